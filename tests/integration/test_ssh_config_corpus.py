"""The ssh config differential corpus (issue #33): 43 (config, host) cases, each a host alias of
one ssh config that exercises an option OpenSSH honours (HostName and its tokens, Port, User and
its tokens, Host patterns with wildcards, negation and case, first value wins, Match with every
criterion that needs no DNS, Include, ProxyJump in every form, ProxyCommand and its tokens (%n
too), a comment after a Host line's patterns,
IdentityFile order and tokens, IdentitiesOnly, known_hosts files, StrictHostKeyChecking,
ConnectTimeout). OpenSSH 9.2 refuses some forms itself (tokens in User, a jump given by address
without a Host block for its key, Match final without canonicalization); those are left out:
both clients fail alike there, and one job cannot hold a failing host.

One msrun-ssh job runs a worker on every alias (reached.py prints SSH_CONNECTION and the user as
the host's sshd saw them), and the real `ssh -F CONFIG ALIAS` reaches every alias too; for every
case the client address (the last jump host, or the launcher), the server address, the server
port and the user must agree. Zero disagreements. What the test cluster cannot tell apart (two
keys that are both authorized) is left to tests/unit/openssh_config_test.cc."""
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

from harness import addresses, check, cluster_dir, job, read, run, tmpdir, wait_no_leftovers


def _corpus():
    """(alias, config lines of its own) for every case; the config's Host * block comes last."""
    a = addresses()
    d = cluster_dir()
    key = os.path.join(d, "id_ed25519")
    other_key = os.path.join(tmpdir(), "corpus_unauthorized_key")
    if not os.path.exists(other_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other_key],
                       check=True, timeout=60)
    # The cluster's key under a name that ends with the case's alias (IdentityFile ..._%n).
    by_name = os.path.join(tmpdir(), "corpus_key")
    if not os.path.exists(by_name + "_c04"):
        os.symlink(key, by_name + "_c04")
    inc = os.path.join(tmpdir(), "corpus_included.conf")
    open(inc, "w").write(f"Host c20\n  HostName {a[2]}\nHost c21*\n  HostName {a[1]}\n")
    proxy = f"ssh -F {{cfg}} -W %h:%p j0"
    return [
        ("c01", f"HostName {a[0]}"),
        ("c02", f"HostName {a[1]}\n  Port 22"),
        ("c03", f"HostName {a[2]}\n  User root"),
        ("c04", f"HostName {a[0]}\n  IdentityFile {by_name}_%n"),     # a token: the alias
        ("c05", f"HostName {a[1]}\n  HostName {a[2]}"),              # the first value wins
        ("c06", f"HostName {a[0]}\n  ProxyJump j1"),
        ("c07", f"HostName {a[2]}\n  ProxyJump j0,j1"),
        ("c08", f"HostName {a[2]}\n  ProxyJump j1,j0"),              # the other order
        ("c09", f"HostName {a[1]}\n  ProxyJump root@j0"),             # user@host
        ("c10", f"HostName {a[1]}\n  ProxyJump ssh://root@j2:22"),    # the URI form
        ("c11", f"HostName {a[2]}\n  ProxyCommand " + proxy),
        ("c12", f"HostName {a[0]}\n  ProxyJump none"),
        ("c13", f"HostName {a[1]}\n  IdentityFile {other_key}\n  IdentityFile {key}"),
        ("c14", f"HostName {a[2]}\n  IdentityFile {key}\n  IdentityFile {other_key}"),
        ("c15", f"HostName {a[0]}\n  StrictHostKeyChecking yes"),
        ("c16", f"HostName {a[1]}\n  StrictHostKeyChecking accept-new"),
        ("c17", f"HostName {a[2]}\n  ConnectTimeout 3"),
        ("c18", f"HostName {a[0]}\n  ServerAliveInterval 30\n  ServerAliveCountMax 4"),
        ("c19", f"HostName {a[1]}\n  UserKnownHostsFile /dev/null {d}/known_hosts"),
        ("c20", f"Include {inc}"),                                    # HostName from the file
        ("c21x", f"Include {inc}"),                                   # c21* there
        ("c22", ""),                                                  # Match originalhost c22
        ("c23", f"HostName {a[0]}\n  Port 22\n  User root\n  IdentitiesOnly yes"),
        ("c24", f"HostKeyAlias {a[2]}\n  HostName {a[2]}"),
        ("C25", f"HostName {a[1]}"),                                 # upper case: its own block
        ("c26", f"HostName {a[2]}\n  ProxyJump c01"),                 # a jump that is a case
        ("c27", f"HostName {a[0]}\n  ProxyJump c07"),                 # a jump with its own jumps
        ("c28", f"HostName {a[1]}\n  ProxyCommand ssh -F {{cfg}} -W [%h]:%p j2"),
        ("c29", f"HostName {a[0]}\n  ProxyJump j2\n  ProxyJump j1"),  # the first value wins
        ("c30", f"HostName {a[2]}\n  GlobalKnownHostsFile {d}/known_hosts"),
        ("c31", ""),                                                  # Host c3? gives it all
        ("c32", ""),                                                  # !c32: not that block
        ("c33", ""),                                                  # Match originalhost
        ("c34", ""),                                                  # Match host (HostName)
        ("c35", ""),                                                  # Match user
        ("c36", ""),                                                  # Match localuser
        ("c37", ""),                                                  # Match exec true
        ("c38", ""),                                                  # Match exec false, then all
        ("c39", ""),                                                  # Match !originalhost
        ("c40", f"HostName {a[2]}"),                                  # Match exec with a token
        # ProxyCommand's %n (libssh knows no %n): the alias as given
        ("c41", f"HostName {a[1]}\n  ProxyCommand sh -c 'test %n = c41 && "
                f"exec ssh -F {{cfg}} -W [%h]:%p j2'"),
        ("c42", ""),                                                  # Host c42 # c43: a comment
        ("c43", ""),                                                  # not c42's block
    ], inc


