"""Issue 15: the results file's tables are data.  Each table is a compound dataset that h5py
reads as a record array and pandas as a DataFrame (``pandas.read_hdf`` too, with PyTables);
nothing in the file is JSON; ragged parts are long-format tables; a file of another layout
version is refused with one message (docs/results-format.md)."""
import dataclasses
import json

import h5py
import numpy as np
import pytest

from difftrace_mpi import cli, store
from difftrace_mpi.engine.pipeline import analyze
from difftrace_mpi.errors import DiffTraceError

from conftest import EXAMPLES

RANKING = ("filter", "k", "attributes", "linkage", "bscore", "clusters", "structured", "localised")


def _text(values):
    return [v.decode("utf-8") for v in values.tolist()]


def test_h5py_reads_the_ranking_table_as_records(dl, dl_h5):
    with h5py.File(dl_h5, "r") as f:
        table = f["ranking"][()]
    assert table.dtype.names == RANKING
    assert len(table) == len(dl.rows) > 1
    for col in ("filter", "attributes", "linkage"):
        assert _text(table[col]) == [getattr(r, col) for r in dl.rows]
    for col in ("k", "bscore", "clusters", "structured", "localised"):
        assert table[col].tolist() == [getattr(r, col) for r in dl.rows]


def test_suspects_are_a_long_table_of_the_ranking_rows(dl, dl_h5):
    with h5py.File(dl_h5, "r") as f:
        suspects = f["ranking_suspects"][()]
    level = np.array(_text(suspects["level"]))
    assert set(level) == {"process", "thread"}
    for i, row in enumerate(dl.rows):
        for name, key, want in (("process", lambda s: ("p", int(s["rank"])), row.top_processes),
                                ("thread", lambda s: (int(s["rank"]), int(s["thread"])), row.top_threads)):
            got = suspects[(suspects["row"] == i) & (level == name)]
            assert got["position"].tolist() == list(range(len(want)))
            assert [(key(s), float(s["score"])) for s in got] == \
                [(("p", k) if name == "process" else k, score) for k, score in want]
            for s in got:
                change = row.change_of(key(s))
                assert s["change"].decode() == change["change"]
                assert (s["shared_of_normal"], s["shared_of_faulty"]) == \
                    (change["shared_of_normal"], change["shared_of_faulty"])
        assert (suspects["thread"][(suspects["row"] == i) & (level == "process")] == -1).all()


def test_pandas_reads_the_tables_from_h5py(dl, dl_h5):
    pd = pytest.importorskip("pandas")
    with h5py.File(dl_h5, "r") as f:
        ranking = pd.DataFrame(f["ranking"][()])
        suspects = pd.DataFrame(f["ranking_suspects"][()])
    for frame in (ranking, suspects):
        for col in frame.columns[frame.dtypes == object]:
            frame[col] = frame[col].str.decode("utf-8")
    assert ranking["linkage"].tolist() == [r.linkage for r in dl.rows]
    # the best row's processes, by a join of the two tables as a pandas user would write it
    best = ranking.reset_index(names="row").head(1).merge(suspects[suspects.level == "process"], on="row")
    assert list(zip(best["rank"], best["score"])) == dl.rows[0].top_processes


def test_pandas_read_hdf_reads_the_ranking_by_name(dl, dl_h5):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("tables", reason="pandas.read_hdf needs PyTables")
    ranking = pd.read_hdf(dl_h5, "ranking")
    assert tuple(ranking.columns) == RANKING
    assert ranking["attributes"].tolist() == [r.attributes for r in dl.rows]
    assert ranking["bscore"].tolist() == [r.bscore for r in dl.rows]


def _json_values(path):
    """Every string in the file (attributes, string datasets, string columns of tables)
    that parses as a JSON list or object."""
    found = []

    def check(where, value):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        if isinstance(text, str) and text.strip()[:1] in ("[", "{"):
            try:
                json.loads(text)
            except ValueError:
                return
            found.append(where)

    def strings(where, array):
        array = np.asarray(array)
        for col in array.dtype.names or (None,):
            values = array[col] if col else array
            if values.dtype.kind in "OSU":
                for value in values.ravel().tolist():
                    check(f"{where}/{col or ''}", value)

    def visit(name, obj):
        for key, value in obj.attrs.items():
            strings(f"{name}@{key}", value)
        if isinstance(obj, h5py.Dataset):
            strings(name, obj[()])
    with h5py.File(path, "r") as f:
        for key, value in f.attrs.items():
            strings(f"@{key}", value)
        f.visititems(visit)
    return found


