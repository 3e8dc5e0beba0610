"""Issue 25: the documents hold.  Every shell command block of README.md and of the docs
pages (``bash``, ``sh``, ``shell``, ``console``) and every ``python`` block runs, on the
bundled examples; every relative link and anchor resolves; the MkDocs site builds, loads
nothing from the network, and every link in it leads to a file of the site (issue 39).

How the blocks run:

* Each page gets a scratch directory holding copies of ``examples/``, ``pin/`` (with the
  tracer as built here) and ``slurm/``, and a link to ``.venv``, so that what the
  commands write (``runs/``, ``diff.h5``, ``examples/programs/build``) never lands in the
  checkout.  A page's blocks run there in order, so a later block may read what an earlier
  one wrote.  ``difftrace_mpi`` is imported from this checkout (``PYTHONPATH``).
* ``.venv/bin`` is *not* put on ``PATH``: the documents name ``.venv/bin/python`` and
  ``.venv/bin/mpiexec`` as a user on a fresh machine must type them, and
  ``test_commands_name_the_virtualenv`` refuses a bare ``mpiexec`` or ``python``.
* The checkout is set up already: in the scratch directory ``./setup.sh`` is a stand-in
  that only checks that ``.venv/bin/python`` exists (``.ci/run`` runs the real one first;
  ``tests/test_install.py`` tests ``pip install``).
* A shell block runs under ``bash -e -o pipefail``; ``timeout`` there is the real one,
  except that its status 124 (it had to stop the job: what the hang recipe wants) counts as
  success.  In a ``console`` block, lines starting with ``$ `` are commands, and the lines
  after one are an excerpt of its output: each must appear in the real output, in order
  (``...`` and ``…`` lines are skipped).
* Where the tracer could not be built (no make or C compiler: ``./setup.sh`` says so), the
  blocks that build or trace programs, or read the ``runs/`` they write, are left out.
* A block is left out only by a marker on the line right before it,
  ``<!-- not run: REASON -->``; at most ``MAX_NOT_RUN`` are, over all pages.  Pages whose
  commands change the environment (installing packages, loading modules) are listed in
  ``PAGES_NOT_RUN`` with the reason; their links are still checked.
"""
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from conftest import ROOT

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), ROOT / "bench" / "README.md",
         ROOT / "bench" / "HISTORY.md"]
RUN_PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
PAGES_NOT_RUN = {
    "docs/install.md": "install steps change the environment they run in (pip, module load, a "
                       "site's MPI); tests/test_install.py and .ci/run exercise the install",
}
MAX_NOT_RUN = 6
SHELL = {"bash", "sh", "shell", "console"}
COPIED = ("examples", "pin", "slurm")
TRACER = ROOT / "pin" / "libparlot.so"
TRACING = ("parlot-run", "examples/programs", "runs/")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")


def rel(path):
    return path.relative_to(ROOT).as_posix()


# --------------------------------------------------------------------------- reading the pages

def blocks(path):
    """[(language, code, line number, not-run reason or None)] of the fenced blocks of a page."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence[:3]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        before = next((ln for ln in reversed(lines[:start - 1]) if ln.strip()), "")
        reason = NOT_RUN.search(before)
        out.append((lang, "\n".join(body) + "\n", start, reason.group(1) if reason else None))
        i += 1
    return out


def runnable(path):
    return [b for b in blocks(path) if b[0] in SHELL or b[0] == "python"]


def console_commands(code):
    """[(command, [expected output lines])] of a console block."""
    out = []
    for line in code.splitlines():
        if line.startswith("$ "):
            out.append([line[2:], []])
        elif out and out[-1][0].endswith("\\"):
            out[-1][0] = out[-1][0][:-1] + line
        elif out:
            out[-1][1].append(line.rstrip())
    return [(cmd, [e for e in expected if e.strip() and e.strip() not in ("...", "…")])
            for cmd, expected in out]


def shell_lines(lang, code):
    """The command lines of a shell block (continuations joined, comments dropped)."""
    if lang == "console":
        return [cmd for cmd, _ in console_commands(code)]
    joined = code.replace("\\\n", " ")
    return [ln.split(" #")[0].strip() for ln in joined.splitlines()
            if ln.strip() and not ln.strip().startswith("#")]


# --------------------------------------------------------------------------- in-process checks

def test_readme_starts_with_the_fresh_machine_commands():
    """The first two command blocks of README.md are the set-up-and-analyze line and the test
    command that .ci/run runs."""
    shell = [b for b in blocks(ROOT / "README.md") if b[0] in SHELL]
    assert shell[0][1].strip() == ("./setup.sh && .venv/bin/python -m difftrace_mpi analyze "
                                   "examples/traces/oddeven/normal examples/traces/oddeven/swapbug")
    assert shell[1][1].strip() == ".venv/bin/python -m pytest tests -q"
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/python -m pytest tests -q\n" in ci


def test_commands_name_the_virtualenv():
    """No command starts with a bare mpiexec, mpicc, python or pytest: on a fresh machine
    those are not the virtualenv's (or do not exist)."""
    bare = re.compile(r"(^|[;&|(]\s*|timeout(\s+-s\s+\w+)?\s+\d+\s+)(mpiexec|mpirun|mpicc|python3?|pytest|difftrace-mpi)\b")
    found = []
    for page in RUN_PAGES:
        if rel(page) in PAGES_NOT_RUN:
            continue
        for lang, code, line, _ in blocks(page):
            if lang not in SHELL:
                continue
            found += [f"{rel(page)}:{line}: {cmd}" for cmd in shell_lines(lang, code) if bare.search(cmd)]
    assert not found, "commands that should name .venv/bin/...:\n" + "\n".join(found)


