"""The ``.end`` record of a ParLOT process: how it ended (functional core of the reader).

Our tracer writes ``<prefix>.<pid>.end`` (``key=value`` lines: how, code, signal, thread,
call, error, time_ns, mpi_calls, the MPI objects still open, the leaf list's counts, the
automatic leaves' counts, the processes spawned) when the process ends; :mod:`.parlot` gives it to every thread of the
process as ``Trace.ending``.
"""
import os
import re
import stat
from pathlib import Path

from ..fsutil import read_whole_file

END_HOWS = ("finalized", "exit", "signal", "mpi_error", "abort")
# MPI objects still open at the end (the generated wrappers count them), one key per kind
END_OPEN_KEYS = tuple(f"open_{k}" for k in ("requests", "comms", "groups", "types", "wins", "ops", "infos", "files",
                                            "errhandlers"))
# the tracer's leaf list (parlot-run -l): listed functions counted, not traced
END_LEAF_KEYS = ("leaf_functions", "leaf_calls")
# the tracer's automatic leaves (its default): threshold, functions counted, their calls left out
END_AUTO_KEYS = ("auto_leaves", "auto_leaf_functions", "auto_leaf_calls")
# processes this one started with MPI_Comm_spawn(_multiple), which the tracer does not trace
END_SPAWN_KEYS = ("spawned",)
END_INT_KEYS = ("code", "thread", "time_ns", "mpi_calls") + END_OPEN_KEYS + END_LEAF_KEYS + END_AUTO_KEYS + \
    END_SPAWN_KEYS
LEAF_NOTE = ("traced with a leaf list (parlot-run -l): calls of the listed tiny functions were counted, not "
             "recorded (leaf_calls in the .end records); compare only runs traced with the same list")
SPAWN_NOTE = ("started processes with MPI_Comm_spawn (spawned in the .end records): the spawned processes were "
              "not traced, so what they did is not in this analysis")
END_STR_KEYS = ("how", "signal", "call", "error")
END_MAX_BYTES = 64 * 1024             # the tracer writes a few hundred bytes
_END_INT_RE = re.compile(r"^-?[0-9]+$")
_END_INT_RANGE = (-2 ** 63, 2 ** 63 - 1)    # stored as int64 (the results file's /endings)


def end_path_for(info_path):
    """``<prefix>.<pid>.info`` -> ``<prefix>.<pid>.end``."""
    return str(info_path)[: -len(".info")] + ".end"


def parse_end(text):
    """The ``key=value`` lines of a ``.end`` record as a dict (known keys only; code, thread,
    time_ns and mpi_calls as int).  Raises ValueError naming the first problem."""
    out = {}
    for i, line in enumerate(text.split("\n"), 1):
        if line.endswith("\r"):
            line = line[:-1]
        if not line.strip():
            continue
        key, eq, value = line.partition("=")
        if not eq or not key or key != key.strip():
            raise ValueError(f"line {i} is not key=value: {line[:60]!r}")
        if key not in END_INT_KEYS and key not in END_STR_KEYS:
            continue                                   # a newer tracer's key
        if key in out:
            raise ValueError(f"line {i}: {key} given twice")
        if key in END_INT_KEYS:
            if not _END_INT_RE.match(value):
                raise ValueError(f"line {i}: {key} is not an integer: {value[:40]!r}")
            number = int(value) if len(value.lstrip("-").lstrip("0")) <= 19 else None
            if number is None or not _END_INT_RANGE[0] <= number <= _END_INT_RANGE[1]:
                raise ValueError(f"line {i}: {key} is out of range (a 64-bit integer): "
                                 f"{value[:40]}{'...' if len(value) > 40 else ''}")
            out[key] = number
        else:
            out[key] = value
    if "how" not in out:
        raise ValueError("no how= line")
    if out["how"] not in END_HOWS:
        raise ValueError(f"unknown how={out['how'][:40]!r} (expected one of {', '.join(END_HOWS)})")
    return out


def read_end(path):
    """How a process ended: ``(dict or None, note or None)`` from ``<prefix>.<pid>.end``.

    A missing file gives ``(None, None)`` (a process killed by SIGKILL, or traced by a tool
    that does not write one); an unreadable, oversized (> END_MAX_BYTES) or malformed one
    ``(None, note)``.  Never raises for the file's contents."""
    name = os.path.basename(str(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"{name}: cannot read the end record: {e.strerror or e}; how the process ended is unknown"
    if not stat.S_ISREG(st.st_mode):
        return None, f"{name}: the end record is not a regular file; how the process ended is unknown"
    if st.st_size > END_MAX_BYTES:
        return None, (f"{name}: end record of {st.st_size} bytes (more than {END_MAX_BYTES}) ignored; "
                      f"how the process ended is unknown")
    try:
        raw = read_whole_file(path)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"{name}: cannot read the end record: {e.strerror or e}; how the process ended is unknown"
    if len(raw) > END_MAX_BYTES:
        return None, (f"{name}: end record of more than {END_MAX_BYTES} bytes ignored; "
                      f"how the process ended is unknown")
    try:
        return parse_end(raw.decode("utf-8", errors="replace")), None
    except ValueError as e:
        return None, f"{name}: malformed end record ({e}); how the process ended is unknown"


def write_end(path, ending):
    """Write a ``.end`` record (``{key: value}``, in the tracer's key order); the inverse of
    :func:`read_end` for the known keys."""
    order = ("how", "code", "signal", "thread", "call", "error", "time_ns", "mpi_calls")
    keys = [k for k in order if k in ending] + [k for k in ending if k not in order]
    lines = []
    for k in keys:
        v = str(ending[k])
        if "\n" in v or "\n" in k or "=" in k:
            raise ValueError(f"{k}={v!r}: keys and values are one line, keys without '='")
        lines.append(f"{k}={v}\n")
    Path(path).write_bytes("".join(lines).encode("utf-8", errors="surrogateescape"))