def test_no_json_anywhere_in_the_file(dl_h5):
    assert _json_values(dl_h5) == []


def test_the_json_check_finds_json(dl_h5, tmp_path):
    """The check above can fail: JSON in an attribute or a table column is found."""
    path = tmp_path / "json.h5"
    path.write_bytes(dl_h5.read_bytes())
    with h5py.File(path, "a") as f:
        f["grid"].attrs["filters"] = json.dumps(["11.mpi"])
        f["extra"] = np.array([(1, b'[{"rank": 6}]')], dtype=[("row", "i8"), ("top", "S16")])
    assert sorted(_json_values(path)) == ["extra/top", "grid@filters/"]


def test_divergence_lists_and_loops_are_long_tables(dl, dl_h5):
    divergences = [d for _, d in sorted(dl.divergences.items())]
    assert any(d.loops for d in divergences) and any(d.call_path for d in divergences)
    with h5py.File(dl_h5, "r") as f:
        table, calls, loops = (f[name][()] for name in ("divergence", "divergence_calls", "divergence_loops"))
    assert list(zip(table["rank"].tolist(), table["thread"].tolist())) == [d.key for d in divergences]
    part = np.array(_text(calls["part"]))
    for row, d in enumerate(divergences):
        mine = calls["row"] == row
        for name in ("normal", "faulty", "call_path"):
            assert _text(calls[mine & (part == name)]["call"]) == getattr(d, name)
        levels = loops[loops["row"] == row]
        assert [(frame, iteration, iterations) for frame, _, iteration, iterations in d.loops] == \
            list(zip(_text(levels["loop_in"]), levels["iteration"].tolist(), levels["iterations"].tolist()))
        for level, (_, body, _, _) in enumerate(d.loops):
            assert _text(calls[mine & (part == "loop_body") & (calls["level"] == level)]["call"]) == body


def test_names_with_spaces_and_arrows_read_back_whole(dl, tmp_path):
    """Call lists are stored name by name, not joined: a C++ name with spaces or " > "
    comes back as one name."""
    obj, d = next((o, d) for o, d in sorted(dl.divergences.items()) if d.loops)
    odd = ["std::vector<int, std::allocator<int> >::push_back", "a > b", "operator new(unsigned long)"]
    changed = dataclasses.replace(d, normal=odd[:1], faulty=odd, call_path=["main", odd[1]],
                                  loops=[(odd[2], odd, 3, 4)] + d.loops[1:])
    res = dataclasses.replace(dl, divergences={**dl.divergences, obj: changed})
    store.write(res, tmp_path / "odd.h5")
    with store.read(tmp_path / "odd.h5") as stored:
        got = stored.divergences[obj]
        assert (got.normal, got.faulty, got.call_path, got.loops) == \
            (changed.normal, changed.faulty, changed.call_path, changed.loops)
        assert got.as_dict() == changed.as_dict()


def test_grid_and_step_names_are_typed_attributes(dl, dl_h5):
    with h5py.File(dl_h5, "r") as f:
        grid = f["grid"].attrs
        assert list(grid["filters"]) == dl.grid["filters"] and grid["ks"].dtype == np.int64
        steps = f["timing/busy_by_rank"].attrs["steps"]
        assert list(steps) == dl.busy_by_rank[0] and "reading traces" in steps
    with store.read(dl_h5) as stored:
        assert stored.grid == dl.grid


def _with_version(source, path, version):
    path.write_bytes(source.read_bytes())
    with h5py.File(path, "a") as f:
        if version is None:
            del f.attrs["format_version"]
        else:
            f.attrs["format_version"] = version
    return path


def test_a_file_of_the_old_layout_is_refused_with_one_message(dl_h5, tmp_path):
    old = _with_version(dl_h5, tmp_path / "old.h5", 1)
    with pytest.raises(DiffTraceError) as err:
        store.read(old)
    assert str(err.value) == (f"{old}: written by difftrace_mpi layout 1; this version reads layout "
                              f"{store.FORMAT_VERSION}: re-run analyze")
    unversioned = _with_version(dl_h5, tmp_path / "none.h5", None)
    with pytest.raises(DiffTraceError, match="written by difftrace_mpi an unknown layout; .*re-run analyze"):
        store.read(unversioned)


