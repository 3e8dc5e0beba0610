"""Concept lattices of weighted contexts (paper section II-E and III-B): build, merge,
serialize, query.

Semantics
---------
Objects are traces; each has a *weighted intent*: sorted unique attribute ids (int64) with
positive integer weights (all 1 for a binary context).  The meet of two intents is the
elementwise min over their common attributes; ``x <= y`` ("y dominates x") when every
attribute of x is in y with at least x's weight.  The lattice holds every meet of a
non-empty set of object intents, plus the bottom concept whose intent is the join
(elementwise max) of all object intents (its extent is empty unless an object has exactly
that intent).  A concept's extent is the set of objects whose intent dominates its
intent.  Objects with identical intents form an equivalence class and share one object
concept.  Upper covers are "parents" (more general: larger extent, smaller intent); the
top (meet of all objects) has none, the bottom has no children.

Algorithm
---------
Insertion is AddIntent (van der Merwe, Obiedkov & Kourie, "AddIntent: a new incremental
algorithm for constructing concept lattices", ICFCA 2004), an incremental algorithm in the
family of Godin's that maintains the Hasse diagram after every object.  It is written only
in terms of the order and the meet, so it applies unchanged to weighted intents (multisets
under min form a lattice).  An insertion (kernel ``_insert``):

1. an intent x that already is a concept (hash lookup) just joins that concept's class;
2. if x is below the bottom (the join J of all intents so far): AddIntent(x, bottom):
   climb from the bottom to the most general concept whose intent dominates x; if equal,
   done; otherwise obtain, for each parent of that generator, the concept for
   (parent meet x) (found by hash, else recursively by AddIntent); keep the most specific
   of them as the new concept's parents, move the covers, hang the generator below;
3. otherwise (x has new attributes or larger weights) every old concept y has
   y meet x = y meet x' with x' = x meet J, so the new meets are those of x': get the
   concept K of x' (hash, else AddIntent(x', bottom)), hang x below K (or, when K was
   just created and has an empty extent, give K the intent x), and grow the bottom to
   J join x (an empty-extent bottom is re-labelled, otherwise a new bottom goes below).
   This avoids meeting x with every co-atom when objects carry rank-unique attributes.

AddIntent's recursion runs on an explicit stack (weighted lattices can be 10^5 deep).
Cost: one hash lookup per object of an existing class; a new intent costs, roughly, one
meet per parent of its generator (all co-atoms in the worst case), so building from many
pairwise-incomparable distinct intents is quadratic in their number.

Extents are not stored: each concept keeps only the objects it *introduces* (its class),
and an extent is the union over its down-set, so an insertion costs nothing per object
above its concept.  All of this is Cython (``kernels/lattice.pyx``, C++ vectors).

Every insertion is atomic.  The concept cap (``max_concepts``) is checked each time a
concept is created; an insertion that would exceed it is undone and raises
:class:`LatticeTooLarge`: the lattice stays that of the objects inserted before.

Bounded lattices (``bounded``, ``merge_bounded``: what ``analyze`` builds)
--------------------------------------------------------------------------
A lattice can be exponential in its objects, so ``analyze`` never builds one at any cost.
It inserts *equivalence classes* (each distinct row once, with all its objects) in the
canonical order of their intents (lightest first, see below) and stops before the first
class that would take the lattice past the concept cap or past its *work budget*: the
lattice's work is the sum over its concepts of 1 + the intent's length (its size in
intent entries, which its time and memory follow), and the budget is
``work_factor`` (config ``LATTICE_WORK_FACTOR``) times the size of the class rows (the
sum over classes of 1 + the row's length), kept between ``WORK_FLOOR`` and
``WORK_CEILING``: a count, not seconds, so the result is the same on any machine.  The
result is the lattice of the first m classes in that order, m as large as the limits
allow; when m is short of all classes it carries a :class:`Coverage` (``coverage``)
saying so, stored with it (format 2) and shown by the report and the ``lattice`` command.

Both limits are functions of the set of classes that never decrease when a class is
added (every meet of old objects stays a concept with the same intent; the bottom's
intent only grows), so the first class that would exceed them depends only on the set
of classes, and the MPI tree can merge partials and still end with exactly the
one-rank lattice: ``merge_bounded`` starts from the partial that got furthest (complete
beats partial), inserts the other's classes that come before its cut, and if they fit,
goes on with the remaining classes of both in canonical order; if they do not fit, the
cut comes earlier, and it rebuilds from the union of the classes (which partials carry
along: the ones left out of their lattice, ``_left``).  Which limit stopped it is fixed
the same way: a bounded insertion runs on past the concept cap (as far as the work
budget allows) and the cap is judged on the whole insertion.

Canonical order
---------------
Public concept indices are positions in the canonical order: ascending total intent
weight, ties broken by the intent's (attribute, weight) sequence compared
lexicographically (a prefix first).  Intents are distinct, so the order is total; it
depends only on the set of concepts, never on insertion order.  Since a strictly
dominating intent has a strictly larger total, it is a linear extension of the lattice
order: the top is index 0 and the bottom index n-1.  ``to_arrays`` writes concepts in this
order with sorted object lists and sorted child lists, so equal lattices serialize to
identical arrays (``meta`` also records the cap; ``==`` ignores it).

Merge (``merge``/``merge_all``): a copy of the lattice with more classes receives the
other's object concepts, one insertion per distinct intent with all its objects; the
result equals the lattice built from all objects in any order.

Serialization (``to_arrays`` / ``Lattice.from_arrays``), int64 arrays: ``meta`` [format
version, max_concepts]; three CSRs of n rows: the intents (``intent_indptr``,
``intent_attrs``, ``intent_weights``), the objects each concept introduces (its class:
``own_indptr``, ``own_objects``), the lower covers (``child_indptr``, ``children``:
canonical indices, sorted).

The JSMs of these lattices and of CSR rows directly are in ``stages.classify.jsm``.
"""
import numpy as np

