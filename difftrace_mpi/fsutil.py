"""Atomic file output (everything the tool writes appears complete or not at all), and
how directory entries are named in messages."""
import os
import stat
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


def shown_names(names, limit=5, width=40):
    """A few file names for a one-line message: ``a, b, c and 99997 more``.  Each name is
    cut to ``width`` characters and control characters are escaped, so the line stays short
    and one line whatever the names are."""
    names = list(names)
    out = []
    for n in names[:limit]:
        if not n.isprintable():
            n = n.encode("unicode_escape").decode("ascii")
        out.append(n if len(n) <= width else n[: width - 3] + "...")
    more = len(names) - len(out)
    return ", ".join(out) + (f" and {more} more" if more > 0 else "")


def describe_entry(path):
    """What a directory entry that is not a regular file is, in words ("a directory",
    "a broken symbolic link (to X)", "a FIFO", ...)."""
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if os.path.islink(path):
            try:
                return f"a broken symbolic link (to {os.readlink(path)}: {exc.strerror or exc})"
            except OSError:
                return "a broken symbolic link"
        return f"not readable ({exc.strerror or exc})"
    for test, words in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return words
    return "not a regular file"
