"""The torch contract with real PyTorch (Debian's python3-torch): every rank's variables against
the real torchrun's, examples/torch_ddp on 3 hosts x 2 workers, fail-fast, error files in the root
cause, Ctrl-C, and a taken master port. Skips loudly when the hosts lack torch."""
import json
import os
import re
import signal
import subprocess
import tempfile
import time

from harness import (Skip, addresses, check, cluster, cluster_dir, interrupt, job, launch,
                     marked_processes, read, run, tmpdir, wait_for, wait_no_leftovers, SOURCE_DIR)

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
    # The teardown starts at the first failure the launcher hears of: rank 4's, or that of a peer
    # whose collective broke as rank 4's sockets closed, in the same instant (both exit 1).
    check(re.search(rb"rank [0-5] on 198\.18\.1\.1[0-2] failed: exit 1; stopping the job on every "
                    rb"host", err), f"{err.decode()[-2000:]}")
    check(b"rank 4: injected failure in epoch 2" in err, f"rank 4's traceback on the console: "
          f"{err.decode()[-2000:]}")
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


def test_the_master_lost_during_the_port_check_is_a_host_failure():
    # The master's sshd dies while its login rc (3 s) still runs, before it answers whether the
    # master port is free: that is the host's failure (255), not the user's input (2). Found by the
    # fault campaign (seed 11, trials 16 and 19).
    cluster("slowrc", 0, 3)
    try:
        p, _ = launch([job("show.py")], extra=[*TORCH, "--agent", "True"])
        time.sleep(1.2)
        cluster("sshd-stop", 0)
        _, err = p.communicate(timeout=60)
    finally:
        cluster("sshd-start", 0, check=False)
        cluster("slowrc", 0, 0, check=False)
    check(p.returncode == 255, f"exit {p.returncode}: {err.decode()[-2000:]}")
    check(b"did not answer whether --master_port=29500 is free" in err, err.decode()[-2000:])
    wait_no_leftovers(3)


# ---- the real torchrun, variable by variable -------------------------------------------------

# Differ by design (docs/torch.md): torchrun's values are its agent's, ours have no agent.
BY_DESIGN = {"TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE"}
# Set by msrun-ssh and not by this torchrun (docs/torch.md), among the names either launcher uses.
OURS_ONLY = {"NODE_RANK", "TORCH_NCCL_ASYNC_ERROR_HANDLING"}
LAUNCHER_NAMES = re.compile(r"^(TORCH|ROLE_|GROUP_|LOCAL_|MASTER_|WORLD_|RANK|OMP_|NCCL_|NODE_)")
# The script's words after its output directory: torchrun's ${local_rank} macro (string.Template's
# safe_substitute) and the words around it, which each rank must get as torchrun gives them.
MACRO_WORDS = ["--out=dev${local_rank}", "$local_rank", "a$$b", "${other}", "$local_ranks", "x$",
               "${local_rank", "$LOCAL_RANK", "$local_rank}", "$$local_rank", "${local_rank}x"]


def _two_host_file(nproc):
    """The cluster's host file with its first two hosts only, nproc workers each."""
    text = open(os.path.join(cluster_dir(), "hosts.toml")).read()
    text = re.sub(r"^local_worker_num = .*$", f"local_worker_num = {nproc}", text, flags=re.M)
    head, *hosts = text.split("\n[[hosts]]")
    fd, path = tempfile.mkstemp(suffix=".toml", dir=tmpdir())
    os.write(fd, (head + "".join("\n[[hosts]]" + h for h in hosts[:2])).encode())
    os.close(fd)
    return path


def _torchrun_envs(nproc, user_env, port):
    """Every rank's environment under the real torchrun: static rendezvous, 2 hosts x nproc.
    `user_env`: the environment torchrun starts in, beside a clean one."""
    out = tempfile.mkdtemp(prefix="torchrun-", dir=tmpdir())
    base = {"PATH": "/usr/bin:/bin", "HOME": "/root", "GLOO_SOCKET_IFNAME": "eth0", **user_env}
    agents = [subprocess.Popen(
        ["ip", "netns", "exec", f"msrs-node{i}", "env", "-i",
         *[f"{k}={v}" for k, v in base.items()],
         # Debian 12's torch 1.13 under Python 3.11 fails without --redirects (its Std.from_str
         # finds no Std for "0" or "3": a Python 3.11 Flag change); redirecting changes no variable.
         "/usr/bin/python3", "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
         "--nnodes", "2", "--node_rank", str(i),
         "--nproc_per_node", str(nproc), "--master_addr", addresses()[0], "--master_port",
         str(port), job("torch_env.py"), out, *MACRO_WORDS], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT) for i in range(2)]
    for a in agents:
        text, _ = a.communicate(timeout=120)
        check(a.returncode == 0, f"torchrun: exit {a.returncode}: {text.decode()[-2000:]}")
    return base, _probed(out, 2 * nproc)


