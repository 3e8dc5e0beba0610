"""``python -m difftrace_mpi``: see difftrace_mpi.cli."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
