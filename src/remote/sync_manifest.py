# Sync, step 1 on a host (run by sync.sh): lists DEST (argv[1]) as JSON lines, one per entry:
# {"t": f|d|l, "m": mode, "s": size, "n": mtime_ns, "p": path, "l": symlink text}; a path or
# text that is not UTF-8 comes as "px" / "lx" in hex. Then {"marker": TOKEN} (what
# DEST/.msrun-sync-id held, "" if nothing) and {"end": true}. With a token (argv[2] not empty), it
# removes the temporary files an interrupted sync left and writes the token to the marker
# (atomically, DEST created when missing). Then it reads one request line from stdin,
# {"hash": [hex paths]}, answers {"marker": TOKEN now}, {"p"|"px": path, "h": sha256 hex} per
# path ("" when unreadable) and {"end": true}, and exits; EOF instead of a request: it exits.
import hashlib, json, os, signal, stat, sys

dest, token = os.fsencode(sys.argv[1]), sys.argv[2]
MARK, TMP = b".msrun-sync-id", b".msrun-sync.tmp."
out = sys.stdout


def emit(obj):
    out.write(json.dumps(obj) + "\n")


def named(obj, key, raw):
    try:
        obj[key] = raw.decode("utf-8")
    except UnicodeDecodeError:
        obj[key + "x"] = raw.hex()
    return obj


def walk(top, rel):
    try:
        entries = list(os.scandir(top))
    except OSError as e:
        emit({"error": "cannot list %s: %s" % (os.fsdecode(top), e.strerror)})
        return
    for d in entries:
        r = rel + b"/" + d.name if rel else d.name
        if token and d.name.startswith(TMP):
            try:
                os.unlink(d.path)
            except OSError:
                pass
            continue
        st = d.stat(follow_symlinks=False)
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
            named(e, "l", os.readlink(d.path))
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
    os.makedirs(dest, exist_ok=True)
    tmp = os.path.join(dest, MARK + b".tmp." + os.urandom(6).hex().encode())
    with open(tmp, "w") as f:
        f.write(token + "\n")
    os.rename(tmp, os.path.join(dest, MARK))


def sha256(path):
    h = hashlib.sha256()
    try:
        with open(os.path.join(dest, path), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return ""
    return h.hexdigest()


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
# The launcher asks once every host has listed its tree; a launcher gone meanwhile (its connection
# dead without sshd noticing) must not keep this waiting: SIGALRM's default action ends it.
signal.alarm(600)
line = sys.stdin.readline()
signal.alarm(0)
if line:
    emit({"marker": marker()})
    for p in json.loads(line).get("hash", []):
        raw = bytes.fromhex(p)
        emit(named({"h": sha256(raw)}, "p", raw))
    emit({"end": True})
    out.flush()
