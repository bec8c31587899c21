# The launch agent of one job on one host (include/msrun_ssh/agent.h): started once per host
# through the user's login shell (agent.sh), it starts the job's commands there itself, each with
# /bin/sh -c in a session of its own, and carries their stdin, stdout, stderr and ends over its
# own stdin and stdout. So a host pays its login rc once per job, not once per process.
#
# Frames, both ways: one op byte, the channel id and the payload length (unsigned 32-bit, big
# endian), the payload. Launcher to agent: S spawn (payload: the command), I stdin bytes, E end
# of stdin, K signal its process group (payload: the signal's name without SIG). Agent to
# launcher: o stdout bytes, e stderr bytes, x exit ("STATUS" or "STATUS NAME" when a signal ended
# it, STATUS being 128+N), c closed (exited and both outputs at their end), f could not start
# (payload: why). Before the first frame the agent writes the line HELLO, so that whatever the
# login rc printed can be told from the frames.
#
# Its one argument is the idle limit in seconds: with no command running and no byte from the
# launcher for that long (a host cut off from it, whose connection never ends), the agent exits.
#
# The launcher's bytes are always read, also while the launcher reads slowly: the agent buffers
# at most MAX_OUT bytes for it and stops reading the commands' outputs meanwhile (they block, as
# over a channel of their own), never the heartbeats meant for a watchdog. The end of the
# agent's stdin (the launcher or the connection gone) ends the agent at once: its commands see
# their stdin end, which a watchdog takes for a lost launcher.
import os
import select
import signal
import struct
import sys

HELLO = b"\nmsrun-ssh-agent 1\n"
MAX_OUT = 1 << 20
CHUNK = 65536
HEAD = struct.Struct(">cII")
IDLE_MS = int(float(sys.argv[1]) * 1000) if len(sys.argv) > 1 else None


class Child:
    def __init__(self, cid, pid, fin, fout, ferr):
        self.cid, self.pid = cid, pid
        self.fin, self.pending, self.eof = fin, b"", False
        self.outs = {fout: b"o", ferr: b"e"}
        self.status = None


class Agent:
    def __init__(self):
        self.children = {}
        self.by_fd = {}
        self.by_pid = {}
        self.out = bytearray(HELLO)
        self.inbuf = b""
        self.wake_r, wake_w = os.pipe()
        for fd in (self.wake_r, wake_w, 1):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)

    def send(self, op, cid, payload=b""):
        self.out += HEAD.pack(op, cid, len(payload)) + payload

    def spawn(self, cid, command):
        fds = [os.pipe() for _ in range(3)]
        try:
            pid = os.fork()
        except OSError as e:
            for r, w in fds:
                os.close(r)
                os.close(w)
            return self.send(b"f", cid, str(e).encode())
        if pid == 0:
            try:
                os.setsid()
                os.dup2(fds[0][0], 0)
                os.dup2(fds[1][1], 1)
                os.dup2(fds[2][1], 2)
                for name in ("SIGPIPE", "SIGXFSZ"):
                    if hasattr(signal, name):
                        signal.signal(getattr(signal, name), signal.SIG_DFL)
                signal.set_wakeup_fd(-1)
                os.execv("/bin/sh", ["sh", "-c", command.decode("utf-8", "surrogateescape")])
            except BaseException as e:
                os.write(2, ("msrun-ssh-agent: cannot start /bin/sh: %s\n" % e).encode())
            os._exit(127)
        os.close(fds[0][0])
        os.close(fds[1][1])
        os.close(fds[2][1])
        child = Child(cid, pid, fds[0][1], fds[1][0], fds[2][0])
        for fd in (child.fin, *child.outs):
            os.set_blocking(fd, False)
        self.children[cid] = child
        self.by_pid[pid] = child
        for fd in child.outs:
            self.by_fd[fd] = child

    def control(self, op, cid, payload):
        if op == b"S":
            return self.spawn(cid, payload)
        child = self.children.get(cid)
        if child is None:
            return
        if op == b"I" and child.fin >= 0:
            child.pending += payload
        elif op == b"E":
            child.eof = True
        elif op == b"K":
            try:
                os.killpg(child.pid, getattr(signal, "SIG" + payload.decode()))
            except (OSError, AttributeError):
                pass
        self.feed_stdin(child)

    def feed_stdin(self, child):
        if child.fin < 0:
            return
        try:
            while child.pending:
                n = os.write(child.fin, child.pending)
                child.pending = child.pending[n:]
        except BlockingIOError:
            return
        except OSError:
            child.pending = b""
        if child.eof and not child.pending:
            os.close(child.fin)
            child.fin = -1

    def read_control(self):
        data = os.read(0, CHUNK)
        if not data:
            os._exit(0)
        self.inbuf += data
        while len(self.inbuf) >= HEAD.size:
            op, cid, size = HEAD.unpack_from(self.inbuf)
            if len(self.inbuf) < HEAD.size + size:
                break
            payload = self.inbuf[HEAD.size:HEAD.size + size]
            self.inbuf = self.inbuf[HEAD.size + size:]
            self.control(op, cid, payload)

    def read_output(self, fd):
        child = self.by_fd[fd]
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            return self.send(child.outs[fd], child.cid, data)
        os.close(fd)
        del self.by_fd[fd]
        del child.outs[fd]
        self.maybe_closed(child)

    def reap(self):
        while self.by_pid:
            try:
                pid, raw = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.by_pid.pop(pid, None)
            if child is None:
                continue
            if os.WIFSIGNALED(raw):
                n = os.WTERMSIG(raw)
                try:
                    name = signal.Signals(n).name[3:]
                except ValueError:
                    name = str(n)
                child.status = "%d %s" % (128 + n, name)
            else:
                child.status = str(os.WEXITSTATUS(raw))
            self.send(b"x", child.cid, child.status.encode())
            self.maybe_closed(child)

    def maybe_closed(self, child):
        if child.status is None or child.outs:
            return
        if child.fin >= 0:
            os.close(child.fin)
            child.fin = -1
        self.send(b"c", child.cid)
        del self.children[child.cid]

    def flush(self):
        try:
            while self.out:
                n = os.write(1, self.out)
                del self.out[:n]
        except BlockingIOError:
            pass

    def loop(self):
        while True:
            self.flush()
            poller = select.poll()
            poller.register(0, select.POLLIN)
            poller.register(self.wake_r, select.POLLIN)
            if self.out:
                poller.register(1, select.POLLOUT)
            if len(self.out) < MAX_OUT:
                for fd in self.by_fd:
                    poller.register(fd, select.POLLIN)
            for child in self.children.values():
                if child.pending and child.fin >= 0:
                    poller.register(child.fin, select.POLLOUT)
            idle = IDLE_MS if not self.children else None
            events = poller.poll(idle)
            if not events and idle is not None:
                os._exit(0)
            for fd, _ in events:
                if fd == 0:
                    self.read_control()
                elif fd == self.wake_r:
                    os.read(self.wake_r, 512)
                elif fd in self.by_fd:
                    self.read_output(fd)
            for child in list(self.children.values()):
                self.feed_stdin(child)
            self.reap()


Agent().loop()
