"""Test job: prints how its host was reached, as sshd saw it: "REACHED <SSH_CONNECTION> <user>"
(SSH_CONNECTION: client address, client port, server address, server port)."""
import getpass
import os

print("REACHED", os.environ.get("SSH_CONNECTION", "-"), getpass.getuser(), flush=True)
