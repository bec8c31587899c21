#!/usr/bin/env python3
"""Data-parallel linear regression that follows MindSpore msrun's environment contract.

Needs nothing but Python 3.9+'s standard library. The same script runs in two roles, chosen
by MS_ROLE, exactly as msrun (and msrun-ssh) start it:

* MS_SCHED: listens on 0.0.0.0:MS_SCHED_PORT, waits for MS_WORKER_NUM workers to register
  within MS_TOPO_TIMEOUT seconds, then serves one synchronous allreduce round per training
  step: it gathers every worker's gradient, averages, and sends the average back to all.
* MS_WORKER: connects to MS_SCHED_HOST:MS_SCHED_PORT, trains y = w.x + b with SGD on its own
  shard of synthetic data, averaging gradients through the scheduler on every step, and prints
  ``epoch: E, step: S, loss is L``.

Wire protocol (TCP, both directions): a 4-byte big-endian length, then that many bytes of
UTF-8 JSON, one object per message with a "type" field:

    worker -> scheduler   register {rank, world_size, node_rank, device_id, host, pid}
    scheduler -> worker   start {world_size}            | error {message}
    worker -> scheduler   grad {step, grad, loss}        | done {steps, loss, weights}
    scheduler -> worker   avg {step, grad, loss}         | finished {...} | error {message}

Every round is "gather one message from each rank, then broadcast one reply", so a worker that
dies, hangs or disagrees is noticed within one step.

Recovery (MS_ENABLE_RECOVERY=1, as msrun-ssh --restart_policy process sets it): the scheduler
keeps listening, and keeps the parameters itself (it applies every averaged gradient as the
workers do). When it loses a worker's connection, the survivors wait (they are in the middle of
the round) while the scheduler waits for that rank to register again, until the round's
MS_TOPO_TIMEOUT deadline. The rank started again with the same environment registers as before and
gets a "start" that also carries {step, params, loss}: it takes the scheduler's parameters and
goes on from the step after `step`, so every rank ends with identical weights. Without
MS_ENABLE_RECOVERY a lost worker ends the job, as before. Socket operations carry deadlines derived
from MS_TOPO_TIMEOUT; the scheduler's deadline for a round always ends before the workers', so
when something goes wrong it is the scheduler that names the culprit and tells everybody.

Exit status: 0 success; 1 a runtime failure (peer lost, timeout, protocol error); 2 invalid
environment or arguments; --fail_code C for the rank chosen by --fail_rank (a test hook).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import struct
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

# ---------------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------------

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

NUM_FEATURES = 8
TRUE_WEIGHTS = (0.5, -1.2, 2.0, 0.3, -0.7, 1.5, -2.2, 0.9)
TRUE_BIAS = 0.25
NOISE_STDDEV = 0.05
DATA_SEED = 1234

HEADER = struct.Struct("!I")            # message length, network byte order
MAX_MESSAGE_BYTES = 16 * 1024 * 1024    # anything longer is not one of ours (e.g. an HTTP probe)
HANDSHAKE_TIMEOUT = 10.0                # seconds a new connection gets to send "register"
WORKER_GRACE = 5.0                      # workers outwait the scheduler by this much
CONNECT_RETRY_FIRST = 0.1              # connect retries back off from this...
CONNECT_RETRY_MAX = 1.0                # ...to this many seconds


class JobError(Exception):
    """A runtime failure of the distributed job: reported on stderr, exit status 1."""


class UsageError(Exception):
    """Invalid environment or arguments: reported on stderr, exit status 2."""


class Refused(Exception):
    """A connection's registration is refused (the job goes on without it)."""


# ---------------------------------------------------------------------------------------------
# Environment contract
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MsrunEnv:
    """The msrun environment of this process, validated."""

    role: str                 # "MS_SCHED" or "MS_WORKER"
    sched_host: str
    sched_port: int
    worker_num: int
    topo_timeout: float       # seconds
    rank: int                 # RANK_ID (0 for the scheduler, as msrun)
    node_rank: Optional[int]  # MS_NODE_RANK
    device_id: Optional[int]  # DEVICE_ID (workers only)
    cpu_list: Optional[str]   # MSRUN_CPU_LIST, when the launcher bound the process
    recovery: bool = False    # MS_ENABLE_RECOVERY=1: a lost worker may rejoin (see above)

    @property
    def is_scheduler(self) -> bool:
        return self.role == "MS_SCHED"


