"""Idle processes on a test host, as the other processes of a busy node (a real node runs thousands):
every watchdog sweep, sampler and look at the host's processes has to read past them.

Used by the benchmarks (bench/common.py, `--clutter`: on the farm) and by the fault campaign
(tests/faults/campaign.py, `--busy`: on each node). A host of tests/cluster/cluster.sh is a network
namespace whose processes run in a pid namespace of their own: the idlers are started in it with
nsenter through one of its processes. Every wait is bounded.
"""

import os
import signal
import subprocess
import time

# Their command line: the integration tests' harness leaves processes with exactly this one out of
# its looks at the hosts (harness.BUSY_HOST_IDLER), and no test job runs it.
COMMAND = "sleep 86399"


def netns_pids(ns):
    """The pids of network namespace `ns` (`ip netns pids`), [] when it cannot tell."""
    try:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                             timeout=30)
    except subprocess.TimeoutExpired:
        return []
    return [int(p) for p in out.stdout.split() if p.isdigit()]


def start(ns, count, max_wait_s=120):
    """Starts `count` idle processes in the pid namespace of network namespace `ns`'s processes and
    waits (at most max_wait_s) until they run. Returns (the Popen whose process group ends them:
    end(), how many of them run)."""
    own = os.readlink("/proc/self/ns/pid")
    pids = netns_pids(ns)
    already = _idlers_among(pids)
    inside = []
    for pid in pids:
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") != own:
                inside.append(pid)
        except OSError:  # it ended meanwhile
            pass
    if not inside:
        raise RuntimeError(f"no process in {ns}'s pid namespace: is the test cluster up?")
    proc = subprocess.Popen(
        ["nsenter", "-t", str(inside[0]), "-p", "-m", "-n", "--", "sh", "-c",
         f"i=0; while [ $i -lt {count} ]; do {COMMAND} & i=$((i + 1)); done; wait"],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + max_wait_s
    while True:
        running = count_in(ns) - already
        if running >= count or time.monotonic() >= deadline or proc.poll() is not None:
            return proc, running
        time.sleep(0.5)


def count_in(ns):
    """How many idlers network namespace `ns` holds."""
    return _idlers_among(netns_pids(ns))


def _idlers_among(pids):
    want = (COMMAND.replace(" ", "\0") + "\0").encode()
    found = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found += f.read() == want
        except OSError:  # it ended meanwhile
            pass
    return found


def end(proc):
    """Ends the idlers of start() (their whole process group) and waits for their shell."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)
