"""The plain text trace format: one directory per run, one file per (rank, thread).

A run is a directory of files named ``r<rank>.t<thread>.txt`` (``r5.t0.txt``).  Each file
is one trace, one event per line, in one of two styles, decided per file:

* entry-only: one function name per line, in call order;
* entry/exit: ``> name`` for an entry, ``< name`` for the matching exit (return).

A file is in entry/exit style as soon as any event line starts with ``"> "`` or ``"< "``;
every event line of such a file must then have one of those two forms.  Blank lines
(empty or whitespace only) and lines whose first character is ``#`` are ignored; the
comment ``# incomplete`` marks a trace whose run was killed (``Trace.complete`` is False).

Names are kept verbatim: only the line terminator (``\\n``, or ``\\r\\n``) and, in
entry/exit style, the two-character prefix are removed, so names may hold spaces,
unicode, ``>`` or ``#`` (after the prefix).  Files are UTF-8 (a leading BOM is accepted).
"""
import codecs
import os
import re
import stat

import numpy as np

from . import budget
from .base import Format
from ..errors import DiffTraceError, TraceFormatError
from ..kernels import textread as _kernel
from ..fsutil import describe_entry, shown_names, write_text_atomic
from ..model import RETURN_NAME, RunIndex, Trace, TraceRef
from ..naming import shorten

__all__ = [
    "STYLES", "TRACE_FILE_RE", "FORMAT", "trace_file_name", "parse_trace_file_name",
    "read_text_trace", "write_text_trace", "write_text_run",
]

#: Accepted values of ``style`` for the writers ("entryonly" is an alias of "entry").
STYLES = ("entryexit", "entry")
_STYLE_ALIASES = {"entryexit": "entryexit", "entry": "entry", "entryonly": "entry"}

#: File names of a text run; ranks and threads are ASCII decimal numbers.
TRACE_FILE_RE = re.compile(r"^r([0-9]+)\.t([0-9]+)\.txt$")
_NAMING = "r<rank>.t<thread>.txt"

_ENTER = "> "
_EXIT = "< "
_MAX_OPEN_SHOWN = 10
# Bytes the tokeniser may hold per line, on top of the file's bytes, at most: its int32
# event, a name table entry (span and hash, 24) with its hash slots (at least two of 4
# bytes) and an open-call stack entry (12), the tables twice that while they double
_BYTES_PER_LINE = 96
# Bytes held per distinct name once decoded (a str object and an array slot), plus its length
_BYTES_PER_NAME = 64


def trace_file_name(rank, thread):
    """The file name of trace (rank, thread) in a text run: ``r5.t0.txt``."""
    return f"r{int(rank)}.t{int(thread)}.txt"


def parse_trace_file_name(name):
    """(rank, thread) for a file name of a text run, or None when it does not follow the naming."""
    m = TRACE_FILE_RE.match(name)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2))


# ----------------------------------------------------------------------------- reading

def _is_incomplete_marker(comment):
    """True for ``# incomplete`` (optionally followed by ``:`` or whitespace and a reason)."""
    body = comment[1:].strip()
    if not body.lower().startswith("incomplete"):
        return False
    rest = body[len("incomplete"):]
    return rest == "" or rest[0] in ": \t"


def _describe_open(stack_names):
    n = len(stack_names)
    if n > _MAX_OPEN_SHOWN:
        head, tail = stack_names[:2], stack_names[-(_MAX_OPEN_SHOWN - 3):]
        chain = " > ".join(head) + f" > ... ({n - len(head) - len(tail)} more) > " + " > ".join(tail)
    else:
        chain = " > ".join(stack_names)
    return f"{n} call{'s' if n != 1 else ''} still open at the end: {chain}"


def _check_utf8(path, data, start):
    """A decode error names the line and byte offset (Python's decoder words the reason)."""
    bad = _kernel.utf8_error_at(data, start)
    if bad < 0:
        return
    try:
        bytes(data[bad:bad + 4]).decode("utf-8")
        reason = "invalid data"             # not reached: the kernel and the decoder agree
    except UnicodeDecodeError as exc:
        reason = exc.reason
    raise TraceFormatError(path, f"line {_kernel.count_lines(data[:bad])}: not valid UTF-8 ({reason})",
                           offset=bad)