def test_the_cli_says_so_in_one_line(dl_h5, tmp_path, capsys):
    old = _with_version(dl_h5, tmp_path / "old.h5", 1)
    capsys.readouterr()
    code = cli.main(["lattice", str(old)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"layout 1; this version reads layout {store.FORMAT_VERSION}: re-run analyze" in err


@pytest.mark.parametrize("column, value", [("row", 10 ** 6), ("row", -1), ("part", b"nope"), ("level", 99)])
def test_a_long_table_pointing_nowhere_is_a_damaged_file(dl_h5, tmp_path, column, value):
    """A /divergence_calls row outside /divergence (a negative one would wrap), an unknown
    part, a loop body of a level /divergence_loops lacks: the one damaged-file error."""
    path = tmp_path / "damaged.h5"
    path.write_bytes(dl_h5.read_bytes())
    with h5py.File(path, "a") as f:
        calls = f["divergence_calls"][()]
        body = np.flatnonzero(calls["part"] == b"loop_body")
        assert len(body)
        calls[column][body[0]] = value
        del f["divergence_calls"]
        f["divergence_calls"] = calls
    with pytest.raises(DiffTraceError, match=f"^damaged results file {path}: ValueError: /divergence_calls"):
        store.read(path)


def test_a_run_without_differences_reads_back(tmp_path):
    """Normal against itself: empty divergence and suspect tables, still tables."""
    same = analyze(EXAMPLES / "normal", EXAMPLES / "normal")
    assert not same.divergences
    store.write(same, tmp_path / "same.h5")
    with h5py.File(tmp_path / "same.h5", "r") as f:
        assert f["divergence_calls"].shape == (0,) and f["divergence_calls"].dtype.names[0] == "row"
    with store.read(tmp_path / "same.h5") as stored:
        assert stored.divergences == {} and stored.no_difference
        assert [r.as_dict() for r in stored.rows] == [r.as_dict() for r in same.rows]


def test_datasets_written_through_the_low_level_api_read_back_as_h5pys_own(tmp_path):
    """``h5tables.put`` (the results file's datasets, created through h5py's low-level
    API for speed) makes the dataset ``group[name] = array`` makes: the same type, shape
    and values, groups on the path created, and anything but a numeric array (strings,
    scalars) written the high-level way."""
    from difftrace_mpi.h5tables import Writing
    rng = np.random.default_rng(3)
    values = {
        "bool": rng.integers(0, 2, (2, 7)).astype(bool),
        "int8": rng.integers(-100, 100, 9).astype(np.int8),
        "uint16": rng.integers(0, 60000, 11).astype(np.uint16),
        "int64": rng.integers(-2**40, 2**40, (3, 4)),
        "uint64": np.array([0, 2**63 + 5], dtype=np.uint64),
        "float64": np.array([[0.5, np.nan], [np.inf, -1e-300]]),
        "float32": rng.random(5).astype(np.float32),
        "empty": np.empty(0, dtype=np.int32),
        "empty2d": np.empty((0, 3), dtype=np.float64),
        "strided": np.arange(20, dtype=np.int16)[::3],
        "list": [1, 2, 3],
        "scalar": np.float64(2.5),
        "bytes": np.array([b"a", b"bc"]),
    }
    with h5py.File(tmp_path / "ref.h5", "w") as ref, h5py.File(tmp_path / "new.h5", "w") as new:
        fast = Writing(new).create_group("g")
        plain = ref.create_group("g")
        for name, value in values.items():
            key = f"deep/{name}" if name.startswith("int") else name
            plain[key] = value
            fast[key] = value
        assert isinstance(fast.create_group("more"), Writing)
    with h5py.File(tmp_path / "ref.h5") as ref, h5py.File(tmp_path / "new.h5") as new:
        names = []
        ref.visit(names.append)
        again = []
        new.visit(again.append)
        assert set(names) <= set(again) and "g/deep" in again
        for name in names:
            a, b = ref[name], new[name]
            if isinstance(a, h5py.Dataset):
                assert (a.dtype, a.shape) == (b.dtype, b.shape), name
                assert np.array_equal(a[()], b[()], equal_nan=a.dtype.kind == "f"), name
        assert new["g/deep/int64"].id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
