"""Spare hosts at a restart (issue #16): a host cut during attempt 1 is replaced by the spare of
the host file, which runs the lost host's node rank and ranks in attempt 2; without a spare the
restart fails with 255, naming the host."""
import contextlib
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile

from harness import (addresses, binary, check, cluster, cluster_dir, copy_hosts_file, job,
                     launch, read, tmpdir, wait_clean, wait_for, running)

VICTIM = 1  # node rank 1 (ranks 2 and 3 with the cluster's 2 workers per host)


def _spare_hosts_file():
    """The cluster's host file with its last host marked spare (the job runs on the others)."""
    path = copy_hosts_file()
    with open(path, "a") as f:
        f.write("spare = true\n")  # the last [[hosts]] table
    return path


def _cut_during_attempt_1(hostfile, processes, state=None, events=None):
    """Runs flaky.py (attempt 1 runs long, attempt 2 briefly), cuts VICTIM once attempt 1's
    `processes` run, and returns (exit code, stdout, stderr, log dir). The job's record goes
    under `state` (XDG_STATE_HOME) when given, its events to `events`."""
    p, logs = launch([job("flaky.py"), "--run_first", "120", "--run", "1"], hostfile=hostfile,
                     extra=["--max_restarts", "1", "--restart_backoff", "0.5",
                            *(["--events", events] if events else [])],
                     env={"XDG_STATE_HOME": state} if state else None)
    try:
        wait_for(lambda: running("flaky.py") >= processes,
                 20, "attempt 1's processes")
        cluster("cut", VICTIM)
        out, err = p.communicate(timeout=120)
    finally:
        cluster("heal", VICTIM)
        if p.poll() is None:
            p.kill()
    return p.returncode, out, err, logs


def test_cut_host_is_replaced_by_the_spare():
    addrs = addresses()
    victim, spare = addrs[VICTIM], addrs[-1]
    state = tempfile.mkdtemp(prefix="state-", dir=tmpdir())
    code, out, err, logs = _cut_during_attempt_1(_spare_hosts_file(), 1 + 2 * (len(addrs) - 1),
                                                 state)
    check(code == 0, f"exit {code}: {err.decode()[-2500:]}")
    check(f"spare host {spare} replaces {victim} as node rank {VICTIM} (lost during the "
          f"attempt)".encode() in err, f"the replacement is not said: {err.decode()[-2500:]}")
    check(b"the master moves" not in err, "the master stays on node rank 0")
    # Attempt 2 runs the lost host's ranks on the spare, with its node rank.
    for rank in (2 * VICTIM, 2 * VICTIM + 1):
        check(re.search(rf"^\[{rank}@{re.escape(spare)} a2\] attempt 2 MS_WORKER rank {rank} "
                        .encode(), out, re.M), f"rank {rank} not on the spare: {out.decode()[-2000:]}")
        text = read(os.path.join(logs, f"worker_{rank}.log"))
        check(text.rstrip().endswith(b"done"), f"worker_{rank}.log incomplete: {text[-300:]}")
    check(f"spare host {spare} replaces {victim}".encode() in read(os.path.join(logs, "msrun-ssh.log")),
          "msrun-ssh.log names the replacement")
    check(b"attempt 2: exit 0" in err, "the attempts are summed up")
    # The job's record lists the spare it took in, for `stop --job` and `stack --job`.
    records = glob.glob(os.path.join(state, "msrun-ssh", "jobs", "*.json"))
    check(len(records) == 1, f"job records: {records}")
    spares = json.load(open(records[0])).get("spares")
    check(spares and [(h["address"], h["node_rank"]) for h in spares] == [(spare, VICTIM)],
          f"the record's spares: {spares}")
    wait_clean(5)


def _check_the_end_is_attempt_2s(logs, state, cause):
    """An attempt 2 that started nothing: summary.json is attempt 2's (exit 255, `cause`), not
    attempt 1's, and the job's record names logs that are there (attempt 1's, kept aside)."""
    summary = json.load(open(os.path.join(logs, "summary.json")))
    check(summary["attempt"] == 2 and summary["exit_status"] == 255 and cause in summary["cause"]
          and summary["processes"] == [], f"summary.json is not attempt 2's: {summary}")
    records = glob.glob(os.path.join(state, "msrun-ssh", "jobs", "*.json"))
    check(len(records) == 1, f"job records: {records}")
    record = json.load(open(records[0]))
    check(record["exit_status"] == 255, f"record: {record}")
    named = [p["log"] for p in record["processes"]]
    missing = [n for n in named if not os.path.exists(n)]
    check(named and not missing and all(".attempt1.log" in n for n in named),
          f"the record names logs that are not there: {missing or named}")