from .classrows import LIMITS, ClassRows, Coverage
from .rows import csr_args, int64_array
from ... import config
from ...config import MAX_CONCEPTS
from ...errors import LatticeTooLarge  # noqa: F401  (re-exported)
from ...kernels import lattice as _k

DEFAULT_MAX_CONCEPTS = MAX_CONCEPTS     # one default for the library and the CLI (config.py)
FORMAT_VERSION = _k.FORMAT_VERSION      # a complete lattice
PARTIAL_FORMAT = 2                      # a partial one: format 1 plus the coverage array
ARRAY_KEYS = ("meta", "intent_indptr", "intent_attrs", "intent_weights",
              "own_indptr", "own_objects", "child_indptr", "children")
WORK_FLOOR = 100_000        # a budget never below this (~10 ms): small lattices are never cut
WORK_CEILING = 20_000_000   # nor above this (~2 s, ~300 MB of intents), however large the rows

__all__ = ["Lattice", "Coverage", "bounded", "merge_bounded", "work_budget", "merge", "merge_all",
           "LatticeTooLarge", "DEFAULT_MAX_CONCEPTS"]

def _limit_error(core, what="the concept lattice"):
    """The user's words for a limit the kernel reported (its status code ``trip``)."""
    if core.trip == _k.TRIP_WORK:
        return LatticeTooLarge(f"{what} exceeds its work budget ({core.max_work:,} intent entries)")
    # no object id in it: which insertion hits the cap depends on the order of
    # insertion, so on the MPI sharding, and results must not
    return LatticeTooLarge(
        f"{what} needs more than {core.max_concepts} concepts, the cap. "
        f"Use coarser attributes (noFreq or log10 instead of actual counts, sing "
        f"instead of doub) or stricter filters, or raise the cap (--max-concepts, max_concepts=).")


