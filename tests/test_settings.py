"""Every KDIAG_* variable is declared in kdiag/settings.py, read through it,
and documented from it: docs/settings.md is its table, and no other
KDIAG_* name is used in the tree."""
import re

import pytest

from conftest import ROOT
from kdiag import settings

PAGE = ROOT / "docs" / "settings.md"
PACKAGE = [ROOT / "kdiag", ROOT / "collectors", ROOT / "parsers"]
# Where a variable is named for the package to read: its code, its docs, the
# tests and CI that set them. The tests' own knobs are KDIAG_TEST_*; bench/
# has its own (KDIAG_BENCH_*), read by the bench scripts only.
TREE = [*PACKAGE, ROOT / "docs", ROOT / "README.md", ROOT / "tests", ROOT / ".ci", ROOT / "fuzz"]
NAME = re.compile(r"\bKDIAG_[A-Z0-9_]+\b")
# A read of a variable by its literal name, past settings.py.
DIRECT_READ = re.compile(r"""(environ\.get\(\s*|getenv\(\s*|environ\[)["']KDIAG_\w+["']\s*(?!\]\s*=[^=])""")


def _files(roots, suffixes=(".py", ".md", ".c", ".h", ".sh", ".toml", ".txt", "")):
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for p in paths:
            if p.suffix in suffixes and "__pycache__" not in p.parts:
                yield p


def test_the_settings_page_is_the_declarations():
    assert PAGE.read_text() == settings.markdown(), "regenerate: python -c 'from kdiag import settings; " \
                                                    "print(settings.markdown(), end=\"\")' > docs/settings.md"


def test_every_kdiag_name_in_the_tree_is_declared():
    undeclared = {}
    for p in _files(TREE):
        if p.name == "test_settings.py":   # names undeclared ones on purpose
            continue
        for name in NAME.findall(p.read_text(errors="replace")):
            # a prefix (KDIAG_MAX_*), the tests' own, a C header's guard
            if name.endswith("_") or name.startswith("KDIAG_TEST_") or (p.suffix == ".h" and name.endswith("_H")):
                continue
            if name not in settings.BY_NAME:
                undeclared.setdefault(name, p.relative_to(ROOT).as_posix())
    assert undeclared == {}


def test_every_declared_setting_is_read_by_the_package():
    code = "\n".join(p.read_text() for p in _files(PACKAGE, (".py",)) if p.name != "settings.py")
    assert [s.name for s in settings.SETTINGS if s.name not in code] == []


def test_no_variable_is_read_past_the_settings_module():
    reads = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
             for p in _files(PACKAGE, (".py",)) if p.name != "settings.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if DIRECT_READ.search(line)]
    assert reads == []
    assert DIRECT_READ.search('os.environ.get("KDIAG_WARM", "1")')
    assert not DIRECT_READ.search('os.environ["KDIAG_VERBOSE"] = "1"')


def test_the_modules_defaults_are_the_declared_ones():
    from kdiag.analysis import spark_plumbing, warm, warm_practice
    from kdiag.bundle.limits import CAPS, Limits

    declared = {s.name: s.default for s in settings.SETTINGS}
    assert declared["KDIAG_WARM_IDLE_S"] == warm.IDLE_S
    assert declared["KDIAG_WARM_TIMEOUT_S"] == warm.REQUEST_TIMEOUT_S
    assert declared["KDIAG_WARM_START_S"] == warm.START_TIMEOUT_S
    assert declared["KDIAG_WARM_READ_S"] == warm.READ_S
    assert declared["KDIAG_WARM_PRACTICE"] == warm_practice.PRACTICE_RUNS
    assert declared["KDIAG_LOCAL_TABLE_BYTES"] == spark_plumbing.LOCAL_TABLE_BYTES
    for field, cap in CAPS.items():
        assert declared[cap.env] * cap.scale == getattr(Limits(), field), cap.env


@pytest.mark.parametrize("text, value", [(None, 600.0), ("", 600.0), ("soon", 600.0), ("30", 30.0)])
def test_unset_empty_or_mistyped_is_the_default(text, value):
    environ = {} if text is None else {"KDIAG_WARM_IDLE_S": text}
    assert settings.get("KDIAG_WARM_IDLE_S", environ) == value


def test_a_switch_is_off_only_at_0():
    assert settings.get("KDIAG_WARM", {}) is True
    assert settings.get("KDIAG_WARM", {"KDIAG_WARM": "0"}) is False
    assert settings.get("KDIAG_VERBOSE", {"KDIAG_VERBOSE": ""}) is False
    assert settings.get("KDIAG_VERBOSE", {"KDIAG_VERBOSE": "yes"}) is True


def test_an_undeclared_name_is_refused():
    with pytest.raises(KeyError):
        settings.get("KDIAG_NO_SUCH_SETTING", {})
