#!/bin/sh
# The node test of `msrun-ssh check --perf` (sent after python.sh, which runs perf.py): without
# python it says so and exits 4.
echo '{"error": "no python"}'
exit 4
