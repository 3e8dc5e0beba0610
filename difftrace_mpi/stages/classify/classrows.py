"""The equivalence classes of a set of objects (distinct intents, each with its objects), in
the canonical order of their intents: what a bounded concept lattice is built from and
carries along (the classes it left out), so that MPI partials merge to the one-rank lattice;
and what a partial lattice covers of them (``Coverage``)."""
from typing import NamedTuple

import numpy as np

from .rows import int64_array, take_rows
from ...kernels import lattice as _k


class ClassRows:
    """Equivalence classes in the canonical order of their intents (distinct rows): the
    intents as CSR (indptr, indices, weights) and each class's objects (optr, objs; sorted)."""

    def __init__(self, indptr, indices, weights, optr, objs):
        self.indptr, self.indices, self.weights, self.optr, self.objs = indptr, indices, weights, optr, objs

    @classmethod
    def sorted(cls, indptr, indices, weights, optr, objs):
        """Classes from rows that may repeat and come in any order (each row with its
        objects optr/objs): equal rows merged, then in canonical order."""
        indptr, indices, weights = int64_array(indptr), int64_array(indices), int64_array(weights)
        optr, objs = int64_array(optr), int64_array(objs)
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
        objs = int64_array(objs).reshape(-1)
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
        return ClassRows(self.indptr[lo:hi + 1] - a, self.indices[a:b], self.weights[a:b],
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
        return cls(*[int64_array(d[k]) for k in ("indptr", "indices", "weights", "optr", "objs")])


# why a bounded build stopped (the kernel's status codes): a Coverage's ``limit``
LIMITS = {_k.TRIP_CONCEPTS: "concepts", _k.TRIP_WORK: "work"}


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
        code = {v: k for k, v in LIMITS.items()}[self.limit]
        return np.array([self.classes, self.classes_total, self.objects, self.objects_total, code,
                         self.work_budget, self.work_factor], dtype=np.int64)

    @classmethod
    def from_array(cls, arr, max_concepts):
        a = [int(x) for x in np.asarray(arr).reshape(-1)]
        if len(a) < 7 or a[4] not in LIMITS or not (0 <= a[0] <= a[1] and 0 <= a[2] <= a[3]):
            raise ValueError(f"lattice arrays: bad coverage {a}")
        return cls(a[0], a[1], a[2], a[3], LIMITS[a[4]], a[5], a[6], int(max_concepts))