def _env_int(environ: Dict[str, str], name: str, minimum: int,
             maximum: Optional[int] = None, required: bool = True) -> Optional[int]:
    """Read an integer variable and check its range; None when optional and unset."""
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        if required:
            raise UsageError(f"environment variable {name} is not set")
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise UsageError(f"environment variable {name}={raw!r} is not an integer") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise UsageError(f"environment variable {name}={value} is out of range ({bound})")
    return value


def _env_str(environ: Dict[str, str], name: str) -> str:
    """Read a required, non-empty string variable."""
    value = environ.get(name, "").strip()
    if not value:
        raise UsageError(f"environment variable {name} is not set")
    return value


def _env_timeout(environ: Dict[str, str]) -> float:
    """Read MS_TOPO_TIMEOUT: a positive number of seconds."""
    raw = _env_str(environ, "MS_TOPO_TIMEOUT")
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"environment variable MS_TOPO_TIMEOUT={raw!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise UsageError(f"environment variable MS_TOPO_TIMEOUT={raw!r} must be a positive number")
    return value


def read_env(environ: Dict[str, str]) -> MsrunEnv:
    """Validate the msrun contract. Raises UsageError on the first problem."""
    if "MS_ROLE" not in environ and environ.get("MS_SIMULATION_LEVEL"):
        raise UsageError("MS_SIMULATION_LEVEL is set: this job needs a scheduler and does not "
                         "support msrun's simulation (dry-run) mode")
    role = _env_str(environ, "MS_ROLE")
    if role not in ("MS_SCHED", "MS_WORKER"):
        raise UsageError(f"environment variable MS_ROLE={role!r} must be MS_SCHED or MS_WORKER")
    is_worker = role == "MS_WORKER"

    worker_num = _env_int(environ, "MS_WORKER_NUM", 1)
    rank_size = _env_int(environ, "RANK_SIZE", 1, required=False)
    if rank_size is not None and rank_size != worker_num:
        raise UsageError(f"RANK_SIZE={rank_size} disagrees with MS_WORKER_NUM={worker_num}")

    # msrun gives the scheduler RANK_ID=0; a worker's rank must lie inside the world.
    rank = _env_int(environ, "RANK_ID", 0, worker_num - 1, required=is_worker)
    node_id = _env_int(environ, "MS_NODE_ID", 0, required=False)
    if is_worker and node_id is not None and node_id != rank:
        raise UsageError(f"MS_NODE_ID={node_id} disagrees with RANK_ID={rank}")

    return MsrunEnv(
        role=role,
        sched_host=_env_str(environ, "MS_SCHED_HOST"),
        sched_port=_env_int(environ, "MS_SCHED_PORT", 1, 65535),
        worker_num=worker_num,
        topo_timeout=_env_timeout(environ),
        rank=rank if rank is not None else 0,
        node_rank=_env_int(environ, "MS_NODE_RANK", 0, required=is_worker),
        device_id=_env_int(environ, "DEVICE_ID", 0, required=is_worker),
        cpu_list=environ.get("MSRUN_CPU_LIST") or None,
        recovery=environ.get("MS_ENABLE_RECOVERY", "").strip() == "1",
    )


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

def log(message: str) -> None:
    """Print a status line on stdout, flushed at once (the launcher streams it live)."""
    print(message, flush=True)


def log_error(message: str) -> None:
    """Print an error line on stderr, flushed at once."""
    print(message, file=sys.stderr, flush=True)


