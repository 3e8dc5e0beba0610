"""How the verdict orders its candidates: a list of named criteria.

Candidates (``Candidate``) are the traces that left the normal path, the processes that
died, and, when neither exists, the stopped traces that stand out.  Two candidates are
compared criterion by criterion, in ``CRITERIA`` order; the first criterion on which they
differ decides, and a lower value comes first.  The first ``POINT`` criteria say *where*
a candidate left the normal path; candidates equal on those are at the same point, and
only the evidence criteria after them can separate them (else they are tied, and the
verdict says so).  docs/verdict.md lists the same criteria, with why each is there."""
from typing import Callable, NamedTuple

from ..compare import divergence as dv

# what kind of candidate it is (Candidate.group), in the order a clock's candidates take
RANKING_PICK = -1       # the ranking table's pick, ahead of a change most traces share
LEFT_PATH_MAIN = 0      # a main thread that left the normal path
DIED = 1                # a process whose end record says it died
LEFT_PATH_WORKER = 2    # a worker thread that left the normal path
STANDS_OUT = 3          # a stopped trace that stands out when nothing left the path or died


class Candidate(NamedTuple):
    clock: float        # the logical clock where it left the normal path (inf: unknown)
    group: int          # one of the kinds above
    key: tuple          # (rank, thread)
    divergence: object  # its stages.compare.divergence.Divergence
    why: str            # what it did, in words


class Evidence(NamedTuple):
    waited_on: dict     # {rank: stopped traces of other ranks in an MPI call naming it as peer}
    deaths: dict        # {rank: end record} of the processes that died


class Criterion(NamedTuple):
    name: str
    compares: str
    why: str
    value: Callable     # (Candidate, Evidence) -> a sortable value, lower first


def _time_step(c, evidence):
    d = c.divergence
    if d.iteration is not None:
        return d.iteration
    return float("inf") if d.status == dv.SAME else 0


CRITERIA = (
    Criterion("earliest clock", "the logical clock where it left the normal path (MPI collectives entered before)",
              "a cause comes before its consequences; a dead process counts where its trace ended",
              lambda c, e: c.clock),
    Criterion("earliest time step", "the iteration of the outermost loop where it left the path",
              "a consequence often shows a step later at the same clock (a collective per step)",
              _time_step),
    Criterion("main thread, then death, then worker", "the kind of candidate",
              "a worker's change follows its main thread's; a death without a change of calls comes after one",
              lambda c, e: c.group),
    Criterion("program order", "where the first difference lies in the program's call order",
              "of two changes in one step, the earlier call is the cause of the later",
              lambda c, e: c.divergence.order),
    Criterion("most waited on", "how many stopped traces of other ranks wait in an MPI call naming its rank",
              "the rank others wait for is the one that did not send or arrive",
              lambda c, e: -e.waited_on.get(c.key[0], 0)),
    Criterion("died", "whether its process died", "a death is evidence of its own",
              lambda c, e: c.key[0] not in e.deaths),
    Criterion("rank and thread", "(rank, thread)", "only so that the order is the same every time: evidence ends "
              "at the criterion before", lambda c, e: c.key),
)
POINT = 4               # the criteria that say where; then evidence; the last only orders


def order_key(candidate, evidence):
    return tuple(criterion.value(candidate, evidence) for criterion in CRITERIA)


def point(candidate):
    """Where a candidate left the normal path: the values of the first ``POINT`` criteria."""
    return tuple(criterion.value(candidate, None) for criterion in CRITERIA[:POINT])


def ordered(candidates, evidence):
    return sorted(candidates, key=lambda c: order_key(c, evidence))


def tied_with_first(candidates, evidence):
    """The candidates that no criterion but the last separates from the first (the first
    included): nothing in the traces tells them apart."""
    if not candidates:
        return []
    first = order_key(candidates[0], evidence)[:-1]
    return [c for c in candidates if order_key(c, evidence)[:-1] == first]
