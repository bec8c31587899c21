"""The terminal's status row on the namespace cluster (issue #21), in a real terminal: tmux runs
the launcher, `pipe-pane` records every byte it draws, `capture-pane` shows the final screen. The
start-up progress appears, reaches "started N/N" and disappears, never mixes with a process's
line; --quiet and a pipe show none of it; --status_line shows the running job."""
import os
import re
import shutil
import subprocess
import time

from harness import binary, check, cluster, hosts_file, job, run, tmpdir, wait_for

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
