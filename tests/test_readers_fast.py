"""The text reader's Cython tokeniser (kernels/textread.pyx) against the pure-Python reader
it replaced (kept in bench/bench_readers.py as the benchmark's baseline): the same names,
events, completeness, notes and style, or the same error message and byte offset, on
generated, mutated and edge-case files."""
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from difftrace_mpi.errors import TraceFormatError
from difftrace_mpi.kernels import textread
from difftrace_mpi.readers.text import read_text_trace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_readers import python_read_text_trace, write_text_trace  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "traces"


def outcome(read, path):
    """What a reader makes of a file: its result as plain data, or its error."""
    try:
        got = read(path)
    except TraceFormatError as e:
        return ("error", str(e), e.offset)
    if isinstance(got, tuple):                     # the baseline's (names, events, complete, notes, returns)
        names, events, complete, notes, returns = got
    else:
        names, events, complete, notes, returns = got.names, got.events, got.complete, got.notes, got.returns
        assert got.events.dtype == np.int32 and got.names.dtype == object
    return ("ok", list(names), np.asarray(events).tolist(), complete, list(notes), returns)


def same_as_baseline(path):
    new, old = outcome(read_text_trace, path), outcome(python_read_text_trace, path)
    assert new == old
    return new


# Pieces that meet every rule of the format: the two prefixes, comments and the marker,
# ASCII and Unicode whitespace (str.strip's), CR, the reserved name, non-ASCII names
PIECES = ["> ", "< ", "#", "# incomplete", "#Incomplete: why", " ", "\t", "\r", "\x0b", "\x1c", "\x85",
          "\u2028", "\u3000", "\xa0", "a", "b", "main", "MPI_Send", "<return>", "é", "函数", ">", "<",
          "incomplete", ":", "\ufeff"]


@st.composite
def text_files(draw):
    lines = draw(st.lists(st.lists(st.sampled_from(PIECES), max_size=4).map("".join), max_size=25))
    body = "\n".join(lines) + draw(st.sampled_from(["", "\n", "\r\n"]))
    data = body.encode("utf-8")
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    return data


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text_files())
def test_generated_files_read_as_the_python_reader_did(tmp_path, data):
    path = tmp_path / "r0.t0.txt"
    path.write_bytes(data)
    same_as_baseline(path)


@st.composite
def nested_files(draw):
    """Well-nested entry/exit traces (with a mistake now and then)."""
    names = draw(st.lists(st.sampled_from(["main", "f", "g", "MPI_Recv", "é", " x ", "a > b"]), min_size=1,
                          max_size=5, unique=True))
    out, stack = [], []
    for _ in range(draw(st.integers(0, 40))):
        if stack and draw(st.booleans()):
            name = stack.pop()
            if draw(st.integers(0, 30)) == 0:
                name = draw(st.sampled_from(names))        # maybe the wrong exit
            out.append(f"< {name}")
        else:
            stack.append(draw(st.sampled_from(names)))
            out.append(f"> {stack[-1]}")
    return ("\n".join(out) + "\n").encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nested_files())
def test_nested_files_read_as_the_python_reader_did(tmp_path, data):
    path = tmp_path / "r0.t0.txt"
    path.write_bytes(data)
    same_as_baseline(path)


def mutate(rng, data):
    data = bytearray(data)
    k = rng.randrange(len(data) or 1)
    op = rng.randrange(4)
    if op == 0 and data:
        data[k] = rng.randrange(256)
    elif op == 1:
        data[k:k] = rng.choice([b"\n", b"> ", b"< ", b"#", b"\r", b"\xc3", b"\xe2\x80\xa8", b"<return>\n"])
    elif op == 2 and data:
        del data[k:k + rng.randrange(1, 8)]
    else:
        data = data[:k]
    return bytes(data)


def test_mutated_example_traces_read_as_the_python_reader_did(tmp_path):
    files = sorted(EXAMPLES.glob("*/*/r*.t*.txt"))
    assert files
    rng = random.Random(1404)
    outcomes = set()
    for k in range(300):
        data = rng.choice(files).read_bytes()
        for _ in range(rng.choice((1, 2, 6))):
            data = mutate(rng, data)
        path = tmp_path / f"r{k}.t0.txt"
        path.write_bytes(data)
        outcomes.add(same_as_baseline(path)[0])
        path.unlink()
    assert outcomes == {"ok", "error"}             # both kinds were compared


