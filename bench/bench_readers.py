"""Reader benchmarks (issue 14), each against a baseline in the same process on the same input:

* text: ``readers.text.read_text_trace`` (the Cython tokeniser) against the pure-Python
  reader it replaced (kept here only, as :func:`python_read_text_trace`), on a synthetic
  entry/exit trace and an entry-only one; MB/s of file, and what bounds it (reading the
  file from the page cache, the line count, the tokeniser alone);
* uftrace: our reader of a real ``uftrace record`` (a -pg program making many calls)
  against ``uftrace dump`` on the same data directory (both decode every record and name
  its function);
* OTF2: our reader of an archive written with the ``otf2`` package against that package's
  own Python reader (``otf2.reader.open``) on the same archive.

Each result is checked equal to its baseline's (names per event).  Figures are medians.

    .venv/bin/python bench/bench_readers.py [--mb 54] [--repeat 5] [--calls 300000] [--otf2-events 200000]
        [--only text uftrace otf2] [--keep DIR]
"""
import argparse
import codecs
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from benchutil import machine_line, timed  # noqa: E402
from difftrace_mpi.errors import TraceFormatError  # noqa: E402
from difftrace_mpi.kernels import textread  # noqa: E402
from difftrace_mpi.model import RETURN_NAME  # noqa: E402
from difftrace_mpi.readers import text as textfmt  # noqa: E402

MB = 1e6


# ---- the baseline: the pure-Python text reader the kernel replaced -------------------------

def python_read_text_trace(path):
    """The text reader before the kernel (same format, same messages): decode the whole
    file, split it into lines, classify them, then map names through a dict.  Returns
    (names list, events int32, complete, notes, returns) or raises TraceFormatError."""
    path = os.fspath(path)
    with open(path, "rb") as fh:
        data = fh.read()
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = start + exc.start
        line = data.count(b"\n", 0, offset) + 1
        raise TraceFormatError(path, f"line {line}: not valid UTF-8 ({exc.reason})", offset=offset) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    # a last event line without its line end was cut mid-line, unless it is an exit that
    # closes the innermost open call: read without it, then, if that reads
    unterminated = bool(lines) and not text.endswith("\n") and textfmt.is_event_line(lines[-1])
    try:
        whole, error = _python_parse(path, lines), None
    except TraceFormatError as exc:
        whole, error = None, exc
    if unterminated and (error is not None or not lines[-1].startswith("< ")):
        try:
            names, events, complete, notes, returns = _python_parse(path, lines[:-1])
        except TraceFormatError:
            pass
        else:
            notes = [n for n in notes if not n.startswith("trace marked")] + [textfmt.cut_line_note(lines[-1])]
            return names, events, False, notes, returns
    if error is not None:
        raise error
    return whole


def _python_parse(path, lines):
    """The baseline's reading of the lines of one file (see python_read_text_trace)."""
    event_lines, complete, entry_exit_at = [], True, None
    for lineno, line in enumerate(lines, 1):
        if line.endswith("\r"):
            line = line[:-1]
        if not line.strip():
            continue
        if line[0] == "#":
            if textfmt._is_incomplete_marker(line):
                complete = False
            continue
        if entry_exit_at is None and (line.startswith("> ") or line.startswith("< ")):
            entry_exit_at = lineno
        event_lines.append((lineno, line))
    ids, names = {}, [RETURN_NAME]
    events = np.empty(len(event_lines), dtype=np.int32)

    def name_id(lineno, name):
        i = ids.get(name)
        if i is None:
            if name == RETURN_NAME:
                raise TraceFormatError(path, f"line {lineno}: the function name {name!r} is reserved")
            if not name:
                raise TraceFormatError(path, f"line {lineno}: empty function name")
            i = ids[name] = len(names)
            names.append(name)
        return i

    notes = []
    if entry_exit_at is None:
        for k, (lineno, name) in enumerate(event_lines):
            events[k] = name_id(lineno, name)
    else:
        stack = []
        for k, (lineno, line) in enumerate(event_lines):
            head, name = line[:2], line[2:]
            if head == "> ":
                events[k] = name_id(lineno, name)
                stack.append((name, lineno))
            elif head == "< ":
                if not stack:
                    raise TraceFormatError(path, f"line {lineno}: exit from {name!r} but no call is open")
                open_name, open_line = stack[-1]
                if name != open_name:
                    raise TraceFormatError(
                        path, f"line {lineno}: exit from {name!r} does not match the innermost "
                              f"open call {open_name!r} (entered at line {open_line})")
                stack.pop()
                events[k] = 0
            else:
                raise TraceFormatError(
                    path, f"line {lineno}: {line!r} is neither '> name' nor '< name', but the "
                          f"file is in entry/exit style (line {entry_exit_at} is)")
        if stack:
            notes.append(textfmt._describe_open([n for n, _ in stack]))
    if not complete:
        notes.append("trace marked '# incomplete' (its run was killed or cut short)")
    return names, events, complete, notes, entry_exit_at is not None