def work_budget(rows_size, work_factor=None):
    """The work budget of a bounded lattice whose class rows have ``rows_size`` entries
    (the sum over classes of 1 + the row's length)."""
    factor = config.LATTICE_WORK_FACTOR if work_factor is None else int(work_factor)
    return int(min(max(factor * int(rows_size), WORK_FLOOR), WORK_CEILING))


def _intent_arrays(attrs, weights):
    attrs = int64_array(attrs).reshape(-1)
    if weights is None:
        weights = np.ones(len(attrs), dtype=np.int64)
    else:
        weights = int64_array(weights).reshape(-1)
    return attrs, weights


class Lattice:
    """A concept lattice of weighted intents, built one object (or class) at a time.

    Concept indices in every query are canonical positions (see the module docstring);
    they stay valid until the lattice is modified.
    """

    def __init__(self, max_concepts=DEFAULT_MAX_CONCEPTS):
        self._core = _k.LatticeCore(int(max_concepts))
        self._cache_version = None
        self.coverage = None        # a Coverage where this is a partial lattice (bounded)
        self.work_factor = None     # the bounded build's factor (None: not bounded)
        self._left = None           # a partial lattice's classes left out (ClassRows)

    # -- building ---------------------------------------------------------------------
    # Each insertion is atomic: one that would exceed the concept cap is undone and
    # raises LatticeTooLarge (the kernel reports it as a status code).

    def _writable(self):
        if self.coverage is not None:
            raise ValueError("a partial lattice takes no more objects (it is the lattice of a stated "
                             "prefix of its classes); merge it with merge_bounded")

    def add_object(self, obj_id, attrs, weights=None):
        """Insert object obj_id with intent (attrs sorted unique int64, positive int64
        weights; None = binary).  Returns nothing; raises ValueError on a repeated id."""
        self.add_class(np.array([obj_id], dtype=np.int64), attrs, weights)

    def add_class(self, obj_ids, attrs, weights=None):
        """Insert several objects that share one intent (one equivalence class)."""
        self._writable()
        attrs, weights = _intent_arrays(attrs, weights)
        if self._core.add_class(attrs, weights, int64_array(obj_ids).reshape(-1)) < 0:
            raise _limit_error(self._core)

    def add_objects(self, obj_ids, indptr, indices, weights=None):
        """Insert objects obj_ids[r] with the intents of the rows of a CSR (each row's
        indices sorted and unique; weights None = binary), in row order.  Where the cap
        stops it, the objects before the one that would exceed it stay in."""
        self._writable()
        indices = int64_array(indices)
        weights = np.ones(len(indices), dtype=np.int64) if weights is None else int64_array(weights)
        obj_ids = int64_array(obj_ids).reshape(-1)
        if self._core.add_csr(int64_array(indptr), indices, weights, obj_ids) < len(obj_ids):
            raise _limit_error(self._core)

    def copy(self):
        out = Lattice.__new__(Lattice)
        out._core = self._core.copy()
        out._cache_version = None
        out.coverage, out.work_factor, out._left = self.coverage, self.work_factor, self._left
        return out

    @property
    def max_concepts(self):
        return self._core.max_concepts

    @property
    def work(self):
        """The lattice's size in intent entries: the sum over concepts of 1 + intent length."""
        return self._core.work

    @property
    def partial(self):
        """Whether this is the lattice of only some of its input's classes (``coverage``)."""
        return self.coverage is not None

    # -- canonical indexing -----------------------------------------------------------

    def canonical_order(self):
        """(perm, inverse): concept i of the core is canonical index inverse[i], canonical
        index c is the core's concept perm[c] (top-down: a linear extension of the order)."""
        core = self._core
        if self._cache_version != core.version:
            perm = core.canonical_order()
            inv = np.empty(len(perm), dtype=np.int64)
            inv[perm] = np.arange(len(perm), dtype=np.int64)
            self._perm, self._inv = perm, inv
            self._extents = None
            self._cache_version = core.version
        return self._perm, self._inv

    def _internal(self, i):
        perm, _ = self.canonical_order()
        n = len(perm)
        i = int(i)
        if not 0 <= i < n:
            raise IndexError(f"concept index {i} out of range (lattice has {n} concepts)")
        return perm[i]

    # -- queries ----------------------------------------------------------------------

    @property
    def n_concepts(self):
        return self._core.n_concepts

    def __len__(self):
        return self._core.n_concepts

    @property
    def n_objects(self):
        return self._core.n_objects

    def object_ids(self):
        """All object ids, sorted."""
        return self._core.object_ids()

    @property
    def top(self):
        """Index of the top concept (0), or None for an empty lattice."""
        return 0 if self.n_concepts else None

    @property
    def bottom(self):
        """Index of the bottom concept (n_concepts - 1), or None for an empty lattice."""
        return self.n_concepts - 1 if self.n_concepts else None

    def intent(self, i):
        """(attrs, weights) of concept i."""
        return self._core.intent(self._internal(i))

    def intent_weight(self, i):
        """Total weight of the intent of concept i."""
        return int(self._core.total(self._internal(i)))

    def extent(self, i):
        """Sorted object ids of the extent of concept i."""
        return self._core.extent(self._internal(i))

    def own_objects(self, i):
        """Sorted object ids that concept i introduces (its class; empty unless it is an
        object concept)."""
        return self._core.own_objects(self._internal(i))

    def concept(self, i):
        a, w = self.intent(i)
        return a, w, self.extent(i)

    def _all_extents(self):
        perm, _ = self.canonical_order()
        if self._extents is None:
            self._extents = self._core.extents(perm)
        return self._extents

    def concepts(self):
        """Iterator of (intent attrs, intent weights, sorted extent) in canonical order."""
        arrs = self.to_arrays()
        ip, at, wt = arrs["intent_indptr"], arrs["intent_attrs"], arrs["intent_weights"]
        eip, eob = self._all_extents()
        for i in range(len(ip) - 1):
            yield (at[ip[i]:ip[i + 1]], wt[ip[i]:ip[i + 1]], eob[eip[i]:eip[i + 1]])

    def object_concept(self, obj_id):
        """Index of the concept whose intent equals the object's intent."""
        _, inv = self.canonical_order()
        c = self._core.object_concept(int(obj_id))
        if c < 0:
            raise KeyError(f"object {obj_id} is not in the lattice")
        return int(inv[c])

    def object_concepts(self, obj_ids):
        """Concept indices of several objects (int64 array)."""
        _, inv = self.canonical_order()
        return inv[self._core.object_concepts(int64_array(obj_ids).reshape(-1))]

    def parents(self, i):
        """Sorted indices of the upper covers of concept i."""
        _, inv = self.canonical_order()
        return np.sort(inv[self._core.parents(self._internal(i))])

    def children(self, i):
        """Sorted indices of the lower covers of concept i."""
        _, inv = self.canonical_order()
        return np.sort(inv[self._core.children(self._internal(i))])

    def cover_edges(self):
        """(E, 2) int64 array of (parent, child) index pairs, sorted."""
        arrs = self.to_arrays()
        ip = arrs["child_indptr"]
        parents = np.repeat(np.arange(len(ip) - 1, dtype=np.int64), np.diff(ip))
        return np.stack([parents, arrs["children"]], axis=1)

    def classes(self):
        """Equivalence classes: one sorted object-id array per object concept, ordered by
        their smallest object id."""
        arrs = self.to_arrays()
        ip, ob = arrs["own_indptr"], arrs["own_objects"]
        out = [ob[ip[i]:ip[i + 1]] for i in range(len(ip) - 1) if ip[i + 1] > ip[i]]
        out.sort(key=lambda a: int(a[0]))
        return out

    # -- serialization and comparison -------------------------------------------------

    def to_arrays(self, stored=False):
        """Lossless canonical serialization: dict of int64 numpy arrays (ARRAY_KEYS; a
        partial lattice also ``coverage``, and format PARTIAL_FORMAT in meta).  ``stored``:
        the intents as the results file keeps them, each as a parent and the entries added
        to its intent (``kernels.lattice.LatticeCore.export_stored``; ``h5tables.intents_whole``
        makes them whole again)."""
        perm, _ = self.canonical_order()
        out = self._core.export_stored(perm) if stored else self._core.export(perm)
        if self.coverage is None:
            out["meta"] = np.array([FORMAT_VERSION, self._core.max_concepts], dtype=np.int64)
        else:
            out["meta"] = np.array([PARTIAL_FORMAT, self._core.max_concepts], dtype=np.int64)
            out["coverage"] = self.coverage.to_array()
        return out

    @classmethod
    def from_arrays(cls, arrays, max_concepts=None, trusted=False):
        """Rebuild a lattice from to_arrays() output (any mapping with those keys, e.g. an
        h5py group); the cap is the stored one unless max_concepts is given.  ``trusted``:
        arrays this code just exported (between MPI ranks): objects are not checked for
        repeats, and the object map is built on the first query."""
        missing = [k for k in ARRAY_KEYS if k not in arrays]
        if missing:
            raise ValueError(f"lattice arrays: missing {', '.join(missing)}")
        meta = int64_array(np.asarray(arrays["meta"]))
        if len(meta) < 2 or meta[0] not in (FORMAT_VERSION, PARTIAL_FORMAT):
            raise ValueError(f"lattice arrays: unsupported format {meta.tolist()} "
                             f"(this version reads formats {FORMAT_VERSION} and {PARTIAL_FORMAT})")
        if meta[0] == PARTIAL_FORMAT and "coverage" not in arrays:
            raise ValueError("lattice arrays: a partial lattice (format 2) without its coverage")
        out = cls(int(meta[1]) if max_concepts is None else int(max_concepts))
        n = len(np.asarray(arrays["intent_indptr"])) - 1
        if out._core.load(*[int64_array(np.asarray(arrays[k])) for k in ARRAY_KEYS[1:]], trusted=trusted):
            raise LatticeTooLarge(f"the lattice has {n} concepts, more than the cap of "
                                  f"{out.max_concepts}; raise the cap (--max-concepts, max_concepts=)")
        if meta[0] == PARTIAL_FORMAT:
            out.coverage = Coverage.from_array(arrays["coverage"], meta[1])
            out.work_factor = out.coverage.work_factor
        return out

    def __eq__(self, other):
        if not isinstance(other, Lattice):
            return NotImplemented
        a, b = self.to_arrays(), other.to_arrays()
        return self.coverage == other.coverage and all(np.array_equal(a[k], b[k]) for k in ARRAY_KEYS[1:])

    __hash__ = None

    def __repr__(self):
        part = f", {self.coverage.short()}" if self.coverage is not None else ""
        return (f"<Lattice: {self.n_concepts} concepts, {self.n_objects} objects, "
                f"cap {self.max_concepts}{part}>")

    # -- bounded building (see the module docstring) ----------------------------------

    def class_rows(self):
        """All classes this lattice stands for (``ClassRows``): its own and, if partial,
        those left out."""
        inside = ClassRows.sorted(*self._core.class_arrays())
        return inside if self._left is None else ClassRows.union([inside, self._left])

    def _cut(self):
        """The intent of the first class left out (None: none was)."""
        return None if self._left is None or not len(self._left) else self._left.row(0)

    def _bound(self, max_concepts, budget):
        core = self._core
        core.set_max_concepts(int(max_concepts))
        core.set_max_work(int(budget))
        core.soft_cap = True

    def _close(self, total, left, budget, work_factor):
        """After a bounded build over the classes ``total``: record what it covers
        (``left``: the classes that were not taken, canonical order)."""
        core = self._core
        limit = LIMITS.get(core.trip) if len(left) else None
        core.set_max_work(_k.NO_LIMIT)
        core.soft_cap = False
        self.work_factor = int(work_factor)
        self._cache_version = None
        if limit is None:
            self.coverage, self._left = None, None
            return self
        self._left = left
        self.coverage = Coverage(len(total) - len(left), len(total), total.n_objects - left.n_objects,
                                 total.n_objects, limit, int(budget), int(work_factor), core.max_concepts)
        return self


