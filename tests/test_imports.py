"""The package's imports, read from the source with ``ast``: no cycles, no
private name used outside its module, and the heavy libraries (pyspark, scapy,
confluent_kafka) imported only at a few named boundaries, never when a module
is merely imported.

A module is every ``.py`` file of the packages pyproject.toml installs, by the
name it installs as (``collectors/`` is ``kdiag.collectors``). An import
statement inside a function body is "lazy": it runs when the function does.
One in a class body or under ``try``/``if`` at the top runs at import; one
under ``if TYPE_CHECKING:`` never runs and is not counted. An edge goes to the
module named, not to the packages around it: importing ``a.b.c`` runs
``a/b/__init__.py`` too, but a package's ``__init__`` importing its own
modules is not a cycle anyone has to untangle.
"""
from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections import deque
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pyspark", "scapy", "confluent_kafka")

# The only modules that may import a heavy library (inside a function). Spark
# is the analysis's language: every module of kdiag.analysis builds columns
# with it, so that package is one boundary; outside it, only these.
SPARK_PACKAGE = "kdiag.analysis"
HEAVY_BOUNDARIES = {
    "pyspark": {
        "kdiag.fleet.job",        # the fleet's session, local or Spark Connect
        "kdiag.fleet.ingest",
        "kdiag.fleet.judge",
        "kdiag.fleet.loopback",
        "kdiag.fleet.samples",
    },
    "scapy": {
        "kdiag.collectors.tcp_probe",       # the probe's requirements check
        "kdiag.collectors._path_probers",   # the packets it sends
        "kdiag.lab.resolver",               # the network lab's slow DNS server
    },
    "confluent_kafka": {
        "kdiag.capture.probe_producer",   # the probe producer
        "kdiag.capture.trace",            # --bootstrap's metadata and traced producers
        "kdiag.lab.broker_start",         # the lab's topic
    },
}

# Imports inside functions that close a cycle, left out of the cycle search,
# each with why it is there.
KNOWN_LAZY_EDGES: dict[tuple[str, str], str] = {}
# Private names used outside their module: (user, "module._name"), with why.
KNOWN_PRIVATE_USES: dict[tuple[str, str], str] = {}


# The lower packages, and all they may import of kdiag (at any level): the
# tables are parsed and written, and bundles made and read, without knowing
# the analysis that reads them.
# Besides them, any of the utilities.
UTILITIES = ("kdiag.deadline", "kdiag.errors", "kdiag.progress", "kdiag.settings", "kdiag.visible")
LOWER_PACKAGES = {
    "kdiag.parsers": ("kdiag.parsers",),
    "kdiag.ingest": ("kdiag.ingest", "kdiag.parsers"),
    "kdiag.bundle": ("kdiag.bundle", "kdiag.ingest", "kdiag.parsers"),
}


@dataclass(frozen=True)
class Import:
    importer: str
    target: str          # the kdiag module imported, or a heavy library's top name
    line: int
    lazy: bool           # inside a function body
    names: tuple = ()    # for ``from target import a, b``: a, b (not submodules)


@cache
def package_modules() -> dict[str, Path]:
    """Every module pyproject.toml installs, by its installed name."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir = tool.get("package-dir", {})
    modules = {}
    for package in tool["packages"]:
        folder = None
        for name, where in package_dir.items():
            if package == name or package.startswith(name + "."):
                folder = ROOT / where / Path(*package[len(name):].split(".")[1:])
        folder = folder or ROOT / Path(*package.split("."))
        for path in sorted(folder.glob("*.py")):
            modules[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return modules


def is_package(module: str) -> bool:
    return package_modules()[module].name == "__init__.py"


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _absolute(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = importer.split(".")
    if not is_package(importer):
        parts = parts[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _known(dotted: str) -> str | None:
    """The deepest kdiag module that ``dotted`` names or lies in."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in package_modules():
            return ".".join(parts[:end])
    return None