def format_ranks(ranks: Sequence[int]) -> str:
    """Compress sorted ranks into ranges: [0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"."""
    parts: List[str] = []
    ordered = sorted(ranks)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def describe_affinity() -> str:
    """The CPUs this process may run on, as ranges (Linux), or "any"."""
    if not hasattr(os, "sched_getaffinity"):
        return "any"
    return format_ranks(sorted(os.sched_getaffinity(0)))


# ---------------------------------------------------------------------------------------------
# Wire protocol: length-prefixed JSON with deadlines
# ---------------------------------------------------------------------------------------------

def _remaining(deadline: float) -> float:
    """Seconds left until a time.monotonic() deadline; raises socket.timeout when none."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("deadline passed")
    return left


def send_message(sock: socket.socket, message: dict, deadline: float) -> None:
    """Send one message; raises OSError (socket.timeout included) on failure."""
    payload = json.dumps(message, separators=(",", ":")).encode("utf-8")
    sock.settimeout(_remaining(deadline))
    sock.sendall(HEADER.pack(len(payload)) + payload)


def _recv_exact(sock: socket.socket, size: int, deadline: float) -> bytes:
    """Read exactly size bytes before the deadline; ConnectionError on end of stream."""
    chunks: List[bytes] = []
    left = size
    while left > 0:
        sock.settimeout(_remaining(deadline))
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_message(sock: socket.socket, deadline: float) -> dict:
    """Receive one message. Raises socket.timeout, ConnectionError or ValueError (bad data)."""
    (size,) = HEADER.unpack(_recv_exact(sock, HEADER.size, deadline))
    if size > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {size} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
    message = json.loads(_recv_exact(sock, size, deadline).decode("utf-8"))
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ValueError("message is not a JSON object with a 'type'")
    return message


def describe_socket_error(error: Exception) -> str:
    """A short human description of a failed receive or send."""
    if isinstance(error, socket.timeout):
        return "timed out"
    if isinstance(error, ValueError):
        return f"sent invalid data ({error})"
    return f"disconnected ({error})"


# ---------------------------------------------------------------------------------------------
# Scheduler
# ---------------------------------------------------------------------------------------------

def open_listener(port: int, backlog: int) -> socket.socket:
    """Listen on 0.0.0.0:port with SO_REUSEADDR."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", port))
        listener.listen(backlog)
    except OSError as error:
        listener.close()
        raise JobError(f"cannot listen on 0.0.0.0:{port}: {error}") from None
    return listener


def validate_registration(message: dict, env: MsrunEnv,
                          workers: Dict[int, socket.socket]) -> int:
    """Check a register message; return its rank or raise Refused saying why."""
    if message.get("type") != "register":
        raise Refused(f"expected 'register', got {message.get('type')!r}")
    rank = message.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < env.worker_num:
        raise Refused(f"rank {rank!r} is not in 0..{env.worker_num - 1}")
    if message.get("world_size") != env.worker_num:
        raise Refused(f"rank {rank} has MS_WORKER_NUM={message.get('world_size')}, "
                      f"the scheduler has {env.worker_num}")
    if rank in workers:
        raise Refused(f"rank {rank} is already registered: duplicate RANK_ID")
    return rank


def refuse(conn: socket.socket, peer: str, reason: str) -> None:
    """Log why a connection is refused, tell the peer (best effort) and close it."""
    log_error(f"scheduler: refused connection from {peer}: {reason}")
    try:
        send_message(conn, {"type": "error", "message": f"refused by scheduler: {reason}"},
                     time.monotonic() + 1.0)
    except OSError:
        pass
    conn.close()


def register_one(conn: socket.socket, peer: str, env: MsrunEnv,
                 workers: Dict[int, socket.socket], deadline: float) -> None:
    """Read one connection's "register" message and add it to workers, or refuse it.

    A stray or broken connection (a port probe, a duplicate rank) is refused and the
    rendezvous goes on: only the deadline ends it.
    """
    # A connection accepted just before the deadline still gets a moment to speak.
    handshake_deadline = max(min(deadline, time.monotonic() + HANDSHAKE_TIMEOUT),
                             time.monotonic() + 1.0)
    try:
        message = recv_message(conn, handshake_deadline)
        rank = validate_registration(message, env, workers)
    except (OSError, ValueError) as error:
        refuse(conn, peer, f"it {describe_socket_error(error)} before registering")
        return
    except Refused as error:
        refuse(conn, peer, str(error))
        return
    workers[rank] = conn
    log(f"scheduler: {len(workers)}/{env.worker_num} workers registered "
        f"(rank {rank} from {peer}, node {message.get('node_rank')}, "
        f"device {message.get('device_id')}, host {message.get('host')})")


