#!/usr/bin/env python3
"""What the straggler watch costs a host (docs/benchmarks.md, "The straggler watch"): the host's
sampler (src/remote/sampler.pl, as msrun-ssh sends it) run here for SECONDS at its 1 s interval
beside JOB job processes (each with the job's marker and a rank, as the launcher starts them)
and OTHER unrelated processes (a busy host: thousands of processes whose /proc it also scans).
Prints the sampler's CPU time per sample and its peak RSS, medians of REPS runs.

  python3 bench/sampler_cost.py [--job 8] [--other 0,2000] [--seconds 20] [--reps 3]

Needs perl; nothing else, no root. Every process it starts is ended before it exits.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time


def sampler_command():
    """`perl -e PROGRAM`: the program as msrun-ssh embeds it (src/remote/sampler.pl without its
    comment lines, cmake/embed.cmake); the job id and the interval follow, as sampler_command()
    in src/watch/watch.cc sends them."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src",
                       "remote", "sampler.pl")
    program = "".join(l for l in open(src) if not l.lstrip().startswith("#"))
    return ["perl", "-e", program]


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def peak_rss_kb(pid):
    m = re.search(r"^VmHWM:\s+(\d+)", open(f"/proc/{pid}/status").read(), re.M)
    return int(m.group(1)) if m else 0


def one_run(args, other):
    job_id = f"bench-sampler-{os.getpid()}"
    procs = []
    try:
        for i in range(other):
            procs.append(subprocess.Popen(["sleep", "600"]))
        for rank in range(args.job):
            env = {"MSRUN_SSH_JOB": job_id, "RANK_ID": str(rank), "PATH": os.environ["PATH"]}
            procs.append(subprocess.Popen(["sleep", "600"], env=env))
        s = subprocess.Popen(sampler_command() + [job_id, "1"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        lines = 0
        start = time.monotonic()
        while time.monotonic() - start < args.seconds:
            line = s.stdout.readline()
            if not line:
                break
            lines += 1
        ticks, rss = cpu_ticks(s.pid), peak_rss_kb(s.pid)
        s.stdin.close()
        s.wait(timeout=10)
        return ticks * 10 / max(lines, 1), rss, lines  # ms of CPU per sample (USER_HZ 100)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--job", type=int, default=8, help="job processes on the host")
    p.add_argument("--other", default="0,2000", help="other processes on the host (list)")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    print(f"sampler cost: {args.job} job processes, {args.seconds:g} s per run, "
          f"median of {args.reps} runs")
    print("| other processes | CPU per sample | share of one CPU | peak RSS |")
    print("|---|---|---|---|")
    for other in [int(x) for x in args.other.split(",")]:
        runs = [one_run(args, other) for _ in range(args.reps)]
        ms = statistics.median(r[0] for r in runs)
        rss = statistics.median(r[1] for r in runs)
        print(f"| {other} | {ms:.1f} ms | {ms / 10:.2f}% | {rss / 1024:.1f} MB |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
