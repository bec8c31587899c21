"""The terminal's status row on the namespace cluster (issue #21), in a real terminal: tmux runs
the launcher, `pipe-pane` records every byte it draws, `capture-pane` shows the final screen. The
start-up progress appears, reaches "started N/N" and disappears, never mixes with a process's
line; --quiet and a pipe show none of it; --status_line shows the running job."""
import os
import re
import shutil
import subprocess
import time

from harness import (Pane, binary, check, cluster, hosts_file, job, launcher_pid, quoted, run,
                     state_of, tmpdir, wait_for, wait_no_leftovers)

PREFIXED = re.compile(r"^\[(sched|\d+)@198\.18\.1\.\d+( err)?\] ")
ROW = re.compile(r"msrun-ssh: (connecting|watchdogs ready|started|running) ")


def in_terminal(name, args, timeout=90):
    """Runs msrun-ssh with `args` in a fresh tmux session; returns (raw bytes drawn, final screen
    lines, exit status)."""
    if not shutil.which("tmux"):
        raise AssertionError("tmux is not installed (the CI installs it)")
    raw = os.path.join(tmpdir(), f"{name}.pane")
    session = f"msrs-{name}-{os.getpid()}"
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in [binary(), *args])
    # The pane records from the start: the command waits until pipe-pane is attached.
    script = f"sleep 0.5; cd {tmpdir()}; {quoted}; echo EXIT=$?; sleep 600"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "50",
                    "env", "TERM=xterm", "bash", "-c", script], check=True, timeout=10)
    try:
        subprocess.run(["tmux", "pipe-pane", "-t", session, "-o", f"cat >> {raw}"], check=True,
                       timeout=10)

        def screen():
            out = subprocess.run(["tmux", "capture-pane", "-p", "-J", "-t", session, "-S", "-"],
                                 capture_output=True, text=True, timeout=10).stdout
            return [l for l in out.splitlines() if l.strip()]
        wait_for(lambda: any(l.startswith("EXIT=") for l in screen()), timeout, "the launcher")
        lines = screen()
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], timeout=10)
    with open(raw, "rb") as f:
        drawn = f.read().decode(errors="replace")
    code = int([l for l in lines if l.startswith("EXIT=")][0][5:])
    return drawn, lines, code


def check_clean_screen(lines):
    """No status row is left and every process line is whole."""
    for l in lines:
        check(not ROW.search(l), f"a status row left on the screen: {l!r}")
        if l.startswith("["):
            check(PREFIXED.match(l), f"a torn line: {l!r}")
            check("msrun-ssh:" not in l, f"a status row inside a process line: {l!r}")


def test_start_progress_appears_reaches_started_and_disappears():
    cluster("slowrc", 1, 4)
    try:
        drawn, lines, code = in_terminal("progress", ["--hostfile", hosts_file(), "--log_dir",
                                                      "progress-logs", job("lines.py"), "5", "0.4"])
    finally:
        cluster("slowrc", 1, 0)
    check(code == 0, f"exit {code}:\n" + "\n".join(lines[-20:]))
    for want in ["msrun-ssh: connecting 3/3", "msrun-ssh: watchdogs ready 3/3",
                 "msrun-ssh: started 7/7", "waiting for 198.18.1.11"]:
        check(want in drawn, f"never drawn: {want!r}:\n{drawn[-3000:]!r}")
    check("\r\033[K" in drawn, "the row is never erased")
    check_clean_screen(lines)
    got = [l for l in lines if PREFIXED.match(l) and " line " in l]
    check(len(got) == 7 * 5, f"{len(got)} process lines on the screen, want 35:\n" + "\n".join(lines))