def wait_for_workers(listener: socket.socket, env: MsrunEnv,
                     workers: Dict[int, socket.socket]) -> None:
    """Accept connections into workers until every rank registered.

    Raises JobError naming the missing ranks when MS_TOPO_TIMEOUT passes first.
    """
    deadline = time.monotonic() + env.topo_timeout
    while len(workers) < env.worker_num:
        try:
            listener.settimeout(_remaining(deadline))
            conn, address = listener.accept()
        except socket.timeout:
            missing = [r for r in range(env.worker_num) if r not in workers]
            raise JobError(f"timed out after {env.topo_timeout:g} s waiting for workers: "
                           f"{len(workers)}/{env.worker_num} registered, "
                           f"missing rank(s) {format_ranks(missing)}") from None
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        register_one(conn, f"{address[0]}:{address[1]}", env, workers, deadline)


def abort_workers(workers: Dict[int, socket.socket], reason: str) -> None:
    """Tell every still-connected worker that the job is aborted (best effort), and close."""
    for sock in workers.values():
        try:
            send_message(sock, {"type": "error", "message": f"job aborted by scheduler: {reason}"},
                         time.monotonic() + 1.0)
        except OSError:
            pass
        sock.close()


def gather(workers: Dict[int, socket.socket], round_no: int, timeout: float,
           recovery: Optional["Recovery"] = None) -> Tuple[Dict[int, dict], float]:
    """Receive one message from every rank for this round, all within timeout seconds.

    Returns the messages by rank and the round's deadline; JobError names the first culprit.
    With recovery, a rank whose connection is lost is waited for to rejoin, then read again.
    """
    deadline = time.monotonic() + timeout
    messages: Dict[int, dict] = {}
    for rank in sorted(workers):
        while True:
            try:
                message = recv_message(workers[rank], deadline)
                break
            except socket.timeout:
                raise JobError(f"rank {rank} sent nothing for step {round_no} within "
                               f"MS_TOPO_TIMEOUT ({timeout:g} s): hung or too slow") from None
            except (OSError, ValueError) as error:
                what = f"rank {rank} {describe_socket_error(error)} during step {round_no}"
                if recovery is None:
                    raise JobError(what) from None
                recovery.rejoin(workers, rank, what, deadline)
        if message["type"] not in ("grad", "done"):
            raise JobError(f"rank {rank} sent unexpected {message['type']!r} in step {round_no}")
        messages[rank] = message
    return messages, deadline


def broadcast(workers: Dict[int, socket.socket], message: dict, deadline: float,
              recovery: Optional["Recovery"] = None) -> None:
    """Send the same message to every rank; JobError names the first rank that cannot take it.

    With recovery, a rank that cannot take it is waited for to rejoin (it then gets the
    parameters this message leads to, so it is not sent again).
    """
    for rank in sorted(workers):
        try:
            send_message(workers[rank], message, deadline)
        except OSError as error:
            what = (f"rank {rank} {describe_socket_error(error)} "
                    f"while receiving {message['type']!r}")
            if recovery is None:
                raise JobError(what) from None
            recovery.rejoin(workers, rank, what, deadline)