# The buffer of the last file read, reused for the next one: a fresh buffer of a large
# file costs more in page faults than reading it does.  Only buffers up to this size are
# kept between reads.
_KEEP_BUFFER = 64 << 20
_buffer = None


def _read_file(path):
    """(buffer, memoryview of the file's bytes in it); give the buffer back with
    :func:`_done_with` once nothing refers to the view."""
    global _buffer
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)     # a FIFO must not block the open
        with open(fd, "rb", buffering=0) as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise TraceFormatError(path, f"trace file is {describe_entry(path)}, not a regular file")
            size = st.st_size
            buf, _buffer = _buffer, None
            if buf is None or len(buf) < size:
                buf = None
                budget.check(path, size, "reading it")
                buf = bytearray(size)
            view = memoryview(buf)
            got = 0
            while got < size:                # a file that shrank since: what is there
                n = fh.readinto(view[got:size])
                if not n:
                    break
                got += n
            return buf, view[:got]
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read trace file: {exc.strerror or exc}") from None


def _unterminated_line(buf, data, start):
    """(where it starts, its text) of the file's last line when it is an event line without
    its line end (``buf``: the bytearray under ``data``), else None (a file that ends with a
    line end, or a last line that is blank or a comment, as the tokeniser reads them)."""
    n = len(data)
    if n <= start or data[n - 1] == 0x0A:
        return None
    last = max(buf.rfind(b"\n", start, n) + 1, start)
    line = str(data[last:n], "utf-8", errors="replace")
    return (last, line) if is_event_line(line) else None


def is_event_line(line):
    """Whether a line (without its line end) is an event: not blank, not a comment."""
    line = line[:-1] if line.endswith("\r") else line
    return bool(line.strip()) and not line.startswith("#")


def cut_line_note(line):
    """The note of a trace whose last line, ``line``, came without its line end."""
    return (f"its last line has no line end ({shorten(line, 40)!r}): the file was cut mid-line (its run killed "
            f"while writing it); read as cut before that line")


def _done_with(buf):
    global _buffer
    if len(buf) <= _KEEP_BUFFER and (_buffer is None or len(_buffer) < len(buf)):
        _buffer = buf


def _format_error(path, data, tok):
    """The message of the first problem the tokeniser met."""
    line = tok.err_line
    text = str(data[tok.err_start:tok.err_end], "utf-8")
    if tok.status == _kernel.RESERVED:
        return TraceFormatError(path, f"line {line}: the function name {text!r} is reserved")
    if tok.status == _kernel.EMPTY:
        return TraceFormatError(path, f"line {line}: empty function name")
    if tok.status == _kernel.NEITHER:
        return TraceFormatError(path, f"line {line}: {text!r} is neither '> name' nor '< name', but the "
                                      f"file is in entry/exit style (line {tok.entry_exit_at} is)")
    if tok.status == _kernel.NONE_OPEN:
        return TraceFormatError(path, f"line {line}: exit from {text!r} but no call is open")
    open_name = tok.names(RETURN_NAME)[tok.err_open_id]
    return TraceFormatError(path, f"line {line}: exit from {text!r} does not match the innermost "
                                  f"open call {open_name!r} (entered at line {tok.err_open_line})")


