"""Tests of the plain text trace format (difftrace_mpi.readers.text)."""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from difftrace_mpi import readers
from difftrace_mpi.readers import text as textfmt
from difftrace_mpi.errors import DiffTraceError, TraceFormatError
from difftrace_mpi.model import RETURN_NAME, Run, Trace
from difftrace_mpi.readers.text import read_text_trace, write_text_run, write_text_trace


def write(path, text, encoding="utf-8"):
    path = str(path)
    with open(path, "wb") as fh:
        fh.write(text.encode(encoding) if isinstance(text, str) else text)
    return path


def as_calls(trace):
    """Event stream as readable tokens: names for entries, None for returns."""
    return [None if v == 0 else trace.names[v] for v in trace.events.tolist()]


# ----------------------------------------------------------------------------- reading

def test_entry_only_style(tmp_path):
    p = write(tmp_path / "r3.t1.txt", "main\nMPI_Init\nfoo\nMPI_Init\n")
    t = read_text_trace(p)
    assert (t.rank, t.thread) == (3, 1)
    assert list(t.names) == [RETURN_NAME, "main", "MPI_Init", "foo"]
    assert t.names.dtype == object
    assert t.events.dtype == np.int32
    assert t.events.tolist() == [1, 2, 3, 2]
    assert t.complete and t.notes == []
    assert t.source == p


def test_entry_exit_style(tmp_path):
    p = write(tmp_path / "r0.t0.txt",
              "> main\n> MPI_Init\n< MPI_Init\n> f\n> MPI_Init\n< MPI_Init\n< f\n< main\n")
    t = read_text_trace(p)
    assert list(t.names) == [RETURN_NAME, "main", "MPI_Init", "f"]
    assert t.events.tolist() == [1, 2, 0, 3, 2, 0, 0, 0]
    assert t.notes == [] and t.complete


def test_comments_blank_lines_and_crlf(tmp_path):
    p = write(tmp_path / "r0.t0.txt",
              "# a header\r\n\r\n   \n> main\r\n# in between\n\t\n< main\r\n")
    t = read_text_trace(p)
    assert as_calls(t) == ["main", None]
    assert t.complete


def test_incomplete_marker(tmp_path):
    p = write(tmp_path / "r0.t0.txt", "# incomplete\n> main\n> MPI_Recv\n")
    t = read_text_trace(p)
    assert not t.complete
    assert any("incomplete" in n for n in t.notes)
    p2 = write(tmp_path / "r1.t0.txt", "#incomplete: killed by timeout\nmain\n")
    assert not read_text_trace(p2).complete
    p3 = write(tmp_path / "r2.t0.txt", "# incompletely specified header\nmain\n")
    assert read_text_trace(p3).complete


def test_open_calls_note_innermost_last(tmp_path):
    p = write(tmp_path / "r5.t0.txt",
              "> main\n> MPI_Init\n< MPI_Init\n> oddEvenSort\n> findPtr\n< findPtr\n> MPI_Recv\n")
    t = read_text_trace(p)
    assert t.events.tolist() == [1, 2, 0, 3, 4, 0, 5]
    assert t.notes == ["3 calls still open at the end: main > oddEvenSort > MPI_Recv"]
    assert t.complete          # only '# incomplete' marks a trace as cut short


def test_one_open_call_note(tmp_path):
    t = read_text_trace(write(tmp_path / "r0.t0.txt", "> main\n"))
    assert t.notes == ["1 call still open at the end: main"]


def test_deep_open_stack_note_is_shortened(tmp_path):
    text = "".join(f"> f{i}\n" for i in range(50))
    note = read_text_trace(write(tmp_path / "r0.t0.txt", text)).notes[0]
    assert note.startswith("50 calls still open at the end: f0 > f1 > ")
    assert note.endswith("> f49") and "more" in note and len(note) < 200


def test_exit_mismatch_names_file_line_and_both_names(tmp_path):
    p = write(tmp_path / "r2.t0.txt", "> main\n> MPI_Send\n\n# c\n< MPI_Recv\n")
    with pytest.raises(TraceFormatError) as ei:
        read_text_trace(p)
    msg = str(ei.value)
    assert "r2.t0.txt" in msg and "line 5" in msg
    assert "MPI_Recv" in msg and "MPI_Send" in msg
    assert "line 2" in msg       # where the open call was entered


