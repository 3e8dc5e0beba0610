"""The Hasse diagram of a concept lattice as its drawings need it (the report's SVG and the
DOT export): cover edges both ways, the attributes each concept introduces (reduced
labelling) and a layered layout.  ``arrs`` is ``Lattice.to_arrays()``."""
import numpy as np


def children_lists(arrs):
    """Each concept's children (cover edges downwards), as lists of ints."""
    cip, ch = arrs["child_indptr"], arrs["children"]
    return [ch[cip[i]:cip[i + 1]].tolist() for i in range(len(cip) - 1)]


def parents_lists(children):
    """Each concept's parents, from the children lists."""
    parents = [[] for _ in children]
    for p, kids in enumerate(children):
        for c in kids:
            parents[c].append(p)
    return parents


def introduced_attributes(arrs, parents, i):
    """[(attribute, weight)] that concept ``i`` introduces: in its intent with a weight that
    none of its parents reaches."""
    ip, at, wt = arrs["intent_indptr"], arrs["intent_attrs"], arrs["intent_weights"]
    a, w = at[ip[i]:ip[i + 1]], wt[ip[i]:ip[i + 1]]
    best = np.zeros(len(a), dtype=np.int64)      # highest weight among the parents
    for p in parents[i]:
        pa, pw = at[ip[p]:ip[p + 1]], wt[ip[p]:ip[p + 1]]
        _, ia, ib = np.intersect1d(a, pa, assume_unique=True, return_indices=True)
        np.maximum.at(best, ia, pw[ib])
    new = w > best
    return list(zip(a[new].tolist(), w[new].tolist()))


def weighted_label(attr_label, attr, weight):
    """``label`` when the weight is 1, ``label:weight`` otherwise."""
    return attr_label(attr) if weight == 1 else f"{attr_label(attr)}:{weight}"


def layers(n, parents, children):
    """Concepts in layers by depth from the top, each layer ordered by barycentres (a few
    sweeps down and up) to keep edge crossings low."""
    depth = [0] * n
    for i in range(n):                      # canonical order is a linear extension
        for p in parents[i]:
            depth[i] = max(depth[i], depth[p] + 1)
    out = [[] for _ in range(max(depth) + 1)] if n else []
    for i in range(n):
        out[depth[i]].append(i)
    pos = {}
    for layer in out:
        for j, v in enumerate(layer):
            pos[v] = j
    for sweep in range(4):                  # barycentre ordering, down then up
        seq = out[1:] if sweep % 2 == 0 else out[-2::-1]
        for layer in seq:
            nb = parents if sweep % 2 == 0 else children
            layer.sort(key=lambda v: (sum(pos[u] for u in nb[v]) / len(nb[v]) if nb[v] else pos[v], v))
            for j, v in enumerate(layer):
                pos[v] = j
    return out