# ---- inputs ---------------------------------------------------------------------------------

KERNELS = ["CalcForceForNodes", "CalcVolumeForceForElems", "IntegrateStressForElems",
           "CalcHourglassControlForElems", "CalcFBHourglassForceForElems", "LagrangeNodal",
           "CalcKinematicsForElems", "CalcLagrangeElements", "CalcQForElems", "ApplyMaterialPropertiesForElems",
           "EvalEOSForElems", "CalcEnergyForElems", "CalcSoundSpeedForElems", "UpdateVolumesForElems",
           "CalcTimeConstraintsForElems", "CalcCourantConstraintForElems", "CalcHydroConstraintForElems"]
MPI = ["MPI_Irecv", "MPI_Isend", "MPI_Waitall", "MPI_Allreduce", "MPI_Wait", "MPI_Barrier"]


def write_text_trace(path, megabytes, style, seed=0):
    """A LULESH-shaped trace of about ``megabytes`` MB: time steps of kernel loops and halo
    exchanges (26 neighbours), in entry/exit or entry-only style."""
    rng = np.random.default_rng(seed)
    step = []

    def call(name, inner=()):
        step.append(("> " if style == "entryexit" else "") + name + "\n")
        step.extend(inner)
        if style == "entryexit":
            step.append("< " + name + "\n")

    for k in KERNELS:
        inner = []
        for _ in range(3):
            inner += [f"> {k}_inner\n", f"< {k}_inner\n"] if style == "entryexit" else [f"{k}_inner\n"]
        call(k, inner)
    for nb in range(26):
        call(MPI[nb % 2])
        call("MPI_Waitall") if nb % 9 == 8 else None
    call("MPI_Allreduce")
    chunk = "".join(step)
    reps = max(1, int(megabytes * MB / len(chunk.encode())))
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("> main\n" if style == "entryexit" else "main\n")
        for i in range(reps):
            fh.write(chunk)
            if rng.random() < 0.02:
                fh.write("> MPI_Barrier\n< MPI_Barrier\n" if style == "entryexit" else "MPI_Barrier\n")
        if style == "entryexit":
            fh.write("< main\n")
    return path