def _compiled(dotted: str) -> bool:
    """A C extension of the tree (setup.py builds ``name.c`` beside the
    package's modules)."""
    package, _, name = dotted.rpartition(".")
    return package in package_modules() and is_package(package) and (
        package_modules()[package].parent / f"{name}.c").exists()


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(tree: ast.AST, lazy: bool = False):
    """(import statement, lazy) for every import that can run."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _type_checking(child):
            for node in child.orelse:
                yield from _statements(ast.Module(body=[node], type_ignores=[]), lazy)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, lazy
        inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _statements(child, inner)


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse(package_modules()[module].read_text(), str(package_modules()[module]))


@cache
def imports_of(module: str) -> tuple[Import, ...]:
    """Every import of a kdiag module or a heavy library in ``module``."""
    found = []
    for node, lazy in _statements(_tree(module)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                target = top if top in HEAVY else _known(alias.name)
                if target:
                    found.append(Import(module, target, node.lineno, lazy))
            continue
        base = _absolute(module, node)
        if base.split(".")[0] in HEAVY:
            found.append(Import(module, base.split(".")[0], node.lineno, lazy))
            continue
        if _known(base) is None:
            continue
        names = []
        for alias in node.names:
            if f"{base}.{alias.name}" in package_modules() or _compiled(f"{base}.{alias.name}"):
                found.append(Import(module, f"{base}.{alias.name}", node.lineno, lazy))
            else:
                names.append(alias.name)
        if names:
            found.append(Import(module, _known(base), node.lineno, lazy, tuple(names)))
    return tuple(found)


def import_graph(lazy_too: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in package_modules()}
    for module in package_modules():
        for imp in imports_of(module):
            if imp.target in package_modules() and imp.target != module and (lazy_too or not imp.lazy):
                graph[module].add(imp.target)
    return graph


def components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's):
    each is one or more cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def connect(v: str) -> None:
        # Recursive: the graph is a few hundred modules, far below the limit.
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through each strongly connected component."""
    return [_shortest_cycle(graph, min(c), c) for c in components(graph)]


def _shortest_cycle(graph, start: str, within: set[str]) -> list[str]:
    came_from = {start: None}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & within):
            if w == start:
                path = [v]
                while came_from[path[-1]] is not None:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")


def _without(graph: dict[str, set[str]], edges) -> dict[str, set[str]]:
    return {v: ws - {w for (u, w) in edges if u == v} for v, ws in graph.items()}


