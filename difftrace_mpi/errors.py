"""User-facing errors.

Anything a user can cause (bad trace files, bad options, mismatched runs) raises a
subclass of DiffTraceError; the CLI prints its message and exits non-zero, never a traceback.
"""


class DiffTraceError(Exception):
    """An error caused by input or options; the message is meant for the user."""


class TraceFormatError(DiffTraceError):
    """A trace file that cannot be read; names the file and, where known, the byte offset."""

    def __init__(self, path, message, offset=None):
        self.path = str(path)
        self.offset = offset
        where = self.path if offset is None else f"{self.path} (byte {offset})"
        super().__init__(f"{where}: {message}")


class LatticeTooLarge(DiffTraceError):
    """The concept lattice would exceed the configured concept cap."""
