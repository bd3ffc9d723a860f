"""What `pip install .` gives a user: every package of the tree installed,
nothing generic at the top of site-packages, every import declared.

The installed result itself is tried in tests/test_clean_install.py; these
checks read the tree and run in a second.
"""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
# Folders of the tree that install as something else (package-dir).
PACKAGE_DIR = SETUPTOOLS.get("package-dir", {})


def _folder_of(package: str) -> Path:
    for name, folder in PACKAGE_DIR.items():
        if package == name or package.startswith(name + "."):
            return ROOT / folder / Path(*package[len(name):].split(".")[1:])
    return ROOT / Path(*package.split("."))


def _package_folders() -> dict[str, Path]:
    """Every package in the tree, by the name it installs as."""
    found = {}
    for top in ["kdiag", *PACKAGE_DIR]:
        base = _folder_of(top)
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            found[".".join([top, *rel.parts])] = init.parent
    return found


def _source_files() -> list[Path]:
    return sorted({p for folder in _package_folders().values() for p in folder.glob("*.py")})


def _imported_tops(path: Path) -> set[str]:
    tops = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return tops


def _requirement_name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].strip().lower().replace("_", "-")


def test_every_package_in_the_tree_is_installed():
    listed = set(SETUPTOOLS["packages"])
    in_tree = set(_package_folders())
    assert in_tree - listed == set(), "packages in the tree that pip install would leave out"
    assert listed - in_tree == set(), "packages listed in pyproject.toml that the tree does not have"


def test_nothing_generic_lands_in_site_packages():
    tops = {p.split(".")[0] for p in SETUPTOOLS["packages"]}
    assert tops == {"kdiag"}


def test_every_third_party_import_is_declared():
    """A lazy import inside a function counts too: `kdiag replay` in a
    fresh environment reaches it."""
    declared = {_requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    missing = {}
    for path in _source_files():
        for top in _imported_tops(path) - set(sys.stdlib_module_names) - {"kdiag", "__future__"}:
            dists = {d.lower().replace("_", "-") for d in distributions.get(top, [top])}
            if not dists & declared:
                missing.setdefault(top, []).append(str(path.relative_to(ROOT)))
    assert missing == {}, f"imported but not in [project] dependencies: {missing}"


def test_no_module_is_started_by_a_typed_name():
    """`python -m` takes its name from the imported module (kdiag.python_m):
    a string would break silently when the module moves."""
    typed = re.compile(r'"-m",\s*"(kdiag|collectors|parsers)\.')
    offenders = [str(p.relative_to(ROOT)) for p in _source_files() if typed.search(p.read_text())]
    assert offenders == []
