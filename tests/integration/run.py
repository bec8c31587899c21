"""Runs one integration test: python3 run.py MODULE FUNCTION. Exit 0 pass, 1 fail, 77 skip."""
import importlib
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def main():
    module, function = sys.argv[1], sys.argv[2]
    try:
        harness.cluster_dir()
        harness.wait_clean(30)  # a test starts on clean hosts
        getattr(importlib.import_module(module), function)()
    except harness.Skip as e:
        print(e, file=sys.stderr)
        return harness.SKIP
    except Exception:
        traceback.print_exc()
        if harness._TMP is not None:
            print(f"the test's scratch directory is kept: {harness._TMP}", file=sys.stderr)
        return 1
    finally:
        harness.restore_cluster()
    harness.remove_tmpdir()
    print(f"PASS {module}.{function}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
