"""A link that corrupts the SSH stream: a faulty NIC, a bad switch port, or a middlebox that
changes bytes past TCP's checksum. SSH's MAC rejects the packet on whichever side receives it, so
the connection ends: the host is lost, the job ends with 255 on every host, no corrupted byte
reaches a log or the console, and nothing is left running anywhere (docs/reliability.md).

The victim host is reached through a proxy on loopback that forwards its connection to the host's
sshd and, once told, flips one bit of the next bytes it forwards in one direction."""
import os
import re
import socket
import subprocess
import threading
import time

from harness import (addresses, check, cluster_dir, copy_hosts_file, job, launch, marked_processes,
                     read, tmpdir, wait_clean, wait_for)

HEARTBEAT = 1.0
VICTIM = 1
LINE = re.compile(rb"^rank (\S+) line (\d+)$")


class CorruptingProxy:
    """Listens on 127.0.0.1 and forwards each connection to `target` (address, port). After
    `corrupt(towards_client)`, the next chunk forwarded in that direction has one bit of its
    middle byte flipped. Either side's end ends both."""

    def __init__(self, target):
        self.target = target
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.armed = {True: threading.Event(), False: threading.Event()}
        self.flipped = {True: 0, False: 0}
        self.forwarded = {True: 0, False: 0}
        self.lock = threading.Lock()
        self.sockets = []
        threading.Thread(target=self._accept, daemon=True).start()

    def corrupt(self, towards_client):
        self.armed[towards_client].set()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target, timeout=10)
            server.settimeout(None)
            with self.lock:
                self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()

    def _pump(self, src, dst, towards_client):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if self.armed[towards_client].is_set() and len(data) >= 32:
                    self.armed[towards_client].clear()
                    middle = len(data) // 2
                    data = data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1:]
                    self.flipped[towards_client] += 1
                self.forwarded[towards_client] += len(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):  # the end of either side ends the connection, as a dead link would
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                try:
                    s.close()
                except OSError:
                    pass


def _victim_hosts_file(proxy, victim_addr):
    """The cluster's host file with the victim reached through the proxy: its address 127.0.0.1
    and the proxy's port, and its host key under that name in a known_hosts of its own."""
    cluster_known = open(os.path.join(cluster_dir(), "known_hosts")).read()
    key = [l.split(None, 1)[1] for l in cluster_known.splitlines()
           if l.split(None, 1)[0] == victim_addr]
    check(key, f"no key of {victim_addr} in the cluster's known_hosts")
    known = os.path.join(tmpdir(), f"known-corrupt-{proxy.port}")
    with open(known, "w") as f:
        f.write(cluster_known)
        f.write(f"[127.0.0.1]:{proxy.port} {key[0]}\n")
    path = copy_hosts_file(known_hosts=f'"{known}"')
    text = open(path).read()
    text = text.replace(f'address = "{victim_addr}"\n',
                        f'address = "127.0.0.1"\nport = {proxy.port}\n', 1)
    open(path, "w").write(text)
    return path


def _corrupted_link(towards_client):
    victim_addr = addresses()[VICTIM]
    proxy = CorruptingProxy((victim_addr, 22))
    try:
        hostfile = _victim_hosts_file(proxy, victim_addr)
        # 2 processes per host and the scheduler: 7; each prints a line every 20 ms for 40 s.
        p, logs = launch([job("lines.py"), "2000", "0.02"], hostfile=hostfile)
        try:
            wait_for(lambda: len([x for x in marked_processes() if "lines.py" in x[2]]) == 7, 20,
                     "all 7 processes")
            time.sleep(1)
            start = time.monotonic()
            proxy.corrupt(towards_client)
            out, err = p.communicate(timeout=30)
            took = time.monotonic() - start
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"the launcher did not end: {err.decode(errors='replace')[-3000:]}")
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        check(proxy.flipped[towards_client] == 1, f"no byte was corrupted: {proxy.flipped}")
        check(p.returncode == 255, f"exit {p.returncode}: {err.decode(errors='replace')[-2000:]}")
        lost = re.search(rb"^.*host 127\.0\.0\.1 lost.*$", err, re.M)
        check(lost, f"not named: {err.decode()[-1500:]}")
        # The launcher read the damaged packet itself, and says so; sshd, which read it on the
        # way to the host, just ends the connection.
        check(not towards_client or b"a packet arrived damaged" in lost.group(0),
              f"the damage is not named: {lost.group(0).decode(errors='replace')}")
        # The job ends soon after the damage: at once when the launcher reads it, at the next
        # heartbeat when sshd does (the launcher's next write).
        check(took < 3 * HEARTBEAT + 2 + 10, f"the job took {took:.1f} s to end")
        # Nothing corrupted reached a log or the console: every line of every rank is whole and
        # in order, each log from line 0 on.
        for name in sorted(os.listdir(logs)):
            if not re.fullmatch(r"(worker_\d+|scheduler)\.log", name):
                continue
            lines = [l for l in read(os.path.join(logs, name)).split(b"\n") if l]
            numbers = []
            for line in lines:
                m = LINE.match(line)
                check(m, f"{name}: a line that no rank printed: {line[:200]!r}")
                numbers.append(int(m.group(2)))
            check(numbers == list(range(len(numbers))), f"{name}: lines missing or out of order")
            check(numbers, f"{name}: no line")
        for line in out.splitlines():
            m = re.match(rb"^\[\S+@[\d.]+\] (.*)$", line)
            check(m and LINE.match(m.group(1)), f"a console line that no rank printed: {line[:200]!r}")
        # The lost host ends the job there by itself (its agent's stdin ended with the link).
        wait_clean(3 * HEARTBEAT + 5)
        print(f"{'towards the launcher' if towards_client else 'towards the host'}: "
              f"the job ended in {took:.1f} s with 255; {proxy.forwarded} bytes forwarded; "
              f"{lost.group(0).decode(errors='replace')}")
    finally:
        proxy.close()


def test_a_byte_corrupted_towards_the_launcher_loses_the_host_and_reaches_no_log():
    _corrupted_link(towards_client=True)


def test_a_byte_corrupted_towards_the_host_loses_it_and_the_job_ends_everywhere():
    _corrupted_link(towards_client=False)