def _later(x, y):
    """Whether cut x comes after cut y (None: no cut, after everything)."""
    if x is None:
        return y is not None
    if y is None:
        return False
    ya, yw = y
    return not bool(_k.csr_before(np.array([0, len(x[0])], dtype=np.int64), x[0], x[1], ya, yw)[0]) \
        and not (np.array_equal(x[0], ya) and np.array_equal(x[1], yw))


# where a trial judges its pace (``_grown``), in fractions of its classes' size, and by how much
# it must look to pass its budget to stop: on the real LULESH pairs at 2-8 ranks, no trial that
# completes stopped, with 1.25 some near their budget did
TRIAL_CHECKS = (1 / 64, 1 / 32, 1 / 16, 3 / 32, 1 / 8, 3 / 16, 1 / 4, 3 / 8, 1 / 2, 3 / 4)
PACE_MARGIN = 1.5


def _grown(classes, max_concepts, budget, checks=()):
    """(a lattice grown from ``classes`` in canonical order within cap and budget, classes
    taken).  ``checks``: fractions of their size after which it also stops where the work
    at the pace so far, both over the whole way and over the last stretch, would end past
    PACE_MARGIN x the budget (classes come lightest first and each costs more as the
    lattice grows: it would stop anyway; an expensive head alone is not enough)."""
    out = Lattice(max_concepts)
    out._bound(max_concepts, budget)
    total = classes.size()
    before = np.arange(len(classes) + 1) + classes.indptr        # the size of the classes before each
    done, last = 0, None
    for fraction in tuple(checks) + (1,):
        upto = max(int(np.searchsorted(before, fraction * total, side="right")) - 1, done)
        if upto > done:
            taken = out._core.add_classes(*classes.slice(done, upto).arrays(), trusted=True)
            done += taken
            if done < upto:
                break
        if done == len(classes):
            break
        work, size = out._core.work, int(before[done])
        if last is not None and size > last[1]:
            stretch = (work - last[0]) / (size - last[1])
            if min(work * total / size, work + stretch * (total - size)) > PACE_MARGIN * budget:
                break
        last = (work, size)
    return out, done


