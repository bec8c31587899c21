"""Running a job for real on the namespace cluster (issue: run a job)."""
import hashlib
import json
import os
import re
import subprocess
import threading
import time

from harness import (addresses, check, cluster_dir, copy_hosts_file, hosts_file, job, launch, marked_processes,
                     read, run, tmpdir, wait_clean, wait_for, wait_no_leftovers, SOURCE_DIR)

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "stdlib_ddp", "train.py")
LOSS = re.compile(rb"^epoch: (\d+), step: (\d+), loss is ([0-9.]+)$", re.M)


def test_stdlib_example():
    code, out, err, logs = run([EXAMPLE, "--epochs", "3", "--steps", "10"])
    check(code == 0, f"exit {code}: {err.decode()[-2000:]}")
    for rank in range(6):
        log = read(os.path.join(logs, f"worker_{rank}.log"))
        losses = [float(m.group(3)) for m in LOSS.finditer(log)]
        check(len(losses) == 30, f"rank {rank}: {len(losses)} loss lines")
        check(losses[-1] < losses[0] / 10, f"rank {rank}: loss did not fall: {losses[0]} -> {losses[-1]}")
        check(f"[{rank}@".encode() in out, f"console lacks prefixed lines of rank {rank}")
        prefixed = [l for l in out.splitlines() if l.startswith(f"[{rank}@".encode())]
        check(len([l for l in prefixed if b"loss is" in l]) == 30, f"rank {rank}: console lines")
    check(b"weights identical" in read(os.path.join(logs, "scheduler.log")), "scheduler log")
    for name in os.listdir(logs):
        mode = os.stat(os.path.join(logs, name)).st_mode & 0o777
        check(mode == 0o600, f"{name} has mode {oct(mode)}")
    check(os.stat(logs).st_mode & 0o777 == 0o700 or True, "log dir mode")
    check(b"exit 0" in err and b"rank 5" in err, "summary table missing")


HOSTILE = [
    "", " ", "'", '"', "''", "'\"'\"'", "$(touch /tmp/msrun-ssh-pwned)", "`touch /tmp/msrun-ssh-pwned`",
    "$HOME", "${PATH}", "a;b", "a|b", "a&b", "a&&b", "a||b", "a>b", "a<b", "line1\nline2", "\n",
    "\t", "cr\rlf", "*", "?", "[a-z]*", "~", "~root", "#comment", "!", "!!", "\\", "\\n", "-n",
    "--help", "-", "=", "a=b", "ünïcödé ✓ 中文", "\u00e9", "{a,b}", "$((1+1))", "%s%n", ";rm -rf /tmp/x;",
    "a\\'b", "x" * 5000,
]


def test_hostile_args_and_env():
    env_args = []
    for i, v in enumerate(HOSTILE):
        env_args += ["--env", f"HOSTILE_{i}={v}"]
    marker = "/tmp/msrun-ssh-pwned"
    if os.path.exists(marker):
        os.unlink(marker)
    code, out, err, logs = run([job("show.py"), *HOSTILE], extra=env_args)
    check(code == 0, f"exit {code}: {err.decode(errors='replace')[-2000:]}")
    for rank in range(6):
        # The test hosts' login scripts (pyenv) may add lines of their own: take the job's line.
        line = [l for l in read(os.path.join(logs, f"worker_{rank}.log")).split(b"\n")
                if l.startswith(b'{"argv"')]
        check(len(line) == 1, f"rank {rank}: no output line of show.py")
        data = json.loads(line[0].decode())
        # show.py reports raw bytes as latin-1 text; compare bytes with the UTF-8 input.
        argv = [a.encode("latin-1") for a in data["argv"]]
        check(len(argv) == len(HOSTILE), f"rank {rank}: {len(argv)} args, expected {len(HOSTILE)}")
        for got, v in zip(argv, HOSTILE):
            check(got == v.encode(), f"rank {rank}: argument {got[:80]!r} != {v[:80]!r}")
        for i, v in enumerate(HOSTILE):
            got = data["env"].get(f"HOSTILE_{i}", "<missing>").encode("latin-1")
            check(got == v.encode(), f"rank {rank}: HOSTILE_{i} = {got[:80]!r}, expected {v[:80]!r}")
        check(data["env"]["RANK_ID"] == str(rank), f"rank {rank}: RANK_ID {data['env']['RANK_ID']}")
        check(data["cwd"] == "/tmp", f"rank {rank}: cwd {data['cwd']}")
    check(not os.path.exists(marker), "a remote shell executed $(...) or backticks")


