# The master-port listener of `msrun-ssh check` (run by python.sh): REUSEADDR as the scheduler's
# own listener would, so a TIME_WAIT left by an earlier job does not count as "in use" while a
# live listener does. It ends on EOF of stdin (the launcher is done or gone) or after argv[2]
# seconds, whichever comes first. Arguments: port, seconds.
import errno, os, select, socket, sys, time
port, limit = int(sys.argv[1]), float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("0.0.0.0", port))
    s.listen(128)
except OSError as e:
    word = "in_use" if e.errno == errno.EADDRINUSE else "bind_error"
    print(word + " " + (e.strerror or str(e)), flush=True)
    sys.exit(3)
print("listening", flush=True)
end = time.monotonic() + limit
n = 0
while True:
    left = end - time.monotonic()
    if left <= 0:
        break
    r = select.select([s, 0], [], [], left)[0]
    if s in r:
        c, _ = s.accept()
        c.close()
        n += 1
    if 0 in r and not os.read(0, 4096):
        break
print("accepted %d" % n, flush=True)
