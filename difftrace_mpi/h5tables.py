"""HDF5 building blocks of the results file (``store`` owns its layout): compound-dataset
tables from dict rows and back, CSR columns of (ids, counts) rows written a few MB at a
time, and the rows two runs share stored once; the lattices' stored form.  h5py loads where a
table is written: the analysis encodes lattices with this module, and a run without --out
never needs h5py."""
import numpy as np


def text(value):
    """A value as text HDF5 can hold: a name's bytes that were not UTF-8 (kept by the readers
    as lone surrogates, which UTF-8 cannot encode) become U+FFFD, in every string of the file."""
    return str(value).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def text_array(values):
    return np.array([text(v) for v in values], dtype=object)


def strings(dataset):
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in dataset[()].tolist()]


class Writing:
    """An h5py group (or file) being written whose ``group[name] = array`` creates the
    dataset through h5py's low-level API (``put``); groups it creates are ``Writing`` too,
    the rest is the group's own.  A results file is hundreds of small datasets (544 on
    real LULESH 216 x 1), and h5py's high-level creation of each costs two to three
    times the low-level one: that file's write, serial on the root, 0.19 -> 0.16 s."""

    __slots__ = ("group",)

    def __init__(self, group):
        self.group = group

    def __setitem__(self, name, data):
        put(self.group, name, data)

    def __getitem__(self, name):
        return self.group[name]

    @property
    def attrs(self):
        return self.group.attrs

    def create_group(self, name):
        return Writing(self.group.create_group(name))

    def link(self, name, existing):
        """``name`` a second name of the object at ``existing`` (an HDF5 hard link: one
        object, read the same through either name, stored once)."""
        self.group[name] = self.group[existing]

    def create_dataset(self, name, **options):
        return self.group.create_dataset(name, **options)


def put(group, name, data):
    """``group[name] = data`` for a numeric or boolean array, through the low-level API;
    the same dataset (type, shape, values) as h5py makes.
    Anything else (strings, objects, scalars) goes the high-level way."""
    import h5py
    arr = np.asarray(data)
    if arr.dtype.kind not in "biuf" or arr.ndim == 0 or arr.dtype.byteorder == ">":
        group[name] = data
        return
    arr = np.ascontiguousarray(arr)
    dataset = h5py.h5d.create(group.id, name.encode("utf-8"), h5py.h5t.py_create(arr.dtype, logical=True),
                              h5py.h5s.create_simple(arr.shape), lcpl=_link_options(h5py))
    if arr.size:
        dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, arr)


_LINK_OPTIONS = []


def _link_options(h5py):
    """Link creation as h5py's: missing groups on the path made, names in UTF-8."""
    if not _LINK_OPTIONS:
        lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
        lcpl.set_create_intermediate_group(True)
        lcpl.set_char_encoding(h5py.h5t.CSET_UTF8)
        _LINK_OPTIONS.append(lcpl)
    return _LINK_OPTIONS[0]


CSR_BUFFER = 1 << 22      # entries written at a time: rows of real NLRs are millions of tokens


def write_csr(group, seqs):
    """(ids, counts) rows as offsets, ids and counts datasets, written a few MB at a time
    (never a second copy of all the rows in memory)."""
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    for i, s in enumerate(seqs):
        offsets[i + 1] = offsets[i] + (0 if s is None else len(s[0]))
    group["offsets"] = offsets
    total = int(offsets[-1])
    for name, column in (("ids", 0), ("counts", 1)):
        rows = [s[column] for s in seqs if s is not None]
        dataset = group.create_dataset(name, shape=(total,), dtype=narrowest(rows))
        start = 0
        for block in _blocks(rows, CSR_BUFFER):
            dataset[start:start + len(block)] = block
            start += len(block)


def narrowest(arrays):
    """The narrowest integer type that holds every value (uint8, int8, uint16, int16,
    int32, else int64; readers widen them): a real run's NLR ids (functions and loops)
    and counts (0 for a call, iterations for a loop) mostly fit 16 bits, a lattice's
    weights 8."""
    # the extremes of a few MB at a time: one reduction per array cost more than the values
    # (a run's NLR tails are thousands of 3-token rows: 0.023 s of a 0.12 s write)
    bounds = [(int(block.min()), int(block.max())) for block in _blocks(arrays, CSR_BUFFER)]
    low = min((lo for lo, _ in bounds), default=0)
    high = max((hi for _, hi in bounds), default=0)
    for kind in (np.uint8, np.int8, np.uint16, np.int16, np.int32):
        if np.iinfo(kind).min <= low and high <= np.iinfo(kind).max:
            return kind
    return np.int64


def _blocks(arrays, entries):
    """The non-empty ``arrays`` joined into blocks of about ``entries`` values (a larger
    array is a block of its own, never copied)."""
    pending, size = [], 0
    for a in arrays:
        if not len(a):
            continue
        if len(a) >= entries:
            yield np.asarray(a)
            continue
        pending.append(a)
        size += len(a)
        if size >= entries:
            yield np.concatenate(pending)
            pending, size = [], 0
    if pending:
        yield np.concatenate(pending)