def build(classes, max_concepts, work_factor):
    """The bounded lattice of ``classes`` (ClassRows): the first m in canonical order."""
    budget = work_budget(classes.size(), work_factor)
    out, n = _grown(classes, max_concepts, budget)
    return out._close(classes, classes.slice(n), budget, work_factor)


def complete_within(classes, max_concepts, work_factor, share):
    """The complete lattice of ``classes`` if building it stays within the cap and 1/share
    of their work budget; else None (a build stopped there, or early where its pace says
    it would, is dropped, not kept partial: which classes a partial lattice holds is
    decided by the whole job's classes; real LULESH 216 x 1 on 2 ranks: 16 of 32 trials
    dropped early, their CPU 0.22 -> 0.06 s)."""
    budget = work_budget(classes.size(), work_factor) // int(share)
    out, n = _grown(classes, max_concepts, budget, TRIAL_CHECKS)
    return out._close(classes, classes.slice(n), budget, work_factor) if n == len(classes) else None


def merged_work_factor(a, b):
    """The work factor of a merge of a and b (a's, else b's, else the default)."""
    return a.work_factor if a.work_factor is not None else (b.work_factor or config.LATTICE_WORK_FACTOR)


def bounded(indptr, indices=None, weights=None, obj_ids=None, max_concepts=DEFAULT_MAX_CONCEPTS,
            work_factor=None):
    """The lattice of the objects obj_ids[r] with the intents of the CSR rows (or a CSR
    matrix alone, ``rows.SparseRows``), built on class representatives within the concept
    cap and the work budget: complete, or the stated partial lattice of the first classes
    in canonical order (``coverage``).  The same lattice however the objects are split and
    merged (``merge_bounded``)."""
    indptr, indices, weights = csr_args(indptr, indices, weights)
    if obj_ids is None:
        obj_ids = np.arange(len(indptr) - 1, dtype=np.int64)
    factor = config.LATTICE_WORK_FACTOR if work_factor is None else int(work_factor)
    return build(ClassRows.from_rows(indptr, indices, weights, obj_ids), max_concepts, factor)