def test_cut_host_without_a_spare_fails_the_restart_with_255():
    addrs = addresses()
    state = tempfile.mkdtemp(prefix="state-", dir=tmpdir())
    code, _, err, logs = _cut_during_attempt_1(copy_hosts_file(), 1 + 2 * len(addrs), state)
    check(code == 255, f"exit {code}: {err.decode()[-2500:]}")
    check(f"host {addrs[VICTIM]} lost".encode() in err, f"the loss is not named: {err.decode()[-2500:]}")
    # Attempt 2 cannot reach the cut host: nothing starts, the host is named.
    check(re.search(rf"msrun-ssh: {re.escape(addrs[VICTIM])}: .+".encode(), err),
          f"the unreachable host is not named: {err.decode()[-2500:]}")
    check(b"attempt 2: exit 255 (a host could not be reached)" in err, f"{err.decode()[-2500:]}")
    _check_the_end_is_attempt_2s(logs, state, "a host could not be reached")
    wait_clean(5)


def test_a_spare_that_does_not_fit_the_job_ends_it_with_255_and_says_why():
    """A spare whose probe shows it cannot take the job (here a bind_core CPU it does not have)
    is found only when a restart takes it in: the restart cannot happen (255), said as attempt 2's
    end, with its summary and the job's record. It ended the launcher with a usage error (2),
    without either."""
    addrs = addresses()
    path = _spare_hosts_file()
    with open(path, "a") as f:
        f.write('bind_core = { device0 = ["9999"], device1 = ["9998"] }\n')
    state = tempfile.mkdtemp(prefix="state-", dir=tmpdir())
    events = os.path.join(state, "events.jsonl")
    code, _, err, logs = _cut_during_attempt_1(path, 1 + 2 * (len(addrs) - 1), state, events)
    check(code == 255, f"exit {code}: {err.decode()[-2500:]}")
    check(b"cannot restart: " in err and b"9999" in err, f"not said: {err.decode()[-2500:]}")
    _check_the_end_is_attempt_2s(logs, state, "cannot restart")
    # The events name attempt 2 and why it started nothing (the end counted an attempt they
    # never named).
    kinds = [json.loads(line) for line in open(events)]
    tail = [(e["type"], e.get("attempt")) for e in kinds[-3:]]
    check(tail == [("attempt", 2), ("start_failed", None), ("end", None)], f"events: {tail}")
    check("cannot restart" in kinds[-2]["reason"] and kinds[-2]["exit_status"] == 255,
          f"start_failed: {kinds[-2]}")
    wait_clean(5)


def test_no_spare_left_names_the_host():
    # The only spare is cut too: attempt 2 replaces the lost host with it, cannot reach it either,
    # and has no spare left.
    addrs = addresses()
    spare = len(addrs) - 1
    cluster("cut", spare)
    state = tempfile.mkdtemp(prefix="state-", dir=tmpdir())
    try:
        code, _, err, logs = _cut_during_attempt_1(_spare_hosts_file(), 1 + 2 * (len(addrs) - 1),
                                                   state)
    finally:
        cluster("heal", spare)
    check(code == 255, f"exit {code}: {err.decode()[-2500:]}")
    check(f"cannot restart: no spare host is left to replace {addrs[spare]} (node rank {VICTIM}, "
          f"unreachable: ".encode() in err, f"no clear reason: {err.decode()[-2500:]}")
    _check_the_end_is_attempt_2s(logs, state, "no spare host is left")
    wait_clean(5)


