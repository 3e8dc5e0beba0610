"""Tests of the ParLOT reader/writer against the real traces in tests/data/parlot-go-sched (copied from the ParLOT project's go-sched runs).

EXPECTED.tsv (beside the real files) is the ground truth; everything else is checked
against the format description, a slow pure-Python reference codec, or round trips.
"""
import hashlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from difftrace_mpi import readers
from difftrace_mpi.readers import parlot as P
from difftrace_mpi.errors import DiffTraceError, TraceFormatError
from difftrace_mpi.kernels import parlot as K
from difftrace_mpi.model import RETURN_NAME, Run

DATA = Path(__file__).resolve().parent / "data" / "parlot-go-sched"
needs_data = pytest.mark.skipif(not (DATA / "EXPECTED.tsv").is_file(),
                                reason=f"real ParLOT traces not found at {DATA}")


def _expected_rows():
    if not (DATA / "EXPECTED.tsv").is_file():
        return []
    lines = (DATA / "EXPECTED.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, ln.split("\t"))) for ln in lines[1:] if ln.strip()]


ROWS = _expected_rows()
ROW_IDS = [r["file"] for r in ROWS]


def _sha(values):
    return hashlib.sha256(np.asarray(values, dtype="<u2").tobytes()).hexdigest()


def _open_calls(values):
    """Calls still open at the end of a stream: depth after each value, never below 0."""
    depth = 0
    for v in np.asarray(values).tolist():
        depth = depth + 1 if v else max(0, depth - 1)
    return depth


# --------------------------------------------------------------------------- reference codec
# Straight from the format description; slow, used as an independent oracle on small inputs.

class _History:
    def __init__(self):
        self.hbuf = [0] * 4096
        self.pbuf = [0] * 65536
        self.ppos = 0
        self.hash = 0

    def push(self, v):
        self.hbuf[self.hash] = self.ppos
        self.hash = ((self.hash << 4) ^ v) % 4096
        self.pbuf[self.ppos] = v
        self.ppos = (self.ppos + 1) & 0xFFFF

    def match(self, lpos):
        return all(self.pbuf[(lpos - k) & 0xFFFF] == self.pbuf[(self.ppos - k) & 0xFFFF]
                   for k in (1, 2, 3))


def ref_lz_decode(words):
    h, out, i = _History(), [], 0
    while i < len(words):
        lpos = h.hbuf[h.hash]
        if h.match(lpos):
            cnt = int(words[i])
            i += 1
            for _ in range(cnt):
                v = h.pbuf[lpos]
                lpos = (lpos + 1) & 0xFFFF
                out.append(v)
                h.push(v)
        if i < len(words):
            v = int(words[i])
            i += 1
            out.append(v)
            h.push(v)
    return out


def ref_ze_decode(data):
    """Returns (words, complete)."""
    data = bytes(data)
    if data == b"\x00":
        return [], True
    words, pos, n = bytearray(), 0, len(data)
    while pos < n:
        bm = data[pos]
        end = pos + 1 + bin(bm).count("1")
        if end > n:
            break
        grp, p = bytearray(8), pos + 1
        for b in range(8):
            if bm >> b & 1:
                grp[b] = data[p]
                p += 1
        last = data[-1]
        if end == n - 1 and 1 <= last <= 4 and bm >> (2 * last) == 0:
            words += grp[: 2 * last]
            return list(np.frombuffer(bytes(words), "<u2")), True
        words += grp
        pos = end
    return list(np.frombuffer(bytes(words), "<u2")), False


def ref_decode(data):
    words, complete = ref_ze_decode(data)
    return ref_lz_decode(words), complete


def group_starts(data):
    """Byte offsets where the ZE groups of a complete file start (plus the trailer's)."""
    starts, pos = [], 0
    while pos < len(data) - 1:
        starts.append(pos)
        pos += 1 + bin(data[pos]).count("1")
    assert pos == len(data) - 1, "group walk must land on the trailer"
    return starts + [pos]


# --------------------------------------------------------------------------- real files

@needs_data
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_expected_row(row):
    path = DATA / row["file"]
    data = path.read_bytes()
    assert len(data) == int(row["compressed_bytes"])
    values, complete = P.decode_file(path)
    assert complete
    assert values.dtype == np.uint16
    assert len(values) == int(row["decoded_values"])
    assert int(np.count_nonzero(values == 0)) == int(row["return_values"])
    assert _open_calls(values) == int(row["open_calls_at_end"])
    assert _sha(values) == row["sha256_of_values_as_uint16_le"]


@needs_data
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_real_file_byte_identical_roundtrip(row):
    data = (DATA / row["file"]).read_bytes()
    values, complete = P.decode_file(DATA / row["file"])
    assert P.encode_values(values) == data
    # and the independent reference agrees with the kernel
    ref, ref_complete = ref_decode(data)
    assert ref_complete and np.array_equal(np.asarray(ref, np.uint16), values)


@needs_data
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_real_file_trailer_rule(row):
    """The trailer counts the words of the last group, 1..4 (4 when the count is a multiple of 4)."""
    data = (DATA / row["file"]).read_bytes()
    words, status, offset = K.decode_words(data)
    assert status == K.OK and offset == len(data)
    assert data[-1] == (len(words) - 1) % 4 + 1


@needs_data
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_truncated_real_file(row, tmp_path):
    data = (DATA / row["file"]).read_bytes()
    full, _ = P.decode_file(DATA / row["file"])
    starts = group_starts(data)
    rng = np.random.default_rng(len(data))
    cuts = sorted({0, 1, 2, len(data) - 1, len(data) - 2, starts[-2], starts[-2] + 1,
                   *map(int, rng.integers(1, len(data) - 1, 25))})
    for c in cuts:
        cut = data[:c]
        values, status, offset, _ = K.decode(cut)
        if status == K.OK:
            # only possible when the cut lands right after a group and the next bitmap
            # byte happens to look like a trailer (1..4): indistinguishable from a real end
            assert c - 1 in starts and 1 <= cut[-1] <= 4
            assert np.array_equal(values, full[: len(values)])
            continue
        assert status == K.TRUNCATED
        expected_offset = max(s for s in starts if s <= c)
        assert offset == expected_offset, c
        ngroups = starts.index(expected_offset)
        w_cut, w_full = K.decode_words(cut)[0], K.decode_words(data)[0]
        assert len(w_cut) == 4 * ngroups
        k = min(len(w_cut), len(w_full))
        assert np.array_equal(w_cut[:k], w_full[:k])
        # (cutting only the trailer turns the partial last group into a full one: the
        # missing words read as zeros; the result is flagged incomplete all the same)
        assert not w_cut[k:].any()
        if len(w_cut) <= len(w_full):
            assert np.array_equal(values, full[: len(values)])
        # through the Python face: flagged, never silently complete
        p = tmp_path / "t.0"
        p.write_bytes(cut)
        v2, complete = P.decode_file(p)
        assert not complete and np.array_equal(v2, values)
        with pytest.raises(TraceFormatError) as ei:
            P.decode_file(p, strict=True)
        assert "trailer" in str(ei.value) and ei.value.offset == offset


@needs_data
def test_random_byte_flips_never_crash(tmp_path):
    rng = np.random.default_rng(12345)
    files = [DATA / r["file"] for r in ROWS]
    p = tmp_path / "x.0"
    outcomes = set()
    for it in range(400):
        data = bytearray(files[it % len(files)].read_bytes())
        for _ in range(int(rng.integers(1, 6))):
            i = int(rng.integers(0, len(data)))
            if rng.random() < 0.5:
                data[i] ^= 1 << int(rng.integers(0, 8))
            else:
                data[i] = int(rng.integers(0, 256))
        if rng.random() < 0.2:
            del data[int(rng.integers(0, len(data))):]
        p.write_bytes(bytes(data))
        try:
            values, complete = P.decode_file(p, max_values=int(rng.choice([100, 10**6])))
            outcomes.add(complete)
            assert values.dtype == np.uint16
        except TraceFormatError as e:
            outcomes.add("error")
            assert str(p) in str(e)
        # the reference agrees on complete/incomplete and values wherever it finishes
        values, status, _, _ = K.decode(bytes(data), 300_000)
        if it % 4 == 0 and status != K.LIMIT:
            ref, ref_complete = ref_decode(bytes(data))
            assert (status == K.OK) == ref_complete
            assert np.array_equal(values, np.asarray(ref, np.uint16))
    assert len(outcomes) >= 2


@needs_data
def test_read_info_real():
    for info in sorted(DATA.glob("run*/*.info")):
        lines = info.read_bytes().decode("utf-8").split("\n")
        assert lines[-1] == "" and lines[0] == "+"
        names = P.read_info(info)
        assert names.dtype == object
        assert names[0] == RETURN_NAME
        assert len(names) == len(lines) - 1 - 2 + 1     # minus '' ,'+', image; plus return
        assert list(names[1:]) == lines[2:-1]
        assert any(" " in n for n in names[1:])          # real names contain spaces


@needs_data
@pytest.mark.parametrize("run,nthreads", [("run1", 6), ("run2", 5)])
def test_real_parlot_runs_load(run, nthreads):
    r = readers.load_run(DATA / run)
    assert isinstance(r, Run)
    assert r.rank_source == "pid-order"
    assert len(r.traces) == nthreads
    assert [t.key for t in r.traces] == [(0, tid) for tid in range(nthreads)]
    for t in r.traces:
        assert t.complete and not t.notes
        assert t.events.dtype == np.int32
        assert t.names[0] == RETURN_NAME
        assert int(t.events.max()) < len(t.names)
        values, _ = P.decode_file(t.source)
        assert np.array_equal(t.events, values.astype(np.int32))
        row = next(x for x in ROWS if x["file"] == f"{run}/{Path(t.source).name}")
        assert _sha(t.events) == row["sha256_of_values_as_uint16_le"]


@needs_data
def test_uncompressed_reading_of_real_streams(tmp_path):
    for row in ROWS[:3]:
        values, _ = P.decode_file(DATA / row["file"])
        p = tmp_path / "u.1.0"
        P.write_trace(p, values, compressed=False)
        assert p.stat().st_size == 2 * len(values) + 1
        v2, complete = P.decode_file(p, compressed=False)
        assert complete and _sha(v2) == row["sha256_of_values_as_uint16_le"]


# --------------------------------------------------------------------------- codec properties

def _segments_to_array(segments, cap=200_000):
    out = []
    for pattern, reps in segments:
        out.extend(pattern * reps)
        if len(out) >= cap:
            break
    return np.asarray(out[:cap], dtype=np.uint16)


values_st = st.one_of(
    st.lists(st.integers(0, 0xFFFF), max_size=200).map(lambda x: np.asarray(x, np.uint16)),
    st.lists(st.integers(0, 6), max_size=400).map(lambda x: np.asarray(x, np.uint16)),
    st.lists(st.tuples(st.lists(st.integers(0, 40), min_size=1, max_size=6),
                       st.integers(1, 300)), max_size=12).map(_segments_to_array),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values_st)
def test_roundtrip_property(values):
    data = P.encode_values(values)
    out, status, offset, _ = K.decode(data)
    assert status == K.OK and offset == len(data)
    assert np.array_equal(out, values)
    # structure: 1..4 trailer, or the single byte 0 for an empty stream
    words, _, _ = K.decode_words(data)
    if len(values) == 0:
        assert data == b"\x00"
    else:
        assert data[-1] == (len(words) - 1) % 4 + 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 0xFFFF), max_size=60).map(lambda x: np.asarray(x, np.uint16)))
