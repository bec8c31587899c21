"""Test job: prints, as one JSON line, its argv, selected environment variables (as latin-1
strings, so every byte survives) and cwd. Variables: everything starting with MS_, RANK_, DEVICE_,
HOSTILE_, MSRUN_ and PYTHONUNBUFFERED."""
import json
import os
import sys

keys = [k for k in os.environb if k.decode("latin-1").startswith(
    ("MS_", "RANK_", "DEVICE_", "HOSTILE", "MSRUN_", "PYTHONUNBUFFERED"))]
print(json.dumps({
    "argv": [a.decode("latin-1") for a in map(os.fsencode, sys.argv[1:])],
    "env": {k.decode("latin-1"): os.environb[k].decode("latin-1") for k in keys},
    "cwd": os.getcwd(),
}), flush=True)