def _probed(out, ranks):
    """Each rank's environment, with its words after the directory under the key ARGV."""
    return {r: dict(json.load(open(os.path.join(out, f"rank{r}.json"))),
                    ARGV=json.load(open(os.path.join(out, f"argv{r}.json")))) for r in range(ranks)}


def _our_envs(nproc, user_env, port):
    out = tempfile.mkdtemp(prefix="ours-", dir=tmpdir())
    env_args = [w for k, v in user_env.items() for w in ("--env", f"{k}={v}")]
    code, _, err, _ = run([job("torch_env.py"), out, *MACRO_WORDS], hostfile=_two_host_file(nproc),
                          extra=["--contract", "torch", "--master_port", str(port), *env_args],
                          timeout=120)
    check(code == 0, f"exit {code}: {err.decode()[-2000:]}")
    return _probed(out, 2 * nproc)


def _compare_with_torchrun(nproc, user_env, login_env=None):
    """`user_env`: given to msrun-ssh with --env; `login_env`: set by the hosts' login rc. Both
    are in the environment torchrun starts in on each host."""
    login_env = login_env or {}
    base, theirs = _torchrun_envs(nproc, {**login_env, **user_env}, 29510)
    try:
        for i in range(2 if login_env else 0):
            cluster("envrc", i, " ".join(f"{k}={v}" for k, v in login_env.items()))
        ours = _our_envs(nproc, user_env, 29511)
    finally:
        for i in range(2 if login_env else 0):
            cluster("slowrc", i, 0, check=False)
    problems = []
    for rank, env in theirs.items():
        mine = ours[rank]
        their_words, my_words = env.pop("ARGV"), mine.pop("ARGV")
        if my_words != their_words:
            problems.append(f"rank {rank}: the script's words: torchrun {their_words}, ours "
                            f"{my_words}")
        set_by_torchrun = {k for k, v in env.items() if base.get(k) != v}
        for name in sorted(login_env):
            if mine.get(name) != env.get(name):
                problems.append(f"rank {rank}: {name} of the login environment: torchrun "
                                f"{env.get(name)!r}, ours {mine.get(name)!r}")
        for name in sorted(set_by_torchrun - BY_DESIGN):
            want = env[name] if name != "MASTER_PORT" else "29511"
            if mine.get(name) != want:
                problems.append(f"rank {rank}: {name}: torchrun {env[name]!r}, ours {mine.get(name)!r}")
        for name in sorted(BY_DESIGN - {"TORCHELASTIC_USE_AGENT_STORE"}):
            if name not in mine:
                problems.append(f"rank {rank}: {name} missing")
        extra = ({k for k in mine if LAUNCHER_NAMES.match(k)} - set_by_torchrun - set(base) -
                 OURS_ONLY - BY_DESIGN)
        problems += [f"rank {rank}: {k}={mine[k]!r} set, torchrun leaves it unset" for k in extra]
        error_file = mine.get("TORCHELASTIC_ERROR_FILE", "")
        if not re.fullmatch(rf"/tmp/msrun-ssh-stacks-[^/]+/error-rank{rank}\.json", error_file):
            problems.append(f"rank {rank}: TORCHELASTIC_ERROR_FILE {error_file!r}")
        for name in ("RANK", "GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE"):
            if name not in set_by_torchrun:
                problems.append(f"rank {rank}: torchrun did not set {name}: the probe is broken")
    check(not problems, "differences from torchrun:\n" + "\n".join(problems))
    return theirs, ours


def test_every_rank_gets_torchruns_variables_two_processes_per_host():
    _need_torch()
    theirs, ours = _compare_with_torchrun(2, {"NCCL_ASYNC_ERROR_HANDLING": "0"})
    check(ours[3]["OMP_NUM_THREADS"] == "1" and theirs[3]["OMP_NUM_THREADS"] == "1", "OMP")
    check(ours[3]["NCCL_ASYNC_ERROR_HANDLING"] == "0", "the user's NCCL value")
    wait_no_leftovers(3)