def test_exit_with_nothing_open(tmp_path):
    p = write(tmp_path / "r2.t0.txt", "> main\n< main\n< main\n")
    with pytest.raises(TraceFormatError) as ei:
        read_text_trace(p)
    assert "r2.t0.txt" in str(ei.value) and "line 3" in str(ei.value)
    assert "no call is open" in str(ei.value)


def test_mixed_styles_rejected(tmp_path):
    p = write(tmp_path / "r0.t0.txt", "> main\nfoo\n< main\n")
    with pytest.raises(TraceFormatError) as ei:
        read_text_trace(p)
    assert "line 2" in str(ei.value) and "r0.t0.txt" in str(ei.value)


def test_style_decided_by_any_line(tmp_path):
    # The first event line looks like an entry-only name, but a later one makes the
    # file entry/exit: the first line is then an error.
    p = write(tmp_path / "r0.t0.txt", "main\n> f\n")
    with pytest.raises(TraceFormatError, match="line 1"):
        read_text_trace(p)


def test_names_with_spaces_unicode_and_markers(tmp_path):
    names = ["operator>> (std::istream&)", "  lead and trail  ", "λ→函数", "a < b", "#x",
             "> nested", "x\u2028y\x85z"]
    text = "".join(f"> {n}\n" for n in names) + "".join(f"< {n}\n" for n in reversed(names))
    t = read_text_trace(write(tmp_path / "r0.t0.txt", text))
    assert list(t.names[1:]) == names
    assert t.events.tolist() == list(range(1, len(names) + 1)) + [0] * len(names)


def test_entry_only_names_verbatim(tmp_path):
    t = read_text_trace(write(tmp_path / "r0.t0.txt", "a>b\n  spaced name \nü\n>x\n"))
    assert list(t.names[1:]) == ["a>b", "  spaced name ", "ü", ">x"]


def test_empty_file_is_valid(tmp_path):
    for text in ["", "\n\n", "# only a comment\n"]:
        t = read_text_trace(write(tmp_path / "r0.t0.txt", text))
        assert t.events.dtype == np.int32 and len(t.events) == 0
        assert list(t.names) == [RETURN_NAME]
        assert t.notes == []


def test_no_final_newline(tmp_path):
    t = read_text_trace(write(tmp_path / "r0.t0.txt", "> main\n< main"))
    assert as_calls(t) == ["main", None]
    assert t.complete and t.notes == []         # an exit that closes the innermost call is whole


@pytest.mark.parametrize("text, calls", [
    ("> main\n> MPI_Send\n< MPI_Send\n> MPI_Se", ["main", "MPI_Send", None]),         # an entry cut mid-line
    ("> main\n> findPtr\n< findPtr\n< find", ["main", "findPtr", None]),             # an exit that closes nothing
    ("main\nMPI_Send\nMPI_Re", ["main", "MPI_Send"]),                                # entry-only style
    ("> ma", []),
])
def test_a_last_line_without_its_line_end_is_read_as_cut(tmp_path, text, calls):
    """A file whose last event line has no line end was cut mid-line (its writer killed):
    that line is left out, the trace is incomplete, and a note quotes the partial line,
    so a cut name is never read as a call of its own."""
    t = read_text_trace(write(tmp_path / "r0.t0.txt", text))
    assert as_calls(t) == calls
    assert not t.complete
    partial = text.rsplit("\n", 1)[-1]
    assert any("no line end" in n and repr(partial) in n for n in t.notes), t.notes


def test_a_last_comment_or_blank_line_without_line_end_cuts_nothing(tmp_path):
    for text in ("> main\n< main\n# done", "main\nfoo\n   "):
        t = read_text_trace(write(tmp_path / "r0.t0.txt", text))
        assert t.complete and t.notes == [] and len(t.events) == 2


def test_bad_utf8_names_file_and_line(tmp_path):
    p = write(tmp_path / "r4.t2.txt", b"main\nok\nbad\xff\xfename\n")
    with pytest.raises(TraceFormatError) as ei:
        read_text_trace(p)
    assert "r4.t2.txt" in str(ei.value) and "line 3" in str(ei.value)
    assert ei.value.offset == 11


def test_utf8_bom_accepted(tmp_path):
    t = read_text_trace(write(tmp_path / "r0.t0.txt", b"\xef\xbb\xbf> main\n< main\n"))
    assert as_calls(t) == ["main", None]


