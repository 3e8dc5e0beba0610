"""The metadata of a uftrace data directory, for :mod:`.uftrace`: the ``info`` header,
``task.txt`` (sessions, threads, forks, dlopens), the ``sid-*.map`` memory maps and the
``.sym`` symbol files, and the resolution of a function address to its name (see the
module doc of :mod:`.uftrace` for the formats).  Read once per directory and cached.
"""
import functools
import os
import re
import stat
from bisect import bisect_right
from dataclasses import dataclass, field

from . import budget
from ..errors import TraceFormatError
from ..fsutil import describe_entry

MAGIC = b"Ftrace!\x00"
_FEAT_SYM_REL_ADDR = 1 << 5
_FEAT_SYM_SIZE = 1 << 12
_MAP_RE = re.compile(r"^([0-9a-fA-F]+)-([0-9a-fA-F]+)\s+(\S+)\s+([0-9a-fA-F]+)\s+\S+\s+[0-9]+\s*(.*)$")
_KV_RE = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def not_a_file(path, what):
    """The error for an entry of a data directory that is not a regular file (a FIFO, whose
    reading would block forever, a directory, a broken symbolic link)."""
    return TraceFormatError(path, f"uftrace {what} is {describe_entry(path)}, not a regular file")


def check_regular(path, what):
    """Raise when ``path`` exists (as a name) but is not a regular file."""
    if os.path.lexists(path) and not os.path.isfile(path):
        raise not_a_file(path, what)