def test_few_blocks_are_left_out():
    """Blocks are left out only with a reason, and only a few."""
    left_out = [f"{rel(p)}:{line}: {reason}" for p in RUN_PAGES if rel(p) not in PAGES_NOT_RUN
                for _, _, line, reason in runnable(p) if reason]
    ran = [1 for p in RUN_PAGES if rel(p) not in PAGES_NOT_RUN for b in runnable(p) if not b[3]]
    assert len(left_out) <= MAX_NOT_RUN, "\n".join(left_out)
    assert len(ran) >= 20, f"only {len(ran)} blocks run"


def heading_anchors(path):
    """GitHub's anchors of a markdown page's headings (duplicates get -1, -2, ...)."""
    seen, anchors, fenced = {}, set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))      # a link's text
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def prose(path):
    """The page without its fenced blocks and code spans (links there are not links)."""
    text, out, fenced = path.read_text(encoding="utf-8"), [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_links_resolve(page):
    """Every relative link of the page names a file or directory that exists, and every
    #anchor a heading of the page it points into."""
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):          # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {rel(dest)}")
    assert not broken, f"{rel(page)}:\n" + "\n".join(broken)


# --------------------------------------------------------------------------- running the blocks

def scratch(tmp_path):
    """A directory that looks like the set-up checkout to the commands."""
    ignore = shutil.ignore_patterns("__pycache__", ".cache")
    for name in COPIED:
        shutil.copytree(ROOT / name, tmp_path / name, symlinks=True, ignore=ignore)
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    setup = tmp_path / "setup.sh"
    setup.write_text("#!/bin/sh\n# stand-in: the checkout is set up (tests/test_docs.py)\n"
                     "test -x .venv/bin/python && echo 'set up already'\n")
    setup.chmod(0o755)
    return tmp_path


def environment():
    env = dict(os.environ, NO_COLOR="1", PYTHONPATH=str(ROOT))
    venv_bin = str(ROOT / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and os.path.realpath(p) != os.path.realpath(venv_bin))
    env.pop("VIRTUAL_ENV", None)
    return env


PRELUDE = """set -e -o pipefail
timeout() { command timeout "$@" && return 0 || rc=$?
            if [ "$rc" = 124 ]; then echo "(timeout stopped the job: status 124)"; return 0; fi
            return "$rc"; }
"""


def run(args, cwd, what, timeout=180):
    proc = subprocess.run(args, cwd=cwd, env=environment(), capture_output=True, text=True,
                          timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{what} failed (status {proc.returncode}):\n{output[-4000:]}"
    return output


def run_block(lang, code, cwd, where):
    if lang == "python":
        script = cwd / "docs_block.py"
        script.write_text(code)
        run([str(ROOT / ".venv" / "bin" / "python"), script.name], cwd, where)
    elif lang == "console":
        for cmd, expected in console_commands(code):
            output = run(["bash", "-c", PRELUDE + cmd], cwd, f"{where}: {cmd}").splitlines()
            lines, at = [ln.rstrip() for ln in output], 0
            for want in expected:
                try:
                    at = lines.index(want, at) + 1
                except ValueError:
                    pytest.fail(f"{where}: {cmd}\nthis line of the excerpt is not in the output "
                                f"(or not in this order):\n{want}\n--- output:\n" + "\n".join(lines[:80]))
    else:
        run(["bash", "-c", PRELUDE + code], cwd, where)


@pytest.mark.integration
@pytest.mark.parametrize("page", [p for p in RUN_PAGES if rel(p) not in PAGES_NOT_RUN
                                  and any(not b[3] for b in runnable(p))], ids=rel)
def test_blocks_run(page, tmp_path):
    """Every command block of the page runs in order, in a scratch copy of the checkout."""
    todo = [b for b in runnable(page) if not b[3]]
    if not TRACER.exists() or not shutil.which("make"):
        # the blocks that build and trace programs, and those that read their runs/, need
        # the tracer (./setup.sh builds it where make and a C compiler are)
        todo = [b for b in todo if not any(word in b[1] for word in TRACING)]
        if not todo:
            pytest.skip(f"{rel(page)} traces programs: the tracer (pin/libparlot.so) or make is missing")
    cwd = scratch(tmp_path)
    for lang, code, line, _ in todo:
        run_block(lang, code, cwd, f"{rel(page)}:{line}")


@pytest.mark.integration
def test_site_builds(tmp_path):
    """The MkDocs site (mkdocs.yml over docs/) builds with --strict: every page of the nav
    exists, every link between pages and every anchor there is valid."""
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.skip("mkdocs is not installed (.venv/bin/python -m pip install mkdocs); "
                    "the links are still checked by test_links_resolve")
    run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(tmp_path / "site")], ROOT, "mkdocs build --strict")
    assert (tmp_path / "site" / "index.html").exists()


