"""Test job for `msrun-ssh stack`: every process prints "rank R up", starts a `sleep` child (a
process of the job that is not Python), then waits SECONDS seconds (default 20): rank STUCK in
wait_for_peer() (socket.recv with a timeout), the others in collective() (an event's wait with a
timeout). Then each prints "rank R done" and exits 0. Usage: stackable.py [SECONDS] [--stuck R]
"""
import argparse
import os
import socket
import subprocess
import threading

ap = argparse.ArgumentParser()
ap.add_argument("seconds", type=float, nargs="?", default=20)
ap.add_argument("--stuck", type=int, default=2)
a = ap.parse_args()
rank = int(os.environ.get("RANK_ID", "-1"))
worker = os.environ.get("MS_ROLE") == "MS_WORKER"


def wait_for_peer():
    a_end, _b_end = socket.socketpair()
    a_end.settimeout(a.seconds)
    try:
        a_end.recv(1)
    except socket.timeout:
        pass


def collective():
    threading.Event().wait(a.seconds)


child = subprocess.Popen(["sleep", str(a.seconds)])
print(f"rank {rank} up", flush=True)
if worker and rank == a.stuck:
    wait_for_peer()
else:
    collective()
child.wait()
print(f"rank {rank} done", flush=True)
