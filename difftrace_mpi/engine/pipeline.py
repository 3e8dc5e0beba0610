"""The DiffTrace analysis of two runs: a short sequence of stage calls over the choreography.

Each stage is a plain function from ``stages``; this module only sequences them and tells
the choreography what to share.  Work on the root alone runs inside agreed steps
(``root_only``, ``on_root``), so an exception anywhere ends every rank with one message.
With one rank every collective is a no-op, so the serial tool and the MPI job are the
same code.
"""
import numpy as np

from .. import config
from ..config import attr_name, combo_name
from ..stages.classify.grid import Grid
from ..errors import DiffTraceError
from ..readers import comparison_cache, discover_run, names_of
from ..stages.model.numbering import global_names, local_names
from ..stages.classify import attributes as attrs
from . import assembly
from ..stages.model import calltree, filters, nlr, numbering
from ..stages.compare import divergence, twins
from ..stages.classify import nlr_keep
from ..stages.diagnose import timing
from ..stages.classify.classes import block_rows, csr_arrays, dedupe, over_class_cap
from ..stages.classify.records import Skipped
from . import lattices as lattice_tree
from .jsm_step import jsm_tasks
from .choreography import Choreography
from .progress import peak_rss_mb
from .tuning import release_freed_memory
from .reading import Reading


def analyze(normal_path, faulty_path, grid=None, *, top=config.TOP, max_concepts=config.MAX_CONCEPTS,
            max_classes=config.MAX_CLASSES, lattices=True, full_limit=config.FULL_LIMIT,
            row_block_min=config.ROW_BLOCK_MIN,
            choreography=None, timing_ratio=config.TIMING_MIN_RATIO, timing_clock=config.TIMING_CLOCK,
            also_normal=(), arguments=True, keep_nlrs=config.NLR_KEEP_TOKENS, notes=()):
    """Run DiffTrace on two run directories. Collective; returns Results on the root, None elsewhere.
    ``notes``: the caller's, first among the results' notes.

    ``also_normal``: more normal runs of the same program.  Where two normal runs differ
    (OpenMP scheduling, say), a faulty trace that differs the same way is noise to the
    verdict, and a faulty trace equal to any normal run's is unchanged.

    ``arguments``: False compares plain names, the tracer's argument annotations stripped
    (``MPI_Send[count=4,...]`` -> ``MPI_Send``), as traces without them would.

    ``timing_ratio`` and ``timing_clock``: the timing view's rule (``timing.compare_runs``:
    the factor an iteration time must change by, and which clocks may flag: both, wall or
    own, i.e. outside MPI calls), applied on the root to traces with timestamps.

    ``keep_nlrs``: tokens of whole NLRs the results keep (None: every trace's), those of
    the traces the verdict names first (``stages.classify.nlr_keep``)."""
    grid = grid or Grid()
    timing.check_rule(timing_ratio, timing_clock)       # every rank, before any collective step
    if int(max_concepts) < 1:
        raise DiffTraceError(f"the concept cap must be at least 1 (got {max_concepts})")
    if int(max_classes) < 1:
        raise DiffTraceError(f"the class cap must be at least 1 (got {max_classes})")
    if keep_nlrs is not None and int(keep_nlrs) < 0:
        raise DiffTraceError(f"the NLR token budget must be 0 or more, or None for all (got {keep_nlrs})")
    ch = choreography or Choreography()

    runs = ch.on_root("finding traces", lambda: [discover_run(p) for p in (normal_path, faulty_path, *also_normal)])
    runs, extra_runs = runs[:2], runs[2:]
    shard, traces, gevents, names, run_names, extra, gextra, pieces = read_runs(
        ch, runs, extra_runs, arguments, normal_path, faulty_path, notes)
    divergence_steps(ch, shard, gevents, names, pieces, [(run, ev) for run, ev in zip(extra, gextra)], run_names[0])

    tasks = []                          # one JSM task per (combo, attribute mode)
    lattice_rows = [] if lattices else None     # per task, the rows its lattices are built from
    nlr_blocks = []         # per setting, this rank's NLRs: the root asks for a few at the end
    identical = identical_runs(ch, shard)
    if identical:
        # the pieces exist on the root only: the other ranks must not even look the method up
        ch.root_only("identical runs", lambda: pieces.notes.append(
            "every trace equals its twin event for event: nothing to rank (the ranking grid was skipped)"))
    buffers = (filters.FilterBuffer(), nlr.Scratch())     # every setting's passes reuse them: no fresh pages
    for spec, k in ([] if identical else grid.combos()):
        nlrs, n_codes, block = nlr_step(ch, shard, traces, gevents, names, spec, k, pieces, timing_ratio,
                                        timing_clock, buffers)
        nlr_blocks.append(block)
        attribute_steps(ch, shard, gevents, names, spec, k, nlrs, n_codes, grid, max_classes, tasks, lattice_rows)
    # no step after the grid reads events: the shard's events (2 bytes each, the most this
    # rank holds) and the scratch go before the lattices and the JSMs add theirs
    gevents.clear()
    gextra.clear()
    nlrs = buffers = None
    release_freed_memory()
    merged = None
    if lattices:        # a binomial tree per lattice, their roots spread over the ranks
        merged = ch.tree_reduce("lattice merge", local_lattices(ch, shard, lattice_rows, max_concepts),
                                lattice_tree.merge, lattice_tree.pack, lattice_tree.unpack, lattice_tree.finish)
        if merged is not None:      # the root
            skipped = sum(isinstance(m, Skipped) for m in merged)
            ch.say(f"concept lattices: {len(merged) - skipped} built" + (f", {skipped} not" if skipped else ""))
    computed = ch.step("JSMs and clustering", jsm_tasks, ch, tasks, shard, grid, full_limit, row_block_min, top)
    gathered = ch.gather(computed)
    if gathered is not None:
        ch.say(f"JSMs and clustering: {sum(len(rows) for part in gathered for _, _, rows in part)} ranking rows")
    peak_rss = ch.gather(peak_rss_mb())
    busy = ch.gather(dict(ch.busy))
    ch.root_only("ranking", assembly.finish, pieces, tasks, gathered, merged, grid, top, ch.accounted(), peak_rss, busy,
                 max_classes, shard.free_ids)
    keep_named_nlrs(ch, pieces, nlr_blocks, keep_nlrs)
    return ch.root_only("results", assembly.make_results, pieces)      # made once, from the steps' pieces