def bench_text(args, work):
    print(f"\n== text reader: Cython tokeniser vs the pure-Python reader (median of {args.repeat}) ==")
    print(f"{'style':10s} {'MB':>7s} {'lines':>10s} | {'read()':>9s} {'count':>9s} {'tokenise':>9s} "
          f"{'reader':>9s} | {'python':>9s} | ratio  check")
    for style in ("entryexit", "entry"):
        path = write_text_trace(os.path.join(work, f"r0.t0.{style}.txt"), args.mb, style)
        size = os.path.getsize(path)

        def read_bytes():
            with open(path, "rb") as fh:
                return fh.read()

        def read_as_the_reader():
            buf, view = textfmt._read_file(path)
            view.release()
            textfmt._done_with(buf)

        data = read_bytes()
        lines = textread.count_lines(data)
        t_read, _ = timed(read_as_the_reader, args.repeat)
        t_count, _ = timed(lambda: textread.count_lines(data), args.repeat)

        def tokenise_only():
            events = np.empty(lines, dtype=np.int32)
            return textread.tokenize(data, 0, events, textfmt._RESERVED, textfmt._is_blank, textfmt._is_marker)

        t_tok, _ = timed(tokenise_only, args.repeat)
        t_new, new = timed(lambda: textfmt.read_text_trace(path), args.repeat)
        t_old, old = timed(lambda: python_read_text_trace(path), max(1, args.baseline_repeat))
        same = (list(new.names) == old[0] and np.array_equal(new.events, old[1])
                and (new.complete, new.notes, new.returns) == old[2:])
        del data
        rate = lambda t: f"{size / MB / t:7.0f}/s"       # noqa: E731
        print(f"{style:10s} {size / MB:7.1f} {lines:10d} | {rate(t_read)} {rate(t_count)} {rate(t_tok)} "
              f"{rate(t_new)} | {rate(t_old)} | {t_old / t_new:5.1f}x {'OK' if same else 'DIFFERENT'}")
        if not same:
            sys.exit("text: the reader's result differs from the baseline's")
        os.unlink(path)
    print("columns: MB of file per second; read() = reading the file from the page cache into the "
          "reader's reused buffer, count = "
          "the kernel's line count (sizes the events array), tokenise = the kernel alone on bytes in "
          "memory, reader = read_text_trace (all of it); ratio = python / reader")


# ---- uftrace --------------------------------------------------------------------------------

CALLS_C = r"""
#include <stdlib.h>
static volatile long sink;
__attribute__((noinline)) void leaf(long i) { sink += i; }
__attribute__((noinline)) void kernel(long n) { for (long i = 0; i < n; i++) leaf(i); }
__attribute__((noinline)) void exchange(long i) { sink ^= i; }
int main(int argc, char **argv) {
    long calls = argc > 1 ? strtol(argv[1], 0, 10) : 100000;
    for (long s = 0; s < calls / 6; s++) { kernel(4); exchange(s); }
    return 0;
}
"""

_DUMP_RE = re.compile(r"\[(entry|exit )\] (.*)\([0-9a-f]+\) depth: \d+$")


def dump_labels(out):
    """The call sequence of ``uftrace dump`` output: names on entry, "<" on exit."""
    labels = []
    for line in out.splitlines():
        m = _DUMP_RE.search(line)
        if m:
            labels.append(m[2] if m[1] == "entry" else "<")
    return labels


def bench_uftrace(args, work):
    from difftrace_mpi.readers import uftrace as U, uftrace_meta
    print(f"\n== uftrace reader vs `uftrace dump` on the same data directory (median of {args.repeat}) ==")
    uftrace, cc = shutil.which("uftrace"), shutil.which("gcc") or shutil.which("cc")
    if not uftrace or not cc:
        print("skipped: needs uftrace (apt-get install uftrace) and a C compiler")
        return
    src = os.path.join(work, "calls.c")
    with open(src, "w") as fh:
        fh.write(CALLS_C)
    prog = os.path.join(work, "calls")
    subprocess.run([cc, "-pg", "-O0", "-o", prog, src], check=True)
    data = os.path.join(work, "calls.data")
    subprocess.run([uftrace, "record", "--no-sched", "-d", data, prog, str(args.calls)], check=True,
                   capture_output=True)
    dats = sorted(f for f in os.listdir(data) if re.fullmatch(r"[0-9]+\.dat", f))
    size = sum(os.path.getsize(os.path.join(data, f)) for f in dats)

    def ours():
        uftrace_meta._cached_dir.cache_clear()          # the symbols are read each time, as uftrace does
        return [U.read_uftrace_thread(os.path.join(data, f)) for f in dats]

    def theirs():
        subprocess.run([uftrace, "dump", "--no-pager", "-d", data], check=True, stdout=subprocess.DEVNULL)

    t_ours, traces = timed(ours, args.repeat)
    t_theirs, _ = timed(theirs, args.repeat)
    out = subprocess.run([uftrace, "dump", "--no-pager", "-d", data], check=True, capture_output=True,
                         text=True).stdout
    mine = [label for t in traces for label in (t.names[v] if v else "<" for v in t.events.tolist())]
    same = mine == dump_labels(out)
    records = size // 16
    print(f"{records} records ({size / MB:.1f} MB in {len(dats)} .dat file(s)): ours {t_ours * 1e3:.0f} ms "
          f"({records / t_ours / 1e6:.1f} M records/s), uftrace dump {t_theirs * 1e3:.0f} ms "
          f"(to /dev/null); ratio {t_theirs / t_ours:.1f}x; names per event equal: {'OK' if same else 'DIFFERENT'}")
    if not same:
        sys.exit("uftrace: our events differ from uftrace dump's")


