"""Concept lattices of weighted contexts (paper section II-E and III-B): build, merge,
serialize, query, Jaccard similarity, DOT.

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

Serialization (``to_arrays`` / ``Lattice.from_arrays``): int64 arrays only ::

    meta            [format version, max_concepts]
    intent_indptr   (n+1,)  CSR of intents ...
    intent_attrs    attribute ids,
    intent_weights  their weights
    own_indptr      (n+1,)  CSR of the objects each concept introduces (its class)
    own_objects
    child_indptr    (n+1,)  CSR of lower covers, canonical indices, sorted
    children

JSM from the lattice (``jaccard_from_lattice``): for two classes, |A meet B| is the total
weight of the intent of their least common ancestor, found by walking the Hasse diagram
(climbing from one class's concept, or sweeping the lattice top-down; see
``LatticeCore.lca_inter``);
|A join B| = w(A) + w(B) - |A meet B|; J = one float division of the two exact int64
numbers (1.0 when both are empty).  ``jaccard_direct`` computes the same integers from a
CSR of intents; both divide in the same kernel, so they agree bit for bit.

Subsumption (``subsumption_from_inter``, Brendel 2013 section 3.5): the asymmetric
S[i, j] = |A_i meet A_j| / w(A_i), the share of i's weighted attributes that j also has
(1 on the diagonal and for an empty A_i).  S[i, j] = 1 means j subsumes i: j does at
least everything i does ("does more work than"), S[i, j] = 1 > S[j, i] means strictly
more; both below 1 means different work.  It divides the same exact intersection
integers as the JSM, so ``jaccard_subsumption_direct`` / ``jaccard_subsumption_rows``
give both matrices for the cost of one.
"""
from typing import NamedTuple

import numpy as np

from .rows import pairs_csr, row_labels, take_rows
from .. import config
from ..config import MAX_CONCEPTS
from ..errors import DiffTraceError, LatticeTooLarge  # noqa: F401  (re-exported)
from ..kernels import lattice as _k

DEFAULT_MAX_CONCEPTS = MAX_CONCEPTS     # one default for the library and the CLI (config.py)
FORMAT_VERSION = _k.FORMAT_VERSION      # a complete lattice
PARTIAL_FORMAT = 2                      # a partial one: format 1 plus the coverage array
ARRAY_KEYS = ("meta", "intent_indptr", "intent_attrs", "intent_weights",
              "own_indptr", "own_objects", "child_indptr", "children")
WORK_FLOOR = 100_000        # a budget never below this (~10 ms): small lattices are never cut
WORK_CEILING = 20_000_000   # nor above this (~2 s, ~300 MB of intents), however large the rows

__all__ = ["Lattice", "Coverage", "bounded", "merge_bounded", "work_budget", "merge", "merge_all",
           "jaccard_from_lattice", "jaccard_direct", "jaccard_subsumption_direct", "subsumption_direct",
           "cross_subsumption", "LatticeTooLarge", "DEFAULT_MAX_CONCEPTS"]

_LIMITS = {_k.TRIP_CONCEPTS: "concepts", _k.TRIP_WORK: "work"}


def _limit_error(core, what="the concept lattice"):
    """The user's words for a limit the kernel reported (its status code ``trip``)."""
    if core.trip == _k.TRIP_WORK:
        return LatticeTooLarge(f"{what} exceeds its work budget ({core.max_work:,} intent entries)")
    # no object id in it: which insertion hits the cap depends on the order of
    # insertion, so on the MPI sharding, and results must not
    return LatticeTooLarge(
        f"{what} needs more than {core.max_concepts} concepts, the cap. "
        f"Use coarser attributes (noFreq or log10 instead of actual counts, sing "
        f"instead of doub) or stricter filters, or raise --max-concepts.")


