"""Inside a Slurm allocation (#20), on a real Slurm (tests/cluster/slurm.sh: slurmctld and munged
here, one slurmd per namespace host): `--hostfile slurm` takes the hosts and the workers per host
from the allocation, in its order, and the job keeps the contract of a host file's: exit status,
logs, teardown on a failure, on Ctrl-C and on `scancel` of the allocation (salloc -K), over SSH
and over `--transport srun` (job steps); with srun, `--bind_core` binds inside the CPUs Slurm gave
the job. Each test brings Slurm up and takes it down; it skips loudly where Slurm is not
installed."""
import contextlib
import os
import re
import signal
import subprocess
import tempfile
import time

from harness import (SOURCE_DIR, Skip, binary, check, cluster_dir, cluster_script, job,
                     marked_processes, tmpdir, wait_clean, wait_for)

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "stdlib_ddp", "train.py")


@contextlib.contextmanager
def slurm():
    """Slurm up on the cluster's hosts for the test; yields the environment its commands need."""
    up = subprocess.run(["bash", cluster_script(), "slurm-up", "--dir", cluster_dir()],
                        capture_output=True, text=True, timeout=180)
    if up.returncode == 77:
        raise Skip(f"SKIPPED: no Slurm here: {up.stderr.strip()}")
    try:
        check(up.returncode == 0, f"slurm-up failed: {up.stderr}")
        yield dict(os.environ, SLURM_CONF=os.path.join(cluster_dir(), "slurm", "slurm.conf"))
    finally:
        subprocess.run(["bash", cluster_script(), "slurm-down", "--dir", cluster_dir()],
                       capture_output=True, timeout=60)


def _salloc(env, args, nodes=3, per_node=2, log_dir=None, extra=(), transport="ssh",
            salloc=(), command=()):
    """Starts `salloc -N nodes --ntasks-per-node per_node -K msrun-ssh --hostfile slurm
    --transport TRANSPORT ...` in a session of its own (as a terminal's foreground job is).
    Returns (Popen, log_dir)."""
    log_dir = log_dir or tempfile.mkdtemp(prefix="logs-", dir=tmpdir())
    cmd = ["salloc", "-N", str(nodes), f"--ntasks-per-node={per_node}", "-K", *salloc,
           binary(), *command, "--hostfile", "slurm", "--transport", transport,
           "--ssh_config", os.path.join(cluster_dir(), "ssh_config"),
           "--log_dir", log_dir, "--heartbeat", "1", "--kill_grace", "2", *extra, *args]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         cwd=tmpdir(), start_new_session=True)
    return p, log_dir


def _finish(p, timeout):
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    return out.decode(errors="replace"), err.decode(errors="replace")


def _squeue(env):
    return subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True,
                          text=True).stdout.split()


def _runs_the_example_in_allocation_order(transport):
    with slurm() as env:
        p, log_dir = _salloc(env, [EXAMPLE], transport=transport)
        out, err = _finish(p, 120)
        check(p.returncode == 0, f"exit {p.returncode}: {err}")
        logs = sorted(os.listdir(log_dir))
        for name in ["scheduler.log"] + [f"worker_{r}.log" for r in range(6)]:
            check(name in logs, f"no {name} in {logs}")
        # Ranks follow the allocation: node0 has 0-1 (and the scheduler), node1 2-3, node2 4-5.
        for rank in range(6):
            node = rank // 2
            check(re.search(rf"^\[{rank}@node{node}\] rank {rank} finished", out, re.M),
                  f"rank {rank} on node{node}: {out}")
            log = open(os.path.join(log_dir, f"worker_{rank}.log")).read()
            check(f"rank {rank} finished" in log, f"worker_{rank}.log: {log}")
        check("[sched@node0]" in out, out)
        wait_clean(5)


def test_dry_run_names_the_allocation_as_the_hosts_source():
    with slurm() as env:
        p, _ = _salloc(env, [EXAMPLE], extra=["--dry_run"])
        out, err = _finish(p, 60)
        check(p.returncode == 0, f"exit {p.returncode}: {err}")
        check("hosts: 3 from SLURM_JOB_NODELIST=node[0-2], local_worker_num from "
              "SLURM_TASKS_PER_NODE=2(x3)" in out, out)
        for node in range(3):
            check(f"host node{node} (node rank {node})" in out, out)
        check(not marked_processes(), "a dry run started something")


def _a_failing_worker_ends_every_process_on_every_node(transport):
    with slurm() as env:
        p, _ = _salloc(env, [job("sleeper.py"), "--fail_rank", "3", "--fail_code", "7",
                             "--delay", "3"], transport=transport)
        out, err = _finish(p, 60)
        check(p.returncode == 7, f"exit {p.returncode}: {err}")
        check(re.search(r"rank 3 on node1 failed: exit 7", err), err)
        wait_clean(5)
        wait_for(lambda: not _squeue(env), 10, "the allocation's end")


def _start_and_wait_running(env, transport):
    p, log_dir = _salloc(env, [job("sleeper.py"), "--sleep", "60"], transport=transport)
    # The scheduler and 6 workers, each with its grandchild.
    wait_for(lambda: len(marked_processes()) >= 14 or p.poll() is not None, 30,
             "the job's processes")
    check(p.poll() is None, f"salloc ended early: {p.returncode}")
    return p, log_dir


