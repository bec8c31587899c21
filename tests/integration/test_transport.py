"""The SSH pool under its own handler: a host torn down from inside an event."""
import os
import subprocess

from harness import check, cluster_dir


def _probe(mode):
    probe = os.environ.get("MSRUN_SSH_POOL_PROBE", "")
    if not probe or not os.access(probe, os.X_OK):
        raise AssertionError(f"MSRUN_SSH_POOL_PROBE={probe!r} is not an executable")
    # Each round catches a teardown that lets late data through about one time in three.
    p = subprocess.run([probe, os.path.join(cluster_dir(), "ssh_config"), "node0", mode, "8"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"pool_probe {mode}: exit {p.returncode}\n{p.stderr[-4000:]}")
    words = p.stdout.split()
    check(len(words) == 3 and words[0] == "ok", f"pool_probe {mode} printed {p.stdout!r}")
    # After the teardown the host's output is not handed over, neither what was held nor what
    # closing its channels read; only the command started after it is refused.
    check(words[2] == "1", f"{words[2]} events came after the teardown, not 1: {p.stdout!r}; "
          f"{p.stderr.strip()}")


def test_a_host_dropped_from_inside_its_own_output_event():
    # The launcher drops a host from its handler (its watchdog ended, it went silent). At 512
    # hosts a starved launcher crashed there: the pool handed the event over from inside libssh's
    # callback, and the teardown freed the session libssh was still reading.
    _probe("drop")


def test_every_connection_closed_from_inside_an_output_event():
    _probe("disconnect")
