"""What a job does around the engine: the one analysis path and its output checks.

``run_analysis`` is the sequence both faces share (``api.analyze`` and ``cli``'s
``analyze`` command): memory budget, parameter grid, choreography, output checks before
any work starts, the engine (two runs, or the faulty run alone), notes on the inputs, the
results file.  ``check_outputs`` is the output policy every command applies first.  No
command-line flag is named here unless the caller passes its own ``Wording``.
"""
import os
from dataclasses import dataclass

from . import config
from .errors import DiffTraceError


@dataclass(frozen=True)
class Wording:
    """How messages name the caller's options: the API's keyword arguments by default, the
    command line's flags when ``cli`` passes its own (``CLI_WORDING`` there)."""
    overwrite: str = "pass force=True to overwrite it"      # ends '<path> exists; ...'
    memory_budget: str = "memory_budget"
    also_normal: str = "also_normal"
    out: str = "out"


LIBRARY_WORDING = Wording()


def same_run_notes(normal, faulty, also_normal=(), wording=LIBRARY_WORDING):
    """Notes for a run given twice (the same directory under two names): a run compared with
    itself shows no difference, and a faulty run given as another normal run is all noise."""
    def same(a, b):
        try:
            return os.path.samefile(a, b)
        except OSError:          # a missing input is reported by the analysis
            return False
    notes = []
    if same(normal, faulty):
        notes.append(f"the normal and the faulty run are the same directory ({normal}): "
                     "a run compared with itself shows no difference")
    notes += [f"{wording.also_normal} {extra} is the faulty run's directory: its differences are all taken for noise"
              for extra in also_normal if same(extra, faulty)]
    return notes


# --- outputs ------------------------------------------------------------------------------
# Every output goes through check_outputs before any work starts (a late failure would
# lose the work): no output replaces a file without ``force``, none names an input, and
# each goes into an existing, writable directory.  The writes themselves are no-clobber
# too (fsutil), so a file that appears meanwhile is not replaced either.

def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _input_named(path, inputs):
    """The input ``path`` is, or the input directory it is a file of, else None."""
    for inp in inputs:
        if _same_file(path, inp):
            return inp
        if os.path.lexists(path) and os.path.isdir(inp):
            if os.path.realpath(path).startswith(os.path.join(os.path.realpath(inp), "")):
                return inp
    return None


