"""MkDocs hook (mkdocs.yml, ``hooks:``): the site is whole, offline.

The pages of docs/ link to files of the repository outside docs/ (``../pin/README.md``,
``../slurm/README.md``, ``../bench/README.md``, the example notebook).  On GitHub those links
work; MkDocs builds docs/ alone, so in the site they would lead nowhere.  This hook

* adds those files to the site: the markdown files as pages (``pin/README.md`` becomes
  ``pin/``), the others as downloads, each at its repository path (the repository's own
  README.md, which would clash with docs/index.md, at ``readme/``);
* rewrites the links between them to their place in the site: ``../pin/README.md`` in a
  docs/ page, ``../docs/design.md`` in pin/README.md, ``docs/api.md`` in README.md, ...;
  a link out of docs/ to a file that is not listed below is a warning (an error under
  ``mkdocs build --strict``): add the file to ``INCLUDED``;
* gives headings GitHub's anchors (``#leaf-functions-counted-not-recorded--p--l``, not
  Python-Markdown's ``#leaf-functions-counted-not-recorded-p-l``), so that the anchors the
  pages were written with (tests/test_docs.py checks them against GitHub's rules) hold in
  the site as well.

tests/test_docs.py builds the site and checks that no page loads anything from the network
and that every relative link of every page leads to a file of the site.
"""
import logging
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.site_hooks")

ROOT = Path(__file__).resolve().parent.parent          # the repository
# repository path -> path in the site (as if it were under docs/)
INCLUDED = {
    "README.md": "readme.md",
    "pin/README.md": "pin/README.md",
    "slurm/README.md": "slurm/README.md",
    "bench/README.md": "bench/README.md",
    "bench/HISTORY.md": "bench/HISTORY.md",
    "examples/notebook/explore_results.ipynb": "examples/notebook/explore_results.ipynb",
}
REPO_OF = {site: repo for repo, site in INCLUDED.items()}

FENCE = re.compile(r"^\s*(```+|~~~+)")
INLINE = re.compile(r"(\]\(\s*<?)([^)\s>#]*)(#[^)\s>]*)?")           # [text](target#anchor
REFERENCE = re.compile(r"^(\s*\[[^\]]+\]:\s*<?)([^\s>#]*)(#\S*)?")     # [label]: target
SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:")


def github_slug(value, separator="-"):
    """GitHub's anchor of a heading: lower case, punctuation dropped, each space a dash."""
    return re.sub(r"[^\w\- ]", "", value.strip().lower()).replace(" ", separator)


def on_config(config):
    config.mdx_configs.setdefault("toc", {})["slugify"] = github_slug
    return config


def on_files(files, config):
    for repo, site in INCLUDED.items():
        path = ROOT / repo
        if not path.is_file():
            log.warning(f"site_hooks: {repo} (INCLUDED) does not exist")
            continue
        if files.get_file_from_path(site) is None:
            files.append(File.generated(config, site, abs_src_path=str(path)))
    return files


def _site_target(page_repo, target, where):
    """The link target in the site, or None where it needs no change."""
    if not target or SCHEME.match(target) or target.startswith("/"):
        return None
    repo = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo), target))
    if repo.startswith("docs/"):
        site = repo[len("docs/"):]
    elif repo in INCLUDED:
        site = INCLUDED[repo]
    elif repo.startswith("../") or repo == "..":
        log.warning(f"{where}: link {target} leads out of the repository")
        return None
    else:
        log.warning(f"{where}: link {target} names {repo}, outside docs/ and not in the site: "
                    "add it to INCLUDED in docs/site_hooks.py")
        return None
    page_site = INCLUDED.get(page_repo, page_repo[len("docs/"):] if page_repo.startswith("docs/") else page_repo)
    new = posixpath.relpath(site, posixpath.dirname(page_site) or ".")
    if target.endswith("/") and not new.endswith("/"):
        new += "/"
    return None if new == target else new


def on_page_markdown(markdown, page, config, files):
    src = page.file.src_uri
    page_repo = REPO_OF.get(src, "docs/" + src)
    out, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        if not fenced:
            def swap(m):
                new = _site_target(page_repo, m.group(2), f"{page_repo}")
                return m.group(0) if new is None else m.group(1) + new + (m.group(3) or "")
            line = REFERENCE.sub(swap, INLINE.sub(swap, line))
        out.append(line)
    return "\n".join(out)
