"""Security claims of docs/security.md, each tested for real on the namespace cluster."""
import os
import re
import shutil
import stat
import subprocess
import time

from harness import (Skip, addresses, check, cluster_dir, copy_hosts_file, job, launch,
                     marked_processes, read, run, tmpdir, wait_for, running)


def _known_hosts_copy(name, transform):
    known = os.path.join(tmpdir(), name)
    lines = open(os.path.join(cluster_dir(), "known_hosts")).read().splitlines()
    open(known, "w").write("\n".join(transform(lines)) + "\n")
    return known


def _other_key_line(addr):
    key = os.path.join(tmpdir(), "sec_otherkey")
    if not os.path.exists(key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    return f"{addr} " + " ".join(open(key + ".pub").read().split()[:2])


def test_changed_key_refused_even_with_checking_off():
    victim = addresses()[0]
    known = _known_hosts_copy("sec_changed", lambda ls: [
        _other_key_line(victim) if l.startswith(victim + " ") else l for l in ls])
    code, _, err, _ = run([job("sleeper.py"), "--sleep", "5"],
                          hostfile=copy_hosts_file(known_hosts=f'"{known}"'),
                          extra=["--strict_host_key_checking=no"])
    check(code == 255, f"exit {code}: {err.decode()}")
    check(re.search(rf"{re.escape(victim)}: host key CHANGED".encode(), err), err.decode())
    check(not marked_processes(), "something started")


def test_revoked_host_key_is_refused():
    """An @revoked line for the host's own key (libssh skips marker lines; ssh refuses it): the
    host is refused whatever the policy, as a changed key is, and nothing starts anywhere."""
    victim = addresses()[1]

    def revoke(lines):
        key = next(l for l in lines if l.startswith(victim + " ")).split(" ", 1)[1]
        return lines + [f"@revoked 198.18.*,!198.18.99.* {key}"]
    known = _known_hosts_copy("sec_revoked", revoke)
    for policy in ("yes", "accept-new", "no"):
        code, _, err, _ = run([job("sleeper.py"), "--sleep", "5"],
                              hostfile=copy_hosts_file(known_hosts=f'"{known}"'),
                              extra=[f"--strict_host_key_checking={policy}"])
        check(code == 255, f"{policy}: exit {code}: {err.decode()[-1500:]}")
        check(re.search(rf"{re.escape(victim)}: host key REVOKED".encode(), err),
              f"{policy}: {err.decode()[-1500:]}")
        check(not marked_processes(), f"{policy}: something started")


def test_accept_new_adds_unknown_keys_only():
    victim = addresses()[2]
    known = _known_hosts_copy("sec_acceptnew", lambda ls: [l for l in ls if not l.startswith(victim + " ")])
    before = open(known).read()
    code, _, err, _ = run([job("sleeper.py"), "--sleep", "0"],
                          hostfile=copy_hosts_file(known_hosts=f'"{known}"'),
                          extra=["--strict_host_key_checking=accept-new"])
    check(code == 0, f"exit {code}: {err.decode()[-1500:]}")
    after = open(known).read()
    check(after.startswith(before) and len(after) > len(before), "key not appended")
    check(b"new host key added" in err, "no notice of the added key")
    # The next run verifies against the added key with the default policy.
    code, _, err, _ = run([job("sleeper.py"), "--sleep", "0"],
                          hostfile=copy_hosts_file(known_hosts=f'"{known}"'))
    check(code == 0, f"second run exit {code}: {err.decode()[-1500:]}")


def test_unknown_key_with_checking_off_warns():
    victim = addresses()[1]
    known = _known_hosts_copy("sec_off", lambda ls: [l for l in ls if not l.startswith(victim + " ")])
    code, _, err, _ = run([job("sleeper.py"), "--sleep", "0"],
                          hostfile=copy_hosts_file(known_hosts=f'"{known}"'),
                          extra=["--strict_host_key_checking=no"])
    check(code == 0, f"exit {code}: {err.decode()[-1500:]}")
    check(re.search(rf"warning: {re.escape(victim)}: host key NOT verified".encode(), err), err.decode())
    check(open(known).read().count(victim + " ") == 0, "policy 'no' must not write known_hosts")


def test_ssh_config_strict_no_is_reported():
    # libssh honours "StrictHostKeyChecking no" from the ssh config by itself (it then calls an
    # unknown host OK); the launcher must still say, per host, that the key was not verified.
    victim = addresses()[1]
    known = _known_hosts_copy("sec_cfg_no", lambda ls: [l for l in ls if not l.startswith(victim + " ")])
    config = os.path.join(tmpdir(), "sec_cfg_no.config")
    open(config, "w").write("Host *\n  StrictHostKeyChecking no\n")
    code, _, err, _ = run([job("sleeper.py"), "--sleep", "0"],
                          hostfile=copy_hosts_file(known_hosts=f'"{known}"'),
                          extra=["--ssh_config", config])
    check(code == 0, f"exit {code}: {err.decode()[-1500:]}")
    check(re.search(rf"warning: {re.escape(victim)}: host key NOT verified \(not in "
                    rf"{re.escape(known)}\) because the ssh config says StrictHostKeyChecking no"
                    .encode(), err), err.decode())
    check(err.count(b"NOT verified") == 1, "only the unknown host is reported: " + err.decode())


def test_without_an_ssh_client_the_config_read_is_the_one_checked_in_the_users_home():
    """Without `ssh` on PATH libssh reads the ssh config itself, and a StrictHostKeyChecking no
    there (which the launcher refuses before it connects: only yes is read as ssh reads it) made
    libssh call a host it has no line for OK. The check read the config of the user's home as ssh
    finds it (the password database), libssh the one under $HOME: with HOME elsewhere, a config
    never checked let an unknown key through without a word (a line handed to every host, an
    @cert-authority of another domain, kept the launcher's warning quiet). Both read the same file
    now, and a host whose key is not known is refused."""
    from test_ssh_config_corpus import _path_without_ssh
    pw_home = os.path.expanduser("~root")
    if os.geteuid() != 0 or os.path.exists(os.path.join(pw_home, ".ssh", "config")):
        raise Skip("SKIPPED LOUDLY: needs root without a ~root/.ssh/config")
    victim = addresses()[1]
    pub = open(os.path.join(cluster_dir(), "id_ed25519.pub")).read().split()
    known = _known_hosts_copy("sec_noclient", lambda ls: [l for l in ls
                                                          if not l.startswith(victim + " ")]
                              + [f"@cert-authority *.example.org {pub[0]} {pub[1]}"])
    home = os.path.join(tmpdir(), "sec_noclient_home")
    os.makedirs(os.path.join(home, ".ssh"), mode=0o700)
    open(os.path.join(home, ".ssh", "config"), "w").write("Host *\n  StrictHostKeyChecking no\n")
    code, _, err, _ = run([job("sleeper.py"), "--sleep", "0"],
                          hostfile=copy_hosts_file(known_hosts=f'"{known}"'),
                          env={"PATH": _path_without_ssh(), "HOME": home})
    check(code == 255 and re.search(rf"{re.escape(victim)}: unknown host key".encode(), err),
          f"exit {code}: {err.decode()[-1500:]}")


def test_hashed_known_hosts():
    known = _known_hosts_copy("sec_hashed", lambda ls: ls)
    subprocess.run(["ssh-keygen", "-H", "-f", known], check=True, capture_output=True)
    text = open(known).read()
    check("|1|" in text and addresses()[0] not in text, "ssh-keygen -H did not hash")
    code, _, err, _ = run([job("sleeper.py"), "--sleep", "0"],
                          hostfile=copy_hosts_file(known_hosts=f'"{known}"'))
    check(code == 0, f"exit {code}: {err.decode()[-1500:]}")


def test_hashed_known_hosts_changed_key_is_still_caught():
    # Each session is handed only its host's lines of known_hosts (the pool narrows the file once
    # per launch): a hashed line with the wrong key must still be found and refused as CHANGED,
    # among hundreds of hashed lines for other hosts. Dropping it would say "unknown" instead.
    victim = addresses()[0]
    decoys = [f"10.9.{i // 200}.{i % 200} " + _other_key_line("x").split(" ", 1)[1]
              for i in range(600)]
    known = _known_hosts_copy("sec_hashed_changed", lambda ls: decoys + [
        _other_key_line(victim) if l.startswith(victim + " ") else l for l in ls])
    subprocess.run(["ssh-keygen", "-H", "-f", known], check=True, capture_output=True)
    check(open(known).read().count("|1|") >= 600, "ssh-keygen -H did not hash")
    code, _, err, _ = run([job("sleeper.py"), "--sleep", "5"],
                          hostfile=copy_hosts_file(known_hosts=f'"{known}"'))
    check(code == 255, f"exit {code}: {err.decode()[-1500:]}")
    check(re.search(rf"{re.escape(victim)}: host key CHANGED \(does not match {re.escape(known)}\)"
                    .encode(), err), err.decode())
    check(not marked_processes(), "something started")


def test_log_permissions_and_no_key_material():
    base = os.path.join(tmpdir(), "sec_logs")
    shutil.rmtree(base, ignore_errors=True)
    log_dir = os.path.join(base, "a", "b")
    code, out, err, _ = run([job("sleeper.py"), "--fail_rank", "1", "--delay", "0.5"],
                            log_dir=log_dir)
    check(code == 1, f"exit {code}")
    for d in (os.path.join(base, "a"), log_dir):
        mode = stat.S_IMODE(os.stat(d).st_mode)
        check(mode == 0o700, f"{d} has mode {oct(mode)}")
    key = read(os.path.join(cluster_dir(), "id_ed25519"))
    body = b"".join(key.split(b"\n")[1:-2])[:40]
    for name in os.listdir(log_dir):
        path = os.path.join(log_dir, name)
        check(stat.S_IMODE(os.stat(path).st_mode) == 0o600, f"{name} not 0600")
        check(body not in read(path), f"{name} contains key material")
    check(body not in out and body not in err, "console shows key material")


def test_env_values_not_in_remote_command_lines():
    secret = "s3cr3t-value-" + str(os.getpid())
    p, _ = launch([job("sleeper.py")], extra=["--env", f"HOSTILE_SECRET={secret}"])
    try:
        wait_for(lambda: running("sleeper.py") >= 7, 15,
                 "processes")
        time.sleep(0.5)
        for ns, pid, cmd in marked_processes():
            check(secret not in cmd, f"{ns} pid {pid} shows the value in its command line: {cmd}")
    finally:
        p.terminate()
        p.communicate(timeout=20)