class Recovery:
    """MS_ENABLE_RECOVERY=1 on the scheduler: the state a rejoining worker resumes from.

    The scheduler applies every averaged gradient to its own copy of the parameters exactly as
    the workers do (same start, same learning rate, same float operations), so after each round
    it holds what every worker holds.
    """

    def __init__(self, listener: socket.socket, env: MsrunEnv, lr: float) -> None:
        self.listener = listener
        self.env = env
        self.lr = lr
        self.params = [0.0] * (NUM_FEATURES + 1)
        self.step = 0
        self.loss = float("nan")

    def update(self, step: int, average: List[float], loss: float) -> None:
        """Apply the averaged gradient of round `step`."""
        self.params = sgd_update(self.params, average, self.lr)
        self.step = step
        self.loss = loss

    def rejoin(self, workers: Dict[int, socket.socket], rank: int, what: str,
               deadline: float) -> None:
        """Replace rank's lost connection by its re-registration; JobError when none comes."""
        log_error(f"scheduler: {what}; waiting for rank {rank} to rejoin (MS_ENABLE_RECOVERY)")
        workers.pop(rank).close()
        while rank not in workers:
            try:
                self.listener.settimeout(_remaining(deadline))
                conn, address = self.listener.accept()
            except socket.timeout:
                raise JobError(f"{what}, and it did not rejoin within MS_TOPO_TIMEOUT "
                               f"({self.env.topo_timeout:g} s)") from None
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            register_one(conn, f"{address[0]}:{address[1]}", self.env, workers, deadline)
        try:
            send_message(workers[rank], {"type": "start", "world_size": self.env.worker_num,
                                         "step": self.step, "params": self.params,
                                         "loss": self.loss}, deadline)
        except OSError as error:
            raise JobError(f"rank {rank} {describe_socket_error(error)} while rejoining") from None
        log(f"scheduler: rank {rank} rejoined; it resumes after step {self.step}")


def average_gradients(messages: Dict[int, dict], round_no: int) -> Tuple[List[float], float]:
    """Average the gradient vectors and losses of one round; JobError on inconsistent input."""
    vectors = [messages[r].get("grad") for r in sorted(messages)]
    width = len(vectors[0]) if isinstance(vectors[0], list) else -1
    for rank, vector in zip(sorted(messages), vectors):
        message = messages[rank]
        if (not isinstance(vector, list) or len(vector) != width
                or message.get("step") != round_no
                or not isinstance(message.get("loss"), (int, float))):
            raise JobError(f"rank {rank} sent a malformed gradient for step {round_no}")
    count = float(len(vectors))
    average = [sum(column) / count for column in zip(*vectors)]
    mean_loss = sum(float(messages[r]["loss"]) for r in messages) / count
    return average, mean_loss


def finish(messages: Dict[int, dict], rounds: int) -> float:
    """Check the "done" round (same step count and identical weights on every rank).

    Returns the mean of the ranks' final losses; JobError when the replicas disagree.
    """
    steps = {r: m.get("steps") for r, m in messages.items()}
    if any(s != rounds for s in steps.values()):
        raise JobError(f"ranks disagree on the number of steps: {steps} (scheduler: {rounds})")
    reference = messages[min(messages)].get("weights")
    diverged = [r for r, m in messages.items() if m.get("weights") != reference]
    if diverged:
        raise JobError(f"weights of rank(s) {format_ranks(diverged)} differ from rank "
                       f"{min(messages)}: the replicas drifted apart")
    return sum(float(m["loss"]) for m in messages.values()) / len(messages)


def serve_rounds(workers: Dict[int, socket.socket], env: MsrunEnv, steps_per_epoch: int,
                 recovery: Optional[Recovery] = None) -> Tuple[int, float]:
    """Run allreduce rounds until every worker says "done". Returns (rounds, final loss)."""
    rounds = 0
    while True:
        messages, deadline = gather(workers, rounds + 1, env.topo_timeout, recovery)
        kinds = {m["type"] for m in messages.values()}
        if kinds == {"done"}:
            mean_loss = finish(messages, rounds)
            broadcast(workers, {"type": "finished", "steps": rounds, "loss": mean_loss}, deadline)
            return rounds, mean_loss
        if kinds != {"grad"}:
            done = [r for r, m in messages.items() if m["type"] == "done"]
            raise JobError(f"rank(s) {format_ranks(done)} finished while others still train "
                           f"(step {rounds + 1})")
        rounds += 1
        average, mean_loss = average_gradients(messages, rounds)
        if recovery is not None:
            recovery.update(rounds, average, mean_loss)
        broadcast(workers, {"type": "avg", "step": rounds, "grad": average, "loss": mean_loss},
                  deadline, recovery)
        if rounds % steps_per_epoch == 0:
            log(f"scheduler: epoch {rounds // steps_per_epoch} done ({rounds} allreduce rounds), "
                f"mean loss {mean_loss:.6f}")


