"""The metadata of a uftrace data directory, for :mod:`.uftrace`: the ``info`` header,
``task.txt`` (sessions, threads, forks, dlopens), the ``sid-*.map`` memory maps and the
``.sym`` symbol files, and the resolution of a function address to its name (see the
module doc of :mod:`.uftrace` for the formats).  Read once per directory and cached.
"""
import functools
import os
import re
import signal
import stat
import struct
from bisect import bisect_right
from dataclasses import dataclass, field

from . import budget
from ..errors import TraceFormatError
from ..fsutil import describe_entry

MAGIC = b"Ftrace!\x00"
_FEAT_SYM_REL_ADDR = 1 << 5
_FEAT_SYM_SIZE = 1 << 12
_MAP_RE = re.compile(r"^([0-9a-fA-F]+)-([0-9a-fA-F]+)\s+(\S+)\s+([0-9a-fA-F]+)\s+\S+\s+[0-9]+\s*(.*)$")
_BUILD_ID_RE = re.compile(r"\s+build-id:([0-9a-fA-F]+)\s*$")
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


def _sym_file_rows(path, sized):
    """(address, type, name, size or None) per line of a uftrace ``.sym`` file."""
    rows = []
    for lineno, line in enumerate(_read_text(path, "symbol file").splitlines(), 1):
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
    return rows


class _Symtab:
    """Symbols of one module: lookup of an address.  ``rows``: (address, type, name, size
    or None), as a ``.sym`` file lists them (type ``?``: an end marker only); ``relative``:
    the addresses are relative to the module's load base (else absolute: very old uftrace)."""

    def __init__(self, rows, relative=True):
        self.relative = relative
        starts, names, ends = [], [], []
        rows = sorted(rows, key=lambda r: r[0])        # stable: file order among equal addresses
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


# --------------------------------------------------------------------------- ELF symbols
# When a module's .sym file is missing (uftrace writes them when the recording ends: a
# program that crashed or was killed under uftrace may leave none), uftrace reads the
# module's own ELF file, as named in the map; so does this reader: its function symbols
# (.symtab, else .dynsym) and its PLT entries (x86-64 and i386: one 16-byte stub per
# .rela.plt/.rel.plt entry, after the PLT's first stub, or from the start of .plt.sec),
# addresses made relative to the load base (the lowest PT_LOAD address).

_ELF_MAGIC = b"\x7fELF"
_SHT_SYMTAB, _SHT_DYNSYM, _SHT_NOTE = 2, 11, 7
_STT_FUNC, _STT_GNU_IFUNC = 2, 10
_PT_LOAD = 1
_NT_GNU_BUILD_ID = 3
_EM_386, _EM_X86_64 = 3, 62
_JUMP_SLOT = 7                         # R_X86_64_JUMP_SLOT and R_386_JMP_SLOT
_PLT_ENTRY = 16
_ELF_MAX_BYTES = 1 << 30               # a larger "module" is not read


