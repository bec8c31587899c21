"""SSH behaviour: ssh config aliases, more processes per host than sshd's MaxSessions."""
import json
import os
import re

from harness import addresses, check, cluster_dir, job, read, run, tmpdir


def test_ssh_config_alias_supplies_hostname_user_identity_and_known_hosts():
    # Only aliases in the host file: HostName, User, IdentityFile and UserKnownHostsFile all come
    # from the generated ssh config.
    path = os.path.join(tmpdir(), "aliases.toml")
    hosts = "".join(f'\n[[hosts]]\naddress = "node{i}"\n' for i in range(len(addresses())))
    open(path, "w").write('[defaults]\nworkdir = "/tmp"\nlocal_worker_num = 1\n' + hosts)
    code, out, err, logs = run([job("show.py")], hostfile=path,
                               extra=["--ssh_config", os.path.join(cluster_dir(), "ssh_config")])
    check(code == 0, f"exit {code}: {err.decode()[-2000:]}")
    sched = read(os.path.join(logs, "scheduler.log"))
    line = [l for l in sched.split(b"\n") if l.startswith(b'{"argv"')][0]
    env = json.loads(line)["env"]
    check(env["MS_SCHED_HOST"] == addresses()[0], f"MS_SCHED_HOST {env['MS_SCHED_HOST']}")
    check(re.search(rb"\[0@node0\]", out), "console prefix uses the alias")


def test_more_processes_than_max_sessions():
    # The test hosts keep sshd's default MaxSessions (10): 12 workers + scheduler + watchdog on one
    # host need two connections.
    path = os.path.join(tmpdir(), "many.toml")
    text = open(os.path.join(cluster_dir(), "hosts.toml")).read()
    first = text.split("[[hosts]]")
    open(path, "w").write(first[0] + "[[hosts]]" + first[1] + "local_worker_num = 12\n")
    code, out, err, logs = run([job("show.py")], hostfile=path)
    check(code == 0, f"exit {code}: {err.decode()[-2000:]}")
    for rank in range(12):
        log = read(os.path.join(logs, f"worker_{rank}.log"))
        check(b'"RANK_ID": "%d"' % rank in log, f"rank {rank} did not run")


# libssh prints "[2026/11/30 20:06:19.136697, 1] function: message" on stderr when left alone.
LIBSSH_LINE = re.compile(rb"^\[\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+, \d\]", re.M)


def test_libssh_messages_never_reach_the_console_whatever_the_configs_loglevel():
    base = open(os.path.join(cluster_dir(), "ssh_config")).read()
    for level in ["QUIET", "FATAL", "ERROR", "INFO", "VERBOSE", "DEBUG", "DEBUG1", "DEBUG2",
                  "DEBUG3"]:
        config = os.path.join(tmpdir(), f"ssh_config_{level}")
        open(config, "w").write(f"Host *\n  LogLevel {level}\n\n" + base)
        code, out, err, logs = run([job("show.py")], extra=["--ssh_config", config])
        check(code == 0, f"LogLevel {level}: exit {code}: {err.decode()[-2000:]}")
        for stream in (out, err):
            check(not LIBSSH_LINE.search(stream) and b"libssh" not in stream,
                  f"LogLevel {level}: libssh on the console: {stream.decode()[-1500:]}")
    # Asked for, they are in the launcher's log, still not on the console.
    code, out, err, logs = run([job("show.py")], extra=["--ssh_config", config, "--ssh_debug", "3"])
    check(code == 0, f"exit {code}: {err.decode()[-2000:]}")
    log = read(os.path.join(logs, "msrun-ssh.log"))
    check(log.count(b" libssh: ") > 20, f"msrun-ssh.log lacks libssh's messages: {log[-1500:]}")
    check(not LIBSSH_LINE.search(err) and b"libssh" not in err + out, "libssh on the console")


def test_hostname_in_log_names_is_each_hosts_own_name():
    # The host file names the hosts by IP address; the hosts call themselves node0, node1, node2.
    code, out, err, logs = run([job("show.py")], extra=["--worker_log_name", "w-{hostname}"])
    check(code == 0, f"exit {code}: {err.decode()[-2000:]}")
    names = sorted(n for n in os.listdir(logs) if n.startswith("w-"))
    check(names == ["w-node0_0.log", "w-node0_1.log", "w-node1_2.log", "w-node1_3.log",
                    "w-node2_4.log", "w-node2_5.log"], f"log files {names}")
    check(b'"RANK_ID": "3"' in read(os.path.join(logs, "w-node1_3.log")), "rank 3's log")
