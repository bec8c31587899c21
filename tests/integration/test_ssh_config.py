"""The ssh config as OpenSSH reads it (issue #33): for each case, msrun-ssh and the real `ssh`
client get the same config and host name, and what the host's sshd saw (SSH_CONNECTION: the
client address, so the last jump host, and the server address and port reached) must agree
between the two; host keys are read from and recorded to the same files ssh uses."""
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time

from harness import (Pane, Skip, addresses, binary, check, cluster, cluster_dir, job, launch,
                     marked_processes, quoted, read, run, running, tmpdir, wait_for,
                     wait_no_leftovers)


def _common(known=None):
    """What every case's config says for every host: the cluster's key, user and known_hosts."""
    d = cluster_dir()
    return ("Host *\n  User root\n  IdentityFile {}/id_ed25519\n  IdentitiesOnly yes\n"
            "  UserKnownHostsFile {}\n  GlobalKnownHostsFile /dev/null\n  BatchMode yes\n"
            "  ConnectTimeout 5\n").format(d, known or os.path.join(d, "known_hosts"))


def _config(name, text):
    path = os.path.join(tmpdir(), name + ".ssh_config")
    open(path, "w").write(text)
    return path


def _hostfile(name, *addrs):
    path = os.path.join(tmpdir(), name + ".toml")
    hosts = "".join(f'\n[[hosts]]\naddress = "{a}"\n' for a in addrs)
    open(path, "w").write('[defaults]\nworkdir = "/tmp"\nlocal_worker_num = 1\n' + hosts)
    return path


