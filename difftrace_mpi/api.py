"""The Python API, for scripts and notebooks: ``analyze`` two runs, ``load`` a results file.

Both give a :class:`difftrace_mpi.results.Results`, the object the command line prints
from: its ``verdict``, its tables (``ranking_table()``, ``suspects_table()``,
``culprits_table()``, ``divergence_table()``, ``hang_table()``: pandas DataFrames when
pandas is installed, else lists of dicts) and the diffNLR of any trace
(``diffnlr(rank, thread)``, a :class:`DiffNLR`).  ``analyze`` runs the same steps as
``python -m difftrace_mpi analyze`` (the same engine, notes and results file), without
the printing.  docs/api.md has the whole picture.
"""
from . import config
from .config import DIFF_CONTEXT, DIFF_MAX_LINES
from .errors import DiffTraceError
from .results import as_table

__all__ = ["analyze", "load", "DiffNLR", "DiffTraceError"]


def analyze(normal, faulty, *, also_normal=(), filters=None, k=None, attributes=None, linkage=None, custom=None,
            top=config.TOP, arguments=True, lattices=True, max_concepts=config.MAX_CONCEPTS,
            full_jsm_limit=config.FULL_LIMIT, row_block_min=config.ROW_BLOCK_MIN,
            timing_ratio=config.TIMING_MIN_RATIO, timing_clock=config.TIMING_CLOCK,
            memory_budget=None, out=None, force=False, progress=False):
    """Compare a normal run with a faulty run, as ``difftrace-mpi analyze`` does.

    Parameters
    ----------
    normal, faulty : str or path-like
        Directories of the normal (good) and the faulty (bad) run's traces (ParLOT,
        uftrace, OTF2 or text format).  ``normal`` None: the faulty run is analysed
        alone, its own ranks and time steps as the norm (``analyze FAULTY_DIR``; the
        grid settings do not apply, and ``also_normal`` must be empty).
    also_normal : sequence of str, optional
        More normal runs of the same program (``--also-normal``): where normal runs
        differ from each other, a faulty trace that differs the same way is noise.
    filters : sequence of str, optional
        Filter specs of the grid, e.g. ``["11.mpi", "11.every"]`` (the default).
    k : sequence of int, optional
        NLR bounds, the longest loop body recognised (default ``[10]``).
    attributes : sequence of str, optional
        Attribute modes, e.g. ``["sing.noFreq", "doub.log10"]`` (default: the four of
        the command line).
    linkage : sequence of str, optional
        SciPy linkage methods (default ``["ward", "average", "complete", "single"]``).
    custom : str, optional
        Regular expression of the ``cust`` filter class.
    top : int, default 5
        Suspects kept per ranking row.
    arguments : bool, default True
        False compares plain call names, the MPI arguments the tracer records in event
        names stripped (``--no-arguments``).
    lattices : bool, default True
        False skips the concept lattices (``--no-lattice``).
    max_concepts, full_jsm_limit, row_block_min, timing_ratio, timing_clock
        As ``--max-concepts``, ``--full-jsm-limit``, ``--row-block-min``,
        ``--timing-ratio`` and ``--timing-clock``.
    memory_budget : int or str, optional
        Most memory each process may use to read traces, in bytes or as ``"8G"``
        (``--memory-budget``); None keeps the current budget (default: half of the
        memory available, or DIFFTRACE_MEMORY_BUDGET).  It holds for the whole process.
    out : str or path-like, optional
        Also write the results to this HDF5 file (``--out``; read it back with
        :func:`load`).
    force : bool, default False
        Replace ``out`` if it exists.
    progress : bool, default False
        Print the steps as they run, on stderr.

    Returns
    -------
    Results or None
        The results (``r.verdict``, ``r.ranking_table()``, ``r.diffnlr(rank)``, ...).
        Under ``mpiexec`` every rank must call it (it is collective): rank 0 gets the
        results, the other ranks None.

    Raises
    ------
    DiffTraceError
        For a user error (a missing run, a bad option value, an output that exists),
        with a one-line message.

    Examples
    --------
    >>> import difftrace_mpi
    >>> r = difftrace_mpi.analyze("examples/traces/oddeven/normal",
    ...                           "examples/traces/oddeven/swapbug")     # doctest: +SKIP
    >>> r.verdict["kind"]                                                # doctest: +SKIP
    'changed'
    >>> r.ranking_table().head(3)                                        # doctest: +SKIP
    >>> print(r.diffnlr(5).text())                                       # doctest: +SKIP
    """
    from .jobs import make_grid, run_analysis
    grid = make_grid(filters, k, attributes, linkage, custom)
    return run_analysis(normal, faulty, grid, also_normal=also_normal, top=top, arguments=arguments,
                        lattices=lattices, max_concepts=max_concepts, full_limit=full_jsm_limit,
                        row_block_min=row_block_min, timing_ratio=timing_ratio, timing_clock=timing_clock,
                        memory_budget=memory_budget, out=out, force=force, progress=progress)


