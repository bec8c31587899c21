"""Test job: rank 1 stops in pdb (breakpoint()); a user types `p x` and `c`. Other ranks finish."""
import os
import sys

x = 41 + 1
if os.environ.get("MS_ROLE") == "MS_WORKER" and os.environ.get("RANK_ID") == "1":
    breakpoint()
    print("rank 1 continued after pdb", flush=True)
else:
    print(f"rank {os.environ.get('RANK_ID')} done", flush=True)
sys.exit(0)