def _ssh_sees(config, host):
    """SSH_CONNECTION and user as the real ssh client reaches `host` with `config`."""
    r = subprocess.run(["ssh", "-F", config, host, 'echo "$SSH_CONNECTION" "$(id -un)"'],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    check(r.returncode == 0, f"ssh -F {config} {host}: exit {r.returncode}: {r.stderr}")
    return r.stdout.split()


def _msrun_sees(config, hostfile, code_wanted=0):
    code, out, err, logs = run([job("reached.py")], hostfile=hostfile,
                               extra=["--ssh_config", config])
    check(code == code_wanted, f"exit {code}: {err.decode()[-2000:]}")
    seen = {}
    for name in os.listdir(logs):
        m = re.search(rb"REACHED (.+)", read(os.path.join(logs, name)))
        if m and name.startswith("worker"):
            seen[name] = m.group(1).decode().split()
    return seen, err.decode()


def _same(ours, theirs, what):
    # client address, server address, server port, user (the client port differs every time)
    pick = lambda s: (s[0], s[2], s[3], s[4])
    check(pick(ours) == pick(theirs), f"{what}: msrun-ssh reached {ours}, ssh reached {theirs}")


@contextlib.contextmanager
def _unreachable_from_the_launcher(*addrs):
    """Blackhole routes on the launcher's side: the hosts still reach each other (the bridge)."""
    for addr in addrs:
        subprocess.run(["ip", "route", "add", "blackhole", addr + "/32"], check=True, timeout=10)
    try:
        for addr in addrs:
            with socket.socket() as s:
                s.settimeout(2)
                check(s.connect_ex((addr, 22)) != 0, f"{addr} is still reachable from here")
        yield
    finally:
        for addr in addrs:
            subprocess.run(["ip", "route", "del", "blackhole", addr + "/32"], timeout=10)


def _jump_ssh_left(config=""):
    """The jump ssh processes running (those reading `config` when given)."""
    return [l for l in subprocess.run(["pgrep", "-af", "ssh -o BatchMode=yes"],
                                      capture_output=True, text=True).stdout.splitlines()
            if "-W" in l and config in l]


@contextlib.contextmanager
def _max_startups(i, value):
    """Host i's sshd with `MaxStartups value` (started again), and as it was afterwards."""
    path = os.path.join(cluster_dir(), f"node{i}", "sshd_config")
    before = open(path).read()
    check(re.search(r"(?m)^MaxStartups ", before), f"{path} sets no MaxStartups")

    def restart(text):
        open(path, "w").write(text)
        cluster("sshd-stop", i)
        cluster("sshd-start", i)

    try:
        restart(re.sub(r"(?m)^MaxStartups .*$", "MaxStartups " + value, before))
        yield
    finally:
        restart(before)


def _farm():
    env = open(os.path.join(cluster_dir(), "cluster.env")).read()
    farm = re.search(r'FARM_ADDRS="([^"]*)"', env).group(1).split()
    check(len(farm) >= 16, f"the test cluster has {len(farm)} farm hosts, not 16 (--farm 16)")
    return farm[:16]


def test_hosts_behind_a_jump_host_stay_within_its_sshds_max_startups():
    """16 hosts behind one jump host: each handshake is an unauthenticated login at the jump host
    until the host behind it answers, and its sshd drops those above MaxStartups."""
    a, farm = addresses(), _farm()
    cfg = _config("bastion", "Host 198.18.2.*\n  ProxyJump {}\n{}".format(a[0], _common()))
    hostfile = _hostfile("bastion", *farm)

    def start(*extra):
        return run(["/bin/true"], hostfile=hostfile, extra=["--ssh_config", cfg, *extra],
                   timeout=120)

    # sshd's own default: 10 at once, then 30% of the others dropped, more as they grow.
    with _max_startups(0, "10:30:100"):
        code, _, err, _ = start()
        check(code == 0, f"under sshd's default MaxStartups, exit {code}: {err.decode()[-2000:]}")
    # A jump host that refuses every one above 4: 4 at a time pass, all 16 at once cannot, and
    # what failed says why.
    with _max_startups(0, "4"):
        code, _, err, _ = start("--jump_fanout", "4")
        check(code == 0, f"4 at a time under MaxStartups 4, exit {code}: {err.decode()[-2000:]}")
        code, _, err, _ = start("--jump_fanout", "16")
        text = err.decode()
        check(code == 255, f"16 at once under MaxStartups 4, exit {code}: {text[-2000:]}")
        check("other handshakes went through the same jump host then, which let others" in text
              and "MaxStartups" in text and "--jump_fanout" in text, f"not said why: {text[-2000:]}")
        # In the jump's ssh's own words (OpenSSH ends its lines with CR LF: neither is kept):
        # the jump host closed the login.
        check(re.search(r"whose ssh said: [^;]*Connection closed by " + re.escape(a[0]) +
                        " port 22", text) and "\r" not in text,
              f"the jump's ssh is not quoted: {text[-2000:]!r}")
    wait_no_leftovers(15)
    check(not _jump_ssh_left(cfg), "a jump ssh is left running")


def test_proxyjump_two_hops_in_order_with_the_same_config():
    a = addresses()
    cfg = _config("jump2", f"Host j0\n  HostName {a[0]}\nHost j1\n  HostName {a[1]}\n"
                  f"Host target\n  HostName {a[2]}\n  ProxyJump j0,j1\n" + _common())
    # The second jump host and the target are out of the launcher's reach: only the chain works.
    with _unreachable_from_the_launcher(a[1], a[2]):
        seen, err = _msrun_sees(cfg, _hostfile("jump2", "target"))
        theirs = _ssh_sees(cfg, "target")
        check(len(seen) == 1, f"one worker, got {seen}: {err[-1500:]}")
        ours = next(iter(seen.values()))
        _same(ours, theirs, "ProxyJump j0,j1")
        # The target was reached from the second hop: the hops ran in their order.
        check(ours[0] == a[1] and ours[2] == a[2], f"reached {ours}, want from {a[1]} to {a[2]}")
        wait_no_leftovers(15)
        check(not _jump_ssh_left(), "a jump ssh is left running")
        # A job that fails there is torn down there, through the chain, completely.
        code, out, err, logs = run([job("sleeper.py"), "--fail_rank", "0", "--delay", "3"],
                                   hostfile=_hostfile("jump2", "target"),
                                   extra=["--ssh_config", cfg], timeout=120)
        check(code == 1, f"exit {code}: {err.decode()[-2000:]}")
        wait_no_leftovers(15)
        check(not _jump_ssh_left(), "a jump ssh is left running after the teardown")


def test_match_originalhost_and_case_sensitive_host_patterns():
    a = addresses()
    cfg = _config("match", f"Host Upper\n  HostName {a[1]}\n"
                  f"Match originalhost lower\n  HostName {a[2]}\n"
                  f"Host upper\n  HostName {a[0]}\n" + _common())
    seen, err = _msrun_sees(cfg, _hostfile("match", "Upper", "lower", "upper"))
    check(len(seen) == 3, f"three workers, got {seen}: {err[-1500:]}")
    by_server = {s[2]: s for s in seen.values()}
    for host in ["Upper", "lower", "upper"]:
        theirs = _ssh_sees(cfg, host)
        check(theirs[2] in by_server, f"{host}: ssh reached {theirs[2]}, msrun-ssh only {sorted(by_server)}")
        _same(by_server[theirs[2]], theirs, host)
    check(sorted(by_server) == sorted(a[:3]), f"servers reached: {sorted(by_server)}")


def test_accept_new_in_the_config_records_the_key_as_ssh_does_and_then_verifies_it():
    known = os.path.join(tmpdir(), "accept_new_known_hosts")
    open(known, "w").close()
    a = addresses()
    cfg = _config("accept_new", f"Host n0\n  HostName {a[0]}\n  StrictHostKeyChecking accept-new\n"
                  "  HashKnownHosts yes\n" + _common(known))
    seen, err = _msrun_sees(cfg, _hostfile("accept_new", "n0"))
    check("new host key added to " + known in err, f"no 'added' warning: {err[-1500:]}")
    text = open(known).read()
    check(text.startswith("|1|") and a[0] not in text, f"not hashed as HashKnownHosts says: {text!r}")
    # ssh itself now verifies the host with that file, strictly.
    r = subprocess.run(["ssh", "-F", cfg, "-o", "StrictHostKeyChecking=yes", "n0", "true"],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    check(r.returncode == 0, f"ssh does not verify the recorded key: {r.stderr}")
    seen, err = _msrun_sees(cfg, _hostfile("accept_new", "n0"))
    check("added" not in err and "NOT verified" not in err, f"second run: {err[-1500:]}")
    check(open(known).read() == text, "the second run wrote to known_hosts again")


def test_known_hosts_file_none_is_no_file_and_accept_new_refuses_as_ssh_does():
    """UserKnownHostsFile none: no file to read or to write. ssh refuses the unknown key even
    with accept-new, and with StrictHostKeyChecking no; msrun-ssh once wrote it to a file named
    "none" and trusted it after (accept-new), and let it through unverified (no)."""
    for policy in ("accept-new", "no"):
        _known_hosts_file_none_refuses(policy)


def _known_hosts_file_none_refuses(policy):
    a = addresses()
    cfg = _config("kh_none", f"Host n0\n  HostName {a[0]}\n  StrictHostKeyChecking {policy}\n"
                  "  UserKnownHostsFile none\n  GlobalKnownHostsFile none\n" + _common())
    places = [os.getcwd(), tmpdir()]
    for p in places:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(p, "none"))
    r = subprocess.run(["ssh", "-F", cfg, "n0", "true"], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    check(r.returncode != 0 and "verification failed" in r.stderr, f"ssh: {r.stderr}")
    for attempt in (1, 2):  # nothing recorded by the first: the second refuses as well
        seen, err = _msrun_sees(cfg, _hostfile("kh_none", "n0"), code_wanted=255)
        check("UserKnownHostsFile none" in err, f"attempt {attempt}: {err[-1500:]}")
    written = [p for p in places if os.path.exists(os.path.join(p, "none"))]
    check(not written, f"a file named none was written in {written}")


def test_host_key_alias_in_the_second_known_hosts_file():
    a = addresses()
    d = cluster_dir()
    key = open(os.path.join(d, "node0", "ssh_host_ed25519_key.pub")).read().split()
    first = os.path.join(tmpdir(), "alias_k1")
    second = os.path.join(tmpdir(), "alias_k2")
    open(first, "w").write("other-host ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample\n")
    open(second, "w").write(f"node-zero-alias {key[0]} {key[1]}\n")
    cfg = _config("alias", f"Host n0\n  HostName {a[0]}\n  HostKeyAlias node-zero-alias\n"
                  f"  UserKnownHostsFile {first} {second}\n  StrictHostKeyChecking yes\n"
                  + _common(first))
    seen, err = _msrun_sees(cfg, _hostfile("alias", "n0"))
    _same(next(iter(seen.values())), _ssh_sees(cfg, "n0"), "HostKeyAlias")
    # Without the alias's line, both refuse; ours names the alias and how to add the key.
    open(second, "w").write("")
    r = subprocess.run(["ssh", "-F", cfg, "n0", "true"], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    check(r.returncode != 0, "ssh accepted an unknown key")
    seen, err = _msrun_sees(cfg, _hostfile("alias", "n0"), code_wanted=255)
    check("under HostKeyAlias node-zero-alias" in err and f"ssh-keyscan -p 22 {a[0]}" in err,
          f"remedy: {err[-1500:]}")


def test_a_pattern_line_counts_for_the_host_key_alias_as_ssh_counts_it():
    """A cluster-wide "*.cluster KEY" line under a HostKeyAlias: with the host's real key both
    connect; with another key there, ssh says CHANGED, and so must we, also under accept-new
    (which would otherwise take the key as new and record it)."""
    a = addresses()
    d = cluster_dir()
    key = open(os.path.join(d, "node0", "ssh_host_ed25519_key.pub")).read().split()
    known = os.path.join(tmpdir(), "alias_pattern_kh")
    open(known, "w").write(f"*.cluster,!bad.cluster {key[0]} {key[1]}\n")
    cfg = _config("alias_pattern", f"Host n0\n  HostName {a[0]}\n  HostKeyAlias n0.cluster\n"
                  "  StrictHostKeyChecking accept-new\n" + _common(known))
    seen, err = _msrun_sees(cfg, _hostfile("alias_pattern", "n0"))
    _same(next(iter(seen.values())), _ssh_sees(cfg, "n0"), "HostKeyAlias and a pattern line")
    other = os.path.join(tmpdir(), "alias_pattern_other")
    if not os.path.exists(other):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True)
    open(known, "w").write("*.cluster " + " ".join(open(other + ".pub").read().split()[:2]) + "\n")
    before = open(known).read()
    r = subprocess.run(["ssh", "-F", cfg, "n0", "true"], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    check(r.returncode != 0 and "CHANGED" in r.stderr, f"ssh: {r.returncode} {r.stderr[-800:]}")
    seen, err = _msrun_sees(cfg, _hostfile("alias_pattern", "n0"), code_wanted=255)
    check("host key CHANGED" in err, f"not refused as changed: {err[-1500:]}")
    check(open(known).read() == before, "the known_hosts file was written")


def test_revoked_host_keys_as_a_krl_and_as_a_list_refuse_the_host_as_ssh_does():
    """RevokedHostKeys (libssh knows none): node0's key in a KRL (asked of ssh-keygen -Q) or in a
    list of keys refuses node0, as ssh refuses it; another key's KRL lets it in; a file that cannot
    be read refuses it too."""
    a = addresses()
    pub = os.path.join(cluster_dir(), "node0", "ssh_host_ed25519_key.pub")
    krl = os.path.join(tmpdir(), "revoked.krl")
    subprocess.run(["ssh-keygen", "-q", "-k", "-f", krl, pub], check=True, timeout=60)
    listed = os.path.join(tmpdir(), "revoked.list")
    open(listed, "w").write("# revoked\n" + open(pub).read())
    other = os.path.join(tmpdir(), "revoked_other")
    if not os.path.exists(other):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True)
    other_krl = os.path.join(tmpdir(), "revoked_other.krl")
    subprocess.run(["ssh-keygen", "-q", "-k", "-f", other_krl, other + ".pub"], check=True,
                   timeout=60)
    for name, file, refused in (("krl", krl, True), ("list", listed, True),
                                ("other", other_krl, False),
                                ("missing", os.path.join(tmpdir(), "no-such.krl"), True)):
        cfg = _config(f"revoked_{name}", f"Host n0\n  HostName {a[0]}\n  RevokedHostKeys {file}\n"
                      + _common())
        r = subprocess.run(["ssh", "-F", cfg, "n0", "true"], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        check((r.returncode != 0) == refused, f"{name}: ssh exit {r.returncode}: {r.stderr[-600:]}")
        seen, err = _msrun_sees(cfg, _hostfile(f"revoked_{name}", "n0"),
                                code_wanted=255 if refused else 0)
        if refused:
            check("REVOKED" in err or "cannot read the ssh config's RevokedHostKeys" in err,
                  f"{name}: {err[-1500:]}")
    # The KRL is asked once per host key, not once per connection: 12 processes take n0's two
    # connections (10 channels each), each verifying the key.
    wrap = os.path.join(tmpdir(), "keygen-count")
    os.makedirs(wrap, exist_ok=True)
    count = os.path.join(wrap, "runs")
    open(count, "w").close()
    with open(os.path.join(wrap, "ssh-keygen"), "w") as f:
        f.write(f'#!/bin/sh\necho "$*" >> {shlex.quote(count)}\nexec /usr/bin/ssh-keygen "$@"\n')
    os.chmod(os.path.join(wrap, "ssh-keygen"), 0o755)
    cfg = _config("revoked_other_many", f"Host n0\n  HostName {a[0]}\n  RevokedHostKeys {other_krl}\n"
                  + _common())
    hf = os.path.join(tmpdir(), "revoked_other_many.toml")
    open(hf, "w").write('[defaults]\nworkdir = "/tmp"\nlocal_worker_num = 12\n'
                        '\n[[hosts]]\naddress = "n0"\n')
    code, _, err, _ = run([job("reached.py")], hostfile=hf, extra=["--ssh_config", cfg],
                          env={"PATH": f"{wrap}:{os.environ['PATH']}"})
    check(code == 0, f"12 processes on n0: exit {code}: {err.decode()[-1500:]}")
    asked = [line for line in open(count) if line.startswith("-Q")]
    check(len(asked) == 1, f"ssh-keygen -Q ran {len(asked)} times for one host key: {asked}")


@contextlib.contextmanager
def _agent_holding(*keys):
    """An ssh-agent of its own (foreground, ended after) holding `keys`, passphrases given by an
    askpass program ("pw"): its socket path."""
    sock = os.path.join(tmpdir(), f"agent-{os.getpid()}-{time.monotonic_ns()}.sock")
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        # The socket exists before the agent listens on it: ssh-add -l exits 2 until it does.
        wait_for(lambda: subprocess.run(["ssh-add", "-l"], env=dict(os.environ, SSH_AUTH_SOCK=sock),
                                        capture_output=True, timeout=10).returncode != 2,
                 10, "the ssh-agent to listen")
        askpass = os.path.join(tmpdir(), "askpass-pw")
        open(askpass, "w").write("#!/bin/sh\necho pw\n")
        os.chmod(askpass, 0o755)
        env = dict(os.environ, SSH_AUTH_SOCK=sock, SSH_ASKPASS=askpass,
                   SSH_ASKPASS_REQUIRE="force", DISPLAY=":0")
        for key in keys:
            r = subprocess.run(["ssh-add", key], env=env, capture_output=True, text=True,
                               timeout=30, stdin=subprocess.DEVNULL)
            check(r.returncode == 0, f"ssh-add {key}: {r.stderr}")
        yield sock
    finally:
        agent.kill()
        agent.wait(timeout=10)


def _fresh_keys(prefix, names):
    """New ed25519 keys in the scratch directory, one per (name, passphrase) of `names`, anything
    left at their paths (a key, its .pub, its -cert.pub) removed first: {name: private key path}."""
    keys = {}
    for name, passphrase in names:
        keys[name] = os.path.join(tmpdir(), f"{prefix}{name}")
        for path in (keys[name], keys[name] + ".pub", keys[name] + "-cert.pub"):
            if os.path.exists(path):
                os.unlink(path)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", keys[name]],
                       check=True, timeout=60)
    return keys


def _logs_in_where_ssh_does(case, name, keys_text, hf, allowed, denied_names=""):
    """Case `case`: a config of `keys_text` (its key lines) for every host, root, the cluster's
    known hosts, batch mode; ssh, the oracle, logs in to the host file's first host (`allowed`)
    or is refused, and msrun-ssh logs in to all of `hf`'s hosts or is refused, naming
    `denied_names`."""
    cfg = _config(name + re.sub(r"[^a-z]+", "_", case),
                  "Host *\n  User root\n" + keys_text +
                  f"  UserKnownHostsFile {cluster_dir()}/known_hosts\n"
                  "  GlobalKnownHostsFile /dev/null\n  BatchMode yes\n  ConnectTimeout 5\n")
    r = subprocess.run(["ssh", "-F", cfg, addresses()[0], "true"], capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    check((r.returncode == 0) == allowed, f"{case}: ssh exit {r.returncode}: {r.stderr[-600:]}")
    code, _, err, _ = run([job("reached.py")], hostfile=hf, extra=["--ssh_config", cfg])
    err = err.decode()
    check(code == (0 if allowed else 255), f"{case}: exit {code}: {err[-1500:]}")
    if not allowed:
        check("authentication denied" in err and denied_names in err, f"{case}: {err[-1500:]}")


def test_the_agents_keys_are_offered_in_sshs_order_and_identities_only_keeps_the_listed_ones():
    """With an agent, ssh offers the agent's copies of the listed IdentityFiles' keys first, then
    (without IdentitiesOnly) the agent's other keys, then the files; msrun-ssh must log in and be
    refused where ssh is. IdentitiesOnly with a passphrase-protected IdentityFile that ssh-add
    loaded: ssh signs with the agent's copy, and so must msrun-ssh (the key's public half read from
    the .pub file or, without one, from the private key file); a key the agent holds that no
    IdentityFile lists is offered by neither. Without IdentitiesOnly, seven keys sshd does not
    know come before the listed one in the agent: ssh offers the listed one first, before sshd's
    MaxAuthTries (6) ends the login. A certificate beside a listed file (FILE-cert.pub, loaded by
    ssh-add with the key) is listed too: a key sshd knows only through its CA logs in by it, from
    the agent and, not in the agent, from the files. 12 processes take two connections per host,
    each asking the agent."""
    a = addresses()
    keys = _fresh_keys("agent_", [("locked", "pw"), ("stray", ""), ("certified", "pw"),
                                  ("certified_file", ""), ("user_ca", "")] +
                       [(f"noise{i}", "") for i in range(7)])
    for name in ("certified", "certified_file"):
        subprocess.run(["ssh-keygen", "-q", "-s", keys["user_ca"], "-I", "msrun-ssh-test", "-n",
                        "root", keys[name] + ".pub"], check=True, timeout=60)
    authorized = os.path.join(cluster_dir(), "authorized_keys")
    before = open(authorized).read()
    cas = os.path.join(cluster_dir(), "user_ca_keys")
    hf = os.path.join(tmpdir(), "agent_only.toml")
    open(hf, "w").write('[defaults]\nworkdir = "/tmp"\nlocal_worker_num = 12\n' +
                        "".join(f'\n[[hosts]]\naddress = "{x}"\n' for x in a[:2]))
    noise = tuple(f"noise{i}" for i in range(7))
    try:
        with open(authorized, "a") as f:
            for name in ("locked", "stray"):
                f.write(open(keys[name] + ".pub").read())
        open(cas, "w").write(open(keys["user_ca"] + ".pub").read())
        locked_pub = open(keys["locked"] + ".pub").read()
        for case, held, listed, with_pub, only, allowed in (
                ("listed", ("stray", "locked"), "locked", True, True, True),
                ("listed, no .pub", ("locked", "stray"), "locked", False, True, True),
                ("unlisted only", ("stray",), "locked", True, True, False),
                ("listed after seven unknown", noise + ("locked",), "locked", True, False, True),
                ("certificate", ("stray", "certified"), "certified", True, True, True),
                ("certificate file", ("stray",), "certified_file", True, True, True)):
            if with_pub:
                open(keys["locked"] + ".pub", "w").write(locked_pub)
            elif os.path.exists(keys["locked"] + ".pub"):
                os.unlink(keys["locked"] + ".pub")
            with _agent_holding(*(keys[k] for k in held)) as sock:
                _logs_in_where_ssh_does(case, "agent_",
                                        f"  IdentityFile {keys[listed]}\n"
                                        f"  IdentitiesOnly {'yes' if only else 'no'}\n"
                                        f"  IdentityAgent {sock}\n", hf, allowed, keys["locked"])
    finally:
        open(authorized, "w").write(before)
        open(cas, "w").close()


def test_a_listed_key_the_agent_holds_is_offered_once_as_ssh_offers_it():
    """ssh offers a listed IdentityFile whose key its agent holds once, through the agent, and not
    again from the file (pubkey_prepare). Three listed keys sshd does not know, all in the agent,
    then a listed key it knows, in no agent: ssh logs in at its fourth offer. Offering the three
    again from their files would make six refusals, sshd's MaxAuthTries, before the known key's
    turn. msrun-ssh must log in where ssh does."""
    a = addresses()
    names = ("held0", "held1", "held2", "known")
    keys = _fresh_keys("once_", [(name, "") for name in names])
    authorized = os.path.join(cluster_dir(), "authorized_keys")
    before = open(authorized).read()
    hf = os.path.join(tmpdir(), "agent_once.toml")
    open(hf, "w").write(f'[defaults]\nworkdir = "/tmp"\n\n[[hosts]]\naddress = "{a[0]}"\n')
    try:
        with open(authorized, "a") as f:
            f.write(open(keys["known"] + ".pub").read())
        with _agent_holding(keys["held0"], keys["held1"], keys["held2"]) as sock:
            cfg = _config("agent_once",
                          "Host *\n  User root\n" +
                          "".join(f"  IdentityFile {keys[n]}\n" for n in names) +
                          f"  IdentitiesOnly yes\n  IdentityAgent {sock}\n"
                          f"  UserKnownHostsFile {cluster_dir()}/known_hosts\n"
                          "  GlobalKnownHostsFile /dev/null\n  BatchMode yes\n"
                          "  ConnectTimeout 5\n")
            r = subprocess.run(["ssh", "-F", cfg, a[0], "true"], capture_output=True, text=True,
                               timeout=60, stdin=subprocess.DEVNULL)
            check(r.returncode == 0, f"ssh exit {r.returncode}: {r.stderr[-600:]}")
            code, _, err, _ = run([job("reached.py")], hostfile=hf, extra=["--ssh_config", cfg])
            check(code == 0, f"exit {code}: {err.decode()[-1500:]}")
    finally:
        open(authorized, "w").write(before)


def test_a_certificate_file_logs_in_where_ssh_does():
    """A CertificateFile (a certificate kept apart from its key, as a CA's signing service writes
    it) to hosts whose sshd knows the user's keys only through the CA (TrustedUserCAKeys): ssh
    offers it first and signs it with its key's file or the agent's copy of the key (the agent
    holding the key, not the certificate), and so must msrun-ssh; where ssh finds no key allowed to
    sign it (a key no IdentityFile lists under IdentitiesOnly, or none anywhere), both are
    refused. Each case is run by ssh, the oracle, and by msrun-ssh."""
    a = addresses()
    keys = _fresh_keys("cf_", [("plain", ""), ("locked", "pw"), ("stray", ""), ("user_ca", "")])
    certs = os.path.join(tmpdir(), "certs")
    os.makedirs(certs, exist_ok=True)
    cert = {}
    for name in ("plain", "locked"):
        subprocess.run(["ssh-keygen", "-q", "-s", keys["user_ca"], "-I", "msrun-ssh-test", "-n",
                        "root", keys[name] + ".pub"], check=True, timeout=60)
        cert[name] = os.path.join(certs, f"{name}.cert")
        os.replace(keys[name] + "-cert.pub", cert[name])  # apart from its key, not FILE-cert.pub
    # A certificate file named without its .pub, which ssh reads as it reads a key's.
    shutil.copy(cert["plain"], os.path.join(certs, "plain_pub.pub"))
    cas = os.path.join(cluster_dir(), "user_ca_keys")
    hf = _hostfile("certificate_file", *a[:2])
    beside = keys["locked"] + "-cert.pub"
    try:
        open(cas, "w").write(open(keys["user_ca"] + ".pub").read())
        for case, listed, certificate, held, only, allowed in (
                ("its key's file", "plain", cert["plain"], (), True, True),
                ("its .pub", "plain", os.path.join(certs, "plain_pub"), (), True, True),
                # With a CertificateFile given, ssh reads no certificate beside a key (FILE-cert):
                # the agent's copy of that one is not listed, and under IdentitiesOnly not offered.
                ("the agent's certificate beside a listed key", "locked", cert["plain"],
                 ("locked",), True, False),
                ("the agent's copy of its key", "locked", cert["locked"], ("locked",), True, True),
                ("the agent's unlisted key", "stray", cert["locked"], ("locked",), False, True),
                ("the agent's unlisted key, IdentitiesOnly", "stray", cert["locked"],
                 ("locked",), True, False),
                ("no key anywhere", "stray", cert["locked"], (), True, False),
                ("a certificate file that is not there", "plain", cert["plain"] + ".gone", (),
                 True, False)):
            if "beside" in case:  # ssh-add loads it with the key
                shutil.copy(cert[listed], beside)
            elif os.path.exists(beside):
                os.unlink(beside)
            agent = _agent_holding(*(keys[k] for k in held)) if held else contextlib.nullcontext()
            with agent as sock:
                _logs_in_where_ssh_does(case, "cf_",
                                        f"  IdentityFile {keys[listed]}\n"
                                        f"  CertificateFile {certificate}\n"
                                        f"  IdentitiesOnly {'yes' if only else 'no'}\n"
                                        f"  IdentityAgent {sock or 'none'}\n", hf, allowed)
    finally:
        open(cas, "w").close()


def test_too_many_keys_name_sshds_limit_at_once_as_ssh_does():
    """Seven listed keys sshd does not know: sshd ends the login at its MaxAuthTries (6) with a
    disconnect that ssh prints ("Too many authentication failures"). msrun-ssh must say so at
    once, with the remedy, not wait out its connect timeout and call it a timeout."""
    a = addresses()
    lines = ""
    for i in range(7):
        key = os.path.join(tmpdir(), f"many_{i}")
        for path in (key, key + ".pub"):
            if os.path.exists(path):
                os.unlink(path)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True,
                       timeout=60)
        lines += f"  IdentityFile {key}\n"
    cfg = _config("too_many", "Host *\n  User root\n" + lines +
                  "  IdentitiesOnly yes\n  IdentityAgent none\n"
                  f"  UserKnownHostsFile {cluster_dir()}/known_hosts\n"
                  "  GlobalKnownHostsFile /dev/null\n  BatchMode yes\n  ConnectTimeout 30\n")
    r = subprocess.run(["ssh", "-F", cfg, a[0], "true"], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    check(r.returncode == 255 and "Too many authentication failures" in r.stderr,
          f"ssh exit {r.returncode}: {r.stderr[-600:]}")
    hf = os.path.join(tmpdir(), "too_many.toml")
    open(hf, "w").write(f'[defaults]\nworkdir = "/tmp"\n\n[[hosts]]\naddress = "{a[0]}"\n')
    code, _, err, _ = run([job("reached.py")], hostfile=hf, extra=["--ssh_config", cfg])
    err = err.decode()
    check(code == 255, f"exit {code}: {err[-1500:]}")
    check("Too many authentication failures" in err and "IdentitiesOnly yes" in err and
          "timed out" not in err, err[-1500:])
    # `check` tells it as a refused login on a reached host whose key was verified.
    p = subprocess.run([binary(), "check", "--json", "--hostfile", hf, "--ssh_config", cfg,
                        "--connect_timeout", "5"], cwd=tmpdir(), capture_output=True, text=True,
                       timeout=120)
    checks = json.loads(p.stdout)["hosts"][a[0]]["checks"]
    got = {name: checks[name]["status"] for name in ("reachable", "authenticated", "host_key")}
    check(got == {"reachable": "pass", "authenticated": "fail", "host_key": "pass"} and
          "Too many authentication failures" in checks["authenticated"]["detail"],
          f"{got}: {checks['authenticated']['detail']}")


def test_an_encrypted_pem_identity_file_is_passed_over_without_a_prompt():
    """An IdentityFile in the old PEM format with a passphrase, in a real terminal: ssh in batch
    mode passes it over; so does msrun-ssh, which must not ask for its passphrase on the terminal
    (libssh leaves such a key to OpenSSL, whose own prompt reads /dev/tty and would hold the
    launcher there). The cluster's key, listed after it, logs in."""
    key = os.path.join(tmpdir(), "pem_locked")
    for path in (key, key + ".pub"):
        if os.path.exists(path):
            os.unlink(path)
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "secret", "-f",
                    key], check=True, timeout=60)
    os.unlink(key + ".pub")  # nothing but the encrypted file tells its key
    cfg = _config("pem_locked", f"Host *\n  IdentityFile {key}\n  IdentityAgent none\n" + _common())
    r = subprocess.run(["ssh", "-F", cfg, addresses()[0], "true"], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    check(r.returncode == 0, f"ssh exit {r.returncode}: {r.stderr[-600:]}")
    logs = os.path.join(tmpdir(), "pem-logs")
    pane = Pane("pem")
    try:
        argv = [binary(), "--hostfile", _hostfile("pem", addresses()[0]), "--log_dir", logs,
                "--ssh_config", cfg, "--connect_timeout", "5", job("reached.py")]
        pane.type(quoted(argv) + "; echo EXIT=$?")
        code = pane.exit_status(60)
        drawn = pane.drawn()
    finally:
        pane.close()
    check(b"pass phrase" not in drawn.lower() and b"passphrase" not in drawn.lower(),
          f"a passphrase was asked for: {drawn[-2000:]!r}")
    check(code == 0, f"exit {code}: {drawn[-2000:]!r}")


def test_an_unknown_key_names_what_ssh_connects_to_and_its_remedy_works():
    a = addresses()
    known = os.path.join(tmpdir(), "remedy_known_hosts")
    open(known, "w").close()
    cfg = _config("remedy", f"Host far\n  HostName {a[1]}\n  Port 22\n" + _common(known))
    seen, err = _msrun_sees(cfg, _hostfile("remedy", "far"), code_wanted=255)
    m = re.search(r"add it with: (ssh-keyscan -p 22 (\S+) >> (\S+))", err)
    check(m and m.group(2) == a[1] and m.group(3) == known, f"remedy: {err[-1500:]}")
    subprocess.run(["sh", "-c", m.group(1)], check=True, capture_output=True, timeout=60)
    seen, err = _msrun_sees(cfg, _hostfile("remedy", "far"))
    _same(next(iter(seen.values())), _ssh_sees(cfg, "far"), "after the remedy")


def test_a_wrong_port_in_a_match_block_is_honoured_as_ssh_honours_it():
    # "Match host" tests the HostName already set: both ssh and msrun-ssh go to port 2, where
    # nothing listens, and both are refused there.
    a = addresses()
    cfg = _config("match_port", f"Host n0\n  HostName {a[0]}\nMatch host {a[0]}\n  Port 2\n"
                  + _common())
    r = subprocess.run(["ssh", "-F", cfg, "n0", "true"], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    check(r.returncode == 255 and "port 2: Connection refused" in r.stderr, f"ssh: {r.stderr}")
    seen, err = _msrun_sees(cfg, _hostfile("match_port", "n0"), code_wanted=255)
    check("Connection refused" in err, f"msrun-ssh: {err[-1500:]}")
    dry = subprocess.run([binary(), "--hostfile", _hostfile("match_port", "n0"), "--ssh_config",
                          cfg, "--dry_run", job("reached.py")], capture_output=True, text=True,
                         timeout=60, cwd=tmpdir())
    check(f"root@{a[0]}:2, workdir" in dry.stdout, f"--dry_run: {dry.stdout[:1500]}")


def test_server_alive_in_the_config_gives_a_cut_host_up_as_ssh_would():
    # n1's config: ServerAliveInterval 1, ServerAliveCountMax 2. At --heartbeat 15 the launcher
    # alone would wait 2 x 15 s (+2 s) for a cut host; the config's 2 s decide, as they decide
    # for ssh, and the cut host's watchdog, which waits as long for the launcher, cleans it.
    a = addresses()
    cfg = _config("alive", f"Host n0\n  HostName {a[0]}\nHost n1\n  HostName {a[1]}\n"
                  "  ServerAliveInterval 1\n  ServerAliveCountMax 2\n" + _common())
    p, _ = launch([job("sleeper.py"), "--sleep", "120"], hostfile=_hostfile("alive", "n0", "n1"),
                  extra=["--ssh_config", cfg, "--heartbeat", "15"])
    try:
        wait_for(lambda: running("sleeper.py") >= 3, 20, "the 3 processes")
        start = time.monotonic()
        cluster("cut", 1)
        wait_for(lambda: not [x for x in marked_processes() if x[0] == "msrs-node1"], 10,
                 "the cut host to clean itself")
        _, err = p.communicate(timeout=30)
        took = time.monotonic() - start
        check(p.returncode == 255, f"exit {p.returncode}: {err.decode()[-1500:]}")
        check(re.search(rb"host n1 lost: no answer to heartbeats for [2-5]\.", err),
              f"not named as lost after the config's 2 s: {err.decode()[-1500:]}")
        check(took < 12, f"the launcher took {took:.1f} s (2 heartbeats would be 30 s)")
    finally:
        cluster("heal", 1)
        if p.poll() is None:
            p.kill()
            p.wait()
    wait_no_leftovers(10)


def _cut_jump_ends_the_launcher(name, target_lines, env=None):
    """Runs a job on `target` (reached through j0 as `target_lines` say) and a[2], cuts j0 while
    it runs, and checks that the target is lost after 2 heartbeats (+2 s), the launcher exits
    255 at once, no proxy is left, and the target's watchdog cleans the target."""
    a = addresses()
    cfg = _config(name, f"Host j0\n  HostName {a[0]}\nHost target\n  HostName {a[1]}\n" +
                  target_lines.format(cfg=os.path.join(tmpdir(), name + ".ssh_config")) +
                  _common())
    p, _ = launch([job("sleeper.py"), "--sleep", "120"],
                  hostfile=_hostfile(name, "target", a[2]), extra=["--ssh_config", cfg], env=env)
    try:
        wait_for(lambda: running("sleeper.py") >= 3, 20, "the 3 processes")
        check(_jump_ssh_left(cfg), "no jump ssh runs for the target")
        start = time.monotonic()
        cluster("cut", 0)
        try:
            _, err = p.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the launcher still runs {time.monotonic() - start:.0f} s after "
                                 "the jump host was cut (the target not lost, or its proxy "
                                 "waited for)")
        took = time.monotonic() - start
        check(p.returncode == 255, f"exit {p.returncode}: {err.decode()[-1500:]}")
        check(re.search(rb"host target lost: no answer to heartbeats for [2-6]\.", err),
              f"the target not named as lost after 2 heartbeats: {err.decode()[-1500:]}")
        check(took < 20, f"the launcher took {took:.1f} s")
        check(not _jump_ssh_left(cfg), f"a jump ssh is left running: {_jump_ssh_left(cfg)}")
        wait_for(lambda: not [x for x in marked_processes() if x[0] == "msrs-node1"], 15,
                 "the target to clean itself")
    finally:
        cluster("heal", 0)
        if p.poll() is None:
            p.kill()
            p.wait()
        for line in _jump_ssh_left(cfg):
            os.kill(int(line.split()[0]), 9)
    wait_no_leftovers(15)


def test_a_jump_host_cut_mid_job_loses_its_target_in_heartbeats_and_ends_the_launcher():
    # The config says BatchMode yes (for which Debian's ssh -G answers ServerAliveInterval 300:
    # 15 min of silence, which the config did not ask for). SHELL=/bin/sh: libssh runs the proxy
    # with $SHELL -c (as `exec COMMAND`), here dash.
    _cut_jump_ends_the_launcher("jumpcut", "  ProxyJump j0\n", env={"SHELL": "/bin/sh"})


def test_a_proxy_command_that_ignores_sigterm_is_ended_when_its_jump_host_is_cut():
    # A ProxyCommand that ignores SIGTERM (ssh keeps an ignored SIGTERM ignored): libssh's own
    # SIGTERM and wait would hold the launcher as long as the cut jump host keeps `ssh -W` alive.
    # It gets 2 s, then SIGKILL.
    _cut_jump_ends_the_launcher(
        "jumpterm", "  ProxyCommand sh -c \"trap '' TERM; exec ssh -o BatchMode=yes -F {cfg} "
        "-W [%h]:%p j0\"\n")


def test_a_jump_host_that_cannot_be_reached_is_named_with_the_command_that_shows_why():
    # libssh sends the proxy's stderr to /dev/null: the failure quotes what the jump's ssh wrote to
    # a file of the launcher's, and names the ssh command that shows more, which does show it.
    a = addresses()
    nowhere = a[0].rsplit(".", 1)[0] + ".99"  # on the cluster's network, no host there
    cfg = _config("jumpnowhere", f"Host j9\n  HostName {nowhere}\n  ConnectTimeout 2\n"
                  f"Host target target2\n  ProxyJump j9\nHost target\n  HostName {a[1]}\n"
                  f"Host target2\n  HostName {a[2]}\n" + _common())
    code, out, err, _ = run(["/bin/true"], hostfile=_hostfile("jumpnowhere", "target", "target2"),
                            extra=["--ssh_config", cfg], timeout=60)
    text = err.decode()
    check(code == 255 and "2 of 2 hosts failed" in text, f"exit {code}: {text[-1500:]}")
    # Both went through the jump host at once, and none got through: not a MaxStartups drop.
    check("MaxStartups" not in text, f"an unreachable jump host taken for a busy one: {text}")
    # The jump's own ssh says why (libssh discards a proxy's stderr: it writes to a file of ours).
    m = re.search(r"target: .*\(through ProxyJump j9, whose ssh said: (.*?); "
                  r"`(ssh -F \S+ -- \S+ true)` shows more\)", text)
    check(m, f"the jump, its words and the command are not named: {text[-1500:]}")
    check(nowhere in m.group(1) and "\r" not in text,
          f"the jump's ssh does not name where it failed: {m.group(1)!r}")
    r = subprocess.run(shlex.split(m.group(2)), capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, cwd=tmpdir())
    check(r.returncode == 255 and nowhere in r.stderr,
          f"{m.group(1)}: exit {r.returncode}, does not show the jump's error: {r.stderr}")
    check(not _jump_ssh_left(cfg), "a jump ssh is left running")


def test_a_proxy_command_that_fails_is_quoted_in_its_own_words():
    # libssh sends a ProxyCommand's stderr to /dev/null: under a POSIX $SHELL (dash, bash) the
    # proxy runs as `exec 2>>FILE COMMAND`, FILE one of the launcher's, and the failure quotes its
    # last words; its tokens expanded as ssh expands them.
    # A command that begins with its own `exec` (libssh 0.10.5 and later add none) keeps it; one
    # that writes nothing is said to have said nothing.
    a = addresses()
    cfg = _config("proxysays", "Host gated\n  HostName " + a[1] + "\n  ProxyCommand sh -c "
                  "'echo proxy-gate: no ticket for %h port %p >&2; exit 1'\n"
                  "Host execd\n  HostName " + a[2] + "\n  ProxyCommand exec sh -c "
                  "'echo proxy-gate: %h is closed >&2; exit 1'\n"
                  "Host mute\n  HostName " + a[0] + "\n  ProxyCommand sh -c 'exit 1'\n" +
                  _common())
    for shell in ("/bin/sh", "/bin/bash"):
        code, out, err, _ = run(["/bin/true"],
                                hostfile=_hostfile("proxysays", "gated", "execd", "mute"),
                                extra=["--ssh_config", cfg], timeout=60, env={"SHELL": shell})
        text = err.decode()
        check(code == 255 and "3 of 3 hosts failed" in text,
              f"SHELL={shell}: exit {code}: {text[-1500:]}")
        check(f"(through its ProxyCommand, which said: proxy-gate: no ticket for {a[1]} port 22; "
              f"`ssh -F {cfg} -- gated true` shows more)" in text,
              f"SHELL={shell}: the proxy's words are not quoted: {text[-1500:]}")
        check(f"(through its ProxyCommand, which said: proxy-gate: {a[2]} is closed; " in text,
              f"SHELL={shell}: the exec'd proxy's words are not quoted: {text[-1500:]}")
        check(f"(through its ProxyCommand, which said nothing; `ssh -F {cfg} -- mute true` "
              "shows more)" in text, f"SHELL={shell}: the silent proxy: {text[-1500:]}")


def test_a_proxy_commands_words_are_let_go_once_its_host_is_through():
    # What a ProxyCommand wrote during the handshake is not kept while the job runs: the
    # launcher's file of its words is emptied and closed once the host is through.
    a = addresses()
    name = "proxyquiet"
    path = os.path.join(tmpdir(), name + ".ssh_config")
    cfg = _config(name, f"Host j0\n  HostName {a[0]}\nHost target\n  HostName {a[1]}\n"
                  "  ProxyCommand sh -c 'echo proxy-words-0123456789 >&2; exec ssh -o "
                  f"BatchMode=yes -F {path} -W [%h]:%p j0'\n" + _common())
    p, _ = launch([job("sleeper.py"), "--sleep", "120"], hostfile=_hostfile(name, "target"),
                  extra=["--ssh_config", cfg], env={"SHELL": "/bin/sh"})
    try:
        wait_for(lambda: running("sleeper.py") >= 2, 20, "the processes")
        mine = []
        for fd in os.listdir(f"/proc/{p.pid}/fd"):
            try:
                mine.append(os.readlink(f"/proc/{p.pid}/fd/{fd}"))
            except FileNotFoundError:  # closed meanwhile
                pass
        check(not [x for x in mine if "msrun-ssh-proxy-log" in x],
              f"the launcher still holds the proxy's words: {mine}")
        proxies = [line.split()[0] for line in _jump_ssh_left(cfg)]
        check(len(proxies) == 1, f"the target's proxy: {_jump_ssh_left(cfg)}")
        stderr = f"/proc/{proxies[0]}/fd/2"
        check("msrun-ssh-proxy-log" in os.readlink(stderr) and os.stat(stderr).st_size == 0,
              f"the proxy's stderr: {os.readlink(stderr)}, {os.stat(stderr).st_size} bytes")
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
    wait_no_leftovers(15)


def test_an_unknown_key_behind_a_jump_host_names_a_remedy_that_passes_the_jump():
    # ssh-keyscan from the launcher cannot reach a host behind a jump host: the remedy is ssh's
    # own question, through the jump (run here in a terminal, answered yes), and the key it
    # records lets msrun-ssh in. The host file names the known_hosts file (the config another):
    # the remedy records the key where the launcher looks.
    a = addresses()
    known = os.path.join(tmpdir(), "jump_remedy_known_hosts")
    open(known, "w").close()
    cfg = _config("jumpremedy", f"Host j0\n  HostName {a[0]}\nHost target\n"
                  f"  HostName {a[1]}\n  ProxyJump j0\n" + _common())
    hostfile = os.path.join(tmpdir(), "jumpremedy.toml")
    open(hostfile, "w").write('[defaults]\nworkdir = "/tmp"\nlocal_worker_num = 1\n'
                              f'[[hosts]]\naddress = "target"\nknown_hosts = "{known}"\n')
    _, err = _msrun_sees(cfg, hostfile, code_wanted=255)
    m = re.search(r"reached through ProxyJump j0: ssh shows its fingerprint and records it when "
                  r"you answer yes: (ssh -o BatchMode=no -o StrictHostKeyChecking=ask -F \S+ "
                  r"-o UserKnownHostsFile=(\S+) -- \S+ true)", err)
    check(m and m.group(2) == known and "ssh-keyscan" not in err, f"remedy: {err[-1500:]}")
    pane = Pane("jumpremedy")
    try:
        pane.type(m.group(1) + "; echo EXIT=$?")
        wait_for(lambda: b"(yes/no" in pane.drawn(), 30, "ssh's question")
        pane.type("yes")
        check(pane.exit_status(30) == 0, f"the remedy failed: {pane.drawn()[-1500:]}")
    finally:
        pane.close()
    check(open(known).read().strip(), f"nothing recorded in {known}")
    seen, err = _msrun_sees(cfg, hostfile)
    _same(next(iter(seen.values())), _ssh_sees(cfg, "target"), "after the remedy")


def test_without_an_ssh_client_an_encrypted_default_key_is_passed_over_without_a_prompt():
    """Without `ssh` on PATH libssh tries the default identities of ~/.ssh itself: an encrypted
    PEM one (here id_ecdsa, without its .pub) was left to OpenSSL, whose prompt on the terminal
    held the launcher past --connect_timeout ("Enter PEM pass phrase:"). It is passed over, as
    ssh in batch mode passes it over, and the next default key (id_rsa: the cluster's key) logs
    in. ~/.ssh is a directory of the test's own, in a mount namespace of the launcher's own."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("script"):
        raise Skip("SKIPPED LOUDLY: needs root, unshare and script for a private ~/.ssh")
    home = os.path.expanduser("~root")
    d = os.path.join(tmpdir(), "pem_home_ssh")
    os.makedirs(d, mode=0o700)
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-m", "PEM", "-N", "secret", "-f",
                    os.path.join(d, "id_ecdsa")], check=True, timeout=60)
    os.unlink(os.path.join(d, "id_ecdsa.pub"))  # libssh then loads the key itself to learn it
    for name, to in (("id_ed25519", "id_rsa"), ("id_ed25519.pub", "id_rsa.pub"),
                     ("known_hosts", "known_hosts")):
        shutil.copy(os.path.join(cluster_dir(), name), os.path.join(d, to))
    os.chmod(os.path.join(d, "id_rsa"), 0o600)
    hostfile = os.path.join(tmpdir(), "pem_default.toml")
    open(hostfile, "w").write(f'[[hosts]]\naddress = "{addresses()[0]}"\nworkdir = "/tmp"\n'
                              'local_worker_num = 1\n')
    from test_ssh_config_corpus import _path_without_ssh
    launcher = quoted([binary(), "--hostfile", hostfile, "--log_dir",
                       os.path.join(tmpdir(), "pem-default-logs"), "--connect_timeout", "8",
                       job("reached.py")])
    inner = (f"mount -t tmpfs tmpfs {home} && mkdir {home}/.ssh && "
             f"mount --bind {d} {home}/.ssh && exec env PATH={_path_without_ssh()} "
             f"script -qec {shlex.quote(launcher)} /dev/null")
    r = subprocess.run(["unshare", "-m", "sh", "-c", inner], capture_output=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    check(b"pass phrase" not in out.lower() and b"passphrase" not in out.lower(),
          f"a passphrase was asked for: {out[-2000:]!r}")
    check(r.returncode == 0 and b"REACHED" in out, f"exit {r.returncode}: {out[-2000:]!r}")
