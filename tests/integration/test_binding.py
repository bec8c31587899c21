"""CPU binding for real: each process's Cpus_allowed_list is exactly what the plan said."""
import re

from harness import addresses, check, job, run

REPORT = re.compile(rb"^node\s+\d+\s+(\S+)\s+(scheduler|rank \d+)\s+DEVICE_ID=\S+\s+cpus (\S+)(?: numa \S+)?", re.M)
SEEN = re.compile(rb"cpus (sched|\d+) allowed=(\S+) msrun=(.*)$", re.M)


def _cpu_list(text):
    cpus = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus += list(range(int(lo), int(hi or lo) + 1))
    return cpus


def _check_bound(extra):
    code, out, err, _ = run([job("cpus.py")], extra=["--report_bindings", *extra])
    check(code == 0, f"exit {code}: {err.decode()[-2000:]}")
    planned = {}
    for host, proc, cpus in REPORT.findall(err):
        key = b"sched" if proc == b"scheduler" else proc.split()[1]
        planned[key] = cpus
    n = 2 * len(addresses()) + 1  # 2 workers per host + the scheduler
    check(len(planned) == n, f"--report_bindings listed {len(planned)} processes: {err.decode()}")
    seen = {who: (allowed, msrun) for who, allowed, msrun in SEEN.findall(out)}
    check(len(seen) == n, f"{len(seen)} processes reported their CPUs")
    for who, cpus in planned.items():
        allowed, msrun = seen[who]
        check(cpus != b"-", f"{who} not bound")
        check(_cpu_list(allowed.decode()) == _cpu_list(cpus.decode()),
              f"{who}: plan said {cpus}, process may use {allowed}")
        check(msrun.decode() == str(_cpu_list(cpus.decode())), f"{who}: MSRUN_CPU_LIST {msrun}")
    return planned


def test_bind_core_auto():
    _check_bound(["--bind_core=True"])


def test_bind_core_dict():
    planned = _check_bound(['--bind_core={"scheduler":["1"],"device0":["0"],"device1":["0-1"]}'])
    check(planned[b"sched"] == b"1" and planned[b"0"] == b"0" and planned[b"5"] == b"0-1",
          f"dict not applied: {planned}")


def test_bind_core_dict_with_missing_cpu_is_an_input_error():
    code, out, err, _ = run([job("cpus.py")], extra=['--bind_core={"device0":["0-99"],"device1":["1"]}'])
    check(code == 2, f"exit {code}: {err.decode()}")
    check(re.search(rb"host 198\.18\.1\.10: .*CPU \d+ is not available on this host", err), err.decode())
    check(b"cpus " not in out, "a process ran")


def test_bind_core_with_bind_numa_uses_numactl():
    planned = _check_bound(["--bind_core=True", "--bind_numa=True"])
    check(all(c != b"-" for c in planned.values()), f"{planned}")