@pytest.mark.parametrize("style", ["entryexit", "entry"])
def test_a_large_generated_trace(tmp_path, style):
    path = write_text_trace(tmp_path / "r0.t0.txt", 0.3, style)
    got = same_as_baseline(path)
    assert got[0] == "ok" and len(got[2]) > 10_000


def test_many_distinct_names_and_a_deep_stack(tmp_path):
    # past the first sizes of the kernel's hash table (1024 slots) and open-call stack (64)
    path = tmp_path / "r0.t0.txt"
    names = [f"fn_{i}" for i in range(5000)]
    path.write_text("".join(f"> {n}\n" for n in names) + "".join(f"< {n}\n" for n in reversed(names[100:]))
                    + "".join(f"> {n}\n< {n}\n" for n in names[::7]))
    got = same_as_baseline(path)
    assert got[1][1:] == names and got[4] == [f"100 calls still open at the end: fn_0 > fn_1 > ... (91 more) > "
                                              + " > ".join(names[93:100])]


def test_names_that_differ_only_late_or_in_length(tmp_path):
    path = tmp_path / "r0.t0.txt"
    names = ["x" * 17, "x" * 16, "x" * 16 + "y", "x" * 8, "x" * 9, "x" * 7 + "\u00e9", "x" * 64, "x" * 63 + "z"]
    path.write_text("".join(f"{n}\n" for n in names * 3))
    got = same_as_baseline(path)
    assert got[1][1:] == names and got[2] == list(range(1, 9)) * 3


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=40))
def test_utf8_check_agrees_with_python(data):
    try:
        data.decode("utf-8")
        expect = -1
    except UnicodeDecodeError as e:
        expect = e.start
    assert textread.utf8_error_at(data) == expect


@given(st.binary(max_size=200), st.integers(0, 5))
def test_line_count(data, start):
    start = min(start, len(data))
    assert textread.count_lines(data, start) == data.count(b"\n", start) + 1


def test_events_array_too_small_is_refused():
    with pytest.raises(ValueError, match="smaller than the line count"):
        textread.tokenize(b"a\nb\n", 0, np.empty(1, np.int32), b"<return>", str.isspace, bool)


def test_empty_and_bom_only_files(tmp_path):
    for data in (b"", b"\xef\xbb\xbf", b"\n", b"\xef\xbb\xbf\r\n"):
        path = tmp_path / "r0.t0.txt"
        path.write_bytes(data)
        got = same_as_baseline(path)
        assert got[:3] == ("ok", ["<return>"], [])
    os.unlink(path)


def test_the_reused_buffer_holds_only_the_file_read(tmp_path):
    """The reader reuses its buffer from one file to the next: a shorter file after a
    longer one must not see the longer one's tail."""
    long, short = tmp_path / "r0.t0.txt", tmp_path / "r1.t0.txt"
    long.write_text("> main\n" + "> f\n< f\n" * 1000 + "< main\n")
    short.write_text("> main\n> g\n> h")       # ends without its line end where the long one goes on
    assert same_as_baseline(long)[0] == "ok"
    got = same_as_baseline(short)
    # "> h" is the file's cut last line, not the start of "> h" + the long file's tail
    assert got[1] == ["<return>", "main", "g"] and got[2] == [1, 2] and not got[3]
    assert "('> h')" in got[4][-1]
    assert same_as_baseline(long)[2][:3] == [1, 2, 0]


@pytest.mark.integration
def test_bench_readers_runs_and_its_checks_pass():
    import subprocess
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, str(root / "bench" / "bench_readers.py"), "--mb", "0.2", "--repeat", "1",
                           "--baseline-repeat", "1", "--calls", "3000", "--otf2-events", "2000"],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("entryexit", "entry "))]
    assert len(rows) == 2 and all(row.endswith("OK") for row in rows), proc.stdout
    results = [line for line in proc.stdout.splitlines() if "names per event equal" in line or
               line.startswith("skipped")]
    assert len(results) == 2 and all(r.endswith(": OK") or r.startswith("skipped") for r in results), proc.stdout