def test_kernel_matches_reference_decoder(values):
    data = P.encode_values(values)
    ref, complete = ref_decode(data)
    assert complete and ref == list(values)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_crash(data):
    values, status, offset, _ = K.decode(data, 5000)
    assert status in (K.OK, K.TRUNCATED, K.LIMIT)
    assert 0 <= offset <= len(data)
    assert len(values) <= 5000
    if status != K.LIMIT:
        ref, complete = ref_decode(data)
        assert complete == (status == K.OK)
        assert np.array_equal(values, np.asarray(ref, np.uint16))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 65534, 65535, 65536, 65537, 65540,
                               2 * 65535 + 7, 300_000])
def test_long_repeats(n):
    for fill in (0, 7):
        values = np.full(n, fill, dtype=np.uint16)
        data = P.encode_values(values)
        assert np.array_equal(K.decode(data)[0], values)
        # counts are capped at 65535 and a capped count is followed by a literal
        words = K.decode_words(data)[0]
        assert int(words.max(initial=0)) <= 65535
    # a long period-3 loop crossing the 65536-value ring several times
    values = np.tile(np.array([5, 9, 0], np.uint16), n // 3 + 1)[:n]
    assert np.array_equal(K.decode(P.encode_values(values))[0], values)


@pytest.mark.parametrize("nwords_mod4", [0, 1, 2, 3])
def test_word_counts_of_each_residue(nwords_mod4):
    rng = np.random.default_rng(nwords_mod4)
    seen = False
    for n in range(1, 200):
        values = rng.integers(1, 60000, n).astype(np.uint16)
        data = P.encode_values(values)
        nw = len(K.decode_words(data)[0])
        if nw % 4 == nwords_mod4:
            seen = True
            assert data[-1] == (nw - 1) % 4 + 1
            assert np.array_equal(K.decode(data)[0], values)
    assert seen


def test_empty_streams(tmp_path):
    assert P.encode_values([]) == b"\x00"
    v, st_, off, _ = K.decode(b"\x00")
    assert len(v) == 0 and st_ == K.OK and off == 1
    v, st_, off, _ = K.decode(b"")
    assert len(v) == 0 and st_ == K.TRUNCATED and off == 0
    p = tmp_path / "e.1.0"
    P.write_trace(p, [])
    v, complete = P.decode_file(p)
    assert complete and len(v) == 0 and v.dtype == np.uint16


def test_max_values_limit(tmp_path):
    values = np.tile(np.arange(1, 50, dtype=np.uint16), 5000)
    data = P.encode_values(values)
    out, status, offset, _ = K.decode(data, len(values))
    assert status == K.OK and np.array_equal(out, values)
    for m in (0, 1, 10, 1000, len(values) - 1):
        out, status, offset, _ = K.decode(data, m)
        assert status == K.LIMIT and len(out) <= m
        assert np.array_equal(out, values[: len(out)])
        assert 0 <= offset < len(data)
    p = tmp_path / "big.1.0"
    p.write_bytes(data)
    with pytest.raises(TraceFormatError, match="more than"):
        P.decode_file(p, max_values=1000)


def test_decompression_bomb_is_bounded():
    # every count word 65535: ~30000x expansion; must stop at max_values, not exhaust memory
    values = np.zeros(3 * 65536 * 20, dtype=np.uint16)
    data = P.encode_values(values)
    assert len(data) < 200
    out, status, _, _ = K.decode(data, 100_000)
    assert status == K.LIMIT and len(out) <= 100_000


def test_encode_rejects_bad_input():
    with pytest.raises(ValueError):
        P.encode_values([1, 70000])
    with pytest.raises(ValueError):
        P.encode_values([-1])
    with pytest.raises(ValueError):
        P.encode_values([[1, 2]])
    assert P.encode_values(np.array([1, 2, 0, 0], np.int64)) == P.encode_values([1, 2, 0, 0])


def test_uncompressed_variant(tmp_path):
    values = np.array([3, 4, 0, 0, 65535, 0], np.uint16)
    p = tmp_path / "u.5.0"
    P.write_trace(p, values, compressed=False)
    raw = p.read_bytes()
    assert raw == values.astype("<u2").tobytes() + b"\x00"
    v, complete = P.decode_file(p, compressed=False)
    assert complete and np.array_equal(v, values)
    p.write_bytes(raw[:-1])                       # trailer byte lost
    v, complete = P.decode_file(p, compressed=False)
    assert not complete and np.array_equal(v, values)
    p.write_bytes(raw[:9])                        # cut inside a word (0xFF of 65535)
    v, complete = P.decode_file(p, compressed=False)
    assert not complete and np.array_equal(v, values[:4])
    with pytest.raises(TraceFormatError):
        P.decode_file(p, compressed=False, strict=True)


# --------------------------------------------------------------------------- .info files

def test_info_roundtrip_with_spaces(tmp_path):
    names = ["main", "type..eq.struct { a int; b [4]uint8 }", "  leading and trailing  ",
             "MPI_Send", "unicode \u00e9\u4e2d", "+x", "tab\there"]
    p = tmp_path / "a.1.info"
    P.write_info(p, names, image="/bin/prog with space")
    got = P.read_info(p)
    assert got[0] == RETURN_NAME and list(got[1:]) == names
    P.write_info(tmp_path / "b.1.info", got)              # inverse: RETURN_NAME skipped
    assert list(P.read_info(tmp_path / "b.1.info")) == list(got)


def test_info_multiple_images(tmp_path):
    p = tmp_path / "m.1.info"
    p.write_text("+\n/bin/a\nf1\nf2\n+\n/lib/libc.so\n+\n/lib/libmpi.so\nMPI_Init\n")
    names, images = P.parse_info(p.read_text(), p)
    assert list(names) == [RETURN_NAME, "f1", "f2", "MPI_Init"]
    assert images == [("/bin/a", 1, 2), ("/lib/libc.so", 3, 2), ("/lib/libmpi.so", 3, 3)]
    assert list(P.read_info(p)) == list(names)


def reference_parse_info(text):
    """The .info grammar read line by line: a '+' line starts an image block, the next
    line names the image, each line after is a routine; '\r' line ends and a BOM read
    as nothing; the first line must be '+' and no routine may be named as the return."""
    text = text[1:] if text.startswith("\ufeff") else text
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    names, images, i = [RETURN_NAME], [], 0
    while i < len(lines):
        line = lines[i].removesuffix("\r")
        if line == "+":
            image = lines[i + 1].removesuffix("\r") if i + 1 < len(lines) else ""
            images.append((image, len(names), len(names) - 1))
            i += 2
            continue
        if not images:
            return f"line {i + 1}"
        if line == RETURN_NAME:
            return f"line {i + 1}"
        names.append(line)
        images[-1] = (images[-1][0], images[-1][1], len(names) - 1)
        i += 1
    return names, images


@pytest.mark.parametrize("seed", range(40))
def test_parse_info_reads_as_the_grammar(seed):
    """Random texts over the lines that matter ('+' runs, '\r' ends, the return's name,
    empty lines, a BOM): the same names and images as reading line by line, or the error
    on the same line."""
    rng = np.random.default_rng(seed)
    pool = ["+", "+", "/bin/a", "f", "g\r", "", "+\r", "h i"]
    lines = [pool[k] for k in rng.integers(0, len(pool), size=int(rng.integers(0, 14)))]
    if rng.random() < 0.2:
        lines.insert(int(rng.integers(0, len(lines) + 1)), RETURN_NAME)
    if rng.random() < 0.8:
        lines = ["+", "/bin/prog"] + lines
    text = ("\ufeff" if rng.random() < 0.2 else "") + "\n".join(lines) + ("\n" if rng.random() < 0.7 else "")
    want = reference_parse_info(text)
    if isinstance(want, str):
        with pytest.raises(TraceFormatError, match=want + ":"):
            P.parse_info(text)
    else:
        names, images = P.parse_info(text)
        assert list(names) == want[0] and images == want[1]


def test_info_errors(tmp_path):
    with pytest.raises(TraceFormatError, match="not found"):
        P.read_info(tmp_path / "nope.1.info")
    p = tmp_path / "bad.1.info"
    p.write_text("f1\n+\n/bin/a\n")
    with pytest.raises(TraceFormatError, match="line 1"):
        P.read_info(p)
    p.write_bytes(b"+\n/bin/a\n\xff\xfe bad utf8\n")
    assert len(P.read_info(p)) == 2                        # undecodable bytes survive


# --------------------------------------------------------------------------- directories

def _make_process(d, prefix, pid, threads, names=("main", "MPI_Send", "compute")):
    P.write_info(d / f"{prefix}.{pid}.info", names)
    for tid, values in threads.items():
        P.write_trace(d / f"{prefix}.{pid}.{tid}", values)


def test_run_ranks_by_pid_order(tmp_path):
    _make_process(tmp_path, "p.host", 300, {0: [1, 2, 0, 0], 1: [3, 0]})
    _make_process(tmp_path, "p.host", 20, {0: [1, 0]})
    _make_process(tmp_path, "p.host", 1000, {0: [1, 3, 0, 0], 2: [2]})
    (tmp_path / "README").write_text("not a trace")
    r = readers.load_run(tmp_path)
    assert [Path(t.source).name for t in r.traces] == [
        "p.host.20.0", "p.host.300.0", "p.host.300.1", "p.host.1000.0", "p.host.1000.2"]
    assert r.rank_source == "pid-order"
    assert r.notes == [f"{tmp_path}: ranks assigned by ascending pid (no .rank sidecar files)",
                       f"{tmp_path}: read as a ParLOT run; other files ignored: README"]
    assert [t.key for t in r.traces] == [(0, 0), (1, 0), (1, 1), (2, 0), (2, 2)]
    assert list(r.traces[1].events) == [1, 2, 0, 0]
    assert r.traces[4].events.dtype == np.int32


def test_run_rank_sidecar(tmp_path):
    _make_process(tmp_path, "p.host", 300, {0: [1, 0]})
    _make_process(tmp_path, "p.host", 20, {0: [2, 0]})
    (tmp_path / "p.host.300.rank").write_text("0\n")
    (tmp_path / "p.host.20.rank").write_text("1\n")
    r = readers.load_run(tmp_path)
    assert r.rank_source == "sidecar"
    assert [(t.rank, list(t.events)) for t in r.traces] == [(0, [1, 0]), (1, [2, 0])]
    (tmp_path / "p.host.20.rank").write_text("0\n")
    with pytest.raises(TraceFormatError, match="rank 0"):
        readers.load_run(tmp_path)
    (tmp_path / "p.host.20.rank").write_text("one\n")
    with pytest.raises(TraceFormatError, match="integer"):
        readers.load_run(tmp_path)
    (tmp_path / "p.host.20.rank").unlink()
    with pytest.raises(TraceFormatError, match="rank file missing"):
        readers.load_run(tmp_path)


def test_a_lone_thread_file_loads_through_the_registry(tmp_path):
    _make_process(tmp_path, "p.host", 42, {3: [1, 2, 0, 0]})
    path = tmp_path / "p.host.42.3"
    assert readers.file_format(path) is P.FORMAT
    t = readers.load_file(path)
    assert (t.rank, t.thread) == (0, 0) and list(t.events) == [1, 2, 0, 0] and t.timestamps is None
    assert list(t.names) == [RETURN_NAME, "main", "MPI_Send", "compute"]
    (tmp_path / "p.host.42.info").unlink()
    with pytest.raises(TraceFormatError, match=r"p\.host\.42\.info: ParLOT \.info file not found"):
        readers.load_file(path)


def test_missing_info_is_an_error(tmp_path):
    _make_process(tmp_path, "p", 5, {0: [1, 0]})
    P.write_trace(tmp_path / "p.6.0", [1, 0])
    with pytest.raises(TraceFormatError) as ei:
        readers.load_run(tmp_path)
    msg = str(ei.value)
    assert "p.6.0" in msg and ".info" in msg and "missing" in msg


def test_unknown_function_id(tmp_path):
    _make_process(tmp_path, "p", 5, {0: [1, 2, 3, 0, 0, 0, 4, 0]})   # names define ids 0..3
    t = readers.load_run(tmp_path).traces[0]         # cut there, with a note (issue 22, item 5)
    assert list(t.events) == [1, 2, 3, 0, 0, 0] and not t.complete
    msg = next(n for n in t.notes if "function id 4" in n)
    assert msg.startswith("p.5.0: function id 4 (value 6, byte ") and "p.5.info" in msg


def test_empty_directory(tmp_path):
    with pytest.raises(DiffTraceError, match="no traces found"):
        readers.load_run(tmp_path)
    (tmp_path / "p.5.info").write_text("+\nimg\nf\n")
    with pytest.raises(DiffTraceError, match="no traces found .*ParLOT files <prefix>.<pid>.info"):
        readers.load_run(tmp_path)
    with pytest.raises(DiffTraceError, match="does-not-exist: no such run directory"):
        readers.load_run(tmp_path / "does-not-exist")


def test_incomplete_trace_in_run(tmp_path):
    values = np.tile(np.array([1, 2, 0, 3, 0, 0], np.uint16), 400)
    _make_process(tmp_path, "p", 9, {0: values, 1: [1, 0]})
    data = (tmp_path / "p.9.0").read_bytes()
    (tmp_path / "p.9.0").write_bytes(data[: len(data) // 2])
    r = readers.load_run(tmp_path)
    t0, t1 = r.traces
    assert t1.complete and not t1.notes
    assert not t0.complete and 0 < len(t0.events) < len(values)
    assert np.array_equal(t0.events, values[: len(t0.events)].astype(np.int32))
    assert len(t0.notes) == 1 and "trailer" in t0.notes[0] and str(len(t0.events)) in t0.notes[0]
    with pytest.raises(TraceFormatError, match="trailer"):
        P.decode_file(tmp_path / "p.9.0", strict=True)


def test_info_path_for():
    assert P.info_path_for("/x/Hdbg.17.host.123.4") == Path("/x/Hdbg.17.host.123.info")


# --------------------------------------------------------------------------- .end records

END_SIGNAL = {"how": "signal", "signal": "SIGSEGV", "thread": 2, "time_ns": 1795507266030358917, "mpi_calls": 4}
END_ERROR = {"how": "mpi_error", "code": 14, "thread": 0, "call": "MPI_Recv",
             "error": "Message truncated, error stack: ... Message from rank 0 and tag 0 truncated",
             "time_ns": 1795507283467998203, "mpi_calls": 5}


def test_end_record_roundtrip(tmp_path):
    for ending in (END_SIGNAL, END_ERROR, {"how": "finalized", "code": 0, "thread": 0, "time_ns": 1, "mpi_calls": 0},
                   {"how": "exit", "code": -1}, {"how": "abort", "code": 7, "call": "MPI_Abort"}):
        P.write_end(tmp_path / "p.5.end", ending)
        assert P.read_end(tmp_path / "p.5.end") == (ending, None)
    text = (tmp_path / "p.5.end").read_text()
    assert text == "how=abort\ncode=7\ncall=MPI_Abort\n"
    assert P.read_end(tmp_path / "p.6.end") == (None, None)              # missing: unknown, no note
    with pytest.raises(ValueError):
        P.write_end(tmp_path / "p.5.end", {"how": "exit", "error": "two\nlines"})


def test_end_record_parsing():
    assert P.parse_end("how=exit\r\ncode=3\n\nfuture_key=x=y\nthread=1\n") == {"how": "exit", "code": 3, "thread": 1}
    assert P.parse_end("how=mpi_error\nerror=a=b, c\n") == {"how": "mpi_error", "error": "a=b, c"}
    assert P.parse_end("how=signal\nsignal=SIG64\ntime_ns=9223372036854775807") == \
        {"how": "signal", "signal": "SIG64", "time_ns": 9223372036854775807}
    with pytest.raises(ValueError, match="time_ns is out of range"):      # stored as int64 (issue 22, item 6)
        P.parse_end("how=signal\nsignal=SIG64\ntime_ns=18446744073709551615")
    for bad, why in (("", "no how"), ("code=1\n", "no how"), ("how=exploded\n", "unknown how"),
                     ("how=exit\ncode=three\n", "code is not an integer"), ("how=exit\ncode=\n", "not an integer"),
                     ("how=exit\njunk\n", "line 2 is not key=value"), ("how=exit\nhow=signal\n", "twice"),
                     ("how=exit\n code=1\n", "not key=value"), ("how=exit\nmpi_calls=1.5\n", "not an integer")):
        with pytest.raises(ValueError, match=why):
            P.parse_end(bad)


def test_end_record_on_every_thread_of_its_process(tmp_path):
    _make_process(tmp_path, "p.host", 300, {0: [1, 2, 0, 0], 1: [3, 0], 2: []})
    _make_process(tmp_path, "p.host", 20, {0: [1, 0]})
    (tmp_path / "p.host.300.rank").write_text("1\n")
    (tmp_path / "p.host.20.rank").write_text("0\n")
    P.write_end(tmp_path / "p.host.300.end", END_SIGNAL)       # pid 20 has none (SIGKILL)
    r = readers.load_run(tmp_path)
    assert r.notes == []                                       # .end files are not "other files"
    t0, t1, t2, t3 = r.traces
    assert t0.ending is None and not t0.notes
    assert t1.ending == END_SIGNAL and t1.ending is t2.ending is t3.ending    # one read per process
    assert [t.key for t in r.traces] == [(0, 0), (1, 0), (1, 1), (1, 2)]
    # discovery lists it as part of the run, stray files still get the note
    (tmp_path / "p.host.99.end").write_text("how=exit\n")
    assert readers.load_run(tmp_path).notes == [f"{tmp_path}: read as a ParLOT run; other files ignored: p.host.99.end"]
    # a lone thread file reads the .end of its process too
    assert readers.load_file(tmp_path / "p.host.300.1").ending == END_SIGNAL


def test_end_record_problems_are_notes(tmp_path):
    """A malformed, oversized, non-UTF-8 or unreadable .end never stops the reading: the
    ending is unknown (None) and each trace of the process says why."""
    _make_process(tmp_path, "p", 7, {0: [1, 0], 1: [2, 0]})
    end = tmp_path / "p.7.end"
    cases = [
        (b"how=exit\ncode=x\n", "malformed end record (line 2: code is not an integer"),
        (b"garbage\x00\xff\n", "malformed end record (line 1 is not key=value"),
        (b"how=exit\n" + b"x" * (P.END_MAX_BYTES + 1), f"more than {P.END_MAX_BYTES}"),
    ]
    for data, why in cases:
        end.write_bytes(data)
        r = readers.load_run(tmp_path)
        assert [t.ending for t in r.traces] == [None, None]
        for t in r.traces:
            assert len(t.notes) == 1 and t.notes[0].startswith("p.7.end: ") and why in t.notes[0], t.notes
            assert "how the process ended is unknown" in t.notes[0]
    end.write_bytes(b"how=mpi_error\nerror=caf\xe9 \xff\ncall=MPI_Recv\n")       # not UTF-8: replaced
    t = readers.load_run(tmp_path).traces[0]
    assert t.ending == {"how": "mpi_error", "error": "caf\ufffd \ufffd", "call": "MPI_Recv"} and not t.notes
    end.unlink()
    end.mkdir()                                                  # not a regular file
    t = readers.load_run(tmp_path).traces[0]
    assert t.ending is None and "not a regular file" in t.notes[0]
    assert P.read_end(end)[0] is None


@pytest.mark.parametrize("values, unmatched, cut", [
    ([1, 2, 0, 0, 0, 3], 4, None),          # the third return closes nothing: damaged at value 4
    ([1, 0, 2, 0], None, None),             # every return closes a call
    ([1, 0, 0, 9, 0, 0], 2, 3),             # damaged before an unnamed id: both said
    ([1, 0, 9, 0, 0], None, 2),             # the unmatched return lies past the cut: not looked at
])
def test_a_return_with_no_call_open_is_noted_where_it_lies(tmp_path, values, unmatched, cut):
    """The reader's one pass over the values finds the first return with no call open (the
    tracer cannot write one, so the bytes were damaged) and the first unnamed id (the trace
    is cut there); a return past the cut is not in the trace and is not noted."""
    info = tmp_path / "run.host.100.info"
    info.write_bytes(b"+\nimage\nmain\nMPI_Send\nMPI_Recv\n")
    trace = tmp_path / "run.host.100.0"
    trace.write_bytes(P.encode_values(np.asarray(values, dtype=np.uint16)))
    t = P.read_parlot_thread(str(trace), str(info), 0, 0)
    damaged = [n for n in t.notes if "no call open" in n]
    if unmatched is None:
        assert not damaged
    else:
        assert len(damaged) == 1 and f"(value {unmatched})" in damaged[0]
    assert len(t.events) == (len(values) if cut is None else cut)
    assert t.events.dtype == np.int32 and np.array_equal(t.events, np.asarray(values[:len(t.events)]))


@pytest.mark.parametrize("period", [3, 4, 7, 33, 300, 1000, 5000])
def test_long_repeats_decode_as_encoded(period):
    """A copy longer than its distance repeats its first values: the decoder replicates
    them in blocks and writes only the hash-table entries that survive
    (``kernels.parlot._copy_periodic``).  Streams of long repeats of one unit, crossing the
    history ring's end, then random values, parts of earlier ones and the unit at another
    phase (which the encoder finds through those entries): decoded as encoded, and
    checked as ``check_ids`` checks them."""
    rng = np.random.default_rng(period)
    unit = rng.integers(0, 40, size=period).astype(np.uint16)
    noise = rng.integers(0, 40, size=3000).astype(np.uint16)
    values = np.concatenate([noise[:1000], np.tile(unit, 150_000 // period + 2), noise[1000:],
                             noise[:700], np.tile(unit, 3)[period // 2:period // 2 + 2 * period + 40], noise[2000:],
                             np.tile(unit, 90_000 // period)]).astype(np.uint16)
    data = K.encode(values)
    out = K.decode_checked(data, 40)
    assert out[1] == K.OK and np.array_equal(out[0], values)
    assert out[4:] == K.check_ids(values, 40)
    assert np.array_equal(K.decode(data)[0], values)
