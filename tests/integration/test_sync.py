"""Sync on the namespace cluster (issue #19). The hosts share the launcher's file system, so every
host here syncs into its own tmpfs (/srv/msrs-private, mounted in its private mount namespace by
cluster.sh); the shared-directory test gives two hosts one directory of the shared file system."""
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time

from harness import (Pane, addresses, binary, check, cluster, cluster_dir, copy_hosts_file,
                     launch, launcher_pid, marked_processes, quoted, run, restore_cluster,
                     state_of, tmpdir, wait_for)

RESULT = re.compile(r"^sync: (\S+): (.*)$", re.M)
SENT = re.compile(r"^(\d+) files?, (\d+) bytes sent, (\d+) deleted")
ODD = "with space 'q\" é.txt"


def on_host(i, command, check_rc=True):
    """Runs a shell command on host i (its own mount namespace) over ssh; returns stdout str."""
    p = subprocess.run(["ssh", "-F", os.path.join(cluster_dir(), "ssh_config"), f"node{i}",
                        command], capture_output=True, timeout=30)
    if check_rc and p.returncode != 0:
        raise AssertionError(f"node{i}: {command}: exit {p.returncode}: {p.stderr.decode()}")
    return p.stdout.decode(errors="replace")


def hostfile(name, shared=()):
    """A host file whose hosts work in /srv/msrs-private/NAME (private), hosts in `shared` in one
    directory of the shared file system. Returns (path, [workdir per host])."""
    path = copy_hosts_file()
    text = open(path).read()
    workdirs = []
    shared_dir = os.path.join(tmpdir(), f"{name}-shared")
    os.makedirs(shared_dir, exist_ok=True)
    for i, addr in enumerate(addresses()):
        wd = shared_dir if i in shared else f"/srv/msrs-private/{name}"
        if i not in shared:
            on_host(i, f"rm -rf {wd} && mkdir -p {wd}")
        workdirs.append(wd)
        text = text.replace(f'address = "{addr}"\n', f'address = "{addr}"\nworkdir = "{wd}"\n')
    with open(path, "w") as f:
        f.write(text)
    return path, workdirs


def make_tree(name):
    """proj/ under the scratch dir: a script, a library, an executable, a relative symlink, an odd
    name, excluded data and bytecode. Returns its path."""
    root = os.path.join(tmpdir(), name, "proj")
    shutil.rmtree(os.path.dirname(root), ignore_errors=True)
    os.makedirs(os.path.join(root, "lib"))
    os.makedirs(os.path.join(root, "data"))
    os.makedirs(os.path.join(root, "__pycache__"))
    files = {
        "train.py": "import os, socket\nfrom lib import util\n"
                    "print('trained', util.VALUE, os.environ.get('RANK_ID', 'sched'), flush=True)\n",
        "lib/__init__.py": "",
        "lib/util.py": "VALUE = 41\n",
        "run.sh": "#!/bin/sh\necho run\n",
        ODD: "odd name\n",
        "data/big.bin": "x" * 100000,
        "__pycache__/train.cpython-311.pyc": "bytecode",
    }
    for rel, text in files.items():
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)
    os.chmod(os.path.join(root, "run.sh"), 0o755)
    os.symlink("lib/util.py", os.path.join(root, "util_link.py"))
    return root


def results(text):
    """{host: result text} of the per-host result lines."""
    return {h: r for h, r in RESULT.findall(text)}


