"""Test job for hangs: every process prints one line, then blocks without a word. Rank STUCK
blocks in wait_for_peer() (socket.recv on a socket nobody writes to); the others block in
collective() (waiting on an event nobody sets), as ranks do in an all-reduce that waits for the
stuck one. Usage: hang.py [--stuck R]
"""
import argparse
import os
import socket
import threading

ap = argparse.ArgumentParser()
ap.add_argument("--stuck", type=int, default=2)
a = ap.parse_args()
rank = int(os.environ.get("RANK_ID", "-1"))
worker = os.environ.get("MS_ROLE") == "MS_WORKER"


def wait_for_peer():
    a_end, _b_end = socket.socketpair()
    a_end.recv(1)


def collective():
    threading.Event().wait()


print(f"rank {rank} up", flush=True)
if worker and rank == a.stuck:
    wait_for_peer()
else:
    collective()