def test_empty_entry_name_rejected(tmp_path):
    with pytest.raises(TraceFormatError, match="line 2"):
        read_text_trace(write(tmp_path / "r0.t0.txt", "> main\n> \n"))


def test_reserved_name_rejected(tmp_path):
    with pytest.raises(TraceFormatError, match="reserved"):
        read_text_trace(write(tmp_path / "r0.t0.txt", f"main\n{RETURN_NAME}\n"))


def test_unreadable_file_names_it(tmp_path):
    with pytest.raises(TraceFormatError, match="r9.t0.txt"):
        read_text_trace(tmp_path / "r9.t0.txt")


# ----------------------------------------------------------------------------- runs

def test_read_run_sorted_by_rank_then_thread(tmp_path):
    for rank, thread in [(10, 0), (2, 1), (2, 0), (0, 3)]:
        write(tmp_path / f"r{rank}.t{thread}.txt", f"main\nrank{rank}\n")
    write(tmp_path / "README.md", "not a trace")
    write(tmp_path / "r1.t0.txt.bak", "old")
    run = readers.load_run(tmp_path)
    assert isinstance(run, Run)
    assert [t.key for t in run.traces] == [(0, 3), (2, 0), (2, 1), (10, 0)]
    assert run.rank_source == "filename"
    assert run.path == str(tmp_path)
    assert run.notes == [f"{tmp_path}: read as a text-format run; other files ignored: README.md, r1.t0.txt.bak"]
    assert list(run.traces[3].names[1:]) == ["main", "rank10"]


def test_read_run_duplicate_rank(tmp_path):
    write(tmp_path / "r5.t0.txt", "main\n")
    write(tmp_path / "r05.t0.txt", "main\n")
    with pytest.raises(DiffTraceError) as ei:
        readers.load_run(tmp_path)
    assert str(ei.value) == f"{tmp_path}: r05.t0.txt and r5.t0.txt are both rank 5 thread 0"


def test_read_run_missing_and_not_directory(tmp_path):
    with pytest.raises(DiffTraceError, match="nope: no such run directory"):
        readers.load_run(tmp_path / "nope")
    f = write(tmp_path / "file.txt", "x")
    with pytest.raises(DiffTraceError, match="not a directory"):
        readers.load_run(f)


def test_read_run_no_trace_files(tmp_path):
    write(tmp_path / "trace0.txt", "main\n")
    with pytest.raises(DiffTraceError) as ei:
        readers.load_run(tmp_path)
    assert f"{tmp_path}: no traces found (expected text traces r<rank>.t<thread>.txt," in str(ei.value)


def test_read_run_error_names_the_bad_file(tmp_path):
    write(tmp_path / "r0.t0.txt", "> main\n< main\n")
    write(tmp_path / "r1.t0.txt", "> main\n< oops\n")
    with pytest.raises(TraceFormatError, match=r"r1\.t0\.txt.*line 2"):
        readers.load_run(tmp_path)


def test_read_run_directory_named_like_a_trace(tmp_path):
    os.mkdir(tmp_path / "r0.t0.txt")
    with pytest.raises(TraceFormatError, match="r0.t0.txt: named like a text trace but is a directory"):
        readers.load_run(tmp_path)


def test_a_lone_text_file_loads_through_the_registry(tmp_path):
    p = write(tmp_path / "r4.t2.txt", "> main\n< main\n")
    assert readers.file_format(p) is textfmt.FORMAT
    t = readers.load_file(p)
    assert (t.rank, t.thread) == (4, 2) and as_calls(t) == ["main", None] and t.timestamps is None
    with pytest.raises(DiffTraceError, match=r"r5\.t0\.txt: no such trace file"):
        readers.load_file(tmp_path / "r5.t0.txt")


def test_text_run_detection(tmp_path):
    with pytest.raises(DiffTraceError, match="no traces found"):
        readers.discover_run(tmp_path)
    write(tmp_path / "notes.txt", "")
    write(tmp_path / "r0.t0.txt.bak", "")
    write(tmp_path / "r٣.t0.txt", "")                   # ranks are ASCII digits only
    with pytest.raises(DiffTraceError, match="no traces found"):
        readers.discover_run(tmp_path)
    write(tmp_path / "r0.t0.txt", "")
    index = readers.discover_run(tmp_path)
    assert index.fmt == "text" and [(r.rank, r.thread, r.fmt) for r in index.refs] == [(0, 0, "text")]
    with pytest.raises(DiffTraceError, match="not a directory"):
        readers.discover_run(tmp_path / "r0.t0.txt")