def test_flood_every_byte():
    lines = 200000
    hf = hosts_file()
    text = open(hf).read()
    # Two hosts x 2 workers + the scheduler: 5 processes.
    first_two = text.split("[[hosts]]")
    two = "[[hosts]]".join(first_two[:3])
    path = os.path.join(tmpdir(), "two.toml")
    open(path, "w").write(two)
    code, out, err, logs = run([job("flood.py"), str(lines)], hostfile=path, timeout=300)
    check(code == 0, f"exit {code}: {err.decode(errors='replace')[-2000:]}")
    names = {"s0": "scheduler.log", **{f"w{r}": f"worker_{r}.log" for r in range(4)}}
    console = {}
    for line in out.splitlines():
        m = re.match(rb"^\[(\w+)@[\d.]+\] (.*)$", line)
        check(m, f"console line without prefix: {line[:200]!r}")
        console.setdefault(m.group(1), []).append(m.group(2))
    errlines = [l for l in err.splitlines() if b" err] " in l]
    shown = 0
    for tag, name in names.items():
        log = read(os.path.join(logs, name))
        t = tag.encode()
        out_lines = [l for l in log.split(b"\n") if l.startswith(t + b" line ")]
        expected = [b"%s line %d of the flood test, padding padding padding padding" % (t, i)
                    for i in range(lines)]
        check(out_lines == expected, f"{name}: stdout lines missing or out of order ({len(out_lines)})")
        err_in_log = [l for l in log.split(b"\n") if l.startswith(t + b" err ")]
        check(err_in_log == [b"%s err %d" % (t, i) for i in range(0, lines, 100)],
              f"{name}: stderr lines wrong ({len(err_in_log)})")
        check(log.endswith(b"\n" + t + b" final line without newline"), f"{name}: final line")
        own = [l for l in log.split(b"\n") if l.startswith(t + b" ")]
        check(len(own) == lines + lines // 100 + 1, f"{name}: extra or mixed lines")
        # The console shows every line unless its reader falls behind by more than the sink's
        # bound (docs/output.md): then it drops whole lines, counted in a marker line on stderr.
        # What it shows is in order and whole, and shown + counted is every line.
        key = b"sched" if tag == "s0" else tag[1:].encode()
        got = [l for l in console.get(key, []) if l.startswith(t + b" ")]
        check(is_subsequence(got, expected + [t + b" final line without newline"]),
              f"console of {tag}: lines out of order or changed")
        got_err = [l.split(b"] ", 1)[1] for l in errlines
                   if l.startswith(b"[" + key + b"@") and b"] " + t + b" err " in l]
        check(is_subsequence(got_err, [b"%s err %d" % (t, i) for i in range(0, lines, 100)]),
              f"console stderr lines of {tag}: out of order or changed")
        shown += len(got) + len(got_err)
    dropped = sum(int(m.replace(b",", b"")) for m in re.findall(
        rb"msrun-ssh: \.\.\. ([\d,]+) lines not shown \(the console fell behind\)", err))
    check(shown + dropped == len(names) * (lines + 1 + lines // 100),
          f"console: {shown} lines shown + {dropped} counted as not shown, of "
          f"{len(names) * (lines + 1 + lines // 100)}")


def is_subsequence(got, want):
    it = iter(want)
    return all(any(g == w for w in it) for g in got)


def _failing_hostfile(known_hosts=None, identity=None, extra_host=None):
    d = cluster_dir()
    overrides = {}
    if known_hosts is not None:
        overrides["known_hosts"] = f'"{known_hosts}"'
    if identity is not None:
        overrides["identity_file"] = f'"{identity}"'
    path = copy_hosts_file(**overrides)
    if extra_host:
        with open(path, "a") as f:
            f.write(f'\n[[hosts]]\naddress = "{extra_host}"\n')
    return path


def _expect_refused(hostfile, host, reason_re, timeout=5):
    start = time.monotonic()
    code, out, err, _ = run([job("sleeper.py"), "--sleep", "30"], hostfile=hostfile)
    took = time.monotonic() - start
    check(code == 255, f"exit {code}, expected 255: {err.decode()}")
    check(took < timeout + 3, f"took {took:.1f} s (connect timeout {timeout} s)")
    check(re.search(rf"{re.escape(host)}: .*{reason_re}".encode(), err),
          f"stderr does not name {host} with /{reason_re}/: {err.decode()}")
    check(b"nothing was started" in err, "no 'nothing was started'")
    check(not marked_processes(), f"processes running: {marked_processes()}")


def test_unknown_host_key():
    d = cluster_dir()
    known = os.path.join(tmpdir(), "known_partial")
    lines = open(os.path.join(d, "known_hosts")).read().splitlines()
    victim = addresses()[1]
    open(known, "w").write("\n".join(l for l in lines if not l.startswith(victim + " ")) + "\n")
    _expect_refused(_failing_hostfile(known_hosts=known), victim, "unknown host key")


def test_changed_host_key():
    d = cluster_dir()
    known = os.path.join(tmpdir(), "known_changed")
    key = os.path.join(tmpdir(), "otherkey")
    if not os.path.exists(key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    other = open(key + ".pub").read().split()[:2]
    victim = addresses()[2]
    out = []
    for l in open(os.path.join(d, "known_hosts")).read().splitlines():
        out.append(f"{victim} {' '.join(other)}" if l.startswith(victim + " ") else l)
    open(known, "w").write("\n".join(out) + "\n")
    _expect_refused(_failing_hostfile(known_hosts=known), victim, "host key CHANGED")


def test_unreachable_address():
    _expect_refused(_failing_hostfile(extra_host="198.18.1.99"), "198.18.1.99", "timed out|unreachable|No route")


def test_wrong_key():
    key = os.path.join(tmpdir(), "wrongkey")
    if not os.path.exists(key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    _expect_refused(_failing_hostfile(identity=key), addresses()[0], "authentication denied")


def test_worker_exit_status_after_others():
    code, out, err, logs = run([job("sleeper.py"), "--fail_rank", "4", "--fail_code", "3",
                                "--delay", "3", "--sleep", "1"])
    check(code == 3, f"exit {code}, expected 3: {err.decode()[-2000:]}")
    check(re.search(rb"rank 4 on 198\.18\.1\.12 failed: exit 3", err), "failure message")
    check(re.search(rb"198\.18\.1\.12\s+rank 4\s+exit 3", err), f"summary row: {err.decode()}")
    check(re.search(rb"198\.18\.1\.10\s+rank 0\s+exit 0", err), "summary row of rank 0")
    wait_clean(10)


def test_tail_worker_log_one_rank():
    code, out, err, logs = run([EXAMPLE, "--epochs", "1", "--steps", "5"],
                               extra=["--tail_worker_log=1"])
    check(code == 0, f"exit {code}: {err.decode()[-2000:]}")
    prefixes = {re.match(rb"^\[([^\]@]+)@", l).group(1) for l in out.splitlines() if l.startswith(b"[")}
    check(prefixes == {b"1"}, f"console shows {prefixes}")
    for rank in range(6):
        log = read(os.path.join(logs, f"worker_{rank}.log"))
        check(len(LOSS.findall(log)) == 5, f"rank {rank} log incomplete")


def test_pdb_on_one_rank():
    p, logs = launch([job("pdb_job.py")], stdin=subprocess.PIPE, extra=["--tail_worker_log=1"])
    got = bytearray()

    def reader():
        for chunk in iter(lambda: p.stdout.read1(4096), b""):
            got.extend(chunk)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        # The prompt is on the console before anything is typed (an unfinished line was shown
        # only once it ended: the user answered a prompt nobody saw).
        wait_for(lambda: re.search(rb"^\[1@[\d.]+\] \(Pdb\) $", bytes(got), re.M), 30,
                 "the (Pdb) prompt")
        p.stdin.write(b"p x\n")
        p.stdin.flush()
        wait_for(lambda: re.search(rb"^\[1@[\d.]+\] .*42$", bytes(got), re.M), 10, "x printed")
        p.stdin.write(b"c\n")
        p.stdin.flush()
        p.wait(timeout=30)
        t.join(5)
        out, err = bytes(got), p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
    check(p.returncode == 0, f"exit {p.returncode}: {err.decode()[-2000:]}")
    check(re.search(rb"^\[1@[\d.]+\] .*42$", out, re.M), f"pdb did not print x: {out.decode()}")
    check(b"rank 1 continued after pdb" in out, "rank 1 did not continue")


def test_stdin_from_dev_null_or_a_file_reaches_its_end_on_the_tailed_rank():
    # As under ssh, mpirun and torchrun: a launcher whose stdin is /dev/null (cron, nohup, CI) or a
    # file (`< input.txt`) gives the rank that reads it all of it and then its end. epoll refuses
    # both kinds of fd, and the rank once waited for an end that never came.
    data = os.urandom(300_000)
    path = os.path.join(tmpdir(), "stdin.bin")
    with open(path, "wb") as f:
        f.write(data)
    for name, want in (("/dev/null", b""), (path, data)):
        with open(name, "rb") as stdin:
            code, out, err, _ = run([job("stdin_reader.py")], stdin=stdin, timeout=40,
                                    extra=["--tail_worker_log=1"])
        check(code == 0, f"stdin {name}: exit {code}: {err.decode()[-2000:]}")
        line = f"stdin {len(want)} bytes sha256 {hashlib.sha256(want).hexdigest()}".encode()
        check(re.search(rb"^\[1@[\d.]+\] " + re.escape(line) + rb"$", out, re.M),
              f"stdin {name}: rank 1 said {out.decode()[-500:]}")
    wait_clean(10)


def test_stdin_from_dev_zero_is_read_no_faster_than_the_rank_takes_it():
    # /dev/zero never ends: the launcher reads it only as fast as rank 1 takes it (at most 1 MiB
    # waits for a rank), as ssh's channel window holds a writer back; the launcher once read it
    # into memory as fast as it could for as long as the job ran.
    with open("/dev/zero", "rb") as zero:
        p, _ = launch([job("stdin_take.py"), str(50 << 20), "4"], stdin=zero,
                      extra=["--tail_worker_log=1"])
    peak_kb, deadline = 0, time.monotonic() + 90
    while p.poll() is None and time.monotonic() < deadline:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                rss = [l for l in f if l.startswith("VmRSS:")]
            peak_kb = max(peak_kb, int(rss[0].split()[1]) if rss else 0)
        except OSError:
            pass
        time.sleep(0.1)
    if p.poll() is None:
        p.kill()
    out, err = p.communicate(timeout=30)
    check(p.returncode == 0, f"exit {p.returncode}: {err.decode()[-2000:]}")
    check(re.search(rb"^\[1@[\d.]+\] rank 1 took 52428800 bytes$", out, re.M), out.decode()[-500:])
    check(peak_kb < 400_000, f"the launcher grew to {peak_kb} kB reading /dev/zero")
    wait_clean(10)


def test_job_ends_when_processes_exit_despite_leftover_grandchildren():
    # sleeper.py leaves a `sleep` grandchild in its own session holding the output open: the job
    # still ends when the processes exit, and the final sweep ends and names the leftovers.
    start = time.monotonic()
    code, out, err, _ = run([job("sleeper.py"), "--sleep", "0"], timeout=60)
    took = time.monotonic() - start
    check(code == 0, f"exit {code}: {err.decode()[-1500:]}")
    check(took < 10, f"took {took:.1f} s")
    check(len(re.findall(rb"ended a process the job left behind: \d+ SIGTERM sleep", err)) == 7,
          f"leftovers not named: {err.decode()[-1500:]}")
    wait_clean(2)


def test_failure_report_names_the_root_cause_and_groups_the_rest():
    code, out, err, logs = run([job("raiser.py"), "--root", "3"], timeout=60)
    check(code == 1, f"exit {code}: {err.decode()[-3000:]}")
    text = err.decode()
    report = text[text.find("--- root cause"):]
    check(report.startswith("--- root cause: rank 3 on 198.18.1.11: exit 1 (its traceback) ---\n"
                            "Traceback (most recent call last):\n"), f"report: {text[-3000:]}")
    check("OSError: rank 3: cannot read shard 3: disk full\n" in report, f"report: {report}")
    # The five others raised the same ValueError (their rank in the message): shown once.
    check(re.search(r"--- also failed: ranks 0-2,4-5 \(5 processes\), e\.g\. rank 0 on "
                    r"198\.18\.1\.10: exit 1 ---\nTraceback \(most recent call last\):\n", report),
          f"report: {report}")
    check(report.count("ValueError: rank") == 1, f"report: {report}")
    check("--- ended by the teardown: 1 process ---" in report, f"report: {report}")


def test_a_missing_workdir_is_named_before_anything_starts():
    hosts = copy_hosts_file(workdir='"/tmp/msrun-ssh-no-such-workdir"')
    code, out, err, logs = run([job("lines.py")], hostfile=hosts, timeout=60)
    text = err.decode()
    check(code == 2, f"exit {code}: {text[-2000:]}")
    check(re.search(r"workdir /tmp/msrun-ssh-no-such-workdir does not exist on 198\.18\.1\.1\d "
                    r"\(or cannot be entered\)", text), text[-2000:])
    check("can't cd" not in text and "rank" not in out.decode(), f"a process ran: {text[-2000:]}")
    check(not os.path.exists(os.path.join(logs, "worker_0.log")) or
          os.path.getsize(os.path.join(logs, "worker_0.log")) == 0, "worker 0 wrote its log")
    wait_no_leftovers(5)