def work_budget(rows_size, work_factor=None):
    """The work budget of a bounded lattice whose class rows have ``rows_size`` entries
    (the sum over classes of 1 + the row's length)."""
    factor = config.LATTICE_WORK_FACTOR if work_factor is None else int(work_factor)
    return int(min(max(factor * int(rows_size), WORK_FLOOR), WORK_CEILING))


class Coverage(NamedTuple):
    """What a partial lattice covers: the lattice of the first ``classes`` of
    ``classes_total`` equivalence classes in the canonical order of their intents
    (lightest first), holding ``objects`` of ``objects_total`` objects; ``limit``: what
    the next class would have exceeded ("concepts": the cap; "work": the budget)."""
    classes: int
    classes_total: int
    objects: int
    objects_total: int
    limit: str
    work_budget: int
    work_factor: int
    max_concepts: int

    def short(self):
        """``partial: 12 of 64 classes``"""
        return f"partial: {self.classes} of {self.classes_total} classes"

    def describe(self, noun="traces"):
        """One sentence for the report and the ``lattice`` command."""
        why = (f"the concept cap ({self.max_concepts:,}; --max-concepts)" if self.limit == "concepts" else
               f"the work budget ({self.work_budget:,} intent entries, {self.work_factor} x the size of the "
               f"class rows, LATTICE_WORK_FACTOR)")
        return (f"{self.short()} ({self.objects} of {self.objects_total} {noun}): the lattice of the "
                f"classes taken lightest first (ascending total attribute weight), up to the first one "
                f"that would take it past {why}")

    def to_array(self):
        code = {v: k for k, v in _LIMITS.items()}[self.limit]
        return np.array([self.classes, self.classes_total, self.objects, self.objects_total, code,
                         self.work_budget, self.work_factor], dtype=np.int64)

    @classmethod
    def from_array(cls, arr, max_concepts):
        a = [int(x) for x in np.asarray(arr).reshape(-1)]
        if len(a) < 7 or a[4] not in _LIMITS or not (0 <= a[0] <= a[1] and 0 <= a[2] <= a[3]):
            raise ValueError(f"lattice arrays: bad coverage {a}")
        return cls(a[0], a[1], a[2], a[3], _LIMITS[a[4]], a[5], a[6], int(max_concepts))


def _i64(x):
    return np.ascontiguousarray(x, dtype=np.int64)


