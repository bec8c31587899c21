# Sync on a host (run by sync.sh on a host without perl; sync.pl is the same program in Perl): one
# program, up to three steps on one channel. DEST is argv[1], the token argv[2]; a token "-" is
# read from stdin's first line before anything else (an empty line: none; EOF there: exit 0), so
# that the program can be started before it is needed and wait (READY seconds at most).
# 1. The manifest: lists DEST as JSON lines, one per entry: {"t": f|d|l, "m": mode, "s": size,
#    "n": mtime_ns, "p": path, "l": symlink text}; a path or text that is not UTF-8 comes as "px" /
#    "lx" in hex. Then {"marker": TOKEN} (what DEST/.msrun-sync-id held, "" if nothing) and
#    {"end": true}. With a token (argv[2] not empty), it removes the temporary files an interrupted
#    sync left and writes the token to the marker (atomically, DEST created when missing).
# 2. When stdin then brings a request (a line that begins with "{"), {"hash": [hex paths]}: it
#    answers {"marker": TOKEN now}, {"p"|"px": path, "h": sha256 hex} per path ("" when
#    unreadable) and {"end": true}.
# 3. When stdin then brings anything else: the record stream, applied to DEST (created when
#    missing). Record: header ">cIqQI" (type, mode, mtime_ns, size, path length), the path, then
#    `size` bytes. Types: X delete (a directory only when empty), D directory, F file (written to
#    DIR/.msrun-sync.tmp.RANDOM, mode and mtime set, renamed over the target), L symlink (its
#    target is the data), A mode and mtime, E end. Refuses paths that are absolute, hold "..", ".",
#    empty components or NUL, pass through a symlink, and symlink targets that leave DEST. Prints
#    "msrun-sync: done FILES BYTES DELETED" after E and exits 0; on EOF before E it removes the file
#    it was writing, prints "msrun-sync: interrupted" and exits 1; on a refused record or an error,
#    "msrun-sync: error: WHY" and exit 2. Nothing half-written ever has the target's name.
# EOF where step 2 or 3 could begin ends the program (exit 0). The launcher sends them once every
# host is done with the step before; a launcher gone meanwhile (its connection dead without sshd
# noticing) must not keep this waiting: WAIT seconds of silence count as EOF there. Within the
# stream, no byte for IDLE seconds counts as EOF: the launcher feeds it without pauses, so a silent
# stdin means it is gone or cut off (sshd may never notice a dead connection).
import errno, hashlib, json, os, posixpath, signal, stat, struct, sys, time

dest, token = os.fsencode(sys.argv[1]), sys.argv[2]
MARK, TMP = b".msrun-sync-id", b".msrun-sync.tmp."
HEAD = struct.Struct(">cIqQI")
WAIT, IDLE, READY = 600, 30, 86400
out = sys.stdout
inp = sys.stdin.buffer
state = {"tmp": None, "files": 0, "bytes": 0, "deleted": 0}
checked = set()


class Refused(Exception):
    pass


def silent(signum, frame):
    raise EOFError


signal.signal(signal.SIGALRM, silent)


def emit(obj):
    out.write(json.dumps(obj) + "\n")


# As sync.pl: a long listing or hashing sends what it has, or an empty line, every BEAT seconds.
BEAT, sent = 10, [time.monotonic()]


def beat():
    if time.monotonic() - sent[0] >= BEAT:
        out.write("\n")
        out.flush()
        sent[0] = time.monotonic()


def named(obj, key, raw):
    try:
        obj[key] = raw.decode("utf-8")
    except UnicodeDecodeError:
        obj[key + "x"] = raw.hex()
    return obj


# As sync.pl's walk: an entry gone since its directory was read is left out, a subdirectory that
# cannot be listed is an error naming it (p).
def walk(top, rel):
    try:
        entries = list(os.scandir(top))
    except FileNotFoundError:
        if rel:
            return
        raise
    except OSError as e:
        error = {"error": "cannot list %s: %s" % (os.fsdecode(top), e.strerror)}
        emit(named(error, "p", rel) if rel else error)
        return
    for d in entries:
        beat()
        r = rel + b"/" + d.name if rel else d.name
        if token and d.name.startswith(TMP):
            try:
                os.unlink(d.path)
            except OSError:
                pass
            continue
        if not rel and d.name.startswith(MARK + b".tmp."):
            continue  # a host's marker on its way
        try:
            st = d.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            t = "d"
        elif stat.S_ISLNK(st.st_mode):
            t = "l"
        elif stat.S_ISREG(st.st_mode):
            t = "f"
        else:
            continue
        e = named({"t": t, "m": st.st_mode & 0o7777, "s": st.st_size, "n": st.st_mtime_ns}, "p", r)
        if t == "l":
            try:
                named(e, "l", os.readlink(d.path))
            except FileNotFoundError:
                continue
        emit(e)
        if t == "d":
            walk(d.path, r)


def marker():
    try:
        with open(os.path.join(dest, MARK), "rb") as f:
            return f.read(200).decode("ascii", "replace").strip()
    except OSError:
        return ""