def sync(hf, args=(), timeout=120):
    p = subprocess.run([binary(), "sync", "--hostfile", hf, "--connect_timeout", "5", *args],
                       cwd=tmpdir(),
                       capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def remote_tree(i, dest):
    """{relative path: (kind, mode, sha256 or link target)} of host i's DEST (tmp files too)."""
    out = on_host(i, f"cd {dest} && find . -mindepth 1 -printf '%y %m %P\\0' | "
                     f"python3 -c \"import sys,os,hashlib\n"
                     f"for e in sys.stdin.read().split('\\0'):\n"
                     f"  if not e: continue\n"
                     f"  k,m,p=e.split(' ',2)\n"
                     f"  v=os.readlink(p) if k=='l' else (hashlib.sha256(open(p,'rb').read()).hexdigest() if k=='f' else '')\n"
                     f"  print(repr((p,k,m,v)))\"")
    tree = {}
    for line in out.splitlines():
        p, k, m, v = eval(line)  # noqa: S307 - our own repr() output
        tree[p] = (k, m, v)
    return tree


def local_tree(root, exclude=("data", "__pycache__")):
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if d not in exclude]
        for n in dirnames + filenames:
            full = os.path.join(dirpath, n)
            rel = os.path.normpath(os.path.join(rel_dir, n))
            st = os.lstat(full)
            mode = oct(st.st_mode & 0o7777)[2:]
            if os.path.islink(full):
                tree[rel] = ("l", "777", os.readlink(full))
            elif os.path.isdir(full):
                tree[rel] = ("d", mode, "")
            else:
                tree[rel] = ("f", mode, hashlib.sha256(open(full, "rb").read()).hexdigest())
    return tree


def test_script_only_on_the_launcher_runs_with_sync_and_check_names_hosts_without_it():
    root = make_tree("s1")
    hf, workdirs = hostfile("s1")
    os.rename(root, os.path.join(tmpdir(), "proj-s1"))  # DIR relative to the launcher's cwd
    root = os.path.join(tmpdir(), "proj-s1")
    p = subprocess.run([binary(), "check", "--hostfile", hf, "--json", "--master_port", "23811",
                        "proj-s1/train.py"], cwd=tmpdir(), capture_output=True, timeout=120)
    import json
    doc = json.loads(p.stdout)
    missing = {h for h, v in doc["hosts"].items() if v["checks"]["script"]["status"] == "fail"}
    check(missing == set(addresses()), f"check should name every host: {missing}")
    check(p.returncode == 1, f"check exit {p.returncode}")
    code, out, err, _ = run(["proj-s1/train.py"], hostfile=hf,
                            extra=["--sync", "--sync_exclude", "data/"])
    out, err = out.decode(errors="replace"), err.decode(errors="replace")
    check(code == 0, f"exit {code}:\n{err[-3000:]}")
    check(len(re.findall(r"\] trained 41 ", out)) == 7, f"7 processes should run it:\n{out}")
    got = results(err)
    check(set(got) == set(addresses()), f"result lines {got}\n{err[-2000:]}")
    for h, r in got.items():
        check(SENT.match(r), f"{h}: {r}")
    want = local_tree(root)
    for i in range(3):
        # What the job and sync leave there themselves: bytecode and the shared-directory marker.
        tree = {k: v for k, v in remote_tree(i, os.path.join(workdirs[i], "proj-s1")).items()
                if "__pycache__" not in k and k != ".msrun-sync-id"}
        check(tree == want, f"node{i}: {sorted(set(tree.items()) ^ set(want.items()))}")
    # check --sync now finds every host in sync.
    p = subprocess.run([binary(), "check", "--hostfile", hf, "--json", "--master_port", "23812",
                        "--sync", "--sync_exclude", "data/", "proj-s1/train.py"], cwd=tmpdir(),
                       capture_output=True, timeout=120)
    doc = json.loads(p.stdout)
    for h, v in doc["hosts"].items():
        check(v["checks"]["sync"]["status"] == "pass", f"{h}: {v['checks']['sync']}")
        check(v["checks"]["script"]["status"] == "pass", f"{h}: {v['checks']['script']}")


