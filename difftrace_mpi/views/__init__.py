"""What difftrace_mpi writes: plain text (``text``), diffNLR renderings (``diffnlr``), the HTML
report (``report`` with its drawings in ``svg`` and ``png``), the lattice's Graphviz export
(``dot``); every name goes through ``escape`` on its way out."""
from importlib import resources


def asset_text(name):
    """The text of ``views/assets/<name>``: the CSS and JavaScript inlined into the pages
    (package data, so the pages stay self-contained)."""
    return resources.files(__name__).joinpath("assets").joinpath(name).read_text(encoding="utf-8")
