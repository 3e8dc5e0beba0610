"""The package's shape, measured: the import graph (imports at module level and inside
functions) has no cycle and follows the layer order cli -> api/jobs -> engine, views,
store -> results -> stages, readers -> kernels, model, config, errors; no module is over
600 lines (kernels aside); docs/architecture.md names every module, and only modules that
exist."""
import ast
import re
from collections import defaultdict

import pytest

from conftest import ROOT

PACKAGE = "difftrace_mpi"
SOURCE = ROOT / PACKAGE
MAX_LINES = 600

# (rank, group): an import goes to a lower rank, or stays inside its own group
LAYERS = [
    (5, "cli", ("cli", "__main__")),
    (4, "api", ("api", "jobs")),
    (3, "engine", ("engine",)),
    (3, "views", ("views",)),
    (3, "store", ("store",)),
    (2, "results", ("results",)),
    (1, "stages", ("stages",)),
    (1, "readers", ("readers",)),
    (1, "h5tables", ("h5tables",)),
    (0, "base", ("", "config", "errors", "naming", "escape", "model", "kernels", "fsutil", "launch")),
]


def module_files():
    """{dotted module name: path} of every Python module of the package."""
    found = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolve(module, is_package, level, name):
    if level == 0:
        return name or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def import_graph():
    """{module: {imported module: first line}}, package-internal imports only."""
    modules = module_files()

    def owner(name):            # the module a dotted name lives in
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = defaultdict(dict)
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, path.name == "__init__.py", node.level, node.module)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                if target.startswith(PACKAGE):
                    target = owner(target)
                    if target and target != module:
                        graph[module].setdefault(target, node.lineno)
    return graph


def layer_of(module):
    """(rank, group) of a dotted module name."""
    inside = module[len(PACKAGE) + 1:] if module != PACKAGE else ""
    head = inside.split(".")[0]
    for rank, group, heads in LAYERS:
        if head in heads:
            return rank, group
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")


def test_every_module_has_a_layer():
    for module in module_files():
        layer_of(module)


def test_no_import_cycle():
    graph = import_graph()
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):           # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in module_files():
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_imports_follow_the_layer_order():
    graph = import_graph()
    wrong = []
    for module, targets in sorted(graph.items()):
        (rank, group) = layer_of(module)
        for target, line in sorted(targets.items()):
            (t_rank, t_group) = layer_of(target)
            if t_group != group and t_rank >= rank:
                wrong.append(f"{module}:{line} imports {target} ({group} {rank} -> {t_group} {t_rank})")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_nothing_imports_the_command_line():
    graph = import_graph()
    users = [m for m, targets in graph.items() if f"{PACKAGE}.cli" in targets and m != f"{PACKAGE}.__main__"]
    assert not users


def test_no_private_name_crosses_modules():
    modules = module_files()
    found = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(module, path.name == "__init__.py", node.level, node.module)
                found += [f"{module} imports {base}.{a.name}" for a in node.names
                          if base.startswith(PACKAGE) and a.name.startswith("_") and not a.name.startswith("__")
                          and f"{base}.{a.name}" not in modules]
    assert not found


def test_no_module_over_the_line_limit():
    long = {m: n for m, p in module_files().items()
            if ".kernels" not in m and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def architecture_map():
    """(module names, folder paths) in docs/architecture.md's tree: modules dotted, folders
    relative to the repository."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    tree = re.search(r"```\n(difftrace_mpi/\n.*?)```", text, re.S)
    assert tree, "docs/architecture.md has no module tree"
    named, paths, folders = set(), set(), []
    for line in tree.group(1).splitlines()[1:]:
        match = re.match(r"( +)([\w/.,\s]+?)(?:\s{2,}|$)", line)
        if not match:
            continue
        depth = len(match.group(1)) // 2
        for entry in re.split(r",\s*", match.group(2).strip()):
            entry = entry.strip()
            if not re.fullmatch(r"[\w]+(\.py)?/?", entry):
                continue
            folders[depth - 1:] = []
            if entry.endswith("/"):
                folders.append(entry[:-1])
                paths.add("/".join([PACKAGE, *folders]))
            elif entry == "__init__.py":
                named.add(".".join([PACKAGE, *folders]))
            else:
                named.add(".".join([PACKAGE, *folders, entry.removesuffix(".py")]))
    return named, paths


def test_architecture_map_is_the_code():
    named, paths = architecture_map()
    assert len(named) > 30 and len(paths) >= 5           # the parse found the tree
    modules = {m for m in module_files() if ".kernels." not in m and m != f"{PACKAGE}.__main__"}
    folders = {m.replace(".", "/") for m, p in module_files().items() if p.name == "__init__.py"}
    assert named - set(module_files()) == set(), "docs/architecture.md names modules that do not exist"
    assert [p for p in paths if not (ROOT / p).is_dir()] == [], "docs/architecture.md names missing folders"
    assert modules - named - {f.replace("/", ".") for f in folders} == set(), "modules missing from docs/architecture.md"
    assert folders - paths - {PACKAGE} == set(), "package folders missing from docs/architecture.md"


# the packages of stages/, in order: each imports only from those before it ("classify"
# and "compare" are side by side: neither imports the other)
STAGE_LAYERS = {"model": 0, "compare": 1, "classify": 1, "diagnose": 2}


def test_stage_packages_follow_their_order():
    graph = import_graph()
    top = f"{PACKAGE}.stages"
    assert {m.split(".")[2] for m in module_files() if m.startswith(top + ".")} == set(STAGE_LAYERS), \
        "stages/ holds a package or module STAGE_LAYERS does not know"
    wrong = []
    for module, targets in sorted(graph.items()):
        if not module.startswith(top + "."):
            continue
        own = module.split(".")[2]
        for target, line in sorted(targets.items()):
            if target.startswith(top + ".") and (there := target.split(".")[2]) != own and \
                    STAGE_LAYERS[there] >= STAGE_LAYERS[own]:
                wrong.append(f"{module}:{line} imports {target} ({own} -> {there})")
    assert not wrong, "\n".join(wrong)