def run_scheduler(env: MsrunEnv, args: argparse.Namespace) -> int:
    """The MS_SCHED role: rendezvous, then allreduce rounds until all workers are done."""
    started = time.monotonic()
    listener = open_listener(env.sched_port, max(env.worker_num, 128))
    log(f"scheduler: listening on 0.0.0.0:{env.sched_port} (MS_SCHED_HOST={env.sched_host}), "
        f"waiting for {env.worker_num} workers, timeout {env.topo_timeout:g} s, pid {os.getpid()}")
    workers: Dict[int, socket.socket] = {}
    recovery = Recovery(listener, env, args.lr) if env.recovery else None
    try:
        wait_for_workers(listener, env, workers)
        if recovery is None:
            listener.close()
        broadcast(workers, {"type": "start", "world_size": env.worker_num},
                  time.monotonic() + env.topo_timeout)
        log(f"scheduler: all {env.worker_num} workers registered, training started"
            + (" (MS_ENABLE_RECOVERY: a lost worker may rejoin)" if recovery else ""))
        rounds, final_loss = serve_rounds(workers, env, args.steps, recovery)
    except JobError as error:
        log_error(f"scheduler: error: {error}")
        abort_workers(workers, str(error))
        return EXIT_FAILURE
    finally:
        listener.close()
    for sock in workers.values():
        sock.close()
    log(f"scheduler: job finished: {env.worker_num} workers, {rounds} allreduce rounds in "
        f"{time.monotonic() - started:.2f} s, mean final loss {final_loss:.6f}, "
        f"weights identical on all ranks")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# Worker: data and model
# ---------------------------------------------------------------------------------------------

Sample = Tuple[List[float], float]


def make_shard(rank: int, num_samples: int) -> List[Sample]:
    """This rank's shard of the synthetic data set: y = TRUE_WEIGHTS.x + TRUE_BIAS + noise.

    Every rank draws from its own deterministic stream, so shards differ between ranks and
    every run of the same rank sees the same data.
    """
    rng = random.Random(DATA_SEED * 1_000_003 + rank)
    shard: List[Sample] = []
    for _ in range(num_samples):
        x = [rng.gauss(0.0, 1.0) for _ in range(NUM_FEATURES)]
        y = sum(w * xi for w, xi in zip(TRUE_WEIGHTS, x)) + TRUE_BIAS
        shard.append((x, y + rng.gauss(0.0, NOISE_STDDEV)))
    return shard


def epoch_batches(shard: List[Sample], rank: int, epoch: int,
                  batch: int) -> List[List[Sample]]:
    """Shuffle the shard for this epoch (deterministically) and cut it into batches."""
    order = list(range(len(shard)))
    random.Random(DATA_SEED * 7919 + rank * 104_729 + epoch).shuffle(order)
    return [[shard[i] for i in order[k:k + batch]] for k in range(0, len(order), batch)]


def loss_and_gradient(params: List[float], batch: List[Sample]) -> Tuple[float, List[float]]:
    """Mean squared error / 2 of the batch and its gradient; params = weights + [bias]."""
    weights, bias = params[:-1], params[-1]
    loss = 0.0
    grad = [0.0] * len(params)
    for x, y in batch:
        error = sum(w * xi for w, xi in zip(weights, x)) + bias - y
        loss += 0.5 * error * error
        for i, xi in enumerate(x):
            grad[i] += error * xi
        grad[-1] += error
    n = float(len(batch))
    return loss / n, [g / n for g in grad]