def _intent_arrays(attrs, weights):
    attrs = _i64(attrs).reshape(-1)
    if weights is None:
        weights = np.ones(len(attrs), dtype=np.int64)
    else:
        weights = _i64(weights).reshape(-1)
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
        self._left = None           # a partial lattice's classes left out (_Classes)

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
        if self._core.add_class(attrs, weights, _i64(obj_ids).reshape(-1)) < 0:
            raise _limit_error(self._core)

    def add_objects(self, obj_ids, indptr, indices, weights=None):
        """Insert objects obj_ids[r] with the intents of the rows of a CSR (each row's
        indices sorted and unique; weights None = binary), in row order.  Where the cap
        stops it, the objects before the one that would exceed it stay in."""
        self._writable()
        indices = _i64(indices)
        weights = np.ones(len(indices), dtype=np.int64) if weights is None else _i64(weights)
        obj_ids = _i64(obj_ids).reshape(-1)
        if self._core.add_csr(_i64(indptr), indices, weights, obj_ids) < len(obj_ids):
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

    def _canon(self):
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
        perm, _ = self._canon()
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
        perm, _ = self._canon()
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
        _, inv = self._canon()
        c = self._core.object_concept(int(obj_id))
        if c < 0:
            raise KeyError(f"object {obj_id} is not in the lattice")
        return int(inv[c])

    def object_concepts(self, obj_ids):
        """Concept indices of several objects (int64 array)."""
        _, inv = self._canon()
        return inv[self._core.object_concepts(_i64(obj_ids).reshape(-1))]

    def parents(self, i):
        """Sorted indices of the upper covers of concept i."""
        _, inv = self._canon()
        return np.sort(inv[self._core.parents(self._internal(i))])

    def children(self, i):
        """Sorted indices of the lower covers of concept i."""
        _, inv = self._canon()
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

    def to_arrays(self):
        """Lossless canonical serialization: dict of int64 numpy arrays (ARRAY_KEYS; a
        partial lattice also ``coverage``, and format PARTIAL_FORMAT in meta)."""
        perm, _ = self._canon()
        out = self._core.export(perm)
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
        meta = _i64(np.asarray(arrays["meta"]))
        if len(meta) < 2 or meta[0] not in (FORMAT_VERSION, PARTIAL_FORMAT):
            raise ValueError(f"lattice arrays: unsupported format {meta.tolist()} "
                             f"(this version reads formats {FORMAT_VERSION} and {PARTIAL_FORMAT})")
        if meta[0] == PARTIAL_FORMAT and "coverage" not in arrays:
            raise ValueError("lattice arrays: a partial lattice (format 2) without its coverage")
        out = cls(int(meta[1]) if max_concepts is None else int(max_concepts))
        n = len(np.asarray(arrays["intent_indptr"])) - 1
        if out._core.load(*[_i64(np.asarray(arrays[k])) for k in ARRAY_KEYS[1:]], trusted=trusted):
            raise LatticeTooLarge(f"the lattice has {n} concepts, more than the cap of "
                                  f"{out.max_concepts}; raise --max-concepts")
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

    def _classes(self):
        """All classes this lattice stands for: its own and, if partial, those left out."""
        inside = _Classes.sorted(*self._core.class_arrays())
        return inside if self._left is None else _Classes.union([inside, self._left])

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
        limit = _LIMITS.get(core.trip) if len(left) else None
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


