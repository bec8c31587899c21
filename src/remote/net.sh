#!/bin/sh
# The link test of `msrun-ssh check --net` (sent after python.sh, which runs net.py): without
# python it says so and exits 4.
echo error=no python
exit 4