@contextlib.contextmanager
def _containers(host, ports):
    """Hosts that share host `host`'s address, as containers with the host's network do: each in
    its own pid, mount and uts namespaces (its processes see none of the others'), in `host`'s
    network namespace, its own sshd on one of `ports` (host `host`'s config, host key and clean
    login rc otherwise). Yields ({port: the container's init process}, a known_hosts file of
    theirs); each ends with its whole pid namespace when the block ends."""
    addr = addresses()[host]
    node = os.path.join(cluster_dir(), f"node{host}")
    base = open(os.path.join(node, "sshd_config")).read()
    known = os.path.join(tmpdir(), f"containers{host}.known_hosts")
    key = open(os.path.join(node, "ssh_host_ed25519_key.pub")).read().split()[:2]
    open(known, "w").write("".join(f"[{addr}]:{port} {' '.join(key)}\n" for port in ports))
    inits, logs = {}, {}

    def answers(port):
        """Whether this container's own sshd answers on `port` (its hostname says it is this
        one, not a listener some earlier run left there)."""
        r = subprocess.run(
            ["ssh", "-p", str(port), "-i", os.path.join(cluster_dir(), "id_ed25519"), "-o",
             f"UserKnownHostsFile={known}", "-o", "BatchMode=yes", "-o", "ConnectTimeout=2",
             f"root@{addr}", "hostname"], capture_output=True, text=True,
            stdin=subprocess.DEVNULL, timeout=10)
        return r.returncode == 0 and r.stdout.strip() == f"node{host}-{port}"

    try:
        for port in ports:
            d = os.path.join(tmpdir(), f"container{host}-{port}")
            os.makedirs(d, exist_ok=True)
            shutil.copy(os.path.join(node, "bashrc"), os.path.join(d, "bashrc"))
            config = re.sub(r"^ListenAddress .*$", f"ListenAddress 0.0.0.0:{port}", base,
                            flags=re.M)
            config = re.sub(r"^PidFile .*$", f"PidFile {d}/sshd.pid", config, flags=re.M)
            open(os.path.join(d, "sshd_config"), "w").write(config)
            logs[port] = os.path.join(d, "sshd.log")
            with open(logs[port], "w") as log:
                inits[port] = subprocess.Popen(
                    ["ip", "netns", "exec", f"msrs-node{host}", "unshare", "--pid", "--fork",
                     "--mount-proc", "--uts", "--mount", "--kill-child=SIGKILL", "bash",
                     os.path.join(cluster_dir(), "hostinit.sh"), f"node{host}-{port}",
                     os.path.join(d, "sshd_config")],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        for port in ports:
            try:
                wait_for(lambda: answers(port), 15, f"the sshd of {addr}:{port}")
            except AssertionError as e:
                raise AssertionError(f"{e}; its log: {read(logs[port])[-1500:]}") from None
        yield inits, known
    finally:
        for p in inits.values():  # unshare (which ignores SIGTERM) SIGKILLs the container's
            try:                  # init as it ends: the container's pid namespace ends with it
                p.kill()
                p.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass


def test_an_entry_that_shares_its_address_is_lost_and_replaced_alone():
    """Three entries on one address, ports of their own (the sshds of containers on one machine):
    the job runs on the host's own sshd and on a container's, the spare is a third container.
    The container is lost (its pid namespace killed, its sshd with it): the spare replaces that
    entry alone, and is named with its port; the host's own entry keeps its node rank. Before,
    the entries of one address were one host to the restart: losing one replaced both, and with
    one spare the restart failed. `msrun-ssh sync` names each such entry with its port too, as
    the host file is loaded."""
    addrs = addresses()
    host = 1
    addr = addrs[host]
    with _containers(host, (2222, 2223)) as (inits, known):
        hf = copy_hosts_file()
        with open(hf, "a") as f:
            for port, spare in ((2222, False), (2223, True)):
                f.write(f'\n[[hosts]]\naddress = "{addr}"\nport = {port}\n'
                        f'known_hosts = "{known}"\n' + ("spare = true\n" if spare else ""))
        src = os.path.join(tmpdir(), "shared_address_src")
        os.makedirs(src, exist_ok=True)
        open(os.path.join(src, "f.txt"), "w").write("x\n")
        r = subprocess.run([binary(), "sync", "--hostfile", hf, "--connect_timeout", "5",
                            "shared_address_src", "/srv/msrs-private/shared_address"],
                           cwd=tmpdir(), capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"sync: exit {r.returncode}: {r.stderr[-1500:]}")
        named = re.findall(r"^sync: (\S+): ", r.stdout, re.M)
        check(sorted(named) == sorted([a for a in addrs if a != addr] +
                                      [f"{addr}:22", f"{addr}:2222"]),
              f"sync's hosts: {named}: {r.stdout[-1500:]}")
        nodes = len(addrs) + 1
        lost_rank = nodes - 1  # the container's entry is the host file's last host
        p, logs = launch([job("flaky.py"), "--run_first", "120", "--run", "1"], hostfile=hf,
                         extra=["--max_restarts", "1", "--restart_backoff", "0.5"])
        try:
            wait_for(lambda: running("flaky.py") >= 1 + 2 * nodes, 30, "attempt 1's processes")
            inits[2222].kill()  # the container ends, every process of it at once
            inits[2222].wait(timeout=10)
            out, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
        wait_clean(10)  # before the spare's container ends, with whatever the job left there
    text = err.decode(errors="replace")
    check(p.returncode == 0, f"exit {p.returncode}: {text[-2500:]}")
    check(f"host {addr}:2222 lost".encode() in err, f"the lost entry is not named: {text[-2500:]}")
    check(f"spare host {addr}:2223 replaces {addr}:2222 as node rank {lost_rank}".encode() in err,
          f"the replacement is not said: {text[-2500:]}")
    check(f"replaces {addr}:22 ".encode() not in err, f"the host's own entry was replaced: "
          f"{text[-2500:]}")
    for rank, where in ((2 * host, f"{addr}:22"), (2 * lost_rank, f"{addr}:2223")):
        check(re.search(rf"^\[{rank}@{re.escape(where)} a2\] attempt 2 MS_WORKER rank {rank} "
                        .encode(), out, re.M),
              f"rank {rank} not on {where}: {out.decode(errors='replace')[-2000:]}")
