"""Reading a shard's traces: each trace numbered globally, its free blocks folded
(``stages.compare.order``) and kept once per distinct content (``stages.compare.twins.Contents``)."""
import numpy as np

from ..kernels.nlr import map_ids_in_place, map_ids_summarised, mapped_ids_uint16, open_calls
from ..model import COMPACT_IDS
from ..readers import NARROW_EVENTS, load_trace
from ..stages.model import numbering
from ..stages.compare import order, twins


class Reading:
    """Reads a shard's traces, numbers their events globally and keeps one array per
    distinct content (``stages.compare.twins.Contents``): ``events`` and ``hashes`` per trace in
    reading order (main runs, then more normal runs); as uint16 ids where the global names
    fit (``model.COMPACT_IDS``; the same on every rank), else int32; ``counted`` per trace,
    where the numbering pass counted them, (calls entered, whether no call is open at the
    end), else None.  With ``names`` known before reading, each trace is numbered and
    shared as it is read; else ``number`` does both afterwards.  ``info_cache``: what the
    reads share with ``Shard.names``."""

    def __init__(self, names, arguments, info_cache, last_run=1):
        self.arguments, self.info_cache, self.last_run = arguments, info_cache, last_run
        self.name_id = None if names is None else {n: i for i, n in enumerate(names)}
        self.compact = names is not None and len(names) <= COMPACT_IDS
        self.order_flags = None if names is None else order.name_flags(names)
        self.free_ids = None if names is None else np.zeros(len(names), dtype=np.uint8)   # met in a free block
        self._bodies = None if names is None else order.region_bodies(names)
        self._process_flags = {}                # rank -> order flags with its regions' bodies learnt
        self._main_inside = {}                  # rank -> ids its main thread met in free blocks
        # (rank, thread) -> what its normal trace taught: ids whose call counts vary, ids that
        # return with a block open, ids it made
        self._varying = {}
        self.folded = FoldCount()
        self.contents = twins.Contents()
        self.events, self.hashes, self.counted = [], [], []
        self._id_maps = {}                      # per names array (threads of a process share one)
        self._last = {}                         # (rank, thread) -> (Trace, events, hash, counted) last read

    def read(self, ch, labelled):
        """[(label, Trace)] of [(label, TraceRef)]; threads of a process share one .info read.
        The traces keep their names; their events are in ``events``.  A thread whose file
        its format knows to hold the events of the same thread in an earlier run (a twin
        the fault did not touch) is not decoded: it is that trace's array."""
        out = []
        if self.compact and self.info_cache is not None:    # ParLOT: its uint16 values, no int32 copy
            self.info_cache[NARROW_EVENTS] = True
        for label, ref in ch.each(labelled, "reading"):
            earlier = self._last.get((ref.rank, ref.thread)) if self.name_id is not None else None
            t = load_trace(ref, self.info_cache, earlier and earlier[0])
            if not self.arguments:
                t.names = numbering.plain_names(t.names, self.info_cache)     # as Shard.names made them
            if self.name_id is not None:
                if t.events is None:
                    t.open_at_end = getattr(earlier[0], "open_at_end", None)
                    self._add(t, *earlier[1:])
                else:
                    self._keep(label, t, *self._global(t))
                if earlier:
                    earlier[0].raw = None
            if self.name_id is None or label == self.last_run:      # no later run to compare with
                t.raw = None
            out.append((label, t))
        return out

    def finish(self):
        """Drop what the formats kept of the files (read no more)."""
        for t, *_ in self._last.values():
            t.raw = None
        self._last.clear()
        if self.info_cache is not None:
            self.info_cache.pop(NARROW_EVENTS, None)

    def number(self, traces, extra, names):
        """Global ids and shared contents for traces read before the names were known."""
        self.name_id = {n: i for i, n in enumerate(names)}
        self.compact = len(names) <= COMPACT_IDS
        self.order_flags = order.name_flags(names)
        self.free_ids = np.zeros(len(names), dtype=np.uint8)
        self._bodies = order.region_bodies(names)
        for label, t in traces + [labelled for run in extra for labelled in run]:
            self._keep(label, t, *self._global(t))

    def _global(self, t):
        """(the trace's events in global ids, in place where the array is its own: int32 ids,
        or uint16 ones read narrow (``readers.NARROW_EVENTS``); for those, what the same
        pass summarised (``kernels.nlr.map_ids_summarised``), else None)."""
        table, ids = self._id_maps.get(id(t.names), (None, None))
        if table is not t.names:        # (the table is held here, so its id is not reused)
            ids = np.asarray([self.name_id[n] for n in t.names], dtype=np.int32)
            self._id_maps[id(t.names)] = (t.names, ids)
        ev = t.events
        t.events = None
        if ev.dtype == np.uint16 and self.compact and ev.flags.c_contiguous and ev.flags.writeable:
            return ev, map_ids_summarised(ev, ids)        # decoded, checked, mapped and summarised
        if ev.dtype == np.int32 and ev.flags.c_contiguous:
            if self.compact:
                return mapped_ids_uint16(ev, ids), None       # mapped and narrowed in one pass
            if ev.flags.writeable:
                map_ids_in_place(ev, ids)       # no second array of its size
                return ev, None
        ev = ids[ev]
        return (ev.astype(np.uint16) if self.compact else ev), None

    def _keep(self, label, t, ev, summary=None):
        folded = self._fold(label, t, ev)
        if folded is not ev:
            summary = None      # of the events before folding
        # a faulty trace's twin is the normal trace read last for its thread
        twin = self._last.get(t.key) if label == 1 else None
        kept, h = self.contents.add(folded, twin and twin[1], summary and summary[0])
        self._add(t, kept, h, summary and summary[1:])

    def _fold(self, label, t, ev):
        """The trace's events with its free blocks folded (``stages.compare.order``): the order
        of arrival-order completions and dynamic shares is not compared.  A main thread
        teaches its process's worker threads which region bodies are dynamic and which it
        ran inside free blocks (a worker runs those in arrival order too); a normal
        trace teaches its twins which functions' call counts vary from call to call (the
        failed run alone: each trace itself).  Only programs that complete messages in
        arrival order or schedule dynamically are folded (the name table says so).
        Traces with timestamps keep their events (the timing view needs them in step)."""
        if t.timestamps is not None or not order.needs_folding(self.order_flags):
            return ev
        flags = self._process_flags.get(t.rank, self.order_flags)
        main_inside = None
        if t.thread == 0:
            flags = self._process_flags[t.rank] = order.learn_bodies(ev, flags)
            main_inside = self._main_inside.setdefault(t.rank, np.zeros(len(flags), dtype=np.uint8))
        elif t.rank in self._main_inside:
            flags = order.with_runs(flags, self._bodies, self._main_inside[t.rank])
        learnt = label != 0 and t.key in self._varying
        if not learnt:
            varying, made = order.learn_varying(ev, flags)
            self._varying[t.key] = (varying, np.zeros(len(flags), dtype=np.uint8), made)
        varying, opened, seen = self._varying[t.key]
        inside = self.free_ids if main_inside is None else main_inside
        folded, how = order.fold(ev, order.with_bodies(flags, varying), inside, opened, learnt, seen)
        if main_inside is not None:
            self.free_ids |= main_inside
        self.folded.add(how)
        if how.dropped:
            t.open_at_end = open_calls(ev)
        return folded

    def _add(self, t, ev, h, counted):
        self.events.append(ev)
        self.hashes.append(h)
        self.counted.append(counted)
        self._last[t.key] = (t, ev, h, counted)


class FoldCount:
    """What order folding did on a shard: traces, blocks, the events they held, events
    dropped with unfinished blocks (``stages.compare.order.Folding``, summed)."""

    def __init__(self):
        self.traces = self.blocks = self.held = self.dropped = 0

    def add(self, how):
        if how:
            self.traces += 1
            self.blocks += how.blocks
            self.held += how.held
            self.dropped += how.dropped

    def as_tuple(self):
        return self.traces, self.blocks, self.held, self.dropped