def test_one_changed_file_is_all_that_is_sent():
    make_tree("s2")
    hf, workdirs = hostfile("s2")
    dir_arg = "s2/proj"
    code, out, err = sync(hf, [dir_arg])
    check(code == 0, f"first sync: exit {code}: {out}{err}")
    first = {h: SENT.match(r) for h, r in results(out).items()}
    check(all(first.values()), f"first sync: {out}")
    check(all(int(m.group(1)) == 7 for m in first.values()), f"first sync: 7 entries each: {out}")
    code, out, err = sync(hf, [dir_arg])
    check(code == 0 and all(r == "up to date" for r in results(out).values()) and
          len(results(out)) == 3, f"second sync: {out}{err}")
    changed = os.path.join(tmpdir(), "s2", "proj", "lib", "util.py")
    with open(changed, "w") as f:
        f.write("VALUE = 42  # changed\n")
    code, out, err = sync(hf, [dir_arg])
    check(code == 0, f"re-sync: exit {code}: {out}{err}")
    for h, r in results(out).items():
        m = SENT.match(r)
        check(m and m.group(1) == "1" and int(m.group(2)) == os.path.getsize(changed) and
              m.group(3) == "0", f"{h}: one file of {os.path.getsize(changed)} bytes: {r}")
    for i in range(3):
        got = on_host(i, f"cat {workdirs[i]}/s2/proj/lib/util.py")
        check(got == "VALUE = 42  # changed\n", f"node{i}: {got!r}")