def keep_named_nlrs(ch, pieces, blocks, budget):
    """The root's pieces get the whole NLRs of the traces the verdict names first, up to
    ``budget`` tokens (``stages.classify.nlr_keep``); every rank sends only those it holds."""
    def wanted():
        combos = list(pieces.combos.values())
        return nlr_keep.keep_set(assembly.nlr_priority(pieces), [c["lengths"] for c in combos],
                                 [c["same"] for c in combos], budget, len(pieces.objects))
    kept = ch.on_root("choosing NLRs to keep", wanted)
    parts = ch.gather(ch.step("cutting out the kept NLRs",
                              lambda: [nlr_keep.kept_part(block, kept) for block in blocks]))

    def install():
        for c, combo in enumerate(pieces.combos.values()):
            combo["nlr"] = nlr_keep.kept_nlrs([part[c] for part in parts], len(pieces.objects), kept)
    ch.root_only("keeping NLRs", install)


def read_runs(ch, runs, extra_runs, arguments, normal_path, faulty_path, first_notes=()):
    """Every rank reads its shard of the runs (``runs``: normal, faulty; the normal one may
    hold no traces: the faulty run alone) and of more normal runs, numbers the events
    globally and indexes them; the root's pieces of the Results get the inputs (``first_notes`` first)
    and the trace states.
    Returns (shard, traces, gevents, names, run_names, extra, gextra, pieces: None off the root)."""
    shard = Shard(runs, ch)
    ch.say((f"{sum(len(r.refs) for r in runs)} traces: {len(runs[0].refs)} normal, {len(runs[1].refs)} faulty"
            if normal_path is not None else f"{len(runs[1].refs)} traces of the faulty run alone")
           + f"; {len(shard.processes)} processes; {ch.size} MPI rank(s)")
    extra_refs = [ExtraRun(run, k, shard, ch).refs for k, run in enumerate(extra_runs)]
    # names first where the formats tell them without the events (ParLOT's .info): then each
    # trace is numbered globally and shared by content as it is read, and a shard never
    # holds two copies of equal events; else every trace is read before the names meet
    # what the formats must know of every run compared before reading one trace (ParLOT's
    # automatic leaves): read on the root, the same on every rank
    info_cache, read_notes = ch.on_root("runs compared", comparison_cache,
                                        [r.path for r in (*runs, *extra_runs) if r.path])
    listed = ch.step("function names", shard.names, extra_refs, arguments, info_cache)
    names, run_names = global_names(ch.allgather(local_names(listed))) if listed is not None else (None, None)
    reading = Reading(names, arguments, info_cache, last_run=1 + len(extra_refs))
    traces = ch.step("reading traces", reading.read, ch, shard.refs)
    extra = [ch.step(f"reading normal run {k + 2}", reading.read, ch, refs) for k, refs in enumerate(extra_refs)]
    reading.finish()
    ch.say(f"read {ch.comm.allreduce(len(traces))} traces")
    if names is None:
        names, run_names = global_names(ch.allgather(local_names(traces + [t for run in extra for t in run])))
        ch.step("global ids", reading.number, traces, extra, names)
    gevents, hashes = reading.events[:len(traces)], np.array(reading.hashes[:len(traces)], dtype=np.uint64)
    gextra, at = [], len(traces)
    for run in extra:
        gextra.append(reading.events[at:at + len(run)])
        at += len(run)
    ch.step("trace index", shard.index, traces, gevents, hashes)      # twins, equal traces
    # ids met inside a free block on any rank (``stages.compare.order``): the same on every rank
    shard.free_ids = np.logical_or.reduce([np.asarray(f, dtype=bool) for f in ch.allgather(reading.free_ids)])

    pieces = ch.root_only("inputs", assembly.new_pieces, normal_path, faulty_path, runs, shard.objects,
                           shard.processes, names, run_names, ch.size, [*first_notes, *read_notes])
    folded = np.sum(ch.allgather(reading.folded.as_tuple()), axis=0).tolist()
    ch.root_only("order folding", assembly.note_folding, pieces, folded)
    states = ch.gather(ch.step("calls and open calls", assembly.trace_states, traces, gevents,
                               reading.counted[:len(traces)], shard.runs, shard.objs, shard.complete, shard.notes,
                               shard.endings))
    ch.root_only("trace states", assembly.apply_trace_states, pieces, states)
    return shard, traces, gevents, names, run_names, extra, gextra, pieces