def read_text_trace(path, rank=None, thread=None):
    """Read one text trace file into a :class:`model.Trace`.

    ``rank`` and ``thread`` default to the numbers in the file name (0 when the name does
    not follow ``r<rank>.t<thread>.txt``).  The local name table is RETURN_NAME at index 0,
    then the distinct names in order of first appearance; events are int32, the name id on
    entry and 0 on exit.  Raises TraceFormatError (naming the file and line) for bad UTF-8,
    a mix of styles, or, in entry/exit style, an exit that does not match the innermost open
    call.  Calls still open at the end are allowed and described in ``Trace.notes``.

    The lines are read by the kernel :mod:`..kernels.textread` in one pass over the bytes.
    """
    path = os.fspath(path)
    if rank is None or thread is None:
        parsed = parse_trace_file_name(os.path.basename(path)) or (0, 0)
        rank = parsed[0] if rank is None else rank
        thread = parsed[1] if thread is None else thread
    buf, data = _read_file(path)
    tok = None
    try:
        start = len(codecs.BOM_UTF8) if data[:3] == codecs.BOM_UTF8 else 0
        lines = _kernel.count_lines(data, start)
        budget.check(path, _BYTES_PER_LINE * lines, "parsing it")
        _check_utf8(path, data, start)
        events = np.empty(lines, dtype=np.int32)
        tok = _kernel.tokenize(data, start, events, _RESERVED, _is_blank, _is_marker)
        unterminated, cut = _unterminated_line(buf, data, start), None
        if unterminated is not None and (tok.status != _kernel.OK or not unterminated[1].startswith(_EXIT)):
            # the last line lacks its line end: the file was cut mid-line (its writer killed),
            # unless that line is an exit that closes the innermost open call (then whole)
            retry = _kernel.tokenize(data[:unterminated[0]], start, events, _RESERVED, _is_blank, _is_marker)
            if retry.status == _kernel.OK:
                tok, cut = retry, unterminated[1]
        if tok.status != _kernel.OK:
            raise _format_error(path, data, tok)
        # decoded, each distinct name is a str object and a slot of the names array
        budget.check(path, _BYTES_PER_NAME * tok.name_count + tok.name_bytes, "decoding its function names")
        names = tok.names(RETURN_NAME)
        count, complete, returns = tok.count, tok.complete and cut is None, tok.entry_exit_at != 0
        still_open = [names[i] for i in tok.open_calls()]
    finally:
        tok = data = None                   # the views of the buffer, before it is reused
        _done_with(buf)
    events.resize(count, refcheck=False)                # shrink in place: no copy
    notes = []
    if still_open:
        notes.append(_describe_open(still_open))
    if cut is not None:
        notes.append(cut_line_note(cut))
    elif not complete:
        notes.append("trace marked '# incomplete' (its run was killed or cut short)")
    return Trace(rank=int(rank), thread=int(thread), names=names, events=events,
                 source=path, complete=complete, notes=notes, returns=returns)


_RESERVED = RETURN_NAME.encode("utf-8")


def _is_blank(line):
    return str(line, "utf-8").isspace()


def _is_marker(line):
    return _is_incomplete_marker(str(line, "utf-8"))


# ----------------------------------------------------------------------------- discovery

def _detect(path, listing):
    count = sum(1 for name in listing if TRACE_FILE_RE.match(name))
    return f"{count} {_NAMING} file{'s' if count != 1 else ''}" if count else None


def _discover(path, listing):
    """The traces of a text run: every entry named ``r<rank>.t<thread>.txt``, which must be
    a regular file; other entries are listed in a note."""
    traces = sorted(name for name in listing if TRACE_FILE_RE.match(name))
    others = sorted(name for name in listing if not TRACE_FILE_RE.match(name))
    notes = [f"read as a text-format run; other files ignored: {shown_names(others)}"] if others else []
    refs, seen = [], {}
    prefix = os.path.join(path, "")
    for name in traces:
        key = parse_trace_file_name(name)
        if key in seen:
            raise DiffTraceError(f"{path}: {seen[key]} and {name} are both rank {key[0]} thread {key[1]}")
        seen[key] = name
        full = prefix + name
        if listing[name] != "file":
            raise TraceFormatError(full, f"named like a text trace but is {describe_entry(full)}")
        try:
            size = os.path.getsize(full)
        except OSError as exc:
            raise TraceFormatError(full, f"cannot read trace file: {exc.strerror or exc}") from None
        refs.append(TraceRef(key[0], key[1], full, "", size, "text"))
    refs.sort(key=lambda r: (r.rank, r.thread))
    return RunIndex(path, "text", refs, "filename", notes)


