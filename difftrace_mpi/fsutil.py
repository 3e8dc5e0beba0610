"""Atomic, no-clobber file output (everything the tool writes appears complete or not at
all, and never replaces a file unless asked), and how directory entries are named in
messages."""
import errno
import os
import stat
import tempfile
from contextlib import contextmanager

from .errors import DiffTraceError

# The mode new files get: mkstemp makes 0600 files, published files get what open() would
# give under the umask.  Read once, at import (os.umask can only be read by setting it).
_UMASK = os.umask(0o022)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK

# Temporary files being written, and how many writes are under way: a signal handler
# (engine.choreography) removes them and ends the process at once rather than raise an
# exception that h5py or a finaliser might swallow.
_pending = set()
_writing = [0]

_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _exists(path):
    """The one error for an output that would replace a file without force (the file
    appeared after the outputs were checked, or a writer was called without force)."""
    return DiffTraceError(f"{path} exists; not overwritten without --force (force=True in the API)")


def write_error(path, exc):
    """One clear DiffTraceError for an OSError met writing ``path``."""
    if getattr(exc, "errno", None) in _DISK_FULL:
        return DiffTraceError(f"disk full writing {path}")
    return DiffTraceError(f"cannot write {path}: {getattr(exc, 'strerror', None) or exc}")


def writing():
    """True while an output file is being built or written."""
    return _writing[0] > 0


def discard_temp_files():
    """Remove every temporary file still being written (from a signal handler)."""
    for tmp in list(_pending):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        _pending.discard(tmp)


@contextmanager
def output_section():
    """Marks building an output: a signal in it ends the process at once (no exception to
    be swallowed half-way through a library call), after removing the temp files."""
    _writing[0] += 1
    try:
        yield
    finally:
        _writing[0] -= 1


def not_replaceable(path):
    """Why an output may not replace what is at ``path`` even with ``--force`` (one line),
    or None: nothing is there, or a regular file.  ``--force`` replaces regular files only:
    never a FIFO, a device node (as root, /dev/full itself), a socket, a directory or a
    symbolic link (replacing the link would not write where it points)."""
    path = os.fspath(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot check {path}: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return None
    return f"{path} is {describe_node(path)}, not a regular file; --force (force=True) replaces regular files only"


def _refuse_special(path):
    problem = not_replaceable(path)
    if problem:
        raise DiffTraceError(problem)


def publish(tmp, path, force=False):
    """Give the complete temporary file ``tmp`` its name ``path``.  Without ``force`` this is
    no-clobber in one step (a hard link fails if ``path`` exists, so of two writers one
    wins and the other is told); with ``force`` an atomic replace, of a regular file only
    (checked again here: a FIFO may have been made since the command checked)."""
    if force:
        _refuse_special(path)
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise _exists(path) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        # a file system without hard links: check, then rename (a small race remains)
        if os.path.lexists(path):
            raise _exists(path) from None
        os.rename(tmp, path)
        return
    os.unlink(tmp)


@contextmanager
def atomic_path(path, force=False):
    """Yield a temporary path beside ``path``; on success it is published as ``path`` with
    the umask's mode (no-clobber unless ``force``), on any failure it is removed.  OS
    errors become one clear DiffTraceError ("disk full writing X" for ENOSPC)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise DiffTraceError(f"cannot write {path}: directory {directory} does not exist")
    _refuse_special(path)
    if not force and os.path.lexists(path):
        raise _exists(path)
    with output_section():
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
        except OSError as exc:
            raise write_error(path, exc) from None
        _pending.add(tmp)
        try:
            os.fchmod(fd, FILE_MODE)
            os.close(fd)
            yield tmp
            publish(tmp, path, force)
        except OSError as exc:
            raise write_error(path, exc) from None
        finally:
            _pending.discard(tmp)
            if os.path.exists(tmp):
                os.unlink(tmp)


class KeepFirstWriteError:
    """A binary file object for a library that writes through it (h5py's fileobj driver):
    the first OSError of a write (a full disk) is kept and later writes are dropped, so the
    library never meets the error half-way (HDF5 then crashes or prints pages of
    tracebacks); ``raise_error()`` raises it once the library is done."""

    def __init__(self, fh):
        self.fh, self.error = fh, None

    def write(self, data):
        if self.error is None:
            try:
                return self.fh.write(data)
            except OSError as exc:
                self.error = exc
        return len(data)

    def raise_error(self):
        if self.error is not None:
            raise self.error

    def __getattr__(self, name):        # read, seek, tell, truncate, flush
        return getattr(self.fh, name)


def write_bytes_atomic(path, data, force=False):
    """Write ``data`` to ``path`` atomically (see atomic_path), with plain writes so that a
    full disk is one OSError, and synced before it is published."""
    with atomic_path(path, force) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)


def write_text_atomic(path, text, force=False):
    """Write ``text`` (UTF-8, '\\n' line ends) to ``path`` atomically, no-clobber unless
    ``force``."""
    write_bytes_atomic(path, text.encode("utf-8"), force)


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


def describe_node(path):
    """What is at ``path`` itself (a symbolic link is not followed), in words: "a symbolic
    link (to X)", "a FIFO (named pipe)", "a character device", ..."""
    path = os.fspath(path)
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return f"not readable ({exc.strerror or exc})"
    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link (to {shown_names([os.readlink(path)], width=80)})"
        except OSError:
            return "a symbolic link"
    return describe_entry(path)


def check_regular_file(path, noun):
    """DiffTraceError unless ``path`` is a regular file (a ``noun``: "results file"),
    checked before a library opens it: opening a FIFO blocks forever (HDF5 holds the
    interpreter meanwhile), a loop of symbolic links is a RuntimeError deep in h5py."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DiffTraceError(f"{path}: no such {noun}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DiffTraceError(f"{path}: cannot open the {noun}: a loop of symbolic links "
                                 f"({exc.strerror})") from None
        raise DiffTraceError(f"{path}: cannot open the {noun}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise DiffTraceError(f"{path}: the {noun} is {describe_entry(path)}, not a regular file")


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


def read_whole_file(path):
    """The bytes of a regular file, through os.read: 2.5x faster than Path.read_bytes on
    small files (no buffered reader, no path object), which counts with 65k trace files."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)     # a FIFO must not block the open
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, f"it is {describe_entry(path)}, not a regular file")
        chunks = []
        want = os.fstat(fd).st_size + 1          # + 1: a file growing under us is read on
        while True:
            chunk = os.read(fd, max(want, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            want = 0
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
