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