def test_a_cut_host_keeps_no_partial_file_and_the_next_sync_completes_it():
    root = make_tree("s3")
    with open(os.path.join(root, "weights.bin"), "wb") as f:
        f.write(os.urandom(3 * 1024 * 1024))
    hf, workdirs = hostfile("s3")
    veth = "msrs-v2"
    # 6 MiB at 8 Mbit/s to host 2 take about 6 s: the cut lands mid-stream.
    subprocess.run(["tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", "8mbit", "burst",
                    "32kbit", "latency", "400ms"], check=True, timeout=10)
    try:
        p = subprocess.Popen([binary(), "sync", "--hostfile", hf, "--connect_timeout", "5",
                              "s3/proj"], cwd=tmpdir(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(2.5)
        cluster("cut", 2)
        out, err = p.communicate(timeout=90)
    finally:
        cluster("heal", 2, check=False)
        subprocess.run(["tc", "qdisc", "del", "dev", veth, "root"], timeout=10)
        restore_cluster()
    out, err = out.decode(errors="replace"), err.decode(errors="replace")
    check(p.returncode == 255, f"exit {p.returncode}: {out}{err}")
    check(addresses()[2] in out + err, f"the cut host is not named: {out}{err}")
    dest = f"{workdirs[2]}/s3/proj"
    # The cut host's sync program ends by itself: its stdin has been silent for 30 s.
    wait_for(lambda: not on_host(2, "pgrep -f 'msrun-sync[.]tmp' || true").strip(), 60,
             "the cut host's sync program to end")
    tree = remote_tree(2, dest)
    want = local_tree(root, exclude=("__pycache__",))
    for rel, entry in tree.items():
        if os.path.basename(rel).startswith(".msrun-sync"):
            continue
        check(rel in want and entry == want[rel], f"node2 has a partial or stray {rel}: {entry}")
    code, out, err = sync(hf, ["s3/proj"])
    check(code == 0, f"the next sync: exit {code}: {out}{err}")
    tree = {k: v for k, v in remote_tree(2, dest).items() if k != ".msrun-sync-id"}
    check(tree == want, f"node2 after the next sync: {sorted(set(tree.items()) ^ set(want.items()))}")


def test_ctrl_c_during_the_sync_of_a_job_ends_it_at_once_and_starts_nothing():
    root = make_tree("s6")
    with open(os.path.join(root, "weights.bin"), "wb") as f:
        f.write(os.urandom(3 * 1024 * 1024))
    hf, workdirs = hostfile("s6")
    dest = f"{workdirs[2]}/s6/proj"
    veth = "msrs-v2"
    # 6 MiB at 1 Mbit/s to host 2 take about 50 s: the signal lands mid-stream.
    subprocess.run(["tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", "1mbit", "burst",
                    "32kbit", "latency", "400ms"], check=True, timeout=10)
    p = None
    try:
        p, _ = launch(["s6/proj/train.py"], hostfile=hf, extra=["--sync"])
        wait_for(lambda: ".msrun-sync.tmp." in on_host(2, f"ls -a {dest} 2>/dev/null || true"),
                 30, "node2's sync to stream")
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=90)
        took = time.monotonic() - sent
    finally:
        if p is not None and p.poll() is None:
            p.kill()
        subprocess.run(["tc", "qdisc", "del", "dev", veth, "root"], timeout=10)
    out, err = out.decode(errors="replace"), err.decode(errors="replace")
    # Before, the launcher read the signal only once the sync was over (about 50 s here).
    check(p.returncode == 130, f"exit {p.returncode}: {err[-3000:]}")
    check(took < 20, f"the launcher ended {took:.1f} s after Ctrl-C: {err[-3000:]}")
    check("interrupted while preparing the hosts; nothing was started" in err, err[-3000:])
    check(f"sync: {addresses()[2]}: failed: interrupted" in err, err[-3000:])
    check("trained" not in out, f"the job started: {out[-2000:]}")
    wait_for(lambda: "proj/train.py" not in on_host(2, "ps -eo args || true"), 30,
             "no process of the job on node2")
    wait_for(lambda: not on_host(2, "pgrep -f 'msrun-sync[.]tmp' || true").strip(), 60,
             "node2's sync program to end")


def test_ctrl_z_during_the_sync_waits_for_the_processes_and_the_job_goes_on():
    """Ctrl-Z in a real terminal while --sync streams to a slow host: the launcher does not stop
    there (its hosts' launch agents would end themselves without it); the sync goes on, the
    processes start, and then the whole job is suspended as a running one is; `fg` continues it
    and it ends well."""
    root = make_tree("s7")
    with open(os.path.join(root, "weights.bin"), "wb") as f:
        f.write(os.urandom(3 * 1024 * 1024))
    with open(os.path.join(root, "slow.py"), "w") as f:
        f.write("import time\ntime.sleep(6)\nprint('trained slowly', flush=True)\n")
    hf, workdirs = hostfile("s7")
    dest = f"{workdirs[2]}/s7/proj"
    logs = os.path.join(tmpdir(), "s7-logs")
    veth = "msrs-v2"
    # 3 MiB at 1 Mbit/s to host 2 take about 25 s: Ctrl-Z lands mid-stream, and the checks after
    # it (each a login through the same slowed link, about 8 s in all) end well before the stream
    # does.
    subprocess.run(["tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", "1mbit", "burst",
                    "32kbit", "latency", "400ms"], check=True, timeout=10)
    pane = Pane("s7")
    try:
        argv = [binary(), "--hostfile", hf, "--log_dir", logs, "--heartbeat", "1",
                "--kill_grace", "2", "--connect_timeout", "5", "--sync", "s7/proj/slow.py"]
        pane.type(quoted(argv))  # `fg` below says its exit status
        wait_for(lambda: ".msrun-sync.tmp." in on_host(2, f"ls -a {dest} 2>/dev/null || true"),
                 30, "node2's sync to stream")
        pane.keys("C-z")
        time.sleep(3)
        pid = launcher_pid(logs)
        check(pid and state_of(pid) not in ("T", "gone"),
              f"the launcher stopped during the sync: {pid} {state_of(pid) if pid else ''}")
        check(b"Stopped" not in pane.drawn(), f"{pane.drawn()[-2000:]!r}")
        # The sync goes on: its temporary file grows (it would not with the launcher stopped).
        size = f"stat -c %s {dest}/.msrun-sync.tmp.* 2>/dev/null | sort -n | tail -1"
        before = int(on_host(2, size).strip() or 0)
        time.sleep(2)
        after = int(on_host(2, size).strip() or 0)
        check(after > before, f"node2's sync did not go on after Ctrl-Z: {before} -> {after} bytes")
        wait_for(lambda: b"Stopped" in pane.drawn(), 120, "the job to be suspended")
        check(state_of(pid) == "T", f"the launcher is not stopped: {state_of(pid)}")
        states = [p for _, p, cmd in marked_processes() if "slow.py" in cmd]
        check(states and all(state_of(p) == "T" for p in states),
              f"the job's processes are not all stopped: {[state_of(p) for p in states]}")
        check(b"`fg` or `bg` resumes it" in pane.drawn(), f"{pane.drawn()[-2000:]!r}")
        pane.type("fg; echo EXIT=$?")
        code = pane.exit_status(90)
        drawn = pane.drawn()
    finally:
        pane.close()
        subprocess.run(["tc", "qdisc", "del", "dev", veth, "root"], timeout=10)
    check(code == 0, f"exit {code}: {drawn[-3000:]!r}")
    check(drawn.count(b"trained slowly") >= 2, f"{drawn[-3000:]!r}")
    check(os.path.getsize(os.path.join(root, "weights.bin")) ==
          int(on_host(2, f"stat -c %s {dest}/weights.bin").strip()), "weights.bin differs")


def test_excludes_modes_symlinks_odd_names_and_escapes():
    root = make_tree("s4")
    with open(os.path.join(root, ".msrunignore"), "w") as f:
        f.write("# data stays here\n*.bin\n!keep.bin\n")
    with open(os.path.join(root, "keep.bin"), "w") as f:
        f.write("kept")
    hf, workdirs = hostfile("s4")
    code, out, err = sync(hf, ["s4/proj", "--sync_exclude", "run.sh"])
    check(code == 0, f"exit {code}: {out}{err}")
    tree = remote_tree(0, f"{workdirs[0]}/s4/proj")
    check("data/big.bin" not in tree and "__pycache__" not in tree, f"excluded files sent: {tree}")
    check("run.sh" not in tree, "--sync_exclude run.sh was sent")
    check(tree.get("keep.bin", ("",))[0] == "f", f"negated pattern not kept: {tree}")
    check(tree.get(ODD) == local_tree(root)[ODD], f"odd name: {tree.get(ODD)}")
    check(tree.get("util_link.py") == ("l", "777", "lib/util.py"), f"symlink: {tree.get('util_link.py')}")
    code, out, err = sync(hf, ["s4/proj"])
    tree = remote_tree(1, f"{workdirs[1]}/s4/proj")
    check(tree.get("run.sh", ("", ""))[1] == "755", f"exec bit: {tree.get('run.sh')}")
    # A symlink that leaves the tree is refused, named, and nothing is written.
    os.symlink("../../../etc/passwd", os.path.join(root, "escape"))
    code, out, err = sync(hf, ["s4/proj"])
    check(code == 2 and "escape" in err, f"escaping symlink: exit {code}: {out}{err}")
    os.remove(os.path.join(root, "escape"))
    os.symlink("/etc/passwd", os.path.join(root, "absolute"))
    code, out, err = sync(hf, ["s4/proj"])
    check(code == 2 and "absolute" in err, f"absolute symlink: exit {code}: {out}{err}")
    check("absolute" not in remote_tree(2, f"{workdirs[2]}/s4/proj"), "absolute link written")


def test_two_hosts_sharing_a_directory_are_written_once():
    make_tree("s5")
    hf, workdirs = hostfile("s5", shared=(0, 1))
    code, out, err = sync(hf, ["s5/proj"])
    check(code == 0, f"exit {code}: {out}{err}")
    got = results(out)
    a = addresses()
    writers = [h for h in (a[0], a[1]) if SENT.match(got[h])]
    sharers = [h for h in (a[0], a[1]) if got[h].startswith("shared with")]
    check(len(writers) == 1 and len(sharers) == 1, f"one writer, one sharer: {got}")
    check(writers[0] in got[sharers[0]], f"the sharer names the writer: {got}")
    check(SENT.match(got[a[2]]), f"the private host is written: {got}")
    shared = os.path.join(workdirs[0], "s5", "proj")
    check(local_tree(shared, exclude=()) .keys() >= {"train.py", "lib/util.py"}, "shared copy")
