"""Test job: rank 1 reads BYTES bytes of its stdin, waits SECONDS, then says how many it got; the
other processes end at once."""
import os
import sys
import time

if os.environ.get("RANK_ID") == "1":
    want, got = int(sys.argv[1]), 0
    while got < want:
        chunk = sys.stdin.buffer.read1(min(1 << 20, want - got))
        if not chunk:
            break
        got += len(chunk)
    time.sleep(float(sys.argv[2]))
    print(f"rank 1 took {got} bytes", flush=True)