def _launcher_pid(salloc):
    """The launcher salloc runs (its child)."""
    r = subprocess.run(["pgrep", "-P", str(salloc.pid)], capture_output=True, text=True)
    pids = r.stdout.split()
    check(len(pids) == 1, f"salloc's children: {pids}")
    return int(pids[0])


def _ctrl_c_ends_every_process_on_every_node(transport):
    with slurm() as env:
        p, _ = _start_and_wait_running(env, transport)
        start = time.monotonic()
        # On a terminal, salloc makes its command the foreground process group: Ctrl-C reaches
        # the launcher, not salloc.
        os.kill(_launcher_pid(p), signal.SIGINT)
        out, err = _finish(p, 30)
        check(p.returncode == 130, f"exit {p.returncode}: {err}")
        check(time.monotonic() - start < 15, "the teardown took too long")
        wait_clean(5)


def _scancel_of_the_allocation_ends_every_process_on_every_node(transport):
    with slurm() as env:
        p, _ = _start_and_wait_running(env, transport)
        ids = _squeue(env)
        check(len(ids) == 1, f"allocations: {ids}")
        subprocess.run(["scancel", ids[0]], env=env, check=True, timeout=30)
        out, err = _finish(p, 30)
        # salloc -K sends SIGTERM to the launcher when the allocation is revoked; slurmd signals
        # the step's processes at the same moment (over srun, the watchdogs' steps too).
        # Whichever reaches first is the cause, and the launcher says it received the signal
        # either way (unless it had ended before it came); each ends the job with 143.
        check(p.returncode == 143, f"exit {p.returncode}: {err}")
        check(re.search(r"^msrun-ssh: received SIGTERM(;| during the teardown)", err, re.M)
              or re.search(r"^msrun-ssh: the watchdog on node\d received SIGTERM", err, re.M)
              or re.search(r"^--- root cause: rank \d+ on node\d: killed by SIGTERM ---$", err,
                           re.M), err)
        wait_clean(5)


def test_over_ssh_the_example_runs_in_allocation_order():
    _runs_the_example_in_allocation_order("ssh")


def test_over_srun_the_example_runs_in_allocation_order():
    _runs_the_example_in_allocation_order("srun")


def test_over_ssh_a_failing_worker_ends_every_process_on_every_node():
    _a_failing_worker_ends_every_process_on_every_node("ssh")


def test_over_srun_a_failing_worker_ends_every_process_on_every_node():
    _a_failing_worker_ends_every_process_on_every_node("srun")


def test_over_ssh_ctrl_c_ends_every_process_on_every_node():
    _ctrl_c_ends_every_process_on_every_node("ssh")


def test_over_srun_ctrl_c_ends_every_process_on_every_node():
    _ctrl_c_ends_every_process_on_every_node("srun")


def test_over_ssh_scancel_of_the_allocation_ends_every_process_on_every_node():
    _scancel_of_the_allocation_ends_every_process_on_every_node("ssh")


def test_over_srun_scancel_of_the_allocation_ends_every_process_on_every_node():
    _scancel_of_the_allocation_ends_every_process_on_every_node("srun")


def test_over_srun_check_passes_on_every_node():
    with slurm() as env:
        p, _ = _salloc(env, [EXAMPLE], transport="srun", command=["check"])
        out, err = _finish(p, 60)
        check(p.returncode == 0, f"exit {p.returncode}: {out}{err}")
        for node in range(3):
            check(re.search(rf"^\S* *node{node} ", out, re.M), f"node{node}'s row: {out}")
        check("* master, scheduler at 198.18.1.10:8118" in out, out)
        wait_clean(5)


def test_over_srun_bind_core_binds_inside_the_cpus_slurm_gave_the_job():
    with slurm() as env:
        # Another allocation takes one core of node1 first: the job gets the other one there.
        other = subprocess.Popen(["salloc", "-N", "1", "-w", "node1", "--ntasks=1",
                                  "--cpus-per-task=1", "sleep", "120"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
        try:
            wait_for(lambda: len(_squeue(env)) == 1, 20, "the other allocation")
            p, log_dir = _salloc(env, [job("cpus.py")], per_node=1, transport="srun",
                                 salloc=["--cpus-per-task=1"], extra=["--bind_core=True"])
            out, err = _finish(p, 60)
        finally:
            os.killpg(other.pid, signal.SIGKILL)
            other.wait()
        check(p.returncode == 0, f"exit {p.returncode}: {err}")
        # node1's core for the job is the one the other allocation left: CPU 1; elsewhere CPU 0.
        for rank, node in ((0, 0), (1, 1), (2, 2)):
            want = "1" if node == 1 else "0"
            m = re.search(rf"^\[{rank}@node{node}\] cpus {rank} allowed=(\S+) msrun=(\S+)$", out,
                          re.M)
            check(m and m.group(1) == want and m.group(2) == f"[{want}]",
                  f"rank {rank} on node{node} should run on CPU {want}: {out}")
        check(re.search(r"^\[sched@node0\] cpus sched allowed=0 ", out, re.M), out)
        wait_clean(5)