def _config():
    a = addresses()
    d = cluster_dir()
    cases, _ = _corpus()
    path = os.path.join(tmpdir(), "corpus.ssh_config")
    blocks = [f"Host {alias}\n  {text.format(cfg=path)}\n" for alias, text in cases if text]
    blocks += [
        f"Host j0\n  HostName {a[0]}\n", f"Host j1\n  HostName {a[1]}\n",
        f"Host j2\n  HostName {a[2]}\n",
        f"Host c3? !c32 !c33 !c34 !c35 !c36 !c37 !c38 !c39\n  HostName {a[1]}\n",
        f"Host c32\n  HostName {a[2]}\n",
        f"Match originalhost c33\n  HostName {a[0]}\n",
        f"Match originalhost c22\n  HostName {a[1]}\n",
        f"Host c34\n  HostName {a[2]}\nMatch host {a[2]} originalhost c34\n  ProxyJump j0\n",
        f"Match user root originalhost c35\n  HostName {a[0]}\n",
        f"Match localuser root originalhost c36\n  HostName {a[2]}\n",
        f"Match originalhost c37 exec true\n  HostName {a[1]}\n",
        f"Match originalhost c38 exec false\n  HostName {a[0]}\n"
        f"Match originalhost c38\n  HostName {a[2]}\n",
        f"Match !originalhost c*,j*\n  HostName 198.18.255.254\n"
        f"Match originalhost c39\n  HostName {a[0]}\n",
        f"Match originalhost c40 exec \"test %h = {a[2]}\"\n  User root\n",
        f"Host C25\n  HostName {a[2]}\n",                            # never: C25 matched first
        f"Host c42 # c43 was here until the move\n  HostName {a[2]}\n",
        f"Host c43\n  HostName {a[0]}\n",
        f"Host *\n  User root\n  IdentityFile {d}/id_ed25519\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {d}/known_hosts\n  GlobalKnownHostsFile /dev/null\n"
        "  BatchMode yes\n  ConnectTimeout 5\n  StrictHostKeyChecking yes\n",
    ]
    open(path, "w").write("".join(blocks))
    return path, [alias for alias, _ in cases]