def test_every_rank_gets_torchruns_variables_one_process_per_host():
    _need_torch()
    theirs, ours = _compare_with_torchrun(1, {})
    check("OMP_NUM_THREADS" not in ours[1] and "OMP_NUM_THREADS" not in theirs[1], "OMP unset")
    check(ours[1]["NCCL_ASYNC_ERROR_HANDLING"] == "1", "NCCL async error handling on")
    wait_no_leftovers(3)


def test_values_of_the_hosts_login_environment_stay_as_under_torchrun():
    # A host whose .bashrc (or module load) sets OMP_NUM_THREADS and NCCL_ASYNC_ERROR_HANDLING:
    # torchrun started there keeps them, and so does every rank here.
    _need_torch()
    login = {"OMP_NUM_THREADS": "4", "NCCL_ASYNC_ERROR_HANDLING": "0"}
    theirs, ours = _compare_with_torchrun(2, {}, login)
    for rank in range(4):
        check(ours[rank]["OMP_NUM_THREADS"] == "4" and theirs[rank]["OMP_NUM_THREADS"] == "4",
              f"rank {rank}: OMP_NUM_THREADS ours {ours[rank].get('OMP_NUM_THREADS')!r}")
        check(ours[rank]["NCCL_ASYNC_ERROR_HANDLING"] == "0", f"rank {rank}: NCCL")
        check(ours[rank]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0",
              f"rank {rank}: torch 2.x's name does not follow the host's value")
    wait_no_leftovers(3)


def test_a_ranks_error_file_is_the_root_cause():
    _need_torch()
    code, _, err, logs = run([job("torch_record.py"), "3"], extra=TORCH, timeout=180)
    check(code == 1, f"exit {code}: {err.decode()[-3000:]}")
    text = err.decode()
    check(re.search(r"--- root cause: rank 3 on 198\.18\.1\.11: exit 1 \(its error file\) ---\n"
                    r"Traceback \(most recent call last\):\n", text), text[-3000:])
    check("ValueError: rank 3 found a bad batch" in text.split("--- root cause")[1], text[-3000:])
    check("msrun-ssh: error file:" not in text, "the relayed line reached the console")
    summary = json.load(open(os.path.join(logs, "summary.json")))
    root = summary["root_cause"]
    check(root["rank"] == 3 and root["error_file"]["message"] == "ValueError: rank 3 found a bad batch",
          f"summary.json: {root}")
    check(abs(root["error_file"]["timestamp"] - time.time()) < 600, f"timestamp: {root}")
    check("msrun-ssh: error file:" not in read(os.path.join(logs, "worker_3.log")).decode(),
          "the relayed line is in the log")
    wait_no_leftovers(3)


def test_the_launchers_error_file_is_what_torchrun_writes_there():
    """TORCHELASTIC_ERROR_FILE in the launcher's own environment (TorchX and other schedulers set
    it): when the job fails, the root cause's error file goes there as torchrun's @record writes
    it, its exitcode as errorCode. Checked against the real torchrun on one host."""
    _need_torch()
    theirs = os.path.join(tmpdir(), "theirs.json")
    agent = subprocess.run(
        ["ip", "netns", "exec", "msrs-node0", "env", "-i", "PATH=/usr/bin:/bin", "HOME=/root",
         "GLOO_SOCKET_IFNAME=eth0", f"TORCHELASTIC_ERROR_FILE={theirs}",
         "/usr/bin/python3", "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
         "--nnodes", "1", "--nproc_per_node", "2", "--master_port", "29513",
         job("torch_record.py"), "1"], capture_output=True, timeout=180)
    check(agent.returncode != 0, f"torchrun: exit {agent.returncode}")
    ours = os.path.join(tmpdir(), "ours.json")
    code, _, err, _ = run([job("torch_record.py"), "1"], hostfile=_two_host_file(1),
                          extra=TORCH, env={"TORCHELASTIC_ERROR_FILE": ours}, timeout=180)
    check(code == 1, f"exit {code}: {err.decode()[-2000:]}")
    want, got = json.load(open(theirs))["message"], json.load(open(ours))["message"]
    for key in ("message", "errorCode"):
        check(got.get(key) == want.get(key), f"{key}: torchrun {want.get(key)!r}, ours "
                                             f"{got.get(key)!r}")
    check(re.fullmatch(r"\d+", got["extraInfo"]["timestamp"]), f"timestamp {got['extraInfo']}")
    last = [line for line in want["extraInfo"]["py_callstack"].splitlines() if line][-1]
    check(got["extraInfo"]["py_callstack"].rstrip().endswith(last), f"py_callstack: {got}")
    wait_no_leftovers(3)