# ---- OTF2 -----------------------------------------------------------------------------------

def write_otf2(path, n_events):
    import otf2
    from otf2.enums import Paradigm, RegionRole
    with otf2.writer.open(path, timer_resolution=1_000_000_000) as tr:
        node = tr.definitions.system_tree_node("node")
        group = tr.definitions.location_group("MPI Rank 0", system_tree_parent=node)
        loc = tr.definitions.location("Master thread", group=group)
        writer = tr.event_writer_from_location(loc)
        regions = {n: tr.definitions.region(n, region_role=RegionRole.FUNCTION, paradigm=Paradigm.USER)
                   for n in ["main"] + KERNELS + MPI}
        t = 1000
        writer.enter(t, regions["main"])
        names = KERNELS + MPI
        for i in range(n_events // 2 - 1):
            t += 5
            writer.enter(t, regions[names[i % len(names)]])
            t += 5
            writer.leave(t, regions[names[i % len(names)]])
        writer.leave(t + 5, regions["main"])
    return os.path.join(path, "traces.otf2")


def bench_otf2(args, work):
    from difftrace_mpi.readers import otf2 as O
    print(f"\n== OTF2 reader vs the otf2 package's reader on the same archive (median of {args.repeat}) ==")
    if not O.otf2_available():
        print("skipped: needs the otf2 package (pip install otf2)")
        return
    import otf2
    anchor = write_otf2(os.path.join(work, "otf"), args.otf2_events)
    location = O.find_otf2_run(os.path.dirname(anchor))[0][0].location

    def ours():
        O._cached_defs.cache_clear()                  # definitions read each time, as theirs
        return O.read_otf2_location(anchor, location)

    def theirs():
        labels = []
        with otf2.reader.open(anchor) as tr:
            for _, event in tr.events:
                if isinstance(event, otf2.events.Enter):
                    labels.append(event.region.name)
                elif isinstance(event, otf2.events.Leave):
                    labels.append("<")
        return labels

    t_ours, trace = timed(ours, args.repeat)
    t_theirs, labels = timed(theirs, args.repeat)
    same = [trace.names[v] if v else "<" for v in trace.events.tolist()] == labels
    n = trace.events.size
    print(f"{n} Enter/Leave events: ours {t_ours * 1e3:.0f} ms ({n / t_ours / 1e6:.2f} M events/s), "
          f"otf2.reader {t_theirs * 1e3:.0f} ms ({n / t_theirs / 1e6:.2f} M events/s); ratio "
          f"{t_theirs / t_ours:.1f}x; names per event equal: {'OK' if same else 'DIFFERENT'}")
    if not same:
        sys.exit("otf2: our events differ from the otf2 package's")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=54, help="size of each synthetic text trace (MB)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline-repeat", type=int, default=3, help="repeats of the pure-Python text reader")
    ap.add_argument("--calls", type=int, default=300_000, help="calls the uftrace-recorded program makes")
    ap.add_argument("--otf2-events", type=int, default=200_000)
    ap.add_argument("--only", nargs="+", choices=["text", "uftrace", "otf2"], default=["text", "uftrace", "otf2"])
    ap.add_argument("--keep", help="work in this directory and keep it (default: a temporary one)")
    args = ap.parse_args(argv)
    print(machine_line())
    work = args.keep or tempfile.mkdtemp(prefix="bench_readers.")
    os.makedirs(work, exist_ok=True)
    try:
        t0 = time.perf_counter()
        for part in args.only:
            {"text": bench_text, "uftrace": bench_uftrace, "otf2": bench_otf2}[part](args, work)
        print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