def identical_runs(ch, shard):
    """Whether both runs hold the same traces, each equal to its twin event for event, with
    no timestamps (whose timing view could still differ): then no setting of the grid can
    rank anything, and the grid is skipped.  The same answer on every rank."""
    local = (int(np.count_nonzero(shard.equals_twin)),
             int(np.count_nonzero(shard.runs == 0)), int(np.count_nonzero(shard.runs == 1)),
             sum(stamps is not None for stamps in shard.timestamps))
    equal, normal, faulty, stamped = np.sum(ch.allgather(local), axis=0).tolist()
    return equal == normal == faulty == len(shard.objects) and not stamped


class Shard:
    """Who owns which traces: objects are the (rank, thread) pairs of both runs; a unit of
    work is one process of both runs, so process-level rows stay on one MPI rank and a
    trace meets its twin there (an identical twin's work is not done twice)."""

    def __init__(self, runs, ch):
        self.objects = sorted({(r.rank, r.thread) for run in runs for r in run.refs})
        self.obj_index = {key: i for i, key in enumerate(self.objects)}
        self.processes = sorted({rank for rank, _ in self.objects})
        self.proc_index = {rank: i for i, rank in enumerate(self.processes)}
        # one thread per process (most MPI codes): process i is object i, its row its
        # thread's, so the thread level's rows serve as the process level (the same classes)
        self.one_thread_per_process = len(self.objects) == len(self.processes)
        unit_refs = {rank: [] for rank in self.processes}
        for ri, run in enumerate(runs):
            for ref in run.refs:
                unit_refs[ref.rank].append((ri, ref))
        units = [unit_refs[rank] for rank in self.processes]
        mine = ch.shard([sum(ref.size for _, ref in unit) for unit in units])[ch.rank]
        self.refs = [labelled for u in mine for labelled in units[u]]

    def names(self, extra_refs, arguments, cache):
        """Per run, the name tables of this rank's traces as [(run, names)], read without
        the events; None when a format tells names only with the events.  ``cache``: what
        the reads share (each process's .info is parsed once, here or when reading)."""
        listed = []
        for ri, ref in self.refs + [labelled for refs in extra_refs for labelled in refs]:
            table = names_of(ref, cache)
            if table is None:
                return None
            listed.append((ri, table if arguments else numbering.plain_names(table, cache)))
        return listed

    def index(self, traces, gevents, hashes):
        """Per local trace: run, object, process; the analysis order (normal before faulty);
        each trace's twin and shared prefix; the first local trace with the same events
        (``same_as``: identical traces, such as the worker threads of an SPMD run, share one
        NLR and attribute row) and the traces that are first (``distinct``)."""
        n_obj = len(self.objects)
        self.runs = np.array([ri for ri, _ in traces], dtype=np.int64)
        self.objs = np.array([self.obj_index[t.key] for _, t in traces], dtype=np.int64)
        self.order = self.runs * n_obj + self.objs
        self.procs = np.array([self.proc_index[t.rank] for _, t in traces], dtype=np.int64)
        self.complete = np.array([bool(t.complete) for _, t in traces], dtype=bool)
        self.repeated = np.array([t.repeated_at_end for _, t in traces], dtype=np.int64)    # livelocks summarised
        self.notes = [(i, list(t.notes)) for i, (_, t) in enumerate(traces) if t.notes]
        self.timestamps = [t.timestamps for _, t in traces]
        # how each process ended ({(run, rank): record}; tracers that record it: pin/)
        self.endings = {(ri, t.rank): dict(t.ending) for ri, t in traces if getattr(t, "ending", None)}
        self.hashes = hashes        # the divergence search's first round too
        self.same_as = twins.first_equal(gevents, self.hashes)
        self.twin, self.shared = twins.twin_prefixes(gevents, self.runs, self.objs, self.same_as)
        self.equals_twin = (self.twin >= 0) & (self.same_as == self.same_as[self.twin])
        self.distinct = np.flatnonzero(self.same_as == np.arange(len(traces)))
        self.distinct_row = np.searchsorted(self.distinct, self.same_as)     # each trace's row among them
        # a group of equal traces is first met at its earliest trace in analysis order
        self.distinct_order = np.full(len(self.distinct), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(self.distinct_order, self.distinct_row, self.order)
        proc_keys = sorted(set(zip(self.runs.tolist(), self.procs.tolist())))
        number = {key: i for i, key in enumerate(proc_keys)}
        self.proc_group = [number[key] for key in zip(self.runs.tolist(), self.procs.tolist())]
        self.proc_runs = np.array([r for r, _ in proc_keys], dtype=np.int64)
        self.proc_ids = np.array([p for _, p in proc_keys], dtype=np.int64)


class ExtraRun:
    """One more normal run (``analyze(also_normal=...)``), sharded by process like the
    main runs; only the traces of objects the main runs have are read (the others have
    no twin to compare with)."""

    def __init__(self, run, k, shard, ch):
        by_rank = {}
        for ref in run.refs:
            if (ref.rank, ref.thread) in shard.obj_index:
                by_rank.setdefault(ref.rank, []).append(ref)
        units = sorted(by_rank)
        mine = ch.shard([sum(ref.size for ref in by_rank[u]) for u in units])[ch.rank]
        self.refs = [(2 + k, ref) for u in mine for ref in by_rank[units[u]]]


def divergence_steps(ch, shard, gevents, names, pieces, extra=(), normal_names=()):
    """Where each faulty trace first leaves its normal twin (``first_differences``).  With
    more normal runs (``extra``: [(traces, global events)] per run): the functions whose
    calls vary between normal runs (``learn_noise``) are left out of every comparison;
    where the normal runs still differ is noise to the verdict; a faulty trace equal to
    another normal run's is unchanged."""
    maps = calltree.id_maps(names)
    if extra and not identical_runs(ch, shard):
        extra = [(run, events) for k, (run, events) in enumerate(extra)
                 if not _is_the_faulty_run(ch, shard, gevents, run, events, k, pieces)]
    extra = [(run, events) for k, (run, events) in enumerate(extra)
             if _same_program(ch, run, normal_names, k, pieces)]
    noisy = learn_noise(ch, shard, gevents, extra, maps) if extra else set()
    if noisy:
        drop = np.isin(maps[0], sorted(noisy))
        gevents = ch.step("noise filter", lambda: [divergence.without_calls(ev, drop) for ev in gevents])
        extra = [(run, ch.step("noise filter", lambda: [divergence.without_calls(ev, drop) for ev in events]))
                 for run, events in extra]
    search, points, gathered = first_differences(ch, gevents, shard.runs, shard.objs, shard.objects, maps,
                                                 trace_hashes=None if noisy else shard.hashes,
                                                 prefixes=None if noisy else
                                                 np.where(shard.twin >= 0, shard.shared, -1),
                                                 repeated=shard.repeated)
    noise, equal_elsewhere = {}, set()      # filled on the root
    for run, events in extra:
        for side in (0, 1):
            pair = pair_with(shard, gevents, side, run, events)
            _, pair_points, pair_contexts = first_differences(ch, *pair, shard.objects, maps,
                                                              with_contexts=side == 0)
            if side == 0:
                ch.root_only("noise", assembly.note_noise, noise, pair_points, pair_contexts)
            else:
                ch.root_only("noise", assembly.note_equal, equal_elsewhere, pair_points, pair[2][pair[1] == 1])
    ch.root_only("divergences", assembly.set_divergences, pieces, maps, points, gathered, search, noise,
                 equal_elsewhere, sorted(names[i] for i in noisy))


def _same_program(ch, run, normal_names, k, pieces):
    """Whether another normal run calls mostly the normal run's functions (plain names, as
    the two main runs are checked); else a note, and it is left out: its differences would
    all be taken for noise."""
    plain = set().union(*ch.allgather({calltree.plain_name(n) for _, t in run for n in list(t.names)[1:]}))
    normal = {calltree.plain_name(n) for n in normal_names}
    fewer = min(len(plain), len(normal))
    if not fewer or len(plain & normal) >= config.MIN_SHARED_NAMES * fewer:
        return True
    ch.root_only("notes", lambda: pieces.notes.append(      # a lambda: ``pieces`` is None off the root
                 f"normal run {k + 2} (--also-normal) shares only {len(plain & normal)} of {fewer} function names "
                 f"with the normal run: not a run of the same program, it is left out"))
    return False


def _is_the_faulty_run(ch, shard, gevents, run, events, k, pieces):
    """Whether another normal run has the faulty run's traces, every one (the faulty run
    given again): taken as a normal run it would make the fault noise; a note says so."""
    parts = ch.gather(divergence.digests(*pair_with(shard, gevents, 1, run, events)))
    same = ch.on_root("another normal run", lambda: not divergence.Search(parts, len(shard.objects)).differs.any())
    if same:
        ch.root_only("notes", lambda: pieces.notes.append(  # a lambda: ``pieces`` is None off the root
                     f"normal run {k + 2} (--also-normal) has the faulty run's traces, every one: it is left out "
                     f"(taken as a normal run it would make every difference noise)"))
    return same


def pair_with(shard, gevents, side, run, events):
    """(events, runs, objs) of one comparison: this shard's traces of run ``side`` (0
    normal, 1 faulty) as run 0, another normal run's as run 1."""
    own = np.flatnonzero(shard.runs == side)
    objs = np.array([shard.obj_index[t.key] for _, t in run], dtype=np.int64)
    return ([gevents[i] for i in own.tolist()] + list(events),
            np.concatenate([np.zeros(len(own), np.int64), np.ones(len(events), np.int64)]),
            np.concatenate([shard.objs[own], objs]))


def learn_noise(ch, shard, gevents, extra, maps, rounds=config.NOISE_ROUNDS):
    """The functions (plain ids) whose calls vary between the normal runs: compare the
    normal run with each other normal run, take the calls at each first difference, leave
    them out and compare again, until the normal runs agree or ``rounds`` are done.
    The same set on every rank."""
    noisy = set()
    for _ in range(rounds):
        drop = np.isin(maps[0], sorted(noisy))
        view = [divergence.without_calls(ev, drop) for ev in gevents]     # one filtered view a round
        found = set()
        for run, events in extra:
            other = [divergence.without_calls(ev, drop) for ev in events]
            _, points, contexts = first_differences(ch, *pair_with(shard, view, 0, run, other), shard.objects, maps)
            found |= ch.on_root("noise calls", divergence.calls_at_differences, points, contexts, maps[0])
        if not found - noisy:
            break
        noisy |= found
    return noisy


def first_differences(ch, events, runs, objs, objects, maps, with_contexts=True, trace_hashes=None, prefixes=None,
                      repeated=None):
    """The first-difference search between run 0 and run 1 of the given traces: whole-trace
    hashes, then rounds of block hashes narrowing the first difference (only hashes
    travel: another normal run's twins may sit on other ranks), then each side's context
    there (``stages.compare.divergence``).  ``trace_hashes``: the whole-trace hashes, when this
    shard has them already; ``prefixes``: per trace, the first events it shares with its
    twin where this shard compared them (``Shard.index``), else -1: no block of theirs is
    hashed; ``repeated``: per trace, its livelock's events summarised while
    read (``Shard.repeated``).  Returns (the root's Search, points, gathered contexts) on the
    root; points on every rank."""
    digests = ch.gather(divergence.digests(events, runs, objs, trace_hashes, prefixes))
    search = ch.root_only("divergence search", divergence.Search, digests, len(objects))
    probes = ch.on_root("divergence search", lambda: search.probes())
    while len(probes[0]):
        hashes = ch.step("divergence hashes", divergence.probe_hashes, events, runs, objs, probes)
        gathered = ch.gather(hashes)
        probes = ch.on_root("divergence search", lambda: search.advance(gathered))
    points, lone = ch.on_root("divergence points", lambda: (search.points(), search.lone()))
    ch.say(f"first differences: {len(points[0])} of {len(objects)} traces differ from their twin")
    contexts = None
    if with_contexts:
        contexts = ch.gather(ch.step("divergence context", divergence.contexts, events, runs, objs, objects, points,
                                     maps, lone=lone, repeated=repeated))
    return search, points, contexts


def nlr_step(ch, shard, traces, gevents, names, spec, k, pieces, timing_ratio, timing_clock, buffers):
    """One (filter, K) setting's NLRs with loop ids agreed across ranks, and its loop
    timing; the root records the Combo.  ``buffers``: the filter's output buffer and the
    NLR kernel's scratch (each sequence is reduced before the next is filtered).  Returns
    (this shard's NLRs, attribute codes, its distinct NLRs as a ``dedupe`` block)."""
    cname = combo_name(spec.label, k)
    mask = filters.keep_mask(names, spec)
    distinct = shard.distinct.tolist()      # a trace equal to an earlier one shares its NLR
    buffer, scratch = buffers
    # pass 1's filtered sequences that are short beside their traces (at most 1/32 of the
    # events: a sixteenth of the events' own memory), for pass 2 to take instead of
    # filtering the whole trace again (the MPI filters keep a thousandth of LULESH's events)
    short = {}

    def sequence_at(i, keep=False):     # filtered when needed (or by the kernel as it goes), never all at once
        if i in short:
            return short.pop(i)
        seq = filters.nlr_input(gevents[distinct[i]], names, spec, mask, buffer)
        if keep and isinstance(seq, np.ndarray) and 32 * len(seq) <= len(gevents[distinct[i]]):
            short[i] = seq.copy()
        return seq

    def shared_prefixes():      # a faulty trace resumes from its normal twin's state after their shared events
        row = {i: d for d, i in enumerate(distinct)}
        return {row[i]: (row[int(shard.same_as[shard.twin[i]])],
                         filters.nlr_position(gevents[i], shard.shared[i], names, spec, mask))
                for i in distinct if shard.twin[i] >= 0 and shard.shared[i] > 0}
    discovery = ch.step(f"NLR discovery {cname}", lambda: nlr.discover(
        (sequence_at(i, True) for i in ch.each(range(len(distinct)), f"NLR {cname}")), k, shared_prefixes(), scratch))
    known = set().union(*ch.allgather(discovery.found_keys()))
    own, table = ch.step(f"NLR {cname}", nlr.reduce_with_known, discovery, sequence_at, k, known, scratch)
    short.clear()       # those pass 2 did not reduce again
    first = {}
    appearances = ch.step(f"NLR loop ids {cname}", nlr.first_appearances, own, shard.distinct_order, table)
    for part in ch.allgather(appearances):
        for key, where in part.items():
            if key not in first or where < first[key]:
                first[key] = where

    held = [own]            # relabelled in place of the shard's own ids, never both held
    del own

    def global_loops():
        loop_ids = nlr.assign_loop_ids(first)
        relabelled = nlr.relabel(held.pop(), table, loop_ids)
        # the shard's distinct NLRs, each held once (an NLR of a real trace is millions of tokens)
        block = dedupe([(relabelled[i].ids, relabelled[i].counts) for i in shard.distinct_row.tolist()],
                       shard.runs, shard.objs)
        del relabelled          # the block holds them once
        distinct_nlrs = [nlr.NLR(ids, counts) for ids, counts in block_rows(block)]
        return (block, [distinct_nlrs[row] for row in block[3][:, 2].tolist()], nlr.global_table(loop_ids),
                nlr_keep.summary(block))
    block, nlrs, gtable, summary = ch.step(f"NLR global loops {cname}", global_loops)
    ch.say(f"{cname}: {len(gtable)} loops")
    gathered_summaries = ch.gather(summary)
    # loop iteration times where traces carry timestamps (uftrace, OTF2); others yield nothing
    waiting = timing.waiting_mask(names)      # MPI calls: time inside them is waiting
    lengths = timing.iteration_lengths(gtable)
    loop_times = ch.step(f"loop timing {cname}", lambda: [
        timing.trace_timing(int(ri), int(o), nl.ids, nl.counts, gtable, ev, stamps,
                            filters.kept_positions(ev, names, spec, mask), waiting, lengths)
        for ri, o, ev, nl, stamps in zip(shard.runs, shard.objs, gevents, nlrs, shard.timestamps)
        if stamps is not None])
    gathered_times = ch.gather(loop_times)

    ch.root_only(f"NLR table {cname}", assembly.add_setting, pieces, spec.label, k, gtable, gathered_summaries,
                 gathered_times, timing_ratio, timing_clock)
    return nlrs, len(names) + len(gtable), block


def attribute_steps(ch, shard, gevents, names, spec, k, nlrs, n_codes, grid, max_classes, tasks, lattice_rows):
    """Per attribute mode of one (filter, K): weighted attribute rows of this shard and its
    distinct rows gathered on every rank, and whether they pass the class cap: one JSM
    task each, appended to ``tasks``, and (unless ``lattice_rows`` is None: no lattices)
    the rows its lattices are built from (None over the cap) to ``lattice_rows``."""
    cname = combo_name(spec.label, k)
    mask = filters.keep_mask(names, spec)
    counted = {}        # kind -> count rows: the frequency modes of one kind weight the same counts
    for kind, freq in grid.attributes:
        aname = attr_name(kind, freq)

        def weighted_rows():
            if kind not in counted:
                # rows of distinct traces, then each trace's row (equal traces have equal rows);
                # the token kinds of the grid together, in one pass over the NLRs
                counts = ({kind: attrs.call_count_matrix([gevents[i] for i in shard.distinct.tolist()], mask,
                                                         len(names))}
                          if kind == "call" else
                          attrs.count_matrices([nlrs[i] for i in shard.distinct.tolist()],
                                               [k for k, _ in grid.attributes if k in attrs.TOKEN_KINDS],
                                               len(names), n_codes))
                counted.update((k, m[shard.distinct_row]) for k, m in counts.items())
            counts = counted[kind]
            rows = attrs.weight_matrix(counts, freq)
            if shard.one_thread_per_process:
                return rows, rows
            return rows, attrs.weight_matrix(attrs.group_rows(counts, shard.proc_group, len(shard.proc_ids)), freq)
        thread_rows, proc_rows = ch.step(f"attributes {cname} {aname}", weighted_rows)

        def class_pieces():
            # class rows travel, not trace rows: identical rows are merged on each rank first;
            # one block for both levels where they are one (it then travels once)
            threads = dedupe(csr_arrays(thread_rows), shard.runs, shard.objs)
            if proc_rows is thread_rows:
                return threads, threads
            return threads, dedupe(csr_arrays(proc_rows), shard.proc_runs, shard.proc_ids)
        pieces = ch.allgather(ch.step(f"attribute classes {cname} {aname}", class_pieces))
        over = over_class_cap(pieces, {"thread": len(shard.objects), "process": len(shard.processes)}, max_classes)
        if lattice_rows is not None:
            lattice_rows.append((f"{cname} {aname}", thread_rows if over is None else None))
        tasks.append((cname, spec, k, aname, pieces, over))
        ch.say(f"{cname} {aname}: attributes gathered")


def local_lattices(ch, shard, lattice_rows, max_concepts):
    """This shard's part of both runs' lattices of every setting (grid order, normal then
    faulty), to merge across ranks; a setting over the class cap gets none."""
    parts = []
    for name, rows in lattice_rows:
        if rows is None:            # stated with the setting
            parts.extend([Skipped("over the class cap")] * 2)
            continue
        parts.extend(ch.step(f"lattice {name}", lambda: [
            lattice_tree.local_lattice(rows, shard.runs == ri, shard.objs, max_concepts, ch.size) for ri in (0, 1)]))
    return parts
