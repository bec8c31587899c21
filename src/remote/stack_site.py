# Stack dumps on demand (`msrun-ssh stack`): stack_site.sh installs this file as sitecustomize.py
# in the job's directory on the host (MSRUN_SSH_STACK_DIR) and puts that directory first on
# PYTHONPATH, so that every Python process of the job imports it at start-up (site.py).
#
# With MSRUN_SSH_STACK_DIR set, it opens DIR/<host name>.<pid>.stack (append mode) and registers
# faulthandler on SIGUSR2 for it: on that signal the process appends every thread's Python stack
# there and goes on (stack.sh sends it and reads what was appended). The handler chains to a
# handler that was there before; it does not chain to the default action, which would end the
# process. The file goes when the process ends normally (not in a child it forked). Without the
# variable, or when anything of this fails, nothing is registered and nothing is said.
#
# With --contract torch it also relays the rank's error file at exit (_relay_error_file).
#
# Then it runs the user's own sitecustomize, if one is further on sys.path, under the name
# "sitecustomize" (it replaces this module in sys.modules): an exception from it propagates to
# site.py, which reports it as it would without us ("Error in sitecustomize; ...").
import os
import sys


def _register():
    import atexit
    import faulthandler
    import signal

    directory = os.environ.get("MSRUN_SSH_STACK_DIR")
    if not directory:
        return
    pid = os.getpid()
    path = os.path.join(directory, "%s.%d.stack" % (os.uname().nodename, pid))
    dump = open(path, "a")
    before = signal.getsignal(signal.SIGUSR2)
    chain = before not in (signal.SIG_DFL, signal.SIG_IGN)
    faulthandler.register(signal.SIGUSR2, file=dump, all_threads=True, chain=chain)

    def remove():
        if os.getpid() == pid:
            try:
                os.unlink(path)
            except OSError:
                pass

    atexit.register(remove)


def _relay_error_file():
    # --contract torch: when the process exits, the error file torch.distributed.elastic's @record
    # wrote (TORCHELASTIC_ERROR_FILE, in the job's directory) goes to stderr as one line the
    # launcher takes for the summary (kErrorFileLine, output.h); a file left by an earlier process
    # of the rank is removed first.
    import atexit
    import json

    path = os.environ.get("TORCHELASTIC_ERROR_FILE", "")
    if not path.startswith(os.environ.get("MSRUN_SSH_STACK_DIR", "\0") + "/"):
        return
    try:
        os.unlink(path)
    except OSError:
        pass
    pid = os.getpid()

    def relay():
        if os.getpid() != pid:
            return
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return
        sys.stderr.write("msrun-ssh: error file: %s\n" % json.dumps(data, separators=(",", ":")))
        sys.stderr.flush()

    atexit.register(relay)


def _user_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    path = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


for _step in (_register, _relay_error_file):
    try:
        _step()
    except Exception:
        pass
_user_sitecustomize()
