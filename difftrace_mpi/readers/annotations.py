"""The tracer's argument annotations in event names (pin/parlot_mpi.c): an MPI call is
recorded as ``MPI_Irecv[count=75,type=MPI_DOUBLE,src=-1,tag=1025]``.  ``--no-arguments``
compares plain names, the annotation stripped.

Only the tracer's MPI events carry one: ``P?MPI_<name>`` followed by ``[``.  The
annotation is stripped from that ``[`` on, whether or not it is closed (a name cut short,
in a damaged or hand-written .info or text trace, lost its ``]``), and nothing else is:
``operator[]`` and other names with brackets are left as they are.
"""
import re

_ANNOTATED = re.compile(r"(P?MPI_[A-Za-z0-9_]+)\[")


def plain_name(name):
    """``MPI_Send[count=4,...]`` -> ``MPI_Send``; ``MPI_Recv[count=3,tag=`` (cut short) ->
    ``MPI_Recv``; any other name unchanged."""
    m = _ANNOTATED.match(name)
    return m[1] if m else name
