"""Test job: prints LINES numbered lines on stdout and every 100th also on stderr, then a final
line without newline. Lines carry the rank so that mixing shows. Usage: flood.py LINES"""
import os
import sys

n = int(sys.argv[1])
rank = os.environ.get("RANK_ID", "?")
role = "s" if os.environ.get("MS_ROLE") == "MS_SCHED" else "w"
out = sys.stdout.buffer
err = sys.stderr.buffer
for i in range(n):
    out.write(b"%s%s line %d of the flood test, padding padding padding padding\n" % (
        role.encode(), rank.encode(), i))
    if i % 100 == 0:
        out.flush()
        err.write(b"%s%s err %d\n" % (role.encode(), rank.encode(), i))
        err.flush()
out.write(b"%s%s final line without newline" % (role.encode(), rank.encode()))
out.flush()