class _Classes:
    """Equivalence classes in the canonical order of their intents (distinct rows): the
    intents as CSR (indptr, indices, weights) and each class's objects (optr, objs; sorted)."""

    def __init__(self, indptr, indices, weights, optr, objs):
        self.indptr, self.indices, self.weights, self.optr, self.objs = indptr, indices, weights, optr, objs

    @classmethod
    def sorted(cls, indptr, indices, weights, optr, objs):
        """Classes from rows that may repeat and come in any order (each row with its
        objects optr/objs): equal rows merged, then in canonical order."""
        indptr, indices, weights = _i64(indptr), _i64(indices), _i64(weights)
        optr, objs = _i64(optr), _i64(objs)
        perm, same = _k.csr_canonical_order(indptr, indices, weights)
        keep = perm[~same]
        class_of = np.empty(len(perm), dtype=np.int64)
        class_of[perm] = np.cumsum(~same) - 1             # each row's class
        obj_class = np.repeat(class_of, np.diff(optr))
        order = np.lexsort((objs, obj_class))
        new_optr = np.zeros(len(keep) + 1, dtype=np.int64)
        np.cumsum(np.bincount(obj_class, minlength=len(keep)), out=new_optr[1:])
        uptr, uind, uwt = take_rows(indptr, indices, weights, keep)
        return cls(uptr, uind, uwt, new_optr, objs[order])

    @classmethod
    def from_rows(cls, indptr, indices, weights, objs):
        """One object per CSR row (rows sorted and unique within, positive weights)."""
        objs = _i64(objs).reshape(-1)
        # equal rows first (hashing, linear), so that only the distinct ones are sorted
        firsts, inverse = np.unique(_k.csr_first_equal(indptr, indices, weights), return_inverse=True)
        inverse = inverse.reshape(-1)
        optr = np.zeros(len(firsts) + 1, dtype=np.int64)
        np.cumsum(np.bincount(inverse, minlength=len(firsts)), out=optr[1:])
        uptr, uind, uwt = take_rows(indptr, indices, weights, firsts)
        return cls.sorted(uptr, uind, uwt, optr, objs[np.argsort(inverse, kind="stable")])

    @classmethod
    def union(cls, parts):
        parts = [p for p in parts if p is not None]
        if len(parts) == 1:
            return parts[0]
        shift = np.cumsum([0] + [len(p.indices) for p in parts[:-1]])
        oshift = np.cumsum([0] + [len(p.objs) for p in parts[:-1]])
        indptr = np.concatenate([[0]] + [p.indptr[1:] + s for p, s in zip(parts, shift)]).astype(np.int64)
        optr = np.concatenate([[0]] + [p.optr[1:] + s for p, s in zip(parts, oshift)]).astype(np.int64)
        cat = lambda name: np.concatenate([getattr(p, name) for p in parts]).astype(np.int64)
        return cls.sorted(indptr, cat("indices"), cat("weights"), optr, cat("objs"))

    def __len__(self):
        return len(self.indptr) - 1

    @property
    def n_objects(self):
        return len(self.objs)

    def size(self):
        """The sum over classes of 1 + the row's length (what the work budget scales)."""
        return len(self) + len(self.indices)

    def row(self, r):
        a, b = self.indptr[r], self.indptr[r + 1]
        return self.indices[a:b], self.weights[a:b]

    def arrays(self):
        return self.indptr, self.indices, self.weights, self.optr, self.objs

    def slice(self, lo, hi=None):
        hi = len(self) if hi is None else hi
        a, b, oa, ob = self.indptr[lo], self.indptr[hi], self.optr[lo], self.optr[hi]
        return _Classes(self.indptr[lo:hi + 1] - a, self.indices[a:b], self.weights[a:b],
                        self.optr[lo:hi + 1] - oa, self.objs[oa:ob])

    def before(self, cut):
        """(the classes before the cut intent, the rest); None: no cut (all, none)."""
        if cut is None:
            return self, self.slice(len(self))
        m = int(np.count_nonzero(_k.csr_before(self.indptr, self.indices, self.weights, *cut)))
        return self.slice(0, m), self.slice(m)

    def to_dict(self):
        return dict(zip(("indptr", "indices", "weights", "optr", "objs"), self.arrays()))

    @classmethod
    def from_dict(cls, d):
        return cls(*[_i64(d[k]) for k in ("indptr", "indices", "weights", "optr", "objs")])


def _build(classes, max_concepts, work_factor):
    """The bounded lattice of ``classes`` (_Classes): the first m in canonical order."""
    budget = work_budget(classes.size(), work_factor)
    out = Lattice(max_concepts)
    out._bound(max_concepts, budget)
    n = out._core.add_classes(*classes.arrays(), trusted=True)
    return out._close(classes, classes.slice(n), budget, work_factor)


def bounded(indptr, indices=None, weights=None, obj_ids=None, max_concepts=DEFAULT_MAX_CONCEPTS,
            work_factor=None):
    """The lattice of the objects obj_ids[r] with the intents of the CSR rows (or a scipy
    CSR matrix alone), built on class representatives within the concept cap and the
    work budget: complete, or the stated partial lattice of the first classes in
    canonical order (``coverage``).  The same lattice however the objects are split and
    merged (``merge_bounded``)."""
    indptr, indices, weights = _csr_args(indptr, indices, weights)
    if obj_ids is None:
        obj_ids = np.arange(len(indptr) - 1, dtype=np.int64)
    factor = config.LATTICE_WORK_FACTOR if work_factor is None else int(work_factor)
    return _build(_Classes.from_rows(indptr, indices, weights, obj_ids), max_concepts, factor)


