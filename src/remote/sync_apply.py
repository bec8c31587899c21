# Sync, step 2 on a host (run by sync.sh): applies the record stream on stdin to DEST (argv[1],
# created when missing). Record: header ">cIqQI" (type, mode, mtime_ns, size, path length), the
# path, then `size` bytes. Types: X delete (a directory only when empty), D directory, F file
# (written to DIR/.msrun-sync.tmp.RANDOM, mode and mtime set, renamed over the target), L symlink
# (its target is the data), A mode and mtime, E end. Refuses paths that are absolute, hold "..",
# ".", empty components or NUL, pass through a symlink, and symlink targets that leave DEST.
# Prints "msrun-sync: done FILES BYTES DELETED" after E and exits 0; on EOF before E it removes
# the file it was writing, prints "msrun-sync: interrupted" and exits 1; on a refused record or an
# error, "msrun-sync: error: WHY" and exit 2. Nothing half-written ever has the target's name.
# No byte on stdin for IDLE seconds counts as EOF: the launcher feeds the stream without pauses,
# so a silent stdin means it is gone or cut off (sshd may never notice a dead connection).
import os, posixpath, signal, stat, struct, sys

dest = os.fsencode(sys.argv[1])
TMP = b".msrun-sync.tmp."
HEAD = struct.Struct(">cIqQI")
inp = sys.stdin.buffer
state = {"tmp": None, "files": 0, "bytes": 0, "deleted": 0}
checked = set()


class Refused(Exception):
    pass


IDLE = 30


def idle(signum, frame):
    raise EOFError


signal.signal(signal.SIGALRM, idle)


def readn(n):
    signal.alarm(IDLE)
    data = inp.read(n)
    if len(data) != n:
        raise EOFError
    return data


def safe(path):
    parts = path.split(b"/")
    if not path or path.startswith(b"/") or b"\0" in path or any(p in (b"", b".", b"..") for p in parts):
        raise Refused("refused path %r: not a plain relative path" % os.fsdecode(path))
    parent = dest
    for p in parts[:-1]:
        parent = os.path.join(parent, p)
        if parent in checked:
            continue
        if not stat.S_ISDIR(os.lstat(parent).st_mode):
            raise Refused("refused path %r: %r is not a directory" % (os.fsdecode(path), os.fsdecode(p)))
        checked.add(parent)
    return os.path.join(dest, path)


def delete(full):
    checked.clear()
    try:
        if stat.S_ISDIR(os.lstat(full).st_mode):
            os.rmdir(full)
        else:
            os.unlink(full)
        state["deleted"] += 1
    except FileNotFoundError:
        pass
    except OSError as e:
        if not os.path.isdir(full):
            raise
        # A directory that still holds excluded files stays.


def directory(full, mode):
    try:
        if not stat.S_ISDIR(os.lstat(full).st_mode):
            raise Refused("cannot make directory %r: something else is there" % os.fsdecode(full))
    except FileNotFoundError:
        os.mkdir(full, 0o700)
    os.chmod(full, mode)


def write_file(full, mode, mtime, size):
    tmp = os.path.join(os.path.dirname(full), TMP + os.urandom(6).hex().encode())
    state["tmp"] = tmp
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        left = size
        while left:
            signal.alarm(IDLE)
            chunk = inp.read(min(left, 1 << 20))
            if not chunk:
                raise EOFError
            os.write(fd, chunk)
            left -= len(chunk)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.utime(tmp, ns=(mtime, mtime))
    os.rename(tmp, full)
    state["tmp"] = None
    state["files"] += 1
    state["bytes"] += size


def symlink(path, full, target):
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if target.startswith(b"/") or resolved == b".." or resolved.startswith(b"../"):
        raise Refused("refused symlink %r -> %r: it leads out of the directory" % (os.fsdecode(path), os.fsdecode(target)))
    tmp = os.path.join(os.path.dirname(full), TMP + os.urandom(6).hex().encode())
    state["tmp"] = tmp
    os.symlink(target, tmp)
    os.rename(tmp, full)
    state["tmp"] = None
    state["files"] += 1


def attrs(full, mode, mtime):
    if not stat.S_ISREG(os.lstat(full).st_mode):
        raise Refused("cannot set the mode of %r: not a file" % os.fsdecode(full))
    os.chmod(full, mode)
    os.utime(full, ns=(mtime, mtime))


def record():
    kind, mode, mtime, size, n = HEAD.unpack(readn(HEAD.size))
    if kind == b"E":
        return False
    path = readn(n)
    full = safe(path)
    if kind == b"X":
        delete(full)
    elif kind == b"D":
        directory(full, mode & 0o7777)
    elif kind == b"F":
        write_file(full, mode & 0o7777, mtime, size)
    elif kind == b"L":
        symlink(path, full, readn(size))
    elif kind == b"A":
        attrs(full, mode & 0o7777, mtime)
    else:
        raise Refused("unknown record type %r" % kind)
    return True


def drop_tmp():
    if state["tmp"]:
        try:
            os.unlink(state["tmp"])
        except OSError:
            pass


code = 0
try:
    os.makedirs(dest, exist_ok=True)
    while record():
        pass
    print("msrun-sync: done %d %d %d" % (state["files"], state["bytes"], state["deleted"]), flush=True)
except EOFError:
    drop_tmp()
    print("msrun-sync: interrupted", flush=True)
    code = 1
except (Refused, OSError) as e:
    drop_tmp()
    print("msrun-sync: error: %s" % e, flush=True)
    code = 2
sys.exit(code)