def sgd_update(params: List[float], grad: List[float], lr: float) -> List[float]:
    """One plain SGD step."""
    return [p - lr * g for p, g in zip(params, grad)]


# ---------------------------------------------------------------------------------------------
# Worker: communication
# ---------------------------------------------------------------------------------------------

def connect_to_scheduler(env: MsrunEnv) -> socket.socket:
    """Connect, retrying until MS_TOPO_TIMEOUT (the scheduler may start after us)."""
    deadline = time.monotonic() + env.topo_timeout
    last_error: Optional[Exception] = None
    pause = CONNECT_RETRY_FIRST
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection((env.sched_host, env.sched_port),
                                            timeout=min(5.0, _remaining(deadline)))
        except OSError as error:   # refused, unreachable, timed out, name not resolved yet
            last_error = error
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, CONNECT_RETRY_MAX)
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise JobError(f"could not reach the scheduler at {env.sched_host}:{env.sched_port} within "
                   f"{env.topo_timeout:g} s (last error: {last_error})")


def expect_reply(sock: socket.socket, wanted: str, deadline: float, doing: str) -> dict:
    """Wait for the scheduler's reply of type wanted; JobError on error, loss or timeout."""
    try:
        message = recv_message(sock, deadline)
    except socket.timeout:
        raise JobError(f"no answer from the scheduler while {doing}") from None
    except (OSError, ValueError) as error:
        raise JobError(f"scheduler {describe_socket_error(error)} while {doing}") from None
    if message["type"] == "error":
        raise JobError(str(message.get("message")))
    if message["type"] != wanted:
        raise JobError(f"scheduler sent {message['type']!r} instead of {wanted!r} while {doing}")
    return message


def exchange(sock: socket.socket, env: MsrunEnv, message: dict, wanted: str,
             doing: str) -> dict:
    """Send one message to the scheduler and wait for its reply.

    Workers wait MS_TOPO_TIMEOUT plus a grace period: longer than the scheduler waits for
    the slowest rank, so a hung peer is reported by the scheduler, not guessed at here.
    """
    deadline = time.monotonic() + env.topo_timeout + WORKER_GRACE
    try:
        send_message(sock, message, deadline)
    except OSError as error:
        raise JobError(f"scheduler {describe_socket_error(error)} while {doing}") from None
    return expect_reply(sock, wanted, deadline, doing)


def register(sock: socket.socket, env: MsrunEnv) -> dict:
    """Register this rank and wait until the scheduler starts the job; returns its "start"
    (with "step", "params" and "loss" when this rank rejoins a running job)."""
    return exchange(sock, env, {
        "type": "register", "rank": env.rank, "world_size": env.worker_num,
        "node_rank": env.node_rank, "device_id": env.device_id,
        "host": socket.gethostname(), "pid": os.getpid(),
    }, "start", "waiting for the other workers to register")


def allreduce(sock: socket.socket, env: MsrunEnv, step: int, grad: List[float],
              loss: float) -> List[float]:
    """Average grad over all ranks through the scheduler (one synchronous round)."""
    reply = exchange(sock, env, {"type": "grad", "step": step, "grad": grad, "loss": loss},
                     "avg", f"averaging gradients of step {step}")
    if reply.get("step") != step or len(reply.get("grad", ())) != len(grad):
        raise JobError(f"scheduler answered step {reply.get('step')} for step {step}")
    return [float(g) for g in reply["grad"]]


# ---------------------------------------------------------------------------------------------
# Worker: training loop
# ---------------------------------------------------------------------------------------------