FORMAT = Format(
    name="text", title="text", expected=f"text traces {_NAMING}",
    detect=_detect, discover=_discover,
    load=lambda ref, cache: read_text_trace(ref.path, ref.rank, ref.thread),
    recognises=lambda path: os.fspath(path).endswith(".txt"), load_file=read_text_trace)


# ----------------------------------------------------------------------------- writing

def _check_name(name, style):
    if not isinstance(name, str):
        raise DiffTraceError(f"function name {name!r} is not a string")
    if name == "" or "\n" in name or "\r" in name:
        raise DiffTraceError(f"function name {name!r} cannot be written to a text trace "
                             f"(empty, or holds a line break)")
    if style == "entry":
        if (not name.strip() or name[0] == "#" or name.startswith(_ENTER)
                or name.startswith(_EXIT)):
            raise DiffTraceError(f"function name {name!r} cannot be written in entry-only style "
                                 f"(it would read back as a comment, blank or entry/exit line); "
                                 f"use style='entryexit'")


def _format_lines(names, events, style, complete, comments):
    names = list(names)
    out = []
    if not complete:
        out.append("# incomplete\n")
    for c in comments:
        for part in str(c).splitlines() or [""]:
            out.append(f"# {part}\n".replace("\r", ""))
    checked = set()
    stack = []
    for k, v in enumerate(np.asarray(events).tolist()):
        if v == 0:
            if style == "entryexit":
                if not stack:
                    raise DiffTraceError(f"event {k}: a return with no call open")
                out.append(_EXIT + stack.pop() + "\n")
            continue
        if not 0 < v < len(names):
            raise DiffTraceError(f"event {k}: name id {v} is outside the name table "
                                 f"(size {len(names)})")
        name = names[v]
        if v not in checked:
            _check_name(name, style)
            if name == RETURN_NAME:
                raise DiffTraceError(f"event {k}: the name {RETURN_NAME!r} is reserved")
            checked.add(v)
        if style == "entryexit":
            stack.append(name)
            out.append(_ENTER + name + "\n")
        else:
            out.append(name + "\n")
    return "".join(out)


def write_text_trace(path, names, events, style="entryexit", complete=True, comments=()):
    """Write one trace (name table + events, 0 = return) as a text trace file, atomically.

    ``style`` is "entryexit" (``> name`` / ``< name`` lines) or "entry" (entries only;
    returns are dropped).  ``complete=False`` writes ``# incomplete`` as the first line;
    each string of ``comments`` becomes a ``# ...`` line after it.  Calls still open at the
    end are written as they are.  Raises DiffTraceError for a name that cannot be written
    in the chosen style, an id outside the table, or (entry/exit) a return with no call open.
    """
    try:
        style = _STYLE_ALIASES[style]
    except (KeyError, TypeError):
        raise ValueError(f"style must be one of {STYLES}, not {style!r}") from None
    write_text_atomic(os.fspath(path), _format_lines(names, events, style, complete, comments), force=True)


def write_text_run(directory, traces, style="entryexit", replace=False):
    """Write :class:`model.Trace` objects as a text run (one ``r<rank>.t<thread>.txt`` each).

    Creates the directory if needed; every file is written atomically.  With ``replace=True``
    other ``r*.t*.txt`` files already in the directory are removed, so it then holds exactly
    this run.  Returns the list of paths written.
    """
    directory = os.fspath(directory)
    traces = list(traces)
    keys = [(int(t.rank), int(t.thread)) for t in traces]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise DiffTraceError(f"two traces are rank {dup[0]} thread {dup[1]}")
    os.makedirs(directory, exist_ok=True)
    written = []
    for t, (rank, thread) in zip(traces, keys):
        p = os.path.join(directory, trace_file_name(rank, thread))
        write_text_trace(p, t.names, t.events, style=style, complete=t.complete)
        written.append(p)
    if replace:
        keep = {os.path.basename(p) for p in written}
        for entry in os.listdir(directory):
            if TRACE_FILE_RE.match(entry) and entry not in keep:
                os.unlink(os.path.join(directory, entry))
    return written
