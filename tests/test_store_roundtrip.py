"""The results file round trip, in process: what store.write saves, store.read gives back
equal (the fast layer's check of the store; the CLI's --out is checked in test_analysis)."""
import numpy as np
import pytest

from difftrace_mpi import store

from conftest import EXAMPLES, h5_contents

COMBO = "11.mpi.K10"


@pytest.fixture(scope="module")
def stored(swap, tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "swap.h5"
    store.write(swap, path)
    with store.read(path) as results:
        yield results


def test_names_and_objects_read_back_equal(swap, stored):
    assert stored.names == swap.names
    assert stored.objects == swap.objects


def test_ranking_rows_read_back_equal(swap, stored):
    assert len(stored.rows) == len(swap.rows) > 1
    assert [row.as_dict() for row in stored.rows] == [row.as_dict() for row in swap.rows]


def test_nlr_rows_of_one_combo_read_back_equal(swap, stored):
    def same(a, b):
        return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))

    # loop ids in the NLRs point into the combo's loop table: it must come back too
    assert len(stored.combos[COMBO].loops) == len(swap.combos[COMBO].loops) > 0
    for got, want in zip(stored.combos[COMBO].loops, swap.combos[COMBO].loops, strict=True):
        assert same(got, want)
    for run in (0, 1):
        for obj in range(len(swap.objects)):
            assert same(stored.nlr_of(COMBO, run, obj), swap.nlr_of(COMBO, run, obj)), (run, swap.objects[obj])


def test_read_then_write_gives_the_same_file(swap, tmp_path):
    """Every dataset, column and attribute that write saved, read gives back: writing the
    results read from a file again makes the same file (dtypes, string widths included)."""
    first, again = tmp_path / "first.h5", tmp_path / "again.h5"
    store.write(swap, first)
    with store.read(first) as results:
        store.write(results, again)
    a, b = h5_contents(first, skip=()), h5_contents(again, skip=())
    assert a.keys() == b.keys() and any(key.startswith("ranking") for key in a)
    for key in a:
        assert np.asarray(a[key]).dtype == np.asarray(b[key]).dtype, key
        assert np.array_equal(np.asarray(a[key]), np.asarray(b[key])), key


def _level_groups(path):
    """Per attribute mode in the file: (its thread group is its process group, the process
    group's jsm_normal)."""
    import h5py
    with h5py.File(path, "r") as f:
        return {f"{c}/{a}": (g["process"] == g["thread"], g["process/jsm_normal"][()])
                for c in f["combos"] for a, g in f[f"combos/{c}/attributes"].items()}


def test_one_thread_per_process_stores_the_level_once(swap, tmp_path):
    """Where each process has one thread, the analysis holds one level under both names,
    and so does the file: the process group is a second name of the thread group (an
    HDF5 hard link: real LULESH 216 x 1's file 55 -> 34 MB), read back as one level.
    Where processes have several threads, two groups of their own."""
    from difftrace_mpi.engine.pipeline import analyze
    threaded = analyze(EXAMPLES / "../ilcs/normal", EXAMPLES / "../ilcs/wrongop")
    for results, shared in ((swap, True), (threaded, False)):
        path = tmp_path / f"{shared}.h5"
        store.write(results, path)
        settings = {f"{c}/{a}": s for c, combo in results.combos.items() for a, s in combo.attrs.items()}
        assert settings and all((s.process is s.thread) is shared for s in settings.values())
        groups = _level_groups(path)
        assert groups.keys() == settings.keys()
        for key, (linked, jsm) in groups.items():
            assert linked is shared, key
            assert np.array_equal(jsm, settings[key].process.normal), key        # the process level's own values
        with store.read(path) as back:
            assert all((s.process is s.thread) is shared for c in back.combos.values() for s in c.attrs.values())


@pytest.mark.parametrize("values, kind", [([0, 3, 255], np.uint8), ([0, -128, 127], np.int8),
                                          ([0, 300, 65535], np.uint16), ([0, 3, -7, 32767], np.int16),
                                          ([0, 65536], np.int32), ([0, -32769], np.int32),
                                          ([2 ** 31], np.int64), ([], np.uint8)])
