# The collective smoke test of `msrun-ssh check --net=collective`: every process of a job planned
# like the real one runs `PYTHON -c THIS LIMIT`, and together they do one all-reduce (a sum) of
# four floats through a hub, on the job's own rendezvous:
#   msrun's contract (MS_ROLE set): the scheduler (MS_ROLE=MS_SCHED) is the hub, listening on
#       0.0.0.0:MS_SCHED_PORT for MS_WORKER_NUM workers; each worker (MS_ROLE=MS_WORKER, rank
#       RANK_ID) connects to MS_SCHED_HOST:MS_SCHED_PORT.
#   torchrun's contract (RANK set): rank 0 is the hub on 0.0.0.0:MASTER_PORT and a worker too; the
#       others connect to MASTER_ADDR:MASTER_PORT. The world is WORLD_SIZE.
# A worker of rank R sends R and [R + 1, 1, 1, 1], receives the sum and checks it against
# [W(W+1)/2, W, W, W] for its world W; then prints "allreduce ok rank=R world=W seconds=S" (S: from
# its start to the sum) and exits 0. The hub prints "allreduce hub ok world=W seconds=S". Any
# failure prints "allreduce failed WHO: WHY" and exits 1. Everything (connecting with retries,
# accepting, every receive) ends LIMIT seconds after the start.
# Test hook: MSRUN_SSH_ALLREDUCE_FAIL_RANK=R makes the worker of rank R fail at once.
import os, socket, struct, sys, time
T0 = time.monotonic()
END = T0 + float(sys.argv[1])
env = os.environ
MSG, SUM = struct.Struct("!i4d"), struct.Struct("!4d")


class Failed(Exception):
    pass


def left():
    t = END - time.monotonic()
    if t <= 0:
        raise Failed("no answer within %s s" % sys.argv[1])
    return t


def recv_exact(c, n):
    data = b""
    while len(data) < n:
        c.settimeout(left())
        b = c.recv(n - len(data))
        if not b:
            raise Failed("the peer closed after %d of %d bytes" % (len(data), n))
        data += b
    return data


def hub(port, world, own=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port))
        s.listen(128)
    except OSError as e:
        raise Failed("cannot listen on 0.0.0.0:%d: %s" % (port, e.strerror or e))
    peers, total, seen = [], [0.0] * 4, set()
    if own is not None:
        seen.add(own[0])
        total = list(own[1])
    while len(seen) < world:
        s.settimeout(left())
        try:
            c, _ = s.accept()
        except socket.timeout:
            raise Failed("%d of %d ranks connected within %s s" % (len(seen), world, sys.argv[1]))
        rank, *vec = MSG.unpack(recv_exact(c, MSG.size))
        if rank in seen or not 0 <= rank < world:
            raise Failed("rank %d connected twice or is outside the world of %d" % (rank, world))
        seen.add(rank)
        peers.append(c)
        total = [a + b for a, b in zip(total, vec)]
    for c in peers:
        c.sendall(SUM.pack(*total))
        c.close()
    return total


def connect(host, port):
    while True:
        try:
            return socket.create_connection((host, port), timeout=min(left(), 5))
        except OSError as e:
            if END - time.monotonic() < 0.2:
                raise Failed("cannot reach %s:%d: %s" % (host, port, e.strerror or e))
            time.sleep(0.1)


def mine(rank):
    return [float(rank + 1), 1.0, 1.0, 1.0]


def check(rank, world, total):
    want = [world * (world + 1) / 2.0, float(world), float(world), float(world)]
    if total != want:
        raise Failed("got the sum %s, expected %s for a world of %d" % (total, want, world))
    print("allreduce ok rank=%d world=%d seconds=%.3f" % (rank, world, time.monotonic() - T0))


def worker(rank, world, host, port):
    if env.get("MSRUN_SSH_ALLREDUCE_FAIL_RANK") == str(rank):
        raise Failed("told to fail by MSRUN_SSH_ALLREDUCE_FAIL_RANK")
    c = connect(host, port)
    c.sendall(MSG.pack(rank, *mine(rank)))
    total = list(SUM.unpack(recv_exact(c, SUM.size)))
    c.close()
    check(rank, world, total)


def main():
    if env.get("MS_ROLE") == "MS_SCHED":
        hub(int(env["MS_SCHED_PORT"]), int(env["MS_WORKER_NUM"]))
        print("allreduce hub ok world=%s seconds=%.3f" % (env["MS_WORKER_NUM"], time.monotonic() - T0))
    elif env.get("MS_ROLE") == "MS_WORKER":
        worker(int(env["RANK_ID"]), int(env["MS_WORKER_NUM"]), env["MS_SCHED_HOST"],
               int(env["MS_SCHED_PORT"]))
    elif env.get("RANK") == "0":
        world = int(env["WORLD_SIZE"])
        if env.get("MSRUN_SSH_ALLREDUCE_FAIL_RANK") == "0":
            raise Failed("told to fail by MSRUN_SSH_ALLREDUCE_FAIL_RANK")
        check(0, world, hub(int(env["MASTER_PORT"]), world, (0, mine(0))))
    elif "RANK" in env:
        worker(int(env["RANK"]), int(env["WORLD_SIZE"]), env["MASTER_ADDR"],
               int(env["MASTER_PORT"]))
    else:
        raise Failed("neither MS_ROLE nor RANK in the environment")


WHO = "scheduler" if env.get("MS_ROLE") == "MS_SCHED" else "rank=%s" % env.get(
    "RANK_ID", env.get("RANK", "?"))
try:
    main()
except (Failed, OSError, KeyError, ValueError, struct.error) as e:
    why = e.args[0] if isinstance(e, Failed) else "%s: %s" % (type(e).__name__, e)
    print("allreduce failed %s: %s" % (WHO, why), flush=True)
    sys.exit(1)
