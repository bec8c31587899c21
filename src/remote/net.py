# The link test of `msrun-ssh check --net` (run by python.sh), one side of one pair:
#   serve BIND SECONDS   BIND is "addr:IP", "if:NAME" (the address of that interface) or
#       "if:PREFIX*" (of the first interface, by index, whose name begins so and has one). Listens
#       on a free port of that address, prints "port=P addr=A", serves one client: echoes its
#       pings, counts its bytes until it half-closes (prints "fwd_bytes=N fwd_s=T"), sends them
#       back as a line, then sends for SECONDS itself and closes. Ends on EOF of stdin (the
#       launcher is done or gone) or after 3 x SECONDS + 30 s.
#   send IP:PORT SECONDS   connects, times 20 one-byte pings, sends for SECONDS, reads the
#       server's count, then counts what it receives until the server closes; prints
#       "rtt_ms=R fwd_gbps=F rev_gbps=V fwd_bytes=N rev_bytes=M".
# Each direction stops at SECONDS or 2 GiB, whichever comes first. Failures print "error=WHY".
import fcntl, os, select, socket, statistics, struct, sys, time
role, where, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
CAP, PINGS, CHUNK = 2 << 30, 20, b"\0" * (1 << 18)


def say(text):
    print(text, flush=True)


def ifaddr(name):
    if name.endswith("*"):
        for _, n in socket.if_nameindex():
            if n.startswith(name[:-1]):
                try:
                    return ifaddr(n)
                except OSError:
                    pass
        raise OSError("no interface whose name begins with %s has an IPv4 address" % name[:-1])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    req = struct.pack("256s", name.encode()[:15])
    return socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])


def pour(c):
    end, sent = time.monotonic() + secs, 0
    while sent < CAP and time.monotonic() < end:
        c.sendall(CHUNK)
        sent += len(CHUNK)
    c.shutdown(socket.SHUT_WR)


def drain(c, first=b""):
    n, t0 = len(first), time.monotonic()
    while True:
        b = c.recv(1 << 18)
        if not b:
            return n, max(time.monotonic() - t0, 1e-6)
        if n == 0:
            t0 = time.monotonic()
        n += len(b)


def serve():
    kind, _, value = where.partition(":")
    addr = ifaddr(value) if kind == "if" else value
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((addr, 0))
    s.listen(1)
    say("port=%d addr=%s" % (s.getsockname()[1], addr))
    end = time.monotonic() + 3 * secs + 30
    while True:
        left = end - time.monotonic()
        r = select.select([s, 0], [], [], max(left, 0))[0] if left > 0 else []
        if not r or (0 in r and not os.read(0, 4096)):
            say("ended=no client")
            return
        if s in r:
            break
    c, _ = s.accept()
    s.close()
    c.settimeout(max(end - time.monotonic(), 1))
    for _ in range(PINGS):
        c.sendall(c.recv(1))
    n, t = drain(c)
    say("fwd_bytes=%d fwd_s=%.6f" % (n, t))
    c.sendall(b"%d %.6f\n" % (n, t))
    pour(c)
    c.recv(1)
    c.close()


def send():
    ip, _, port = where.rpartition(":")
    c = socket.create_connection((ip, int(port)), timeout=secs + 20)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(PINGS):
        t0 = time.monotonic()
        c.sendall(b"p")
        if not c.recv(1):
            raise OSError("the server closed during the pings")
        rtts.append(time.monotonic() - t0)
    c.settimeout(2 * secs + 20)
    pour(c)
    head = b""
    while b"\n" not in head:
        b = c.recv(4096)
        if not b:
            raise OSError("the server closed before its count")
        head += b
    line, _, rest = head.partition(b"\n")
    fn, ft = line.split()
    rn, rt = drain(c, rest)
    c.close()
    say("rtt_ms=%.4f fwd_gbps=%.6f rev_gbps=%.6f fwd_bytes=%d rev_bytes=%d" % (
        statistics.median(rtts) * 1e3, int(fn) * 8 / float(ft) / 1e9, rn * 8 / rt / 1e9,
        int(fn), rn))


try:
    serve() if role == "serve" else send()
except (OSError, ValueError) as e:
    say("error=%s" % (getattr(e, "strerror", None) or str(e) or type(e).__name__))
    sys.exit(1)
