"""The one results model: what the analysis produces, what the store writes and reads back,
and all that the views and the CLI read.

``data``: the ``Results`` (made once, on the root, by ``engine.assembly.make_results``, or
by ``store.read``), its ``Combo`` and ``Setting`` parts, and their lookups; ``tables``: the
same as pandas DataFrames and plain data (JSON); ``notebook``: as HTML.  ``store.write``
saves a Results and ``store.read`` gives back the same types (large matrices and lattices
load on first use), so the text output, the HTML report and the commands on a results
file share one code path.  Objects are thread-level traces ``(rank, thread)`` in sorted
order; run 0 is the normal run, run 1 the faulty one.
"""
from .data import DAMAGE_ERRORS, Combo, LatticeRef, Results, Setting, damaged
from .tables import as_table, events_frame, pandas_module

__all__ = ["DAMAGE_ERRORS", "Combo", "LatticeRef", "Results", "Setting", "damaged", "as_table", "events_frame",
           "pandas_module"]