def test_nlr_columns_are_stored_in_the_narrowest_integer_that_holds_them(values, kind, tmp_path):
    """ids and counts as uint8, int8, uint16, int16, int32 or int64 (a real run's NLRs
    mostly fit 16 bits: a quarter of the file), read back as the same int64 values."""
    import h5py
    from difftrace_mpi import h5tables
    rows = [(np.array(values, dtype=np.int64), np.array(values[::-1], dtype=np.int64)), None,
            (np.array([1, 2], dtype=np.int64), np.array([0, 0], dtype=np.int64))]
    with h5py.File(tmp_path / "t.h5", "w") as f:
        h5tables.write_csr(f.create_group("rows"), rows)
        assert f["rows/ids"].dtype == kind and f["rows/counts"].dtype == kind
        back = h5tables.read_csr(f["rows"])
    assert [(a.tolist(), b.tolist()) for a, b in back] == \
        [(values, values[::-1]), ([], []), ([1, 2], [0, 0])]
    assert all(a.dtype == np.int64 for a, _ in back)


@pytest.mark.parametrize("extreme", [-129, 40000, 70000, -40000])
def test_the_narrowest_type_sees_every_block(extreme, monkeypatch):
    """The values' extremes are taken a block of arrays at a time: one anywhere (in a block
    of small arrays, in an array longer than a block, after empty ones) sets the type, as
    over all the values at once."""
    from difftrace_mpi import h5tables
    monkeypatch.setattr(h5tables, "CSR_BUFFER", 5)
    base = [np.array([1, 2]), np.array([], dtype=np.int64), np.array([3]), np.arange(12), np.array([4, 5, 6]),
            np.array([7])]
    for where in range(len(base)):
        for position in (0, -1):
            arrays = [a.copy() for a in base]
            if not len(arrays[where]):
                arrays[where] = np.array([extreme])
            else:
                arrays[where][position] = extreme
            whole = np.concatenate(arrays)
            want = next((k for k in (np.uint8, np.int8, np.uint16, np.int16, np.int32)
                         if np.iinfo(k).min <= whole.min() and whole.max() <= np.iinfo(k).max), np.int64)
            assert h5tables.narrowest(arrays) == want, (where, position)
    assert h5tables.narrowest([np.array([], dtype=np.int64)] * 3) == np.uint8


def test_csr_rows_written_a_block_at_a_time_read_back_equal(tmp_path, monkeypatch):
    """Rows are written a block of about CSR_BUFFER values at a time: small rows joined, a
    longer one alone, empty and missing ones skipped; every row reads back in its place."""
    import h5py
    from difftrace_mpi import h5tables
    monkeypatch.setattr(h5tables, "CSR_BUFFER", 5)
    lengths = [2, 0, 3, 12, 1, 1, None, 4, 7, 2]
    rows = [None if n is None else (np.arange(n, dtype=np.int64) + 10 * i, np.full(n, i, dtype=np.int64))
            for i, n in enumerate(lengths)]
    with h5py.File(tmp_path / "csr.h5", "w") as f:
        h5tables.write_csr(f.create_group("rows"), rows)
        back = h5tables.read_csr(f["rows"])
    for row, (ids, counts) in zip(rows, back, strict=True):
        want = (np.array([], dtype=np.int64),) * 2 if row is None else row
        assert ids.tolist() == want[0].tolist() and counts.tolist() == want[1].tolist()


def test_the_bundled_example_nlrs_take_at_most_16_bits(stored, tmp_path, swap):
    import h5py
    from difftrace_mpi.h5tables import narrowest
    path = tmp_path / "s.h5"
    store.write(swap, path)
    with h5py.File(path, "r") as f:
        for c in swap.combos:
            ids = f[f"combos/{c}/nlr/rows/ids"]
            assert ids.dtype == narrowest([ids[()].astype(np.int64)]) and ids.dtype.itemsize <= 2


def test_lattice_arrays_are_stored_in_the_narrowest_integer_that_holds_them(swap, tmp_path):
    """A lattice's CSR arrays go to the file in the narrowest integer type that holds them
    (its intents, even as added entries, are most of its bytes); meta stays int64; every
    lattice reads back equal."""
    import h5py
    from difftrace_mpi.h5tables import narrowest
    path = tmp_path / "swap.h5"
    store.write(swap, path)
    found = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: found.append((name.rsplit("/", 1)[-1], obj.dtype, obj[()]))
                     if isinstance(obj, h5py.Dataset) and "/lattice/" in name else None)
    assert found
    for key, dtype, values in found:
        assert dtype == (np.int64 if key in ("meta", "coverage") else narrowest([values])), (key, dtype)
    assert any(key == "intent_added_attrs" and dtype.itemsize < 8 for key, dtype, _ in found)
    with store.read(path) as again:
        for cname, combo in swap.combos.items():
            for aname, setting in combo.attrs.items():
                for run in (0, 1):
                    assert setting.lattice(run) == again.combos[cname].attrs[aname].lattice(run), (cname, aname, run)


