"""Test job: prints LINES lines evenly over SECONDS (0: as fast as it can), each
"TAG rank R line I" padded to 80 bytes, then "TAG rank R done". Usage: steady.py TAG LINES SECONDS.
What a rank prints is known in advance (expected_log in test_console_pause.py), so its log can be
compared byte for byte."""
import os
import sys
import time

tag, lines, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rank = os.environ.get("RANK_ID", "sched")
out = sys.stdout.buffer
start = time.monotonic()
batch = 100
for i in range(lines):
    out.write(b"%-79s\n" % (b"%s rank %s line %d" % (tag.encode(), rank.encode(), i)))
    if (i + 1) % batch == 0:
        out.flush()
        if seconds > 0:
            ahead = start + seconds * (i + 1) / lines - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
out.write(b"%s rank %s done\n" % (tag.encode(), rank.encode()))
out.flush()