def load(path):
    """Open a results file written by ``difftrace-mpi analyze --out`` (or ``analyze(out=...)``).

    Parameters
    ----------
    path : str or path-like
        The HDF5 results file.

    Returns
    -------
    Results
        The same object :func:`analyze` returns.  Large matrices and lattices load on
        first use from the file, which stays open until ``close()``: use it in a
        ``with`` block.

    Raises
    ------
    DiffTraceError
        When the file is missing, not a results file, of another layout version, or
        damaged.

    Examples
    --------
    >>> import difftrace_mpi
    >>> with difftrace_mpi.load("diff.h5") as r:                 # doctest: +SKIP
    ...     print(r.verdict["summary"])
    ...     table = r.ranking_table()
    """
    from . import store
    return store.read(path)


class DiffNLR:
    """The diffNLR of one trace: its NLR in the normal run against the faulty run.

    Made by ``Results.diffnlr(rank, thread)``.  In a notebook it shows as HTML; ``str()``
    is the bounded text the command line prints.

    Attributes
    ----------
    key : tuple of int
        (rank, thread) of the trace.
    combo : str
        The (filter, K) setting of the NLRs, e.g. ``"11.mpi.K10"``.
    blocks : list of difftrace_mpi.stages.diff.Block
        The diff: ``common``, ``normal``-only and ``faulty``-only blocks of tokens.
    loop_bodies : dict
        ``{"L3": tokens}`` for every loop the two NLRs use.

    Examples
    --------
    >>> d = r.diffnlr(5)                        # doctest: +SKIP
    >>> d.summary                               # doctest: +SKIP
    'The traces agree for 3 tokens, ...'
    >>> print(d.text(max_lines=None))           # doctest: +SKIP
    >>> open("rank5.svg", "w").write(d.svg())   # doctest: +SKIP
    """

    def __init__(self, key, combo, blocks, loop_bodies):
        self.key, self.combo, self.blocks, self.loop_bodies = tuple(key), combo, blocks, loop_bodies

    @property
    def title(self):
        return f"rank {self.key[0]} thread {self.key[1]} ({self.combo})"

    @property
    def summary(self):
        """One or two sentences on where the faulty trace leaves the normal one."""
        from .stages.diff import summarize
        return summarize(self.blocks)

    @property
    def approximate(self):
        """True when a bound cut the exact diff short (still a correct diff)."""
        return bool(getattr(self.blocks, "approximate", False))

    def text(self, color=False, context=DIFF_CONTEXT, max_lines=DIFF_MAX_LINES):
        """The text the command line prints: ``max_lines`` bounds it (None: every
        token); ``context`` tokens are kept next to each change; ``color`` adds ANSI
        colours."""
        from .views.diffnlr import render_text
        return render_text(self.blocks, self.loop_bodies, color=color, title=self.title, context=context,
                           max_lines=max_lines)

    def html(self, page=False):
        """An HTML fragment (``page``: a whole page, as ``diffnlr --html`` writes)."""
        from .views.diffnlr import render_html, render_html_page
        return (render_html_page if page else render_html)(self.blocks, self.loop_bodies, title=self.title,
                                                           context=DIFF_CONTEXT)

    def svg(self):
        """A standalone SVG picture, as ``diffnlr --svg`` writes."""
        from .views.diffnlr import render_svg
        return render_svg(self.blocks, self.loop_bodies, title=self.title, context=DIFF_CONTEXT)

    def table(self, as_frame=None):
        """The blocks as a table: ``kind``, where they start in each NLR, their tokens."""
        from .stages.diff import format_token
        return as_table([{"kind": b.kind, "normal_start": b.normal_start, "faulty_start": b.faulty_start,
                          "tokens": " ".join(format_token(t) for t in b.tokens), "length": len(b)}
                         for b in self.blocks], ("kind", "normal_start", "faulty_start", "tokens", "length"),
                        as_frame)

    def __str__(self):
        return self.text()

    def __repr__(self):
        return f"<DiffNLR {self.title}: {len(self.blocks)} blocks>"

    def _repr_html_(self):
        return self.html()