def shared_rows(per_run):
    """The rows of both runs once (most faulty NLRs are their normal twins', and a real
    one is millions of tokens), and per run each object's row among them (-1 stays -1:
    not kept).  Equal rows are
    found by content (the very same arrays at once; others by length and ends, confirmed
    in full), so the file does not depend on how the rows were held or sharded."""
    rows, indexes, by_id, by_key = [], [], {}, {}
    for run_rows, index in per_run:
        own = []
        for ids, counts in run_rows:        # (the rows are alive here: their ids are theirs)
            ids, counts = np.asarray(ids), np.asarray(counts)
            number = by_id.get((id(ids), id(counts)))
            if number is None:
                key = (len(ids), ids[:4].tolist(), ids[-4:].tolist(), counts[:4].tolist(), counts[-4:].tolist())
                key = repr(key)
                number = next((k for k in by_key.get(key, ()) if np.array_equal(rows[k][0], ids)
                               and np.array_equal(rows[k][1], counts)), None)
                if number is None:
                    number = len(rows)
                    rows.append((ids, counts))
                    by_key.setdefault(key, []).append(number)
                by_id[(id(ids), id(counts))] = number
            own.append(number)
        # index -1 (an NLR not kept) picks the -1 appended
        indexes.append(np.asarray(own + [-1], dtype=np.int64)[np.asarray(index, dtype=np.int64)])
    return rows, indexes


def read_csr(group):
    off = group["offsets"][()]
    ids, counts = (group[name][()].astype(np.int64, copy=False) for name in ("ids", "counts"))
    return [(ids[off[i]:off[i + 1]], counts[off[i]:off[i + 1]]) for i in range(len(off) - 1)]


NONE = -1          # an unknown integer in a table


def write_table(group, name, columns, rows):
    """A compound dataset from dict rows: h5py reads it as a numpy record array, pandas as
    a DataFrame, and with PyTables installed ``pandas.read_hdf`` reads it by name, hence
    fixed-width UTF-8 strings (the longest value's bytes; PyTables has no variable-length
    ones in tables).  columns: [(name, "i8" | "f8" | "?" | "str")]; a missing or None
    cell is -1, NaN, False or ""."""
    cells = {"i8": lambda v: NONE if v is None else int(v), "f8": lambda v: np.nan if v is None else float(v),
             "?": bool, "str": lambda v: v or ""}
    import h5py
    values, fields = {}, []
    for c, t in columns:
        values[c] = [cells[t](row.get(c)) for row in rows]
        if t == "str":
            values[c] = [v.encode("utf-8") for v in text_array(values[c])]
            t = h5py.string_dtype("utf-8", max(map(len, values[c]), default=0) or 1)
        fields.append((c, t))
    data = np.zeros(len(rows), dtype=np.dtype(fields))
    for c, column in values.items():
        data[c] = column
    group.create_dataset(name, data=data)


def table_records(dataset, columns):
    """A compound dataset's records; ValueError when it lacks one of ``columns`` (the
    names ``write_table`` wrote)."""
    data = dataset[()]
    missing = [c for c, _ in columns if c not in (data.dtype.names or ())]
    if missing:
        raise ValueError(f"table {dataset.name} lacks column(s) {', '.join(missing)}")
    return data


def decoded(column):
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in column.tolist()]


def read_table(dataset, columns):
    """A compound dataset back to dict rows (strings decoded, -1 -> None, "" -> None)."""
    data = table_records(dataset, columns)
    values = {}
    for c, t in columns:
        column = data[c].tolist()
        if t == "str":
            values[c] = [v or None for v in decoded(data[c])]
        elif t == "i8":
            values[c] = [None if v == NONE else int(v) for v in column]
        elif t == "f8":
            values[c] = [float(v) for v in column]
        else:
            values[c] = [bool(v) for v in column]
    return [dict(zip(values, row)) for row in zip(*values.values())]


# a lattice's intents, as the results file keeps them (layout 5)
INTENT_KEYS = ("intent_indptr", "intent_attrs", "intent_weights")
ADDED_KEYS = ("intent_parent", "intent_added_indptr", "intent_added_attrs", "intent_added_weights")
MAX_INTENT_ENTRIES = 1 << 27        # whole intents read back: a damaged file could ask for more than memory


def _int64(arrays, keys):
    return [np.ascontiguousarray(arrays[k], dtype=np.int64) for k in keys]


def narrowed(stored):
    """A lattice's arrays in the form the results file keeps (``Lattice.to_arrays(stored=True)``:
    intents as entries added to a parent's; on real LULESH 216 x 1, 174 K entries instead
    of 15.5 M, 80% of the results file before) with integers in their narrowest type
    (``narrowest``; readers widen them again)."""
    return {key: arr if key in ("meta", "coverage") else np.asarray(arr).astype(narrowest([arr]), copy=False)
            for key, arr in stored.items()}


def intents_whole(stored):
    """The intents stored as added entries made whole again: the arrays ``Lattice.from_arrays`` reads.  A
    damaged file raises ValueError."""
    from .kernels import lattice as kernel
    status, *whole = kernel.intents_whole(*_int64(stored, ADDED_KEYS), MAX_INTENT_ENTRIES)
    if status == kernel.INTENTS_TOO_BIG:
        raise ValueError(f"its lattice's intents would hold over {MAX_INTENT_ENTRIES:,} entries")
    if status != kernel.INTENTS_OK:
        raise ValueError("its lattice's intents are malformed (a parent after its concept, or rows out of order)")
    return {**{k: v for k, v in stored.items() if k not in ADDED_KEYS}, **dict(zip(INTENT_KEYS, whole))}
