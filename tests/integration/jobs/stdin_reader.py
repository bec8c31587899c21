"""Test job: reads its stdin to the end, then prints how many bytes came and their SHA-256."""
import hashlib
import sys

data = sys.stdin.buffer.read()
print(f"stdin {len(data)} bytes sha256 {hashlib.sha256(data).hexdigest()}", flush=True)