def _stored_by_definition(arrays):
    """The stored form computed from the whole intents as layout 5 defines it: each
    concept's parent is its upper neighbour (listed before it) with the longest intent,
    the first listed of equals, if its intent lies within the concept's; the entries added
    are the concept's attributes the parent lacks or holds with another weight."""
    ptr, attrs, weights = (np.asarray(arrays[k]) for k in ("intent_indptr", "intent_attrs", "intent_weights"))
    intent = [dict(zip(attrs[ptr[c]:ptr[c + 1]].tolist(), weights[ptr[c]:ptr[c + 1]].tolist()))
              for c in range(len(ptr) - 1)]
    uppers = [[] for _ in intent]
    cptr, children = np.asarray(arrays["child_indptr"]), np.asarray(arrays["children"])
    for q in range(len(intent)):
        for c in children[cptr[q]:cptr[q + 1]].tolist():
            if c > q:
                uppers[c].append(q)
    parents, added = [], []
    for c, own in enumerate(intent):
        best = max(uppers[c], key=lambda q: (len(intent[q]), -q), default=-1)
        if best >= 0 and not all(a in own and own[a] >= w for a, w in intent[best].items()):
            best = -1
        parents.append(best)
        added.append(sorted((a, w) for a, w in own.items() if best < 0 or intent[best].get(a) != w))
    return parents, added


def test_intents_are_stored_as_entries_added_to_a_parent(swap, tmp_path):
    """Layout 5: each concept's intent as a parent listed before it plus the entries it
    adds (a weight that grew is an added entry), made from the lattice without its whole
    intents (``to_arrays(stored=True)``) as the layout defines them from the whole ones;
    the whole intents are rebuilt exactly, and a file whose parent comes after its
    concept, or whose rows are out of order, reads as damaged."""
    import h5py
    from difftrace_mpi import h5tables
    from difftrace_mpi.errors import DiffTraceError
    from difftrace_mpi.stages.classify.lattice import bounded
    lattices = [s.lattice(run) for c in swap.combos.values() for s in c.attrs.values() for run in (0, 1)]
    # a weight that grows from the parent's is added; an attribute the parent lacks too
    grown = bounded(np.array([0, 1, 3]), np.array([4, 4, 7]), np.array([1, 3, 1]), np.array([0, 1]))
    lattices.append(grown)
    whole = sum(len(lat.to_arrays()["intent_attrs"]) for lat in lattices)
    added = [lat.to_arrays(stored=True) for lat in lattices]
    assert sum(len(a["intent_added_attrs"]) for a in added) < whole
    for lat, stored in zip(lattices, added):
        arrays = lat.to_arrays()
        parents, entries = _stored_by_definition(arrays)
        assert stored["intent_parent"].tolist() == parents
        ptr = stored["intent_added_indptr"]
        assert [list(zip(stored["intent_added_attrs"][ptr[c]:ptr[c + 1]].tolist(),
                         stored["intent_added_weights"][ptr[c]:ptr[c + 1]].tolist()))
                for c in range(len(parents))] == entries
        again = h5tables.intents_whole(stored)
        for key, value in arrays.items():
            assert np.array_equal(np.asarray(value), np.asarray(again[key])), key
        assert all(p < c for c, p in enumerate(stored["intent_parent"].tolist()))
    intents = grown.to_arrays()
    grown_concept = next(c for c in range(len(intents["intent_indptr"]) - 1)
                         if intents["intent_weights"][intents["intent_indptr"][c]:][:1].tolist() == [3])
    ptr = added[-1]["intent_added_indptr"]
    assert added[-1]["intent_parent"][grown_concept] >= 0
    assert added[-1]["intent_added_attrs"][ptr[grown_concept]:ptr[grown_concept + 1]].tolist() == [4, 7]
    path = tmp_path / "swap.h5"
    store.write(swap, path)
    with h5py.File(path, "r+") as f:
        groups = []
        f.visititems(lambda name, obj: groups.append(obj) if name.endswith("lattice/normal") else None)
        parent = groups[0]["intent_parent"]
        values = parent[()]
        values[1] = len(values)                 # a parent after its concept
        del groups[0]["intent_parent"]
        groups[0]["intent_parent"] = values.astype(np.int64)
    with store.read(path) as broken:
        first = next(s for c in broken.combos.values() for s in c.attrs.values())
        with pytest.raises(DiffTraceError, match="damaged results file.*parent after its concept"):
            first.lattice(0)