# ----------------------------------------------------------------------------- writing

NAMES = [RETURN_NAME, "main", "MPI_Send", "name with spaces", "ünï → ∞", "a > b"]


@pytest.mark.parametrize("style", ["entryexit", "entry"])
def test_write_then_read_round_trip(tmp_path, style):
    events = [1, 2, 0, 3, 4, 0, 5, 0, 0, 2, 0, 0]
    p = str(tmp_path / "r7.t2.txt")
    write_text_trace(p, NAMES, events, style=style)
    t = read_text_trace(p)
    assert (t.rank, t.thread) == (7, 2)
    expected = [NAMES[v] if v else None for v in events]
    if style == "entry":
        expected = [x for x in expected if x is not None]
    assert as_calls(t) == expected


def test_write_entry_exit_text_exact(tmp_path):
    p = str(tmp_path / "r0.t0.txt")
    write_text_trace(p, np.array(NAMES, dtype=object), np.array([1, 2, 0, 2], dtype=np.int32),
                     complete=False, comments=["generated"])
    with open(p, encoding="utf-8") as fh:
        assert fh.read() == "# incomplete\n# generated\n> main\n> MPI_Send\n< MPI_Send\n> MPI_Send\n"
    t = read_text_trace(p)
    assert not t.complete
    assert t.notes[0] == "2 calls still open at the end: main > MPI_Send"


def test_write_rejects_unwritable(tmp_path):
    p = str(tmp_path / "r0.t0.txt")
    with pytest.raises(DiffTraceError):
        write_text_trace(p, [RETURN_NAME, "a\nb"], [1])
    with pytest.raises(DiffTraceError):
        write_text_trace(p, [RETURN_NAME, "> x"], [1], style="entry")
    with pytest.raises(DiffTraceError):
        write_text_trace(p, [RETURN_NAME, "#x"], [1], style="entry")
    with pytest.raises(DiffTraceError):
        write_text_trace(p, [RETURN_NAME, "a"], [0])
    with pytest.raises(DiffTraceError):
        write_text_trace(p, [RETURN_NAME, "a"], [2])
    with pytest.raises(ValueError):
        write_text_trace(p, [RETURN_NAME, "a"], [1], style="xml")
    assert not os.path.exists(p)
    assert os.listdir(tmp_path) == []          # no temp file left behind


def test_write_is_atomic_replace(tmp_path):
    p = str(tmp_path / "r0.t0.txt")
    write_text_trace(p, [RETURN_NAME, "old"], [1, 0])
    with pytest.raises(DiffTraceError):
        write_text_trace(p, [RETURN_NAME, "new"], [1, 0, 0])
    assert as_calls(read_text_trace(p)) == ["old", None]     # the old file is intact
    assert os.listdir(tmp_path) == ["r0.t0.txt"]


def _trace(rank, thread, names, events, complete=True):
    return Trace(rank, thread, np.array(names, dtype=object),
                 np.array(events, dtype=np.int32), complete=complete)


def test_write_run_round_trip(tmp_path):
    traces = [_trace(1, 0, [RETURN_NAME, "main", "MPI_Recv"], [1, 2], complete=False),
              _trace(0, 1, [RETURN_NAME, "main", "x y"], [1, 2, 0, 0]),
              _trace(0, 0, [RETURN_NAME, "main"], [])]
    out = tmp_path / "run"
    written = write_text_run(out, traces)
    assert sorted(os.path.basename(p) for p in written) == ["r0.t0.txt", "r0.t1.txt", "r1.t0.txt"]
    run = readers.load_run(out)
    assert [t.key for t in run.traces] == [(0, 0), (0, 1), (1, 0)]
    by_key = {t.key: t for t in traces}
    for t in run.traces:
        orig = by_key[t.key]
        assert as_calls(t) == as_calls(orig)
        assert t.complete == orig.complete
    assert run.traces[2].notes[0].startswith("2 calls still open at the end: main > MPI_Recv")


