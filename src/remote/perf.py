# The node test of `msrun-ssh check --perf` (run by python.sh): SECONDS PATHS TOOLS, where PATHS
# holds the directories to time (one per line; the first is the workdir) and TOOLS is "auto" or
# "none". Prints one JSON object:
#   cpus      the CPUs this process may run on (its affinity: what the job's processes get)
#   kernel    "numpy" (a 96 x 96 float64 matrix product) or "python" (an integer loop) when numpy
#             does not import: the unit of cpu_each
#   cpu_each  per allowed CPU (at most 64), one process pinned there for SECONDS: kernel runs per
#             second
#   mem_gbps  one process copying a 32 MiB buffer for SECONDS / 2: GB copied per second
#   disks     per path: MB/s writing (then fsync) and reading back (after dropping the file from
#             the page cache), at most 256 MiB and 10% of the free space, each for at most SECONDS;
#             "error" instead when it could not; the file is always removed
#   accel     {"tool": "nvidia-smi" | "npu-smi", "out": its output, "status": its exit status},
#             or null when neither tool is installed
# Every step is bounded; the launcher runs it under `timeout` too.
import json, os, shutil, subprocess, sys, time

secs = max(0.05, float(sys.argv[1]))
paths = [p for p in sys.argv[2].split("\n") if p]
tools = sys.argv[3]
for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[v] = "1"  # one CPU per measuring process


def numpy_kernel():
    try:
        import numpy
    except Exception:
        return None
    a = numpy.random.rand(96, 96)
    return lambda: a @ a


def python_kernel():
    def run():
        x = 1
        for _ in range(2000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        return x
    return run


def count(kernel, seconds):
    n, start = 0, time.monotonic()
    end = start + seconds
    while True:
        kernel()
        n += 1
        now = time.monotonic()
        if now >= end:
            return n / (now - start)


def cpu():
    cpus = sorted(os.sched_getaffinity(0))[:64]
    kernel_name = "numpy" if numpy_kernel() else "python"
    children = []
    for c in cpus:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                os.sched_setaffinity(0, {c})
                k = numpy_kernel() if kernel_name == "numpy" else python_kernel()
                os.write(w, repr(count(k, secs)).encode())
            finally:
                os._exit(0)
        os.close(w)
        children.append((pid, r))
    each = []
    for pid, r in children:
        with os.fdopen(r, "rb") as f:
            text = f.read()
        os.waitpid(pid, 0)
        each.append(float(text) if text else 0.0)
    return len(os.sched_getaffinity(0)), kernel_name, each


def memory():
    size = 32 << 20
    src, dst = bytearray(b"\1" * size), bytearray(size)
    s, d = memoryview(src), memoryview(dst)
    rate = count(lambda: d.__setitem__(slice(None), s), secs / 2)
    return rate * size / 1e9


def disk(path):
    # (hosts may share the directory, and their pids: an NFS home, containers)
    name = os.path.join(path, f".msrun-ssh-perf-{os.uname().nodename}-{os.urandom(6).hex()}")
    block = b"\0" * (4 << 20)
    try:
        cap = min(256 << 20, shutil.disk_usage(path).free // 10)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            written, start = 0, time.monotonic()
            while written + len(block) <= cap and time.monotonic() - start < secs:
                written += os.write(fd, block)
            os.fsync(fd)
            wrote_s = time.monotonic() - start
        finally:
            os.close(fd)
        if written == 0:
            return {"path": path, "error": "no space to write a test file"}
        fd = os.open(name, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            got, start = 0, time.monotonic()
            while got < written and time.monotonic() - start < secs:
                chunk = os.read(fd, len(block))
                if not chunk:
                    break
                got += len(chunk)
            read_s = time.monotonic() - start
        finally:
            os.close(fd)
        return {"path": path, "write_mbps": written / 1e6 / max(wrote_s, 1e-6),
                "read_mbps": got / 1e6 / max(read_s, 1e-6)}
    except OSError as e:
        return {"path": path, "error": f"{e.strerror or e} ({e.filename or path})"}
    finally:
        try:
            os.unlink(name)
        except OSError:
            pass


def accel():
    if tools == "none":
        return None
    queries = [
        ("nvidia-smi", ["nvidia-smi", "--query-gpu=index,name,temperature.gpu,utilization.gpu,"
                        "clocks.sm,clocks.max.sm,ecc.errors.uncorrected.volatile.total,"
                        "clocks_throttle_reasons.hw_slowdown", "--format=csv,noheader,nounits"]),
        ("npu-smi", ["npu-smi", "info"]),
    ]
    for tool, argv in queries:
        if shutil.which(tool):
            try:
                r = subprocess.run(argv, capture_output=True, timeout=20)
                return {"tool": tool, "out": r.stdout.decode(errors="replace")[:65536],
                        "status": r.returncode}
            except (OSError, subprocess.TimeoutExpired) as e:
                return {"tool": tool, "out": "", "status": -1, "error": str(e)}
    return None


n, kernel, each = cpu()
print(json.dumps({"cpus": n, "kernel": kernel, "cpu_each": each, "mem_gbps": memory(),
                  "disks": [disk(p) for p in paths], "accel": accel()}), flush=True)