def merge_bounded(a, b, consume=False):
    """``bounded`` of the union of a's and b's objects (disjoint), from two bounded
    lattices (complete or partial): the same lattice as ``bounded`` over all objects at
    once.  The cap and work factor are a's.  ``consume``: a or b may be modified."""
    factor = a.work_factor if a.work_factor is not None else (b.work_factor or config.LATTICE_WORK_FACTOR)
    cap = a.max_concepts
    total = _Classes.union([a._classes(), b._classes()])
    budget = work_budget(total.size(), factor)
    if _later(b._cut(), a._cut()) or (b._cut() is None and a._cut() is None and b.n_objects > a.n_objects):
        a, b = b, a                             # start from the one that got furthest
    cut = a._cut()
    below, _ = b._classes().before(cut)
    if cut is not None and a._core.count_known(*below.arrays()[:3]) < len(below):
        # a stopped within one class of its budget, and b brings classes before its cut
        # that are new to it: the cut almost surely comes earlier (measured on LULESH:
        # trying first doubled the merges' time), so build from the classes directly
        return _build(total, cap, factor)
    out = a if consume else a.copy()
    out._bound(cap, budget)
    if out._core.add_classes(*below.arrays(), trusted=True) < len(below):
        return _build(total, cap, factor)       # the cut comes earlier: from the classes
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


# ----------------------------------------------------------------------------------------
# Jaccard similarity

def _expand(jc, inverse, expand):
    if not expand:
        return jc, inverse
    return jc.take(inverse, axis=0).take(inverse, axis=1)     # ~15x faster than np.ix_


_LCA_METHODS = {"auto": 0, "climb": 1, "sweep": 2}


def jaccard_from_lattice(lattice, object_ids=None, expand=True, method="auto"):
    """Pairwise (weighted) Jaccard similarity of objects, through the lattice.

    Works per pair of equivalence classes: intersection = intent weight of the least
    common ancestor of the two object concepts (walked in the Hasse diagram), union =
    w_i + w_j - intersection.  object_ids: the row/column order (default: all objects,
    sorted).  Returns the n x n float64 matrix, or with expand=False the class matrix and
    the class index of each object (J = Jc[np.ix_(inv, inv)]).  method: how the least
    common ancestors are walked ("climb" from each class through the cover edges, "sweep"
    the lattice top-down once per class, or "auto": the cheaper per class); all give
    the same numbers."""
    if method not in _LCA_METHODS:
        raise ValueError(f"method must be one of {', '.join(_LCA_METHODS)}, got {method!r}")
    core = lattice._core
    perm, _ = lattice._canon()          # a top-down order; refuses a lattice broken by the cap
    if object_ids is None:
        object_ids = core.object_ids()
    cons = core.object_concepts(_i64(object_ids).reshape(-1))
    cls, inverse = np.unique(cons, return_inverse=True)
    cls = np.ascontiguousarray(cls, dtype=np.int32)
    inter = core.lca_inter(cls, perm, _LCA_METHODS[method])
    w = np.ascontiguousarray(np.diagonal(inter), dtype=np.int64)
    return _expand(_k.jaccard_from_inter(inter, w), inverse.reshape(-1), expand)


def _csr_args(indptr, indices, weights):
    if indices is None and hasattr(indptr, "indptr"):      # a scipy.sparse CSR matrix
        m = indptr
        indptr, indices, weights = m.indptr, m.indices, m.data
    indptr, indices = _i64(indptr), _i64(indices)
    weights = np.ones(len(indices), dtype=np.int64) if weights is None else _i64(weights)
    if _k.check_csr_rows(indptr, indices, weights):
        rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        order = np.lexsort((indices, rows))
        indices, weights = indices[order], weights[order]
        dup = (np.diff(indices) == 0) & (np.diff(rows) == 0)
        if dup.any():
            k = int(np.flatnonzero(dup)[0])
            raise ValueError(f"row {rows[k]}: attribute {indices[k]} appears twice")
    return indptr, indices, weights


def _class_rows(indptr, indices, weights):
    """Distinct rows of a CSR of intents: (indptr, indices, weights of the distinct rows in
    order of first appearance, class index of each row, each class's total weight)."""
    indptr, indices, weights = _csr_args(indptr, indices, weights)
    first_of = row_labels(indptr, indices, weights)       # per row, the first equal row
    firsts, inverse = np.unique(first_of, return_inverse=True)   # ascending = first appearance
    uptr, uind, uwt = take_rows(indptr, indices, weights, firsts)
    return uptr, uind, uwt, inverse.reshape(-1).astype(np.int64), _row_totals(uptr, uwt)