def train(sock: socket.socket, env: MsrunEnv, args: argparse.Namespace,
          start: dict) -> Tuple[int, float, List[float]]:
    """The SGD loop from the scheduler's "start". Returns (global steps, last loss, params).

    A rank that rejoins (start has "params") takes the scheduler's parameters and goes on after
    start["step"]. With --fail_rank equal to this rank, exits the process with --fail_code after
    epoch 1 (unless it rejoined after that epoch).
    """
    shard = make_shard(env.rank, args.steps * args.batch)
    params = [0.0] * (NUM_FEATURES + 1)
    resumed = 0
    loss = float("nan")
    if "params" in start:
        params = [float(p) for p in start["params"]]
        resumed = int(start["step"])
        loss = float(start["loss"])
        log(f"rank {env.rank}: rejoined the job; resuming after step {resumed}")
    global_step = 0
    for epoch in range(1, args.epochs + 1):
        for step, batch in enumerate(epoch_batches(shard, env.rank, epoch, args.batch), start=1):
            global_step += 1
            if global_step <= resumed:
                continue
            loss, grad = loss_and_gradient(params, batch)
            params = sgd_update(params, allreduce(sock, env, global_step, grad, loss), args.lr)
            log(f"epoch: {epoch}, step: {step}, loss is {loss:.6f}")
            if args.sleep > 0:
                time.sleep(args.sleep)
        if epoch == 1 and args.fail_rank == env.rank and global_step > resumed:
            log_error(f"rank {env.rank}: --fail_rank test hook: exiting with code "
                      f"{args.fail_code} after epoch 1")
            sys.exit(args.fail_code)   # the caller's "with" closes the socket on the way out
    return global_step, loss, params


def run_worker(env: MsrunEnv, args: argparse.Namespace) -> int:
    """The MS_WORKER role: register, train with averaged gradients, report "done"."""
    log(f"rank {env.rank}: node {env.node_rank}, device {env.device_id}, pid {os.getpid()}, "
        f"cpus {describe_affinity()}"
        + (f" (MSRUN_CPU_LIST={env.cpu_list})" if env.cpu_list else "")
        + f", scheduler {env.sched_host}:{env.sched_port}, world size {env.worker_num}")
    try:
        with connect_to_scheduler(env) as sock:
            steps, loss, params = train(sock, env, args, register(sock, env))
            exchange(sock, env, {"type": "done", "steps": steps, "loss": loss,
                                 "weights": params}, "finished", "finishing")
    except JobError as error:
        log_error(f"rank {env.rank}: error: {error}")
        return EXIT_FAILURE
    log(f"rank {env.rank} finished, final loss {loss:.6f}")
    log(f"rank {env.rank}: final weights {json.dumps(params)}")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------

def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse and check the task arguments (the same for the scheduler and every worker)."""
    parser = argparse.ArgumentParser(
        description="Standard-library data-parallel training under the msrun environment.")
    parser.add_argument("--epochs", type=int, default=3, help="number of epochs (default 3)")
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch (default 20)")
    parser.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    parser.add_argument("--batch", type=int, default=32, help="samples per step per rank")
    parser.add_argument("--fail_rank", type=int, default=None, metavar="R",
                        help="test hook: worker R exits after the first epoch")
    parser.add_argument("--fail_code", type=int, default=1, metavar="C",
                        help="exit status for --fail_rank (default 1)")
    parser.add_argument("--sleep", type=float, default=0.0, metavar="S",
                        help="seconds to sleep per step, for long-running tests "
                             "(keep well below MS_TOPO_TIMEOUT)")
    args = parser.parse_args(argv)
    for name in ("epochs", "steps", "batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if not args.lr > 0:
        parser.error("--lr must be positive")
    if not args.sleep >= 0:
        parser.error("--sleep must not be negative")
    if not 0 <= args.fail_code <= 255:
        parser.error("--fail_code must be in 0..255")
    return args


def main(argv: Sequence[str]) -> int:
    """Validate arguments and environment, then run the role MS_ROLE names."""
    args = parse_args(argv)
    try:
        env = read_env(dict(os.environ))
    except UsageError as error:
        log_error(f"train.py: error: {error} (this script expects to be started by msrun or "
                  f"msrun-ssh; see examples/stdlib_ddp/README.md)")
        return EXIT_USAGE
    try:
        return run_scheduler(env, args) if env.is_scheduler else run_worker(env, args)
    except JobError as error:
        log_error(f"{'scheduler' if env.is_scheduler else f'rank {env.rank}'}: error: {error}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        log_error("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
