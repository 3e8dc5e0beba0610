"""Global function ids (functional core): every rank's names meet in one sorted table, so
ids never depend on the sharding; plain names where the tracer's argument annotations are
left out."""
import numpy as np

from ...model import RETURN_NAME
from . import calltree


def plain_names(table, cache):
    """A name table with the tracer's argument annotations stripped, so two calls that
    differ only in their arguments get one id (threads of a process share one table)."""
    key = ("plain", id(table))
    held, plain = cache.get(key, (None, None))
    if held is not table:       # (the table is held in the cache, so its id is not reused)
        plain = np.array([calltree.plain_name(n) for n in table], dtype=object)
        cache[key] = (table, plain)
    return plain


def local_names(listed):
    """Per run (normal, faulty, more normal runs), the function names of this rank's
    traces: ``listed`` as [(run, names)] or [(run, Trace)] (for the global table and the
    same-program check)."""
    out = (set(), set(), set())
    for ri, table in listed:
        out[min(ri, 2)].update(list(getattr(table, "names", table))[1:])
    return out


def global_names(parts):
    """The global name table: the sorted union of every rank's names (ids do not depend on
    the sharding), returns first; and per main run its names."""
    run_names = [set().union(*(p[ri] for p in parts)) - {RETURN_NAME} for ri in (0, 1)]
    extra_names = set().union(*(p[2] for p in parts)) - {RETURN_NAME}
    return [RETURN_NAME] + sorted(run_names[0] | run_names[1] | extra_names), run_names