def _row_totals(indptr, weights):
    """Each row's total weight = its intersection with itself (the JSM's diagonal)."""
    cumulative = np.concatenate([[0], np.cumsum(weights, dtype=np.int64)])
    return cumulative[indptr[1:]] - cumulative[indptr[:-1]]


INTER_BLOCK_BYTES = 64 << 20     # one row block of the intersection sums (float32 or int64)


def _class_matrices(indptr, indices, weights, jaccard=True, subsumption=False):
    """Class Jaccard and/or subsumption matrices of the distinct rows.  Returns ([J], [S],
    class index of each row)."""
    uptr, uind, uwt, inverse, w = _class_rows(indptr, indices, weights)
    jc, sc = _blocked_matrices(uptr, uind, uwt, w, 0, len(w), jaccard, subsumption)
    return jc, sc, inverse


def _blocked_matrices(indptr, indices, weights, w, lo, hi, jaccard, subsumption):
    """Rows lo..hi-1 of the Jaccard and/or subsumption matrix of the CSR rows (totals
    ``w``), the intersection sums computed in row blocks of about INTER_BLOCK_BYTES, so
    that only the float64 results are ever as large as the whole row range.  For the
    whole matrix only the upper triangle is summed and divided (the sums are symmetric),
    then mirrored: half the products and divisions, the same bits."""
    n = len(w)
    whole = lo == 0 and hi == n
    jc = np.empty((hi - lo, n), dtype=np.float64) if jaccard else None
    sc = np.empty((hi - lo, n), dtype=np.float64) if subsumption else None
    step = max(1, INTER_BLOCK_BYTES // (8 * max(n, 1)))
    layers = _Layers(indptr, indices, weights)
    for a in range(lo, hi, step):
        b = min(hi, a + step)
        c = a if whole else 0                   # first column summed
        block = layers.block(a, b, c)
        if jaccard:
            _k.jaccard_from_inter(block, w, a, jc[a - lo:b - lo], c)
        if subsumption:
            if whole:                           # exact sums kept; divided after mirroring
                sc[a:b, c:] = block
            else:
                sc[a - lo:b - lo] = subsumption_from_inter(block, w[a:b])
        del block
    if whole:
        for m in (jc, sc):
            if m is not None:
                _k.mirror_upper(m)
        if subsumption:
            for a in range(0, n, step):
                b = min(n, a + step)
                sc[a:b] = subsumption_from_inter(sc[a:b], w[a:b])
    return jc, sc


def jaccard_direct(indptr, indices=None, weights=None, expand=True):
    """Pairwise weighted Jaccard sum(min)/sum(max) straight from a CSR of intents (rows =
    objects; weights None = binary; or pass a scipy.sparse CSR matrix alone).  Identical
    rows are merged first; the result is bit-identical to jaccard_from_lattice.  With
    expand=False returns (class matrix, class index of each row); classes are numbered in
    order of first appearance."""
    jc, _, inverse = _class_matrices(indptr, indices, weights)
    return _expand(jc, inverse, expand)


# ----------------------------------------------------------------------------------------
# Subsumption (asymmetric; Brendel 2013, section 3.5, a Tversky index)

def subsumption_from_inter(inter, w_rows):
    """S[i, j] = inter[i, j] / w_i: the share of row i's (weighted) attributes that j also
    has.  ``inter`` holds rows lo..hi-1 of the intersection matrix, ``w_rows`` those rows'
    total weights; one float64 division of two exact integers per cell (so every path
    gives the same bits), and 1.0 where w_i = 0 (an empty trace is subsumed by anything).
    S[i, i] = 1; S[i, j] = 1 means j subsumes i (does at least everything i does)."""
    w_rows = np.asarray(w_rows, dtype=np.int64).reshape(-1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = inter.astype(np.float64) / w_rows.astype(np.float64)
    out[np.broadcast_to(w_rows == 0, out.shape)] = 1.0
    return out


def jaccard_subsumption_direct(indptr, indices=None, weights=None, expand=True):
    """Jaccard and subsumption matrices from one intersection matrix (the cost of one
    JSM): (J, S), or with expand=False (class J, class S, class index of each row).  J is
    bit-identical to ``jaccard_direct``; S as ``subsumption_from_inter``."""
    jc, sc, inverse = _class_matrices(indptr, indices, weights, subsumption=True)
    if not expand:
        return jc, sc, inverse
    return _expand(jc, inverse, True), _expand(sc, inverse, True)


def subsumption_direct(indptr, indices=None, weights=None, expand=True):
    """The N x N subsumption matrix S[i, j] = |A_i meet A_j| / |A_i| of the rows of a CSR
    of intents (arguments as ``jaccard_direct``); with expand=False (class matrix, class
    index of each row)."""
    _, sc, inverse = _class_matrices(indptr, indices, weights, jaccard=False, subsumption=True)
    return _expand(sc, inverse, expand)


def cross_subsumption(rows_a, rows_b):
    """Subsumption between two lists of rows ((sorted codes, weights) pairs), e.g. the
    faulty rows of suspects against the normal run's classes: (a_in_b, b_in_a), both
    len(rows_a) x len(rows_b) float64; a_in_b[i, j] = share of a_i's weight that b_j also
    has (1: b_j subsumes a_i), b_in_a[i, j] = share of b_j's weight that a_i has (1: a_i
    subsumes b_j); 1.0 for an empty row.  One ``min_sums`` over the stacked rows."""
    m = len(rows_a)
    indptr, indices, weights = _csr_args(*pairs_csr(list(rows_a) + list(rows_b)))
    inter = min_sums(indptr, indices, weights, 0, m)[:, m:]
    w = _row_totals(indptr, weights)
    return subsumption_from_inter(inter, w[:m]), subsumption_from_inter(inter.T, w[m:]).T


LAYERED_MAX_WEIGHT = 64     # up to this weight, min-sums go through sparse products


def min_sums(indptr, indices, weights, lo=0, hi=None):
    """inter[i, j] = sum over common attributes of min(w_i, w_j), rows lo..hi-1 against all.

    Exact int64 either way.  Small weights (presence, log2, log10) use matrix products over
    weight layers: min(a, b) = #{t >= 1 : a >= t and b >= t}, so the sum is the sum over t
    of the product of the indicator matrices [w >= t] (one layer for presence); large
    weights (actual counts) use the pairwise merge kernel."""
    return inter_sums(indptr, indices, weights, lo, hi).astype(np.int64, copy=False)


def inter_sums(indptr, indices, weights, lo=0, hi=None):
    """``min_sums`` without the final int64 copy: float32 when every layer went through
    BLAS and no row's total weight reaches 2^24 (so every sum is an exact float32
    integer), int64 otherwise.  Both Jaccard paths divide exactly the same integers."""
    n = len(indptr) - 1
    return _Layers(indptr, indices, weights).block(lo, n if hi is None else hi)


class _Layers:
    """The weight layers of a CSR of intents, prepared once for any number of row blocks
    of the intersection sums (dense 0/1 float32 matrices where BLAS pays, sparse
    indicator matrices elsewhere; the pairwise merge kernel for large weights)."""

    def __init__(self, indptr, indices, weights):
        import scipy.sparse as sp
        self.indptr, self.indices, self.weights = indptr, indices, weights
        self.n = n = len(indptr) - 1
        top = int(weights.max()) if len(weights) else 0
        self.merge = top > LAYERED_MAX_WEIGHT
        self.layers = []
        if self.merge or top == 0:
            return
        self.exact32 = int(_row_totals(indptr, weights).max()) < (1 << 24)
        cols = int(indices.max()) + 1
        for t in range(1, top + 1):
            layer = sp.csr_matrix(((weights >= t).astype(np.int64), indices, indptr), shape=(n, cols))
            layer.eliminate_zeros()
            if layer.nnz == 0:
                break
            used = np.unique(layer.indices)
            if _dense_pays(layer.nnz, n, len(used)):
                # SPMD traces share most attributes: a dense 0/1 product through BLAS beats
                # the sparse one by ~8x there, and float32 sums of 0/1 terms are exact below 2^24
                dense = np.zeros((n, len(used)), dtype=np.float32)
                rows = np.repeat(np.arange(n), np.diff(layer.indptr))
                dense[rows, np.searchsorted(used, layer.indices)] = 1.0
                self.layers.append((dense, None))
            else:
                self.layers.append((None, (layer, layer.T.tocsr())))

    def block(self, lo, hi, col_lo=0):
        """Rows lo..hi-1, columns col_lo..n-1 of the intersection sums."""
        if self.merge:
            args = (self.indptr, np.ascontiguousarray(self.indices), np.ascontiguousarray(self.weights))
            if lo == 0 and hi == self.n:
                full = _k.csr_min_sums(*args)
            else:
                full = _k.csr_min_sums_rows(*args, lo, hi)
            return full if col_lo == 0 else np.ascontiguousarray(full[:, col_lo:])
        inter = None
        for dense, sparse in self.layers:
            if dense is not None:
                part = dense[lo:hi] @ dense[col_lo:].T
            else:
                part = (sparse[0][lo:hi] @ sparse[1]).toarray()
                if col_lo:
                    part = np.ascontiguousarray(part[:, col_lo:])
            if inter is None:
                inter = part if (part.dtype == np.int64 or self.exact32) else part.astype(np.int64)
            elif inter.dtype == part.dtype:
                inter += part
            else:
                inter = inter.astype(np.int64, copy=False)
                np.add(inter, part, out=inter, casting="unsafe")
            del part
        return inter if inter is not None else np.zeros((hi - lo, self.n - col_lo), dtype=np.int64)


DENSE_MIN_DENSITY = 0.02             # share of ones in the used columns above which BLAS wins
DENSE_MAX_BYTES = 1 << 30            # the dense 0/1 matrix of one layer


def _dense_pays(nnz, n_rows, n_cols):
    return (n_cols < (1 << 24) and n_rows * n_cols * 4 <= DENSE_MAX_BYTES
            and nnz >= DENSE_MIN_DENSITY * n_rows * n_cols)


def _row_range(indptr, indices, weights, lo, hi, jaccard, subsumption):
    indptr, indices, weights = _csr_args(indptr, indices, weights)
    return _blocked_matrices(indptr, indices, weights, _row_totals(indptr, weights), lo, hi, jaccard, subsumption)


def jaccard_rows(indptr, indices, weights, lo, hi):
    """Rows lo..hi-1 of the Jaccard matrix of the (distinct) CSR rows, bit-identical to the
    same rows of ``jaccard_direct(..., expand=False)[0]`` (the same exact sums and the one
    division kernel)."""
    return _row_range(indptr, indices, weights, lo, hi, True, False)[0]


def jaccard_subsumption_rows(indptr, indices, weights, lo, hi):
    """Rows lo..hi-1 of the Jaccard and of the subsumption matrix of the (distinct) CSR
    rows, from the same intersection blocks; bit-identical to the same rows of
    ``jaccard_subsumption_direct(..., expand=False)``."""
    return _row_range(indptr, indices, weights, lo, hi, True, True)


# ----------------------------------------------------------------------------------------
# DOT export: a view, moved to views.dot; importable from here only until cli.py and
# tests/test_lattice.py import it from there