def _writable_dir(directory, create=False):
    """An error message when files cannot be written into ``directory`` (``create``: it
    may be made, so its nearest existing ancestor counts), else None."""
    directory = os.path.abspath(directory)
    while create and not os.path.lexists(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    if not os.path.isdir(directory):
        return f"directory {directory} does not exist"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"directory {directory} is not writable"
    return None


def check_outputs(outputs, inputs, force, created_dirs=(), wording=LIBRARY_WORDING):
    """Refuse, in one line, outputs that would replace a file without ``force``, that name
    an input (a trace, a run directory or a file in it, the results file read) or each
    other, or whose directory is missing or not writable.  ``outputs``: [(name, path)]
    (``name`` as the caller's user knows the option), None paths skipped;
    ``created_dirs``: directories the command creates."""
    from .fsutil import not_replaceable
    inputs = [os.fspath(i) for i in inputs]
    seen = {}
    for flag, path in outputs:
        if path is None:
            continue
        path = os.fspath(path)
        if not path:
            raise DiffTraceError(f"{flag}: an empty file name: give a path")
        inp = _input_named(path, inputs)
        if inp is not None:
            what = "is that input" if _same_file(path, inp) else "is in that input directory"
            raise DiffTraceError(f"{flag} {path} would overwrite an input ({inp} {what}); give another path")
        real = os.path.realpath(path)
        if real in seen:
            raise DiffTraceError(f"{seen[real]} and {flag} name the same file {path}")
        seen[real] = flag
        if os.path.isdir(path):
            raise DiffTraceError(f"{flag} {path} is a directory")
        problem = not_replaceable(path)
        if problem:
            raise DiffTraceError(f"{flag} {problem}")
        if os.path.lexists(path) and not force:
            raise DiffTraceError(f"{path} exists; {wording.overwrite}")
        directory = os.path.dirname(os.path.abspath(path))
        problem = _writable_dir(directory, create=any(_same_file(directory, d) or not os.path.exists(d)
                                                      for d in created_dirs))
        if problem:
            raise DiffTraceError(f"cannot write {path}: {problem}")
    for d in created_dirs:
        inp = _input_named(d, inputs)
        if inp is not None:
            raise DiffTraceError(f"{d} would write into an input ({inp}); give another directory")


def results_writer():
    """``store.write``, loaded on the root only and before the analysis: h5py's import
    runs ``uname -p`` in a subprocess (``platform.uname``), a fork that costs 20-35 ms in a
    process holding GBs of traces and about 7 ms in one that has read none."""
    from . import store
    return store.write


def on_root(ch, name, fn, *args, **kwargs):
    """``fn`` on the root, as a step every rank agrees on when there are several (one rank:
    a plain call, so its error reads as it is)."""
    if ch.size == 1:
        return fn(*args, **kwargs)
    return ch.root_only(name, fn, *args, **kwargs)


# --- the analysis ---------------------------------------------------------------------------

def make_grid(filters=None, ks=None, attributes=None, linkages=None, custom=None):
    """The parameter grid; a setting left None is the default (config)."""
    from .stages.classify.grid import Grid
    chosen = {"filters": filters, "ks": ks, "attributes": attributes, "linkages": linkages}
    return Grid(**{name: tuple(value) for name, value in chosen.items() if value is not None}, custom=custom)


def run_analysis(normal, faulty, grid=None, *, also_normal=(), top=config.TOP, arguments=True, lattices=True,
                 max_concepts=config.MAX_CONCEPTS, max_classes=config.MAX_CLASSES, keep_nlrs=config.NLR_KEEP_TOKENS,
                 full_limit=config.FULL_LIMIT,
                 row_block_min=config.ROW_BLOCK_MIN, timing_ratio=config.TIMING_MIN_RATIO,
                 timing_clock=config.TIMING_CLOCK, memory_budget=None, out=None, outputs=(), force=False,
                 progress=False, wording=LIBRARY_WORDING):
    """The one analysis path.  ``normal`` None: the faulty run alone (``engine.alone``; the
    grid and its settings do not apply).  ``out``: also write the results file there;
    ``outputs``: more [(name, path)] the caller writes afterwards, checked with ``out``
    before any work.  ``grid``: a ``Grid`` or None (the default).  Collective under MPI:
    Results on the root, None on the other ranks."""
    from .engine.choreography import Choreography
    from .readers.budget import budget_bytes, budget_for_call
    from .stages.classify.grid import Grid
    also_normal = tuple(os.fspath(d) for d in also_normal or ())     # None: none, as the API documents
    if normal is None and also_normal:
        raise DiffTraceError(f"{wording.also_normal} needs a normal run")
    memory_budget = budget_bytes(memory_budget)         # a bad size: one error before MPI starts
    grid = grid if grid is not None else Grid()
    ch = Choreography(progress=progress)
    try:
        on_root(ch, "checking the outputs", check_outputs, [(wording.out, out), *outputs],
                [p for p in (normal, faulty, *also_normal) if p is not None], force, wording=wording)
        writer = on_root(ch, "loading the results writer", results_writer) if out is not None else None
        with ch.one_blas_thread_per_rank(), budget_for_call(memory_budget, source=wording.memory_budget):
            if normal is None:
                from .engine.alone import analyze_alone
                results = analyze_alone(faulty, choreography=ch, arguments=arguments)
            else:
                from .engine.pipeline import analyze
                results = analyze(normal, faulty, grid, top=top, also_normal=also_normal, arguments=arguments,
                                  max_concepts=max_concepts, max_classes=max_classes, keep_nlrs=keep_nlrs,
                                  lattices=lattices, choreography=ch,
                                  full_limit=full_limit, row_block_min=row_block_min,
                                  timing_ratio=timing_ratio, timing_clock=timing_clock,
                                  notes=same_run_notes(normal, faulty, also_normal, wording))
        if out is not None:     # every rank waits in the step: an interrupt then ends the job from the root
            on_root(ch, "writing the results", writer, results, out, force=force)
            if ch.is_root:
                ch.say(f"results file written: {os.path.getsize(out) / 1e6:,.1f} MB")
        ch.close(finished=True)
    finally:
        ch.close()
    return results


# -- one trace at a time (decode, nlr, diffnlr) ----------------------------------------------

def load_single(path):
    """One trace file of any format, as a Trace."""
    from .readers import load_file
    return load_file(path)


def trace_nlr(traces, spec, k):
    """(names, NLRs, loop table) of ``traces`` filtered by ``spec``, with shared names and loop ids."""
    import numpy as np
    from .stages.model import filters, nlr
    from .model import RETURN_NAME
    names = [RETURN_NAME] + sorted({n for t in traces for n in list(t.names)[1:]} - {RETURN_NAME})
    name_id = {n: i for i, n in enumerate(names)}
    mask = filters.keep_mask(names, spec)
    seqs = [filters.apply_filter(np.asarray([name_id[n] for n in t.names], dtype=np.int32)[t.events],
                                 names, spec, mask) for t in traces]
    nlrs, table = nlr.reduce_all(seqs, k)
    return names, nlrs, table


def run_traces(run):
    """All traces of a run directory, or the one trace of a file, in (rank, thread) order."""
    from .readers import load_run
    if os.path.isfile(run):
        return [load_single(run)]
    return load_run(run).traces

