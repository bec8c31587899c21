# The connection test of `msrun-ssh check` (run by python.sh): connects to argv[1] port argv[2]
# within argv[3] seconds and prints "reach=ok" or "reach=fail REASON".
import socket, sys
ip, port, t = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    socket.create_connection((ip, port), timeout=t).close()
    print("reach=ok")
except socket.timeout:
    print("reach=fail timed out after %g s" % t)
except OSError as e:
    print("reach=fail " + (e.strerror or str(e)))