def read_bytes(path, what):
    """The bytes of a regular file; opened without blocking, so that a FIFO is an error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        if os.path.islink(path):
            raise not_a_file(path, what) from None
        raise TraceFormatError(path, f"uftrace {what} not found") from None
    except OSError as e:
        raise TraceFormatError(path, f"cannot read uftrace {what}: {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise not_a_file(path, what)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    except OSError as e:
        raise TraceFormatError(path, f"cannot read uftrace {what}: {e.strerror or e}") from None
    finally:
        os.close(fd)


_BYTES_PER_LINE = 200                 # a parsed line: its str, split parts and row tuple


def _read_text(path, what):
    raw = read_bytes(path, what)
    budget.check(path, 2 * len(raw) + _BYTES_PER_LINE * raw.count(b"\n"), f"reading its {what}")
    return raw.decode("utf-8", errors="replace")


@dataclass
class _Header:
    version: int
    endian: int
    elf_class: int
    feat_mask: int
    text: dict


def _parse_info(path):
    raw = read_bytes(path, "info file")
    if len(raw) < 40 or raw[:8] != MAGIC:
        raise TraceFormatError(path, "not a uftrace info file (no 'Ftrace!' header)", 0)
    version = int.from_bytes(raw[8:12], "little")
    hsize = int.from_bytes(raw[12:14], "little")
    endian, elf_class = raw[14], raw[15]
    feat = int.from_bytes(raw[16:24], "little")
    if version < 3 or version > 1000:
        raise TraceFormatError(path, f"unsupported uftrace data version {version}", 8)
    if endian != 1:
        raise TraceFormatError(path, "big-endian uftrace data is not supported (recorded on a "
                                     "big-endian machine)", 14)
    if elf_class not in (1, 2):
        raise TraceFormatError(path, f"unknown ELF class {elf_class}", 15)
    if hsize < 24 or hsize > len(raw):
        hsize = 40
    text = {}
    for line in raw[hsize:].decode("utf-8", errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if sep and key not in text:
            text[key] = value
    return _Header(version, endian, elf_class, feat, text)


def _timestamp_ns(value, path, lineno):
    sec, dot, frac = value.partition(".")
    try:
        return int(sec) * 1_000_000_000 + (int((frac + "000000000")[:9]) if dot else 0)
    except ValueError:
        raise TraceFormatError(path, f"line {lineno}: bad timestamp {value!r}") from None


def _unquote(v):
    if len(v) >= 2 and v[0] == '"' and v[-1] == '"':
        return v[1:-1]
    return v


@dataclass
class _Tasks:
    sessions: list         # (timestamp ns, pid, sid, exename), in file order
    task_pid: dict         # tid -> pid
    parent: dict           # pid -> ppid (FORK)
    dlopens: list          # (timestamp, sid, base, libname)


def parse_task_txt(path):
    sessions, task_pid, parent, dlopens = [], {}, {}, []
    check_regular(path, "task.txt")
    if not os.path.isfile(path):
        return _Tasks(sessions, task_pid, parent, dlopens)
    for lineno, line in enumerate(_read_text(path, "task.txt").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        tag, _, rest = line.partition(" ")
        kv = {k: _unquote(v) for k, v in _KV_RE.findall(rest)}
        try:
            ts = _timestamp_ns(kv.get("timestamp", "0"), path, lineno)
            if tag == "SESS":
                sessions.append((ts, int(kv["pid"]), kv["sid"], kv.get("exename", "")))
            elif tag == "TASK":
                task_pid.setdefault(int(kv["tid"]), int(kv["pid"]))
            elif tag == "FORK":
                parent.setdefault(int(kv["pid"]), int(kv["ppid"]))
            elif tag == "DLOP":
                dlopens.append((ts, kv["sid"], int(kv["base"], 16), kv.get("libname", "")))
            # other tags (newer versions) carry nothing needed here
        except (KeyError, ValueError):
            raise TraceFormatError(path, f"line {lineno}: malformed {tag} line: {line[:80]!r}") from None
    return _Tasks(sessions, task_pid, parent, dlopens)


def pid_of(tasks, tid):
    """The process of thread ``tid``: its TASK line, else itself when it is a forked process
    (FORK line) or when no single process is known, else the only recorded process."""
    pid = tasks.task_pid.get(tid)
    if pid is not None:
        return pid
    if tid in tasks.parent:
        return tid
    pids = {s[1] for s in tasks.sessions}
    return pids.pop() if len(pids) == 1 else tid


class _Symtab:
    """Symbols of one module, from its ``.sym`` file: lookup of an address relative to the base."""

    def __init__(self, path, sized=False):
        self.path = path
        starts, names, ends = [], [], []
        lines = _read_text(path, "symbol file").splitlines()
        rows = []
        for lineno, line in enumerate(lines, 1):
            if not line or line[0] == "#":
                continue
            parts = line.split(None, 3)
            if len(parts) < 3:
                continue
            try:
                addr = int(parts[0], 16)
            except ValueError:
                raise TraceFormatError(path, f"line {lineno}: bad symbol address {parts[0][:40]!r}") from None
            if sized and len(parts) == 4 and len(parts[2]) == 1:     # addr size type name
                try:
                    size = int(parts[1], 16)
                except ValueError:
                    raise TraceFormatError(path, f"line {lineno}: cannot parse symbol line "
                                                 f"{line[:60]!r}") from None
                stype, name = parts[2], parts[3]
            elif len(parts[1]) == 1:                                  # addr type name
                stype, name, size = parts[1], line.split(None, 2)[2], None
            else:
                raise TraceFormatError(path, f"line {lineno}: cannot parse symbol line {line[:60]!r}")
            rows.append((addr, stype, name.rstrip("\r"), size))
        rows.sort(key=lambda r: r[0])                  # stable: file order among equal addresses
        bounds = sorted({r[0] for r in rows})
        for addr, stype, name, size in rows:
            if stype == "?":
                continue
            if starts and starts[-1] == addr:          # an alias at the same address: keep the first
                continue
            k = bisect_right(bounds, addr)
            end = bounds[k] if k < len(bounds) else addr + (size or 1)
            if size:
                end = min(end, addr + size) if k < len(bounds) else addr + size
            starts.append(addr)
            names.append(name)
            ends.append(end)
        self.starts, self.names, self.ends = starts, names, ends
        self.max_end = max(ends) if ends else 0

    def lookup(self, offset):
        k = bisect_right(self.starts, offset) - 1
        if k >= 0 and offset < self.ends[k]:
            return self.names[k]
        return None


@dataclass
class _Session:
    sid: str
    pid: int
    ts: int
    ranges: list = field(default_factory=list)   # sorted (start, end, module path)
    bases: dict = field(default_factory=dict)    # module path -> load base


class _DataDir:
    """Metadata of one uftrace data directory (read once, symbols loaded lazily)."""

    def __init__(self, path):
        self.path = path
        self.header = _parse_info(os.path.join(path, "info"))
        self.tasks = parse_task_txt(os.path.join(path, "task.txt"))
        self.relative = bool(self.header.feat_mask & _FEAT_SYM_REL_ADDR)
        self._symtabs = {}
        self.sessions = {}
        maps = sorted(e for e in os.listdir(path) if e.startswith("sid-") and e.endswith(".map"))
        for name in maps:
            sid = name[4:-4]
            self.sessions[sid] = self._read_map(os.path.join(path, name), sid)
        for ts, pid, sid, exe in self.tasks.sessions:
            s = self.sessions.get(sid)
            if s is not None and s.pid < 0:
                s.pid, s.ts = pid, ts
        for ts, sid, base, lib in self.tasks.dlopens:
            s = self.sessions.get(sid)
            if s is None:
                continue
            tab = self.symtab(lib)
            end = base + (tab.max_end if tab is not None and tab.max_end else 1)
            s.ranges.append((base, end, lib))
            s.bases.setdefault(lib, base)
            s.ranges.sort()

    def _read_map(self, path, sid):
        sess = _Session(sid, -1, 0)
        for lineno, line in enumerate(_read_text(path, "map file").splitlines(), 1):
            m = _MAP_RE.match(line.strip())
            if not m:
                if line.strip():
                    raise TraceFormatError(path, f"line {lineno}: not a memory map line: {line[:80]!r}")
                continue
            start, end, perms, rest = int(m[1], 16), int(m[2], 16), m[3], m[5]
            module = re.sub(r"\s+build-id:[0-9a-fA-F]+\s*$", "", rest).strip()
            if not module:
                continue
            if module not in sess.bases or start < sess.bases[module]:
                sess.bases[module] = start
            if "x" in perms:
                sess.ranges.append((start, end, module))
        sess.ranges.sort()
        return sess

    def symtab(self, module):
        if module not in self._symtabs:
            p = os.path.join(self.path, os.path.basename(module) + ".sym")
            sized = bool(self.header.feat_mask & _FEAT_SYM_SIZE)
            check_regular(p, "symbol file")
            self._symtabs[module] = _Symtab(p, sized) if os.path.isfile(p) else None
        return self._symtabs[module]

    # sessions ---------------------------------------------------------------------------

    def pid_of(self, tid):
        return pid_of(self.tasks, tid)

    def sessions_of(self, pid):
        """Sessions of a process (its own SESS lines, else its fork parent's), by time."""
        seen = set()
        while pid not in seen:
            seen.add(pid)
            own = sorted((s for s in self.sessions.values() if s.pid == pid), key=lambda s: s.ts)
            if own:
                return own
            if pid not in self.tasks.parent:
                break
            pid = self.tasks.parent[pid]
        if len(self.sessions) == 1 or not self.tasks.sessions:
            return sorted(self.sessions.values(), key=lambda s: (s.ts, s.sid))[:1]
        return []

    def resolve(self, sess, addr):
        """Name of the function at ``addr`` in session ``sess`` (None: no session)."""
        if sess is None:
            return f"0x{addr:x}"
        k = bisect_right(sess.ranges, (addr, float("inf"), "")) - 1
        if k < 0 or not (sess.ranges[k][0] <= addr < sess.ranges[k][1]):
            return f"0x{addr:x}"
        module = sess.ranges[k][2]
        base = sess.bases.get(module, sess.ranges[k][0])
        tab = self.symtab(module)
        if tab is not None:
            tries = (addr - base, addr) if self.relative else (addr, addr - base)
            for off in tries:
                name = tab.lookup(off)
                if name is not None:
                    return name
        return f"{os.path.basename(module)}+0x{addr - base:x}"


def _dir_key(path):
    st = []
    for name in ("info", "task.txt"):
        try:
            s = os.stat(os.path.join(path, name))
            st.append((s.st_mtime_ns, s.st_size, s.st_ino))
        except OSError:
            st.append(None)
    return os.path.abspath(path), tuple(st)


@functools.lru_cache(maxsize=16)
def _cached_dir(key):
    return _DataDir(key[0])


def read_data_dir(path):
    """The metadata of a data directory, read again only when its info or task.txt changed."""
    return _cached_dir(_dir_key(path))