def merge_bounded(a, b, consume=False):
    """``bounded`` of the union of a's and b's objects (disjoint), from two bounded
    lattices (complete or partial): the same lattice as ``bounded`` over all objects at
    once.  The cap and work factor are a's.  ``consume``: a or b may be modified."""
    factor = merged_work_factor(a, b)
    cap = a.max_concepts
    total = ClassRows.union([a.class_rows(), b.class_rows()])
    budget = work_budget(total.size(), factor)
    if _later(b._cut(), a._cut()) or (b._cut() is None and a._cut() is None and b.n_objects > a.n_objects):
        a, b = b, a                             # start from the one that got furthest
    cut = a._cut()
    below, _ = b.class_rows().before(cut)
    if cut is not None and a._core.count_known(*below.arrays()[:3]) < len(below):
        # a stopped within one class of its budget, and b brings classes before its cut
        # that are new to it: the cut almost surely comes earlier (measured on LULESH:
        # trying first doubled the merges' time), so build from the classes directly
        return build(total, cap, factor)
    out = a if consume else a.copy()
    out._bound(cap, budget)
    if out._core.add_classes(*below.arrays(), trusted=True) < len(below):
        return build(total, cap, factor)       # the cut comes earlier: from the classes
    _, rest = total.before(cut)
    n = out._core.add_classes(*rest.arrays(), trusted=True)
    return out._close(total, rest.slice(n), budget, factor)


