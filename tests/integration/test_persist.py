"""Kept connections (`msrun-ssh sync --persist SECONDS`, include/msrun_ssh/mux.h) on the namespace
cluster: the next sync runs over the kept connections (shown by a host that accepts no new
connection), a sync killed midway leaves nothing running, the keeper ends after its idle time and
leaves nothing on the hosts, and a host whose connection broke is connected anew. Every host syncs
into its own tmpfs (as in test_sync). Each test has its own XDG_RUNTIME_DIR, so its keeper is its
own."""
import os
import re
import signal
import subprocess
import time

from harness import (addresses, binary, check, cluster, restore_cluster, tmpdir, wait_for)
from test_sync import hostfile, make_tree, on_host, remote_tree, local_tree, results

KEPT = re.compile(r"connections kept for \S+ s by process (\d+)")
OVER = re.compile(r"over the connections kept by process (\d+)")
SYNC_PROGRAM = "msrun-sync[.]tmp"  # words of the host program's text (pgrep -f)


def runtime_dir(name):
    d = os.path.join(tmpdir(), f"{name}-run")
    os.makedirs(d, mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)
    return d


def env_for(name):
    return dict(os.environ, XDG_RUNTIME_DIR=runtime_dir(name))


def sync(name, hf, args, timeout=120):
    p = subprocess.run([binary(), "sync", "--hostfile", hf, "--connect_timeout", "5", *args],
                       cwd=tmpdir(), env=env_for(name), capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not alive (the keeper's parent ended at once: init reaps it).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def stop_keeper(pid):
    if pid and alive(pid):
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not alive(pid), 10, f"keeper {pid} to end")


def sync_programs(i):
    return int(on_host(i, f"pgrep -fc '{SYNC_PROGRAM}' || true").strip() or 0)


def listener_pid(i):
    """The root-namespace pid of host i's listening sshd (not its sessions)."""
    out = cluster("ps", i).stdout
    for line in out.splitlines():
        pid, _, cmd = line.partition(" ")
        if "sshd" in cmd and "-D" in cmd:
            return int(pid)
    raise AssertionError(f"no listening sshd on node{i}: {out}")


def test_the_next_sync_runs_over_the_kept_connections():
    root = make_tree("p1")
    hf, workdirs = hostfile("p1")
    keeper = None
    try:
        code, out, err = sync("p1", hf, ["--persist", "60", "p1/proj"])
        check(code == 0, f"first sync: exit {code}: {out}{err}")
        m = KEPT.search(err)
        check(m, f"no keeper announced: {err}")
        keeper = int(m.group(1))
        check(alive(keeper), "the keeper is not running")
        # From now on node1 accepts no new connection: only a kept one can reach it.
        os.kill(listener_pid(1), signal.SIGKILL)
        code, out, err = sync("p1", hf, ["p1/proj"])
        check(code == 255 and addresses()[1] in out + err,
              f"without --persist node1 should be unreachable: exit {code}: {out}{err}")
        with open(os.path.join(root, "lib/util.py"), "w") as f:
            f.write("VALUE = 42\n")
        code, out, err = sync("p1", hf, ["--persist", "60", "p1/proj"])
        check(code == 0, f"second sync: exit {code}: {out}{err}")
        m = OVER.search(err)
        check(m and int(m.group(1)) == keeper, f"not over keeper {keeper}: {err}")
        r = results(out)
        for a in addresses():
            check(r.get(a, "").startswith("1 files, "), f"{a}: {r.get(a)} (one changed file)")
        cluster("sshd-start", 1)  # to look at node1's copy
        tree = {k: v for k, v in remote_tree(1, f"{workdirs[1]}/p1/proj").items()
                if k != ".msrun-sync-id"}
        want = local_tree(root, exclude=("__pycache__",))
        check(tree == want, f"node1: {sorted(set(tree.items()) ^ set(want.items()))}")
    finally:
        stop_keeper(keeper)
        cluster("sshd-start", 1, check=False)


def test_a_sync_killed_midway_over_kept_connections_leaves_nothing_running():
    root = make_tree("p2")
    hf, workdirs = hostfile("p2")
    keeper = None
    veth = "msrs-v2"
    try:
        code, out, err = sync("p2", hf, ["--persist", "60", "p2/proj"])
        check(code == 0, f"first sync: exit {code}: {out}{err}")
        keeper = int(KEPT.search(err).group(1))
        with open(os.path.join(root, "weights.bin"), "wb") as f:
            f.write(os.urandom(6 * 1024 * 1024))
        # 6 MiB at 8 Mbit/s to host 2 take about 6 s: the kill lands mid-stream.
        subprocess.run(["tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", "8mbit",
                        "burst", "32kbit", "latency", "400ms"], check=True, timeout=10)
        try:
            p = subprocess.Popen([binary(), "sync", "--hostfile", hf, "--persist", "60",
                                  "p2/proj"], cwd=tmpdir(), env=env_for("p2"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            time.sleep(2.5)
            check(p.poll() is None, "the sync ended before the kill")
            p.kill()
            p.communicate(timeout=30)
        finally:
            subprocess.run(["tc", "qdisc", "del", "dev", veth, "root"], timeout=10)
        # The keeper ends what the killed sync left on the hosts: well before the 30 s after
        # which a host program whose stdin fell silent gives up by itself.
        waited = wait_for(lambda: sync_programs(2) == 0, 15, "node2's sync program to end")
        check(waited < 15, f"{waited:.1f} s")
        check(alive(keeper), "the keeper ended with its command")
        dest = f"{workdirs[2]}/p2/proj"
        want = local_tree(root, exclude=("__pycache__",))
        for rel, entry in remote_tree(2, dest).items():
            if os.path.basename(rel).startswith(".msrun-sync"):
                continue
            check(rel in want and entry == want[rel], f"node2 has a partial or stray {rel}: {entry}")
        code, out, err = sync("p2", hf, ["--persist", "60", "p2/proj"])
        check(code == 0, f"the next sync: exit {code}: {out}{err}")
        check(f"process {keeper}" in err, f"not over keeper {keeper}: {err}")
        tree = {k: v for k, v in remote_tree(2, dest).items() if k != ".msrun-sync-id"}
        check(tree == want, f"node2 after the next sync: {sorted(set(tree.items()) ^ set(want.items()))}")
    finally:
        stop_keeper(keeper)
        restore_cluster()


def test_the_keeper_ends_after_its_idle_time_and_leaves_nothing_on_the_hosts():
    make_tree("p3")
    hf, _ = hostfile("p3")
    code, out, err = sync("p3", hf, ["--persist", "3", "p3/proj"])
    synced = time.monotonic()  # the idle time counts from the sync's end
    check(code == 0, f"sync: exit {code}: {out}{err}")
    keeper = int(KEPT.search(err).group(1))
    socket_dir = os.path.join(runtime_dir("p3"), "msrun-ssh")
    check(any(n.endswith(".sock") for n in os.listdir(socket_dir)), "no socket")
    # It started the next sync's programs on every host; they wait for their token.
    for i in range(len(addresses())):
        wait_for(lambda i=i: sync_programs(i) == 1, 10, f"node{i}'s waiting sync program")
    try:
        wait_for(lambda: not alive(keeper), 15, "the keeper to end")
        waited = time.monotonic() - synced
    finally:
        stop_keeper(keeper)
    check(2.5 <= waited <= 10, f"the keeper ended {waited:.1f} s after the sync, not about 3")
    check(not any(n.endswith(".sock") for n in os.listdir(socket_dir)), "its socket is left")
    for i in range(len(addresses())):
        wait_for(lambda i=i: sync_programs(i) == 0, 10, f"node{i}'s waiting program to end")


def test_a_host_whose_kept_connection_broke_is_connected_anew():
    make_tree("p4")
    hf, _ = hostfile("p4")
    keepers = []
    try:
        code, out, err = sync("p4", hf, ["--persist", "60", "p4/proj"])
        check(code == 0, f"first sync: exit {code}: {out}{err}")
        keepers.append(int(KEPT.search(err).group(1)))
        cluster("sshd-stop", 2)  # every sshd of node2, the kept connection's too
        cluster("sshd-start", 2)
        # A keeper that lost a host and has no command ends.
        wait_for(lambda: not alive(keepers[0]), 10, "the keeper that lost node2 to end")
        code, out, err = sync("p4", hf, ["--persist", "60", "p4/proj"])
        check(code == 0, f"the next sync: exit {code}: {out}{err}")
        m = KEPT.search(err)
        check(m and not OVER.search(err), f"not connected anew: {err}")
        keepers.append(int(m.group(1)))
    finally:
        for k in keepers:
            stop_keeper(k)
        cluster("sshd-start", 2, check=False)


def test_a_slow_login_rc_is_paid_before_the_next_sync_not_during_it():
    """node1's login rc takes 4 s. The first sync pays it; the keeper then starts the next sync's
    program ahead, so the next sync, a few seconds later, does not wait for the rc."""
    root = make_tree("p5")
    hf, _ = hostfile("p5")
    keeper = None
    cluster("slowrc", 1, 4)
    try:
        t0 = time.monotonic()
        code, out, err = sync("p5", hf, ["--persist", "60", "p5/proj"])
        first = time.monotonic() - t0
        check(code == 0, f"first sync: exit {code}: {out}{err}")
        check(first >= 4, f"the first sync took {first:.1f} s: the 4 s rc was not paid?")
        keeper = int(KEPT.search(err).group(1))
        wait_for(lambda: sync_programs(1) == 1, 15, "node1's program started ahead")
        with open(os.path.join(root, "train.py"), "a") as f:
            f.write("# changed\n")
        t0 = time.monotonic()
        code, out, err = sync("p5", hf, ["--persist", "60", "p5/proj"])
        second = time.monotonic() - t0
        check(code == 0 and OVER.search(err), f"second sync: exit {code}: {out}{err}")
        check(results(out).get(addresses()[1], "").startswith("1 files, "), out)
        check(second < 2, f"the second sync took {second:.1f} s (the rc takes 4)")
    finally:
        cluster("slowrc", 1, 0)
        stop_keeper(keeper)


def test_connections_through_a_jump_host_are_kept_after_the_command_ends():
    # node1 is reached through node0 (ProxyJump): its connection runs over an `ssh -W` that
    # libssh forked in the sync command's process, which ends once the keeper is forked. The
    # proxy outlives it, the next sync goes over the kept connections, and the keeper's end
    # ends the proxy (not its child: signalled while it lives, reaped by init).
    from test_ssh_config import _common, _config, _jump_ssh_left
    a = addresses()
    root = make_tree("p5")
    hf, workdirs = hostfile("p5")
    text = open(hf).read().replace(f'address = "{a[1]}"\n', 'address = "target"\n')
    open(hf, "w").write(text)
    cfg = _config("p5", f"Host j0\n  HostName {a[0]}\nHost target\n  HostName {a[1]}\n"
                  "  ProxyJump j0\n" + _common())
    keeper = None
    try:
        code, out, err = sync("p5", hf, ["--ssh_config", cfg, "--persist", "60", "p5/proj"])
        check(code == 0, f"first sync: exit {code}: {out}{err}")
        m = KEPT.search(err)
        check(m, f"no keeper announced: {err}")
        keeper = int(m.group(1))
        check(_jump_ssh_left(cfg), "the jump ssh ended with the command that started it")
        with open(os.path.join(root, "lib/util.py"), "w") as f:
            f.write("VALUE = 43\n")
        code, out, err = sync("p5", hf, ["--ssh_config", cfg, "--persist", "60", "p5/proj"])
        check(code == 0, f"second sync: exit {code}: {out}{err}")
        m = OVER.search(err)
        check(m and int(m.group(1)) == keeper, f"not over keeper {keeper}: {err}")
        r = results(out)
        check(r.get("target", "").startswith("1 files, "), f"target: {r} (one changed file)")
    finally:
        stop_keeper(keeper)
    wait_for(lambda: not _jump_ssh_left(cfg), 10, "the jump ssh to end with the keeper")