def _module_aliases(module: str) -> dict[str, str]:
    """Local names bound to kdiag modules: ``import kdiag.x as y``,
    ``from kdiag import x``, and ``kdiag`` itself for ``import kdiag.a.b``."""
    aliases = {}
    for node, _ in _statements(_tree(module)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _known(alias.name) is None:
                    continue
                if alias.asname:
                    aliases[alias.asname] = _known(alias.name)
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        else:
            base = _absolute(module, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in package_modules():
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
    return aliases


def _dotted(node: ast.Attribute) -> list[str] | None:
    parts = [node.attr]
    value = node.value
    while isinstance(value, ast.Attribute):
        parts.append(value.attr)
        value = value.value
    if not isinstance(value, ast.Name):
        return None
    return [value.id, *reversed(parts)]


def _private_module_outside(user: str, target: str) -> str | None:
    """A module whose name starts with ``_`` belongs to its package: the
    target's first private part, if ``user`` is outside that package."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if is_private(part):
            owner = ".".join(parts[:i])
            user_package = user if is_package(user) else user.rsplit(".", 1)[0]
            if not (user_package == owner or user_package.startswith(owner + ".")):
                return ".".join(parts[:i + 1])
            return None
    return None


def private_uses() -> set[tuple[str, str]]:
    """(user, ``module._name``) for every private name one kdiag module takes
    from another: imported by name, read as an attribute of the module, or a
    private module imported from outside its package."""
    found = set()
    for module in package_modules():
        for imp in imports_of(module):
            if imp.target not in package_modules() or imp.target == module:
                continue
            outside = _private_module_outside(module, imp.target)
            if outside:
                found.add((module, outside))
            found |= {(module, f"{imp.target}.{name}") for name in imp.names if is_private(name)}
        aliases = _module_aliases(module)
        for node in ast.walk(_tree(module)):
            if not isinstance(node, ast.Attribute):
                continue
            dotted = _dotted(node)
            if not dotted or dotted[0] not in aliases:
                continue
            path = aliases[dotted[0]].split(".") + dotted[1:]
            # The longest known module along the chain, then the name read from it.
            for end in range(len(path) - 1, 0, -1):
                owner = ".".join(path[:end])
                if owner in package_modules():
                    if owner != module and is_private(path[end]) and (
                            f"{owner}.{path[end]}" not in package_modules()):
                        found.add((module, f"{owner}.{path[end]}"))
                    break
    return found


def heavy_importers() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {lib: set() for lib in HEAVY}
    for module in package_modules():
        for imp in imports_of(module):
            if imp.target in HEAVY:
                found[imp.target].add(module)
    return found


def _report(found: list[list[str]]) -> str:
    return "\n".join(" -> ".join(c) for c in found)


def test_the_walk_finds_the_package():
    modules = package_modules()
    assert {"kdiag.cli", "kdiag.collectors.base", "kdiag.parsers.registry"} <= set(modules)
    assert ("kdiag.ingest.tables", "kdiag.ingest.detect") in {
        (m, t) for m, ts in import_graph(lazy_too=False).items() for t in ts}


def test_the_cycle_search_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_cycle_among_module_level_imports():
    found = cycles(import_graph(lazy_too=False))
    assert not found, f"import cycles:\n{_report(found)}"


def test_no_cycle_counting_lazy_imports():
    graph = import_graph(lazy_too=True)
    tied = components(graph)
    stale = [(u, v) for u, v in KNOWN_LAZY_EDGES
             if v not in graph.get(u, ()) or not any({u, v} <= c for c in tied)]
    assert not stale, f"listed as known but no longer closing a cycle, remove: {stale}"
    found = cycles(_without(graph, KNOWN_LAZY_EDGES))
    assert not found, f"import cycles through imports inside functions:\n{_report(found)}"


def _within(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_lower_packages_import_nothing_above_them():
    graph = import_graph(lazy_too=True)
    upward = sorted(f"{m} imports {t}" for package, allowed in LOWER_PACKAGES.items()
                    for m in package_modules() if _within(m, [package])
                    for t in graph[m] if not _within(t, allowed + UTILITIES))
    assert not upward, "\n".join(upward)


def test_no_private_name_used_outside_its_module():
    found = private_uses()
    stale = set(KNOWN_PRIVATE_USES) - found
    assert not stale, f"listed as known but no longer used, remove: {sorted(stale)}"
    unknown = sorted(found - set(KNOWN_PRIVATE_USES))
    assert not unknown, "private names used outside their module:\n" + "\n".join(
        f"{user} uses {name}" for user, name in unknown)


def test_the_private_name_search_finds_one():
    assert is_private("_x") and not is_private("__all__") and not is_private("x")
    assert _private_module_outside("kdiag.capture.trace", "kdiag.collectors._tcp_info") == \
        "kdiag.collectors._tcp_info"
    assert _private_module_outside("kdiag.collectors.sockets", "kdiag.collectors._tcp_info") is None


def test_heavy_libraries_only_at_their_boundaries():
    found = heavy_importers()
    spark_side = {m for m in found["pyspark"] if m == SPARK_PACKAGE or m.startswith(SPARK_PACKAGE + ".")}
    assert {lib: mods - (spark_side if lib == "pyspark" else set())
            for lib, mods in found.items()} == HEAVY_BOUNDARIES
    eager = sorted(f"{i.importer}:{i.line} imports {i.target}" for m in package_modules()
                   for i in imports_of(m) if i.target in HEAVY and not i.lazy)
    assert not eager, "heavy imports at module level:\n" + "\n".join(eager)


def _loaded_heavy(modules: list[str]) -> set[str]:
    code = (f"import importlib, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
            f"print(sorted({{n.split('.')[0] for n in sys.modules}} & {set(HEAVY)!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(ast.literal_eval(out.stdout.strip().splitlines()[-1]))


def test_the_cli_imports_no_heavy_library():
    assert _loaded_heavy(["kdiag.cli"]) == set()


def test_importing_every_module_imports_no_heavy_library():
    # __main__ modules run when imported; what they import is their functions'.
    modules = [m for m in package_modules() if not m.endswith(".__main__")]
    assert _loaded_heavy(modules) == set()
