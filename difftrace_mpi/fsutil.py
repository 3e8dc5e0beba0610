"""Atomic file output: everything the tool writes appears complete or not at all."""
import os
import tempfile
from contextlib import contextmanager

from .errors import DiffTraceError


@contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path``; on success it is renamed over ``path``, on
    any failure it is removed.  OS errors become one clear DiffTraceError."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise DiffTraceError(f"cannot write {path}: directory {directory} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    except OSError as exc:
        raise DiffTraceError(f"cannot write {path}: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise DiffTraceError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text_atomic(path, text):
    """Write ``text`` (UTF-8, '\\n' line ends) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