def write_marker():
    # If it can (sync.pl's write_marker: a read-only mount, DEST no directory).
    tmp = os.path.join(dest, MARK + b".tmp." + os.urandom(6).hex().encode())
    try:
        os.makedirs(dest, exist_ok=True)
        with open(tmp, "w") as f:
            f.write(token + "\n")
        os.rename(tmp, os.path.join(dest, MARK))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def sha256(path):
    h = hashlib.sha256()
    try:
        with open(os.path.join(dest, path), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
                beat()
    except OSError:
        return ""
    return h.hexdigest()


def manifest():
    try:
        if os.path.isdir(dest):
            walk(dest, b"")
        elif os.path.lexists(dest):
            emit({"error": "%s is not a directory" % os.fsdecode(dest)})
        emit({"marker": marker()})
        if token:
            write_marker()
    except OSError as e:
        emit({"error": "%s: %s" % (e.filename or os.fsdecode(dest), e.strerror)})
    emit({"end": True})
    out.flush()


def answer(request):
    emit({"marker": marker()})
    for p in request.get("hash", []):
        raw = bytes.fromhex(p)
        emit(named({"h": sha256(raw)}, "p", raw))
    emit({"end": True})
    out.flush()


def waiting(read):
    signal.alarm(WAIT)
    try:
        return read()
    except EOFError:
        return b""
    finally:
        signal.alarm(0)


def next_step():
    # The first byte of what comes next on stdin, left there; b"" for EOF.
    return waiting(lambda: inp.peek(1)[:1])


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


def drop_caches(d):
    # As sync.pl's drop_caches: Python's caches go with their directory, nothing else excluded.
    try:
        names = os.listdir(d)
    except OSError:
        return
    for n in names:
        p = os.path.join(d, n)
        try:
            is_dir = stat.S_ISDIR(os.lstat(p).st_mode)
            if n == b"__pycache__" and is_dir:
                for f in os.listdir(p):
                    if f.endswith(b".pyc"):
                        try:
                            os.unlink(os.path.join(p, f))
                        except OSError:
                            pass
                os.rmdir(p)
            elif n.endswith(b".pyc") and not is_dir:
                os.unlink(p)
        except OSError:
            pass


def not_a_directory(full):
    try:
        if stat.S_ISDIR(os.lstat(full).st_mode):
            raise Refused("%s: a directory holding files the sync leaves out is in the way (remove it here)"
                          % os.fsdecode(full))
    except FileNotFoundError:
        pass


def delete(full):
    checked.clear()
    try:
        is_dir = stat.S_ISDIR(os.lstat(full).st_mode)
        writable_dir(full)
        if is_dir:
            try:
                os.rmdir(full)
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                drop_caches(full)
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


# As sync.pl: directories whose mode keeps their owner from writing in them get it at the end.
late = {}


def directory(full, mode):
    try:
        if not stat.S_ISDIR(os.lstat(full).st_mode):
            raise Refused("cannot make directory %r: something else is there" % os.fsdecode(full))
    except FileNotFoundError:
        os.mkdir(full, 0o700)
    late.pop(full, None)
    if not mode & 0o200:
        late[full] = mode
    os.chmod(full, mode | 0o700 if full in late else mode)


def writable_dir(full):
    d = os.path.dirname(full)
    if d in late or os.access(d, os.W_OK | os.X_OK):
        return
    st = os.lstat(d)
    if st.st_uid == os.geteuid() and stat.S_ISDIR(st.st_mode):
        late[d] = st.st_mode & 0o7777
        os.chmod(d, late[d] | 0o700)


def finish():
    for d, mode in late.items():
        try:
            os.chmod(d, mode)
        except OSError:
            pass


def write_file(full, mode, mtime, size):
    writable_dir(full)
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
            view = memoryview(chunk)
            while view:  # a short write (a disk filling up) is followed by ENOSPC, not ignored
                view = view[os.write(fd, view):]
            left -= len(chunk)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.utime(tmp, ns=(mtime, mtime))
    not_a_directory(full)
    os.rename(tmp, full)
    state["tmp"] = None
    state["files"] += 1
    state["bytes"] += size


def symlink(path, full, target):
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if target.startswith(b"/") or resolved == b".." or resolved.startswith(b"../"):
        raise Refused("refused symlink %r -> %r: it leads out of the directory" % (os.fsdecode(path), os.fsdecode(target)))
    writable_dir(full)
    tmp = os.path.join(os.path.dirname(full), TMP + os.urandom(6).hex().encode())
    state["tmp"] = tmp
    os.symlink(target, tmp)
    not_a_directory(full)
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


def apply():
    try:
        try:
            os.makedirs(dest, exist_ok=True)
            while record():
                pass
        finally:
            finish()
        print("msrun-sync: done %d %d %d" % (state["files"], state["bytes"], state["deleted"]), flush=True)
        return 0
    except EOFError:
        drop_tmp()
        print("msrun-sync: interrupted", flush=True)
        return 1
    except (Refused, OSError) as e:
        drop_tmp()
        print("msrun-sync: error: %s" % e, flush=True)
        return 2


if token == "-":  # the token is stdin's first line (an empty line: none); EOF first: nothing to do
    signal.alarm(READY)
    try:
        line = inp.readline()
    except EOFError:  # READY passed: nobody came for it
        sys.exit(0)
    signal.alarm(0)
    if not line.endswith(b"\n"):
        sys.exit(0)
    token = line.strip().decode("ascii", "replace")
manifest()
step = next_step()
if step == b"{":
    answer(json.loads(waiting(inp.readline)))
    step = next_step()
sys.exit(apply() if step else 0)