def test_status_line_shows_the_running_job_and_leaves():
    drawn, lines, code = in_terminal("status", ["--hostfile", hosts_file(), "--log_dir",
                                                "status-logs", "--status_line", job("lines.py"),
                                                "8", "0.5"])
    check(code == 0, f"exit {code}:\n" + "\n".join(lines[-20:]))
    check(re.search(r"msrun-ssh: running 7, exited 0, failed 0 \| [\d.]+ (B|KB|MB)/s \| 00:00:0\d",
                    drawn), f"no running status drawn:\n{drawn[-3000:]!r}")
    check_clean_screen(lines)


def test_quiet_and_a_pipe_show_no_status_row():
    drawn, lines, code = in_terminal("quiet", ["--hostfile", hosts_file(), "--log_dir",
                                               "quiet-logs", "--quiet", job("lines.py"), "2", "0.1"])
    check(code == 0, f"exit {code}:\n" + "\n".join(lines[-20:]))
    check(not ROW.search(drawn) and "\033[K" not in drawn, f"--quiet drew a row:\n{drawn[-2000:]!r}")
    code, out, err, _ = run([job("lines.py"), "2", "0.1"], extra=["--status_line"])
    check(code == 0, f"exit {code}: {err[-2000:]!r}")
    check(not ROW.search(err.decode()) and b"\033[K" not in err, f"a pipe got a row: {err[-2000:]!r}")


def test_a_launcher_in_the_background_is_not_stopped_by_the_terminal_it_reads():
    # `msrun-ssh --tail_worker_log 1 ... &` in an interactive shell, and a command typed ahead at
    # the shell meanwhile: the launcher, which forwards its stdin to rank 1, must not read the
    # terminal's input (the shell's) and be stopped by SIGTTIN, which ended the job (its watchdogs
    # heard nothing). After `fg`, what is typed reaches rank 1 and the job ends well.
    logs = os.path.join(tmpdir(), "bg-logs")
    pane = Pane("bg")
    try:
        pane.type("stty tostop")  # a background write goes on all the same (docs/output.md)
        pane.type(quoted([binary(), "--hostfile", hosts_file(), "--log_dir", logs, "--heartbeat",
                          "1", "--kill_grace", "2", "--connect_timeout", "5",
                          "--tail_worker_log", "1", job("stdin_line.py")]) + " &")
        wait_for(lambda: b"rank 1 waits for a line" in pane.drawn(), 60, "rank 1 to wait")
        pid = launcher_pid(logs)
        check(pid is not None, "no launcher found")
        # Typed ahead while a foreground command runs that does not read it: the line waits in
        # the terminal, readable, for the shell.
        pane.type("sleep 6")
        time.sleep(1)
        pane.type("echo typed-ahead")
        time.sleep(1)
        check(state_of(pid) not in ("T", "t", "gone"),
              f"the launcher is {state_of(pid)}:\n{pane.drawn()[-2000:]!r}")
        wait_for(lambda: pane.drawn().count(b"typed-ahead") >= 2, 20, "the shell's echo")
        time.sleep(3)  # the watchdogs end the job after 2 s without their launcher
        check(state_of(pid) not in ("T", "t", "gone"),
              f"the launcher is {state_of(pid)}:\n{pane.drawn()[-2000:]!r}")
        # Nor is the status row drawn over the shell's prompt from the background.
        background = pane.drawn().decode(errors="replace")
        check(not ROW.search(background), f"a status row in the background: {background[-2000:]!r}")
        pane.type("fg; echo EXIT=$?")
        time.sleep(1)
        pane.type("hello-rank-1")
        code = pane.exit_status(60)
        drawn = pane.drawn()
    finally:
        pane.close()
    check(code == 0, f"exit {code}:\n{drawn[-3000:]!r}")
    plain = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", drawn)  # the prefixes' colours
    check(re.search(rb"\[1@[\d.]+\] rank 1 got 'hello-rank-1'", plain), f"{drawn[-3000:]!r}")
    check(b" lost" not in drawn and b"Stopped" not in drawn, f"{drawn[-3000:]!r}")
    wait_no_leftovers(10)
