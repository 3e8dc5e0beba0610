"""The Python API, for scripts and notebooks: ``analyze`` two runs, ``load`` a results file.

Both give a :class:`difftrace_mpi.results.Results`, the object the command line prints
from: its ``verdict``, its tables (``ranking_table()``, ``suspects_table()``,
``culprits_table()``, ``divergence_table()``, ``hang_table()``, ``traces_table()``: pandas
DataFrames), one trace's events (``events(rank, thread)``) and the diffNLR of any trace
(``diffnlr(results, rank, thread)``, a :class:`DiffNLR`).  ``position`` means one thing in
every table: an event's index in its trace as read.  ``analyze`` runs the same steps as
``python -m difftrace_mpi analyze`` (the same engine, notes and results file), without
the printing.  docs/api.md has the whole picture.
"""
from . import config
from .errors import DiffTraceError
from .views.diffnlr import DiffNLR, diffnlr_of

__all__ = ["analyze", "load", "diffnlr", "load_run", "DiffNLR", "DiffTraceError"]


def analyze(normal, faulty, *, also_normal=(), filters=None, k=None, attributes=None, linkage=None, custom=None,
            top=config.TOP, arguments=True, lattices=True, max_concepts=config.MAX_CONCEPTS,
            max_classes=config.MAX_CLASSES, keep_nlrs=config.NLR_KEEP_TOKENS, full_jsm_limit=config.FULL_LIMIT,
            row_block_min=config.ROW_BLOCK_MIN,
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
        Empty or None: none.
    filters : sequence of str, optional
        Filter specs of the grid, e.g. ``["11.mpi", "11.every"]`` (the default).
    k : sequence of int, optional
        NLR bounds, the longest loop body recognised (default ``[10]``).
    attributes : sequence of str, optional
        Attribute modes, e.g. ``["sing.noFreq", "doub.log10"]`` (default: the four of
        the command line).
    linkage : sequence of str, optional
        Linkage methods, as SciPy defines them (default ``["ward", "average", "complete", "single"]``).
    custom : str, optional
        Regular expression of the ``cust`` filter class.
    top : int, default 5
        Suspects kept per ranking row.
    arguments : bool, default True
        False compares plain call names, the MPI arguments the tracer records in event
        names stripped (``--no-arguments``).
    lattices : bool, default True
        False skips the concept lattices (``--no-lattice``).
    max_concepts, max_classes, full_jsm_limit, row_block_min, timing_ratio, timing_clock
        As ``--max-concepts``, ``--max-classes``, ``--full-jsm-limit``, ``--row-block-min``,
        ``--timing-ratio`` and ``--timing-clock``.
    keep_nlrs : int or None, default 4,000,000
        Tokens of whole NLRs the results keep (``--keep-nlrs``): those of the traces the
        verdict and the ranking name first; None keeps every trace's.  ``diffnlr`` of a
        trace whose NLRs were not kept raises DiffTraceError saying so.
    memory_budget : int or str, optional
        Most memory each process may use to read traces, in bytes or as ``"8G"``
        (``--memory-budget``); None keeps the current budget (default: half of the
        memory available, or DIFFTRACE_MEMORY_BUDGET).  It holds for the whole process.
    out : str or path-like, optional
        Also write the results to this HDF5 file (``--out``; read it back with
        :func:`load`).
    force : bool, default False
        Replace ``out`` if it exists.
    progress : bool or "batch", default False
        Print progress on stderr: True, a line per milestone and per step of a second or
        more; "batch", one line every few seconds once the run takes that long (logs).

    Returns
    -------
    Results or None
        The results (``r.verdict``, ``r.ranking_table()``, ...; ``diffnlr(r, rank)``).
        Under ``mpiexec`` every rank must call it (it is collective): rank 0 gets the
        results, the other ranks None.

    Raises
    ------
    DiffTraceError
        For a user error (a missing run, a bad option value, an output that exists),
        with a one-line message.

    Examples
    --------
    On the bundled odd/even sort example (run from the repository's top folder):

    >>> import difftrace_mpi
    >>> r = difftrace_mpi.analyze("examples/traces/oddeven/normal", "examples/traces/oddeven/swapbug")
    >>> r.verdict["kind"]
    'changed'
    >>> first = r.culprits_table(as_frame=False)[0]
    >>> first["rank"], first["thread"], first["iteration"], first["call"]
    (5, 0, 8, 'MPI_Send')
    >>> r.ranking_table(as_frame=False)[0]["combo"]
    '11.every.K10'

    Two normal runs give no difference:

    >>> difftrace_mpi.analyze("examples/traces/oddeven/normal", "examples/traces/oddeven/normal").no_difference
    True
    """
    from .jobs import make_grid, run_analysis
    grid = make_grid(filters, k, attributes, linkage, custom)
    return run_analysis(normal, faulty, grid, also_normal=also_normal, top=top, arguments=arguments,
                        lattices=lattices, max_concepts=max_concepts, max_classes=max_classes,
                        keep_nlrs=keep_nlrs,
                        full_limit=full_jsm_limit,
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
    >>> import os, tempfile, difftrace_mpi
    >>> path = os.path.join(tempfile.mkdtemp(), "diff.h5")
    >>> _ = difftrace_mpi.analyze("examples/traces/oddeven/normal", "examples/traces/oddeven/swapbug", out=path)
    >>> with difftrace_mpi.load(path) as r:
    ...     print(r.verdict["kind"], r.culprit_keys(1), r.source == path)
    changed [(5, 0)] True
    """
    from . import store
    return store.read(path)


def diffnlr(results, rank, thread=0, combo=None):
    """The diffNLR of one trace of ``results``: its NLR in the normal run against the faulty run.

    Parameters
    ----------
    results : Results
        From :func:`analyze` or :func:`load`.
    rank, thread : int
        The trace.
    combo : str, optional
        The (filter, K) setting, e.g. ``"11.mpi.K10"`` (default: the best row's, unless
        the trace's NLRs differ only in another).

    Returns
    -------
    DiffNLR
        Its ``text()``, ``html()``, ``svg()`` and ``table()`` renderings; HTML in a notebook.

    Raises
    ------
    DiffTraceError
        When the trace or the setting is not in the results.

    Examples
    --------
    >>> import difftrace_mpi
    >>> r = difftrace_mpi.analyze("examples/traces/oddeven/normal", "examples/traces/oddeven/swapbug")
    >>> d = difftrace_mpi.diffnlr(r, 5)
    >>> d.combo
    '11.every.K10'
    >>> print(d.summary)
    The traces agree for 7 tokens, up to localSort, then normal has L1^16 where faulty has L1^7 L2^9; both end with MPI_Finalize.
    >>> [b.kind for b in d.blocks]
    ['common', 'normal', 'faulty', 'common']
    """
    return diffnlr_of(results, rank, thread, combo)


def load_run(path, ranks=None):
    """The events of one run directory as a table, one row per event (in Pipit's spirit).

    Parameters
    ----------
    path : str or path-like
        A run directory (ParLOT, uftrace, OTF2 or text traces), as ``analyze`` takes.
    ranks : iterable of int, optional
        Only these ranks' traces (a real run holds hundreds of millions of events: every
        row costs about 60 bytes; ``Results.events`` reads a window of one trace).

    Returns
    -------
    pandas.DataFrame
        The columns of ``Results.events``: ``rank``, ``thread``, ``position`` (the
        event's index in its trace as read), ``event`` (``"call"`` or ``"return"``),
        ``name`` (as traced, MPI arguments included: ``MPI_Send[count=4,dest=+1,...]``;
        for a return, the call it closes), ``function`` (the plain name), ``depth``
        (calls open around it, 0 outermost; a call and its return share it),
        ``matching`` (the position of its return or call), ``parent`` (the position of
        the call it was made in), ``call`` (the call's number, 0-based in the order
        entered) and ``timestamp`` (ns, where the format records time: uftrace, OTF2;
        else missing).  Names are categorical.

    Raises
    ------
    DiffTraceError
        When the directory holds no traces, or pandas is not installed.

    Examples
    --------
    >>> import difftrace_mpi
    >>> events = difftrace_mpi.load_run("examples/traces/oddeven/swapbug", ranks=[5])
    >>> print(events[["rank", "thread", "event", "function", "depth", "matching"]].head(3).to_string(index=False))
     rank  thread  event function  depth  matching
        5       0   call     main      0       143
        5       0   call MPI_Init      1         2
        5       0 return MPI_Init      1         1
    >>> calls = events[events["event"] == "call"]
    >>> calls["function"].value_counts()[["MPI_Send", "MPI_Recv"]].tolist()
    [16, 16]
    """
    from .readers import load_run as read_run
    from .results import events_frame, pandas_module
    pandas = pandas_module()
    run = read_run(path)
    wanted = None if ranks is None else {int(r) for r in ranks}
    traces = [t for t in run.traces if wanted is None or t.rank in wanted]
    if not traces:
        raise DiffTraceError(f"{path}: no traces of ranks {sorted(wanted)}" if wanted else f"{path}: no traces")
    names = sorted({str(n) for t in traces for n in t.names[1:]})
    return pandas.concat([events_frame(pandas, t, 0, len(t.events), names) for t in traces], ignore_index=True)