class _Elf:
    """Just enough of an ELF file (little-endian, 32 or 64 bit) for its symbols."""

    def __init__(self, data):
        if len(data) < 52 or data[:4] != _ELF_MAGIC or data[5] != 1 or data[4] not in (1, 2):
            raise ValueError("not a little-endian ELF file")
        self.data = data
        self.is64 = data[4] == 2
        if self.is64:
            (self.type, self.machine, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum,
             shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
        else:
            (self.type, self.machine, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum,
             shstrndx) = struct.unpack_from("<HHIIIIIHHHHHH", data, 16)
        self.segments = [self._segment(phoff + i * phentsize) for i in range(phnum)]
        self.sections = [self._section(shoff + i * shentsize) for i in range(shnum)]
        names = self.sections[shstrndx] if shstrndx < len(self.sections) else None
        for sec in self.sections:
            sec["name"] = self.string(names, sec["name_at"]) if names else ""

    def _segment(self, at):
        if self.is64:
            ptype, _, _, vaddr, _, _, _, _ = struct.unpack_from("<IIQQQQQQ", self.data, at)
        else:
            ptype, _, vaddr, _, _, _, _, _ = struct.unpack_from("<IIIIIIII", self.data, at)
        return ptype, vaddr

    def _section(self, at):
        fmt = "<IIQQQQIIQQ" if self.is64 else "<IIIIIIIIII"
        name_at, stype, _, addr, offset, size, link, _, _, entsize = struct.unpack_from(fmt, self.data, at)
        if offset + size > len(self.data) and stype != 8:            # 8: SHT_NOBITS
            raise ValueError("a section runs past the end of the file")
        return {"name_at": name_at, "type": stype, "addr": addr, "offset": offset, "size": size,
                "link": link, "entsize": entsize}

    def string(self, strtab, at):
        start = strtab["offset"] + at
        end = self.data.find(b"\0", start, strtab["offset"] + strtab["size"])
        return self.data[start:end if end >= 0 else start].decode("utf-8", errors="replace")

    def named(self, name):
        return next((sec for sec in self.sections if sec["name"] == name), None)

    def load_base(self):
        """The address the module's first PT_LOAD segment asks for (0 for PIE and shared
        libraries): symbol values minus this are offsets from the load base."""
        return next((vaddr for ptype, vaddr in self.segments if ptype == _PT_LOAD), 0)

    def build_id(self):
        for sec in self.sections:
            if sec["type"] != _SHT_NOTE:
                continue
            at, end = sec["offset"], sec["offset"] + sec["size"]
            while at + 12 <= end:
                namesz, descsz, ntype = struct.unpack_from("<III", self.data, at)
                desc = at + 12 + (namesz + 3) // 4 * 4
                if ntype == _NT_GNU_BUILD_ID and self.data[at + 12:at + 12 + namesz].rstrip(b"\0") == b"GNU":
                    return self.data[desc:desc + descsz].hex()
                at = desc + (descsz + 3) // 4 * 4
        return None

    def symbols(self, table):
        """(name, value, size, type) of a symbol table section."""
        strtab = self.sections[table["link"]] if table["link"] < len(self.sections) else None
        entsize = table["entsize"] or (24 if self.is64 else 16)
        fmt = "<IBBHQQ" if self.is64 else "<IIIBBH"
        out = []
        for at in range(table["offset"], table["offset"] + table["size"] - entsize + 1, entsize):
            if self.is64:
                name_at, info, _, shndx, value, size = struct.unpack_from(fmt, self.data, at)
            else:
                name_at, value, size, info, _, shndx = struct.unpack_from(fmt, self.data, at)
            out.append((self.string(strtab, name_at) if strtab else "", value, size, info & 0xF, shndx))
        return out

    def plt_rows(self, base):
        """The PLT stubs, named after the functions their relocations name, in relocation
        order (as uftrace counts them: unnamed relocations take no stub)."""
        if self.machine not in (_EM_X86_64, _EM_386):
            return []
        rel = self.named(".rela.plt") or self.named(".rel.plt")
        plt_sec, plt = self.named(".plt.sec"), self.named(".plt")
        if rel is None or (plt is None and plt_sec is None) or rel["link"] >= len(self.sections):
            return []
        dynsym = self.symbols(self.sections[rel["link"]])
        rela = rel["name"] == ".rela.plt"
        entsize = rel["entsize"] or ((24 if rela else 16) if self.is64 else (12 if rela else 8))
        first = plt_sec["addr"] if plt_sec is not None else plt["addr"] + _PLT_ENTRY
        rows = []
        for at in range(rel["offset"], rel["offset"] + rel["size"] - entsize + 1, entsize):
            if self.is64:
                sym = struct.unpack_from("<QQ", self.data, at)[1] >> 32
            else:
                sym = struct.unpack_from("<II", self.data, at)[1] >> 8
            name = dynsym[sym][0] if sym < len(dynsym) else ""
            if name:
                rows.append((first + len(rows) * _PLT_ENTRY - base, "P", name, _PLT_ENTRY))
        return rows

    def function_rows(self):
        """Function symbols and PLT stubs as (offset from the load base, type, name, size),
        named as uftrace names them: of the aliases at one address the first in the table
        (.symtab, else .dynsym), unless a later one does not start with "_" where it does
        (C++ mangled names aside); then the exported (.dynsym) name of the function, on the
        same terms."""
        base = self.load_base()
        tables = [s for s in self.sections if s["type"] == _SHT_SYMTAB] or \
                 [s for s in self.sections if s["type"] == _SHT_DYNSYM]
        if not tables:
            return self.plt_rows(base)
        syms, previous = [], None
        for name, value, size, stype, shndx in self.symbols(tables[0]):
            if shndx == 0 or size == 0 or stype not in (_STT_FUNC, _STT_GNU_IFUNC) or value == previous:
                continue
            previous = value
            syms.append([value, size, name])
        syms.sort(key=lambda x: x[0])                  # stable: table order among aliases
        funcs = []
        for value, size, name in syms:
            if funcs and funcs[-1][0] == value:
                if _prefer(name, funcs[-1][2]):
                    funcs[-1][2] = name
                continue
            funcs.append([value, size, name])
        starts = [f[0] for f in funcs]
        for dyn in (s for s in self.sections if s["type"] == _SHT_DYNSYM):
            for name, value, size, stype, shndx in self.symbols(dyn):
                if shndx == 0 or stype not in (_STT_FUNC, _STT_GNU_IFUNC):
                    continue
                k = bisect_right(starts, value) - 1
                if k >= 0 and value < funcs[k][0] + funcs[k][1] and _exported_name_wins(name, funcs[k][2]):
                    funcs[k][2] = name
        return [(value - base, "T", name, size) for value, size, name in funcs] + self.plt_rows(base)


def _prefer(alias, best):
    """An alias replaces the name kept so far when that starts with "_" (and is no mangled
    C++ name) and the alias does not."""
    return best[:1] == "_" and best[1:2] != "Z" and alias[:1] != "_"


def _exported_name_wins(exported, current):
    return exported and not (current[:1] != "_" and exported[:1] == "_") and current[1:2] != "Z"


def _elf_symtab(module, build_id):
    """(_Symtab or None, why not) from the module's ELF file on this machine; None when it
    is missing, unreadable, not ELF, or another build than the one recorded."""
    try:
        fd = os.open(module, os.O_RDONLY | os.O_NONBLOCK)     # a FIFO must not block
    except OSError as e:
        return None, f"{module} cannot be read ({e.strerror or e})"
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None, f"{module} is not a regular file"
            if st.st_size > _ELF_MAX_BYTES:
                return None, f"{module} is larger than {_ELF_MAX_BYTES >> 20} MiB"
            budget.check(module, 3 * st.st_size, "reading its symbols")
            data = fh.read()
    except OSError as e:
        return None, f"{module} cannot be read ({e.strerror or e})"
    try:
        elf = _Elf(data)
        if build_id and elf.build_id() not in (None, build_id):
            return None, f"{module} is another build than the one recorded (its build-id differs)"
        return _Symtab(elf.function_rows()), None
    except (ValueError, struct.error, IndexError) as e:
        return None, f"{module} is not a readable ELF file ({e})"


@dataclass
class _Session:
    sid: str
    pid: int
    ts: int
    ranges: list = field(default_factory=list)   # sorted (start, end, module path)
    bases: dict = field(default_factory=dict)    # module path -> load base
    build_ids: dict = field(default_factory=dict)   # module path -> build-id (hex), when the map names one


class _DataDir:
    """Metadata of one uftrace data directory (read once, symbols loaded lazily)."""

    def __init__(self, path):
        self.path = path
        self.header = _parse_info(os.path.join(path, "info"))
        self.tasks = parse_task_txt(os.path.join(path, "task.txt"))
        self.relative = bool(self.header.feat_mask & _FEAT_SYM_REL_ADDR)
        self._symtabs = {}
        self.symbol_notes = {}          # module -> where its names came from, when not its .sym file
        self.ending = _ending(self.header.text.get("exit_status"))
        self.leader = self.tasks.sessions[0][1] if self.tasks.sessions else None
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
            build = _BUILD_ID_RE.search(rest)
            module = rest[:build.start()].strip() if build else rest.strip()
            if not module:
                continue
            if build:
                sess.build_ids.setdefault(module, build[1].lower())
            if module not in sess.bases or start < sess.bases[module]:
                sess.bases[module] = start
            if "x" in perms:
                sess.ranges.append((start, end, module))
        sess.ranges.sort()
        return sess

    def symtab(self, module):
        """The module's symbols: its ``.sym`` file in the data directory, else (as uftrace)
        its ELF file on this machine, when that is the build recorded; None when neither."""
        if module not in self._symtabs:
            sym = os.path.basename(module) + ".sym"
            p = os.path.join(self.path, sym)
            check_regular(p, "symbol file")
            if os.path.isfile(p):
                tab = _Symtab(_sym_file_rows(p, bool(self.header.feat_mask & _FEAT_SYM_SIZE)), self.relative)
            else:
                build_id = next((s.build_ids[module] for s in self.sessions.values() if module in s.build_ids), None)
                tab, why = _elf_symtab(module, build_id)
                self.symbol_notes[module] = (
                    f"no {sym} in the data directory (uftrace writes it when the recording ends): the "
                    f"names of {module} were read from that file, as uftrace does" if tab is not None else
                    f"no {sym} in the data directory, and {why}: its functions are named "
                    f"{os.path.basename(module)}+0x<offset>")
            self._symtabs[module] = tab
        return self._symtabs[module]

    def ending_of(self, pid):
        """How process ``pid`` ended (``Trace.ending``), for the process uftrace started; None
        for others (forked children) and when the info file does not say."""
        return dict(self.ending) if self.ending and pid == self.leader else None

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

    def resolve(self, sess, addr, modules=None):
        """Name of the function at ``addr`` in session ``sess`` (None: no session); the module
        that holds it is added to the set ``modules``."""
        if sess is None:
            return f"0x{addr:x}"
        k = bisect_right(sess.ranges, (addr, float("inf"), "")) - 1
        if k < 0 or not (sess.ranges[k][0] <= addr < sess.ranges[k][1]):
            return f"0x{addr:x}"
        module = sess.ranges[k][2]
        if modules is not None:
            modules.add(module)
        base = sess.bases.get(module, sess.ranges[k][0])
        tab = self.symtab(module)
        if tab is not None:
            tries = (addr - base, addr) if tab.relative else (addr, addr - base)
            for off in tries:
                name = tab.lookup(off)
                if name is not None:
                    return name
        return f"{os.path.basename(module)}+0x{addr - base:x}"


_EXIT_FINISHED = 1 << 16           # uftrace's "terminated by finish trigger": no status


def _ending(text):
    """``Trace.ending`` from the info file's ``exit_status`` (a wait status, as uftrace
    writes it): {"how": "exit", "code": n} or {"how": "signal", "signal": "SIGSEGV"}."""
    try:
        status = int(str(text).strip())
    except ValueError:
        return None
    if status < 0 or status >= _EXIT_FINISHED:
        return None
    if status & 0x7F == 0:
        return {"how": "exit", "code": (status >> 8) & 0xFF}
    if status & 0x7F != 0x7F:                    # 0x7f: stopped, not ended
        number = status & 0x7F
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return {"how": "signal", "signal": name}
    return None


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