def test_write_run_replace_removes_stale(tmp_path):
    write(tmp_path / "r9.t0.txt", "stale\n")
    write(tmp_path / "keep.me", "x")
    write_text_run(tmp_path, [_trace(0, 0, [RETURN_NAME, "a"], [1])])
    assert sorted(os.listdir(tmp_path)) == ["keep.me", "r0.t0.txt", "r9.t0.txt"]
    write_text_run(tmp_path, [_trace(0, 0, [RETURN_NAME, "a"], [1])], replace=True)
    assert sorted(os.listdir(tmp_path)) == ["keep.me", "r0.t0.txt"]


def test_write_run_duplicate_keys(tmp_path):
    with pytest.raises(DiffTraceError, match="rank 0 thread 0"):
        write_text_run(tmp_path, [_trace(0, 0, [RETURN_NAME], []), _trace(0, 0, [RETURN_NAME], [])])


# ----------------------------------------------------------------------------- properties

_name = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
                min_size=1, max_size=12).filter(lambda s: s != RETURN_NAME)


@st.composite
def _well_nested(draw):
    """(names, events) of a random call tree, possibly with calls left open."""
    names = [RETURN_NAME] + draw(st.lists(_name, min_size=1, max_size=6, unique=True))
    events, depth = [], 0
    for _ in range(draw(st.integers(0, 40))):
        if depth and draw(st.booleans()):
            events.append(0)
            depth -= 1
        else:
            events.append(draw(st.integers(1, len(names) - 1)))
            depth += 1
    return names, events


@settings(max_examples=150, deadline=None)
@given(_well_nested())
def test_round_trip_property_entry_exit(tmp_path_factory, data):
    names, events = data
    p = str(tmp_path_factory.mktemp("rt") / "r0.t0.txt")
    write_text_trace(p, names, events)
    t = read_text_trace(p)
    assert as_calls(t) == [names[v] if v else None for v in events]
    # The local table holds each used name once, in order of first appearance.
    used = list(dict.fromkeys(names[v] for v in events if v))
    assert list(t.names) == [RETURN_NAME] + used
    # Writing what was read gives the same file.
    p2 = p + ".again"
    write_text_trace(p2, t.names, t.events)
    assert open(p, "rb").read() == open(p2, "rb").read()


@settings(max_examples=100, deadline=None)
@given(st.lists(_name.filter(lambda s: s.strip() and s[0] != "#" and s[:2] not in ("> ", "< ")),
                max_size=30))
def test_round_trip_property_entry_only(tmp_path_factory, seq):
    names = [RETURN_NAME] + list(dict.fromkeys(seq))
    events = [names.index(s) for s in seq]
    p = str(tmp_path_factory.mktemp("rt") / "r0.t0.txt")
    write_text_trace(p, names, events, style="entry")
    assert as_calls(read_text_trace(p)) == seq


def test_module_exports():
    for name in ["read_text_trace", "write_text_trace", "write_text_run"]:
        assert callable(getattr(textfmt, name))
    assert textfmt.FORMAT.name == "text" and textfmt.FORMAT in readers.FORMATS
    assert textfmt.trace_file_name(5, 0) == "r5.t0.txt"
    assert textfmt.parse_trace_file_name("r05.t12.txt") == (5, 12)
    assert textfmt.parse_trace_file_name("r5.t0.txt.bak") is None


def test_the_small_word_helpers_have_one_definition():
    """plural, shorten, shorten_left and token_label live in naming.py alone (issue 23)."""
    import ast
    from conftest import ROOT
    from difftrace_mpi.naming import plural, shorten, shorten_left, token_label
    assert (plural(1, "trace"), plural(3, "process"), plural(1234, "token", grouped=True)) == \
        ("1 trace", "3 processes", "1,234 tokens")
    assert (shorten("abcdef", 6), shorten("abcdefg", 6), shorten_left("/a/b/c/d", 5)) == \
        ("abcdef", "abcde\u2026", "\u2026/c/d")
    assert (token_label("MPI_Send", 0), token_label("L1", 7)) == ("MPI_Send", "L1^7")
    helpers = {"plural", "shorten", "shorten_left", "token_label", "cut_name"}
    for path in (ROOT / "difftrace_mpi").rglob("*.py"):
        if path.name == "naming.py":
            continue
        defined = {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
        assert not defined & helpers, f"{path} defines {defined & helpers}"
