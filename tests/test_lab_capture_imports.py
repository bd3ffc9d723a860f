"""No import cycle among the lab's and the capture's modules, counting the
imports inside functions too: a lazy import does not make a cycle go away,
it only hides it until the call."""
from __future__ import annotations

import ast

import pytest

from conftest import ROOT

PACKAGES = {"kdiag.lab": ROOT / "kdiag" / "lab", "kdiag.capture": ROOT / "kdiag" / "capture"}


def _modules() -> dict[str, ast.Module]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join([package, *(p for p in parts if p != "__init__")])
            found[name] = ast.parse(path.read_text())
    return found


def _imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``name`` imports, anywhere in it."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle in ``graph``, as the path that closes it, or None."""
    state: dict[str, int] = {}      # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_lab_and_the_capture_import_no_module_in_a_circle():
    trees = _modules()
    graph = {name: _imports(name, tree, set(trees)) for name, tree in trees.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


@pytest.mark.parametrize("graph, cyclic", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
])
def test_the_walk_finds_a_cycle_where_there_is_one(graph, cyclic):
    assert (_cycle(graph) is not None) == cyclic
