"""Writes the rank's whole environment as JSON to DIR/rank<RANK>.json (DIR: argv[1]), and the words
after DIR to DIR/argv<RANK>.json: the probe of test_torch.py's comparison with the real torchrun."""
import json
import os
import sys

with open(os.path.join(sys.argv[1], "rank%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(dict(os.environ), f)
with open(os.path.join(sys.argv[1], "argv%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(sys.argv[2:], f)