def _ssh_sees(config, host):
    r = subprocess.run(["ssh", "-F", config, host, 'echo "$SSH_CONNECTION" "$(id -un)"'],
                       capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    return r.stdout.split() if r.returncode == 0 else ["ssh failed: " + r.stderr.strip()]


def _pick(seen):
    """Client address, server address, server port, user (the client port differs every time)."""
    return (seen[0], seen[2], seen[3], seen[4]) if len(seen) == 5 else tuple(seen)


def _same_as_ssh(aliases, logs, theirs):
    """Every alias's worker (rank = its place in the host file) reached what ssh reached."""
    ours = {}
    for rank, alias in enumerate(aliases):
        m = re.search(rb"REACHED (.+)", read(os.path.join(logs, f"worker_{rank}.log")))
        ours[alias] = m.group(1).decode().split() if m else ["no REACHED line"]
    problems = [f"{h}: msrun-ssh {_pick(ours[h])}, ssh {_pick(theirs[h])}"
                for h in aliases if _pick(ours[h]) != _pick(theirs[h])]
    check(not problems, f"{len(problems)} of {len(aliases)} cases disagree with ssh:\n" +
          "\n".join(problems))


def test_every_case_reaches_what_ssh_reaches():
    cfg, aliases = _config()
    check(len(aliases) == 43, f"{len(aliases)} cases")
    hostfile = os.path.join(tmpdir(), "corpus.toml")
    open(hostfile, "w").write('[defaults]\nworkdir = "/tmp"\nlocal_worker_num = 1\n' +
                              "".join(f'\n[[hosts]]\naddress = "{h}"\n' for h in aliases))
    with ThreadPoolExecutor(max_workers=8) as pool:
        theirs = dict(zip(aliases, pool.map(lambda h: _ssh_sees(cfg, h), aliases)))
    code, out, err, logs = run([job("reached.py")], hostfile=hostfile, timeout=240,
                               # 40 hosts' sessions and processes on this machine's 2 CPUs:
                               # the default heartbeat, not the tests' quick one (1 s)
                               extra=["--ssh_config", cfg, "--connect_timeout", "20",
                                      "--heartbeat", "5"])
    check(code == 0, f"exit {code}: {err.decode()[-3000:]}")
    _same_as_ssh(aliases, logs, theirs)
    # The corpus is not one case forty times: it reaches every host, directly and through jumps.
    servers = {_pick(theirs[h])[1] for h in aliases}
    clients = {_pick(theirs[h])[0] for h in aliases}
    check(servers == set(addresses()[:3]), f"servers {servers}")
    check(len(clients) >= 3, f"clients (launcher and jump hosts) {clients}")
    wait_no_leftovers(15)


def _path_without_ssh():
    """A PATH directory holding every program of /usr/bin and /usr/sbin but `ssh`."""
    d = os.path.join(tmpdir(), "path_without_ssh")
    if not os.path.isdir(d):
        os.makedirs(d)
        for src in ("/usr/sbin", "/usr/bin"):
            for name in os.listdir(src):
                if name != "ssh" and not os.path.exists(os.path.join(d, name)):
                    os.symlink(os.path.join(src, name), os.path.join(d, name))
    return d


def _fallback_config():
    """The cases libssh's own parser takes (docs/ssh.md): no Match, no IdentityFile, no tokens."""
    a = addresses()
    d = cluster_dir()
    inc = os.path.join(tmpdir(), "fallback_included.conf")
    open(inc, "w").write(f"Host f10\n  HostName {a[2]}\nHost f11*\n  HostName {a[1]}\n")
    cases = [
        ("f01", f"HostName {a[0]}"),
        ("f02", f"HostName {a[1]}\n  Port 22"),
        ("f03", f"HostName {a[2]}\n  User root"),
        ("f04", f"HostName {a[1]}\n  HostName {a[2]}"),               # the first value wins
        ("f05", f"HostName {a[0]}\n  ProxyJump none"),
        ("f06", f"HostName {a[1]}\n  StrictHostKeyChecking yes"),
        ("f07", f"HostName {a[2]}\n  ConnectTimeout 3"),
        ("f08", f"HostName {a[0]}\n  UserKnownHostsFile {d}/known_hosts"),
        ("f09", f"HostName {a[1]}\n  GlobalKnownHostsFile {d}/known_hosts"),
        ("f10", f"Include {inc}"),                                     # HostName from the file
        ("f11x", f"Include {inc}"),                                    # f11* there
        ("f21", ""),                                                   # Host f2? !f22
        ("f22", f"HostName {a[2]}"),                                   # not that block
        ("f23", ""),                                                   # Host f2? !f22
    ]
    path = os.path.join(tmpdir(), "fallback.ssh_config")
    blocks = [f"Host {alias}\n  {text}\n" for alias, text in cases if text]
    blocks += [f"Host f2? !f22\n  HostName {a[0]}\n",
               f"Host *\n  User root\n  UserKnownHostsFile {d}/known_hosts\n"
               "  GlobalKnownHostsFile /dev/null\n  BatchMode yes\n  ConnectTimeout 5\n"
               "  SendEnv LANG\n  ForwardAgent no\n"]
    open(path, "w").write("".join(blocks))
    return path, [alias for alias, _ in cases]


def test_without_an_ssh_client_what_libssh_reads_as_ssh_reaches_what_ssh_reaches():
    # Without `ssh` on PATH libssh reads the config. What it reads as OpenSSH does, it is given:
    # every such case reaches what the real ssh reaches (the key comes from the host file, as
    # IdentityFile is refused there). The whole corpus, which holds what it reads otherwise
    # (Match, IdentityFile, ProxyJump, HostKeyAlias, tokens, capitals), is refused before
    # anything connects, naming the file, the line and the keyword.
    cfg, aliases = _fallback_config()
    key = os.path.join(cluster_dir(), "id_ed25519")
    hostfile = os.path.join(tmpdir(), "fallback.toml")
    open(hostfile, "w").write(f'[defaults]\nworkdir = "/tmp"\nlocal_worker_num = 1\n'
                              f'identity_file = "{key}"\n' +
                              "".join(f'\n[[hosts]]\naddress = "{h}"\n' for h in aliases))

    def ssh_sees(h):
        r = subprocess.run(["/usr/bin/ssh", "-F", cfg, "-i", key, h,
                            'echo "$SSH_CONNECTION" "$(id -un)"'], capture_output=True,
                           text=True, timeout=90, stdin=subprocess.DEVNULL)
        return r.stdout.split() if r.returncode == 0 else ["ssh failed: " + r.stderr.strip()]

    with ThreadPoolExecutor(max_workers=8) as pool:
        theirs = dict(zip(aliases, pool.map(ssh_sees, aliases)))
    saved = os.environ["PATH"]
    os.environ["PATH"] = _path_without_ssh()
    try:
        code, _, err, logs = run([job("reached.py")], hostfile=hostfile, timeout=180,
                                 extra=["--ssh_config", cfg, "--connect_timeout", "20",
                                        "--heartbeat", "5"])
        check(code == 0, f"exit {code}: {err.decode()[-3000:]}")
        _same_as_ssh(aliases, logs, theirs)
        check({_pick(theirs[h])[1] for h in aliases} == set(addresses()[:3]), "every host")

        corpus, corpus_aliases = _config()
        corpus_hosts = os.path.join(tmpdir(), "corpus_fallback.toml")
        open(corpus_hosts, "w").write('[defaults]\nworkdir = "/tmp"\nlocal_worker_num = 1\n' +
                                      "".join(f'\n[[hosts]]\naddress = "{h}"\n'
                                              for h in corpus_aliases))
        code, _, err, _ = run([job("reached.py")], hostfile=corpus_hosts, timeout=60,
                              extra=["--ssh_config", corpus])
        # The first line libssh reads otherwise: case c04's IdentityFile.
        line = open(corpus).read().splitlines().index(
            next(l for l in open(corpus).read().splitlines() if "IdentityFile" in l)) + 1
        check(code == 2, f"exit {code}: {err.decode()[-2000:]}")
        check(f"ssh config {corpus} line {line}: IdentityFile: ".encode() in err and
              b"install OpenSSH's client" in err, f"not named: {err.decode()[-2000:]}")
    finally:
        os.environ["PATH"] = saved
    wait_no_leftovers(15)
