#!/bin/sh
# The master-port listener of `msrun-ssh check` (sent after python.sh, which runs listen.py):
# without python it says so and exits 4.
echo no_python
exit 4
