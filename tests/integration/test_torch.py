"""The torch contract with real PyTorch (Debian's python3-torch): examples/torch_ddp on 3 hosts x
2 workers, fail-fast, Ctrl-C, and a taken master port. Skips loudly when the hosts lack torch."""
import os
import re
import signal
import subprocess
import time

from harness import (Skip, check, cluster_dir, interrupt, launch, marked_processes, read, run,
                     wait_for, wait_no_leftovers, SOURCE_DIR)

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "torch_ddp", "train.py")
TORCH = ["--contract", "torch", "--master_port", "29500"]


def _need_torch():
    cluster_dir()
    r = subprocess.run(["ip", "netns", "exec", "msrs-node0", "/usr/bin/python3", "-c",
                        "import torch"], capture_output=True)
    if r.returncode != 0:
        raise Skip("SKIP: PyTorch is not installed (apt-get install python3-torch; .ci/run does)")


def test_ddp_example_trains_with_identical_weights_on_every_rank():
    _need_torch()
    code, out, err, logs = run([EXAMPLE, "--epochs", "4", "--steps", "10"], extra=TORCH,
                               timeout=300)
    check(code == 0, f"exit {code}: {err.decode()[-3000:]}")
    digests = set()
    for rank in range(6):
        text = read(os.path.join(logs, f"worker_{rank}.log")).decode()
        losses = [float(x) for x in re.findall(rf"^rank {rank} epoch \d+ loss ([0-9.]+)$", text,
                                               re.M)]
        check(len(losses) == 4, f"rank {rank}: losses {losses}: {text[-1000:]}")
        check(losses[-1] < losses[0] / 2, f"rank {rank}: loss does not fall: {losses}")
        m = re.search(rf"^rank {rank} final weights sha256 ([0-9a-f]{{64}})$", text, re.M)
        check(m, f"rank {rank}: no final weights: {text[-1000:]}")
        digests.add(m.group(1))
    check(len(digests) == 1, f"weights differ between ranks: {digests}")
    check(not os.path.exists(os.path.join(logs, "scheduler.log")), "no scheduler in torch")
    wait_no_leftovers(3)


def test_rank_raising_mid_training_ends_the_job_everywhere():
    _need_torch()
    start = time.monotonic()
    code, out, err, logs = run([EXAMPLE, "--epochs", "50", "--fail_rank", "4", "--fail_epoch",
                                "2"], extra=TORCH, timeout=300)
    check(code == 1, f"exit {code}, expected 1 (the Python exception): {err.decode()[-3000:]}")
    check(re.search(rb"rank 4 on 198\.18\.1\.12 failed: exit 1", err), f"{err.decode()[-2000:]}")
    check(b"injected failure in epoch 2" in read(os.path.join(logs, "worker_4.log")),
          "rank 4's traceback in its log")
    check(time.monotonic() - start < 120, "took too long")
    wait_no_leftovers(3)


def test_ctrl_c_ends_gloo_and_everything_it_started():
    _need_torch()
    p, logs = launch([EXAMPLE, "--epochs", "100000"], extra=TORCH)

    def training():
        wait_for(lambda: os.path.exists(os.path.join(logs, "worker_5.log")) and
                 b"epoch 1 loss" in read(os.path.join(logs, "worker_5.log")), 120,
                 "training to run")
        # 6 ranks, each with its DataLoader worker process (a fork: the same command line).
        trainers = [x for x in marked_processes() if "train.py" in x[2]]
        check(len(trainers) >= 12, f"no DataLoader workers: {trainers}")
    err, _ = interrupt(p, signal.SIGINT, 30, training)
    check(p.returncode == 130, f"exit {p.returncode}: {err.decode()[-2000:]}")
    wait_no_leftovers(3)


def test_taken_master_port_is_a_clear_error_before_anything_starts():
    _need_torch()
    # Something listens on the master's port (inside node0's network namespace).
    holder = subprocess.Popen(["ip", "netns", "exec", "msrs-node0", "python3", "-c",
                               "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,"
                               " socket.SO_REUSEADDR, 1); s.bind(('', 29500)); s.listen(); "
                               "print('ok', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE)
    try:
        check(holder.stdout.readline().strip() == b"ok", "the port holder did not start")
        code, out, err, logs = run([EXAMPLE], extra=TORCH, timeout=60)
    finally:
        holder.kill()
        holder.wait()
    check(code == 2, f"exit {code}: {err.decode()[-2000:]}")
    check(b"--master_port=29500 is taken on the master 198.18.1.10" in err, f"{err.decode()}")
    check(not os.path.exists(os.path.join(logs, "worker_0.log")), "something started")