# --------------------------------------------------------------------------- the built site, offline

# (tag, attribute) of what a browser fetches while it shows the page: scripts, style
# sheets, fonts, icons, images, frames, media
RESOURCES = {("script", "src"), ("link", "href"), ("img", "src"), ("img", "srcset"),
             ("source", "src"), ("source", "srcset"), ("iframe", "src"), ("frame", "src"),
             ("embed", "src"), ("object", "data"), ("video", "src"), ("video", "poster"),
             ("audio", "src"), ("track", "src"), ("input", "src"), ("image", "href")}
CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])\s*((?:[a-z][a-z0-9+.-]*:)?//[^'")\s]*)""", re.I)


class _HTMLRefs(HTMLParser):
    """The references of a page: [(tag, attribute, value)], its ids and its inline CSS."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.refs, self.ids, self.css, self._in_style = [], set(), [], False

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            if name == "href" or (tag, name) in RESOURCES:
                self.refs.append((tag, name, value))
            if name == "style":
                self.css.append(value)
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.css.append(data)


def site_problems(site):
    """What makes the built site at ``site`` not whole offline: resources loaded from the
    network, and relative links or references to a file (or #anchor) that is not there."""
    pages, problems = {}, []
    for page in sorted(site.rglob("*.html")):
        parser = _HTMLRefs()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        pages[page.resolve()] = parser
    for css in sorted(site.rglob("*.css")):
        problems += [f"{css.relative_to(site)}: loads {url}"
                     for url in CSS_URL.findall(css.read_text(encoding="utf-8", errors="replace"))]

    def target(page, url):
        parts = urlsplit(url)
        path = unquote(parts.path)
        # 404.html is served at any address: its links start at the site's root (/css/...)
        base = site.resolve() if path.startswith("/") else page.parent
        dest = (base / path.lstrip("/")).resolve() if path else page.resolve()
        if path.endswith("/") or dest.is_dir():
            dest = dest / "index.html"
        return dest, unquote(parts.fragment)

    for page, parser in pages.items():
        where = page.relative_to(site.resolve()).as_posix()
        problems += [f"{where}: inline CSS loads {url}" for css in parser.css for url in CSS_URL.findall(css)]
        for tag, attr, value in parser.refs:
            urls = ([u.split()[0] for u in value.split(",") if u.strip()] if attr == "srcset"
                    else [value.strip()])
            for url in urls:
                external = re.match(r"([a-z][a-z0-9+.-]*:)?//", url, re.I)
                if (tag, attr) in RESOURCES:
                    if external or re.match(r"https?:", url, re.I):
                        problems.append(f"{where}: <{tag} {attr}> loads {url} from the network")
                        continue
                if external or re.match(r"[a-z][a-z0-9+.-]*:", url, re.I) or url == "#":
                    continue                  # a link out (http:, mailto:), data:, javascript:
                dest, anchor = target(page, url)
                if not dest.is_file():
                    problems.append(f"{where}: <{tag} {attr}={url}>: no such file in the site")
                elif anchor and dest in pages and anchor not in pages[dest].ids:
                    problems.append(f"{where}: <{tag} {attr}={url}>: no #{anchor} in "
                                    f"{dest.relative_to(site.resolve()).as_posix()}")
    return problems


@pytest.mark.integration
def test_site_whole_offline(tmp_path):
    """Issue 39: the built site needs no network and has no broken link.  No page loads a
    script, style sheet, font or image from the network (the theme's highlight.js came from
    a CDN), and every relative link or reference of every page (to the pages of docs/ and to
    the repository files they link to: pin/README.md, slurm/README.md, bench/README.md, the
    notebook, put into the site by docs/site_hooks.py) leads to a file of the site, and its
    #anchor to an element there.  Links in the text to other web sites are not loaded, and
    are fine."""
    site = tmp_path / "site"
    run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(site)], ROOT, "mkdocs build --strict")
    assert len(list(site.rglob("*.html"))) >= len(list(DOCS.glob("*.md"))) + 3
    problems = site_problems(site)
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:60])
