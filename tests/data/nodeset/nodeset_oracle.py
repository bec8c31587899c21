"""ClusterShell's answer for each node set: the reference the node-set differential test
(tests/unit/nodeset_oracle_test.cc) compares msrun-ssh's expansion with.

Reads one JSON string per line on stdin; prints one JSON object per line: {"names": [...]} (sorted)
or {"error": "..."}. Exit 3 when ClusterShell is not installed (Debian: python3-clustershell).
"""
import json
import sys

try:
    from ClusterShell.NodeSet import NodeSet
except ImportError:
    sys.exit(3)

for line in sys.stdin:
    pattern = json.loads(line)
    try:
        answer = {"names": sorted(NodeSet(pattern))}
    except Exception as e:  # every parse error ClusterShell has is a refusal here
        answer = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(answer))