# ----------------------------------------------------------------------------------------
# merge

def merge(a, b, max_concepts=None, consume=False, disjoint=False):
    """The lattice of the union of a's and b's objects (object ids must be disjoint).

    A copy of the lattice with more equivalence classes receives the other's object
    concepts, one insertion per distinct intent carrying all its objects (the result does
    not depend on which is copied).  Neither input is modified, unless ``consume``: then
    the receiving lattice is a or b itself, not a copy (the tree reduction's partials,
    which nobody reads again), and neither may be used afterwards.  ``disjoint``: the
    caller guarantees that no object is in both (the MPI tree's shards): not checked, and
    no per-object work until an object is queried.  The cap is a's unless max_concepts is
    given; exceeding it raises LatticeTooLarge.  Partial lattices merge with
    ``merge_bounded`` only."""
    if a.coverage is not None or b.coverage is not None:
        raise ValueError("partial lattices merge with merge_bounded, which keeps their coverage stated")
    cap = a.max_concepts if max_concepts is None else int(max_concepts)
    if len(b._core.class_concepts()) > len(a._core.class_concepts()):
        a, b = b, a
    out = a if consume else a.copy()
    out._core.set_max_concepts(cap)
    out.work_factor = None
    # b's concepts in reverse creation order (no measurable difference to other orders
    # on the benchmarks; any order gives the same lattice)
    order = np.arange(b._core.n_concepts - 1, -1, -1, dtype=np.int32)
    if out._core.merge_from(b._core, order, disjoint) < len(order):
        raise _limit_error(out._core, "the merged concept lattice")
    return out


def merge_all(lattices, max_concepts=None):
    """Binomial-tree merge (round r merges i with i + 2**r), as across MPI ranks."""
    parts = list(lattices)
    if not parts:
        return Lattice() if max_concepts is None else Lattice(max_concepts)
    step = 1
    while step < len(parts):
        for i in range(0, len(parts) - step, 2 * step):
            parts[i] = merge(parts[i], parts[i + step], max_concepts)
        step *= 2
    if len(parts) == 1:
        return merge(parts[0], Lattice(), max_concepts)
    return parts[0]
