"""The collector registry: what the package holds is what is registered,
and every collector declares what trace and attach rely on."""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from pathlib import Path

import pytest

from kdiag import collectors
from kdiag.collectors.base import MODES, PID, PROBE, Capture, Collector, CollectorStatus, Requirement, gaps

REGISTRY = collectors.registry()
IDS = [c.name for c in REGISTRY]


def test_every_module_in_the_package_is_registered_and_nothing_else():
    scanned = {m.name for m in pkgutil.iter_modules(collectors.__path__)
               if not m.name.startswith("_") and m.name not in collectors.NOT_COLLECTORS}
    registered = {c.__module__.rpartition(".")[2] for c in REGISTRY}
    assert scanned == registered
    assert len(REGISTRY) == len(scanned), "one collector per module"
    for name in scanned:
        module = importlib.import_module(f"kdiag.collectors.{name}")
        assert len(collectors.declared_in(module)) == 1, name


def test_the_explicit_order_names_only_collector_modules():
    names = collectors.module_names()
    assert set(collectors.ORDER) <= set(names)
    assert names[:len(collectors.ORDER)] == list(collectors.ORDER)


def test_helper_modules_declare_no_collector():
    for m in pkgutil.iter_modules(collectors.__path__):
        if m.name.startswith("_") or m.name in collectors.NOT_COLLECTORS:
            module = importlib.import_module(f"kdiag.collectors.{m.name}")
            assert collectors.declared_in(module) == [], m.name


@pytest.mark.parametrize("cls", REGISTRY, ids=IDS)
def test_each_declares_every_required_attribute_with_its_type(cls):
    for attr, kind in Collector.REQUIRED.items():
        assert attr in vars(cls), f"{cls.__name__} does not declare {attr}"
        assert isinstance(vars(cls)[attr], kind), f"{cls.__name__}.{attr}"
    assert cls.name and cls.raw_dir and "/" not in cls.raw_dir
    assert cls.modes and cls.modes <= MODES
    assert cls.partial_without <= cls.modes
    assert isinstance(cls.syscall_tracer, bool)
    for method in ("start", "stop", "status", "inputs"):
        assert callable(getattr(cls, method))


def test_names_and_raw_folders_are_unique():
    names = [c.name for c in REGISTRY]
    assert len(names) == len(set(names))
    own = [c.raw_dir for c in REGISTRY if not c.syscall_tracer]
    assert len(own) == len(set(own))
    # The syscall tracers are alternatives: one folder, which no other collector uses.
    tracer_dirs = {c.raw_dir for c in REGISTRY if c.syscall_tracer}
    assert len(tracer_dirs) == 1 and not tracer_dirs & set(own)


def test_raw_folders_are_the_ones_bundles_hold():
    from kdiag.bundle import archive

    from kdiag.parsers.registry import bundle_dirs

    dirs = {c.raw_dir for c in REGISTRY}
    # Every folder the format registry says a bundle keeps a format in is
    # one a collector writes.
    assert set(bundle_dirs()) <= dirs
    assert set(archive.ANALYSED_SOURCES) == set(bundle_dirs())
    assert {"rdkafka_log", "strace", "stats", "probe", "tcp_probe", "sockets"} == dirs


def _fields_hold_no_callables(value) -> bool:
    if callable(value):
        return False
    if dataclasses.is_dataclass(value):
        return all(_fields_hold_no_callables(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, (tuple, list, frozenset, set)):
        return all(_fields_hold_no_callables(v) for v in value)
    return isinstance(value, (str, int, float, bool, type(None)))


@pytest.mark.parametrize("cls", REGISTRY, ids=IDS)
def test_requirements_are_data_and_evaluate_to_met_or_a_reason(cls):
    for req in (*cls.requirements, *cls.preferences):
        assert isinstance(req, Requirement)
        assert _fields_hold_no_callables(req), req
        why = req.check()
        assert why is None or (isinstance(why, str) and why)
    why = cls.unmet()
    assert why is None or (isinstance(why, str) and why)


def test_every_mode_has_its_syscall_tracer_and_stderr():
    for mode in MODES:
        chosen = collectors.for_mode(mode)
        assert any(c.syscall_tracer for c in chosen), mode
        assert [c.name for c in chosen] == [c.name for c in REGISTRY if mode in c.modes]


def test_raw_folders_are_made_for_a_mode(tmp_path):
    collectors.make_raw_dirs(tmp_path, collectors.for_mode(PROBE))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({c.raw_dir for c in collectors.for_mode(PROBE)})


def test_a_collector_that_omits_an_attribute_is_refused():
    with pytest.raises(TypeError, match="does not declare raw_dir"):
        class NoFolder(Collector):
            name = "no_folder"
            requirements = ()
            modes = frozenset({PROBE})
    with pytest.raises(TypeError, match="modes is set"):
        class WrongType(Collector):
            name = "wrong"
            raw_dir = "wrong"
            requirements = ()
            modes = {PROBE}
    with pytest.raises(TypeError, match="Requirement"):
        class HiddenCall(Collector):
            name = "hidden"
            raw_dir = "hidden"
            requirements = (lambda: None,)
            modes = frozenset({PROBE})


class _NeedsAMissingTool(Collector):
    name = "needs_missing"
    raw_dir = "needs_missing"
    requirements = (Requirement(executable="kdiag-no-such-tool", why="apt-get install it"),)
    modes = frozenset({PID})
    partial_without = frozenset({PID})


def test_an_unmet_requirement_skips_the_collector_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(collectors, "registry", lambda: (*REGISTRY, _NeedsAMissingTool))
    said: list[str] = []
    active = collectors.for_capture(Capture(raw=tmp_path, mode=PID, log=said.append))
    c = next(c for c in active if c.name == "needs_missing")
    reason = "kdiag-no-such-tool not found on PATH (apt-get install it)"
    assert c.skipped and said == [f"needs_missing skipped: {reason}"]
    st = c.status()
    assert st == CollectorStatus("needs_missing", state="skipped", reason=reason).to_dict()
    # ... and the capture says so, in the modes the collector declares it matters.
    assert gaps([st], PID, [c]) == [f"needs_missing skipped: {reason}"]
    assert gaps([st], PROBE, [c]) == []


def test_a_collector_with_nothing_to_report_has_no_status(tmp_path):
    for cls in REGISTRY:
        c = cls(Capture(raw=Path(tmp_path), mode=next(iter(cls.modes))))
        assert c.status() is None, cls.name
        assert c.inputs() == [], cls.name


# The syscall tracers: each declares its place in the choice, and the
# choices, the auto policy and docs/tracers.md are read from those declarations.
TRACER_CLASSES = collectors.tracers()


@pytest.mark.parametrize("cls", TRACER_CLASSES, ids=[c.name for c in TRACER_CLASSES])
def test_each_tracer_declares_its_own_tracing(cls):
    from kdiag.collectors.base import AUTO_WHEN, Tracing

    assert isinstance(vars(cls).get("tracing"), Tracing), f"{cls.__name__} declares no tracing of its own"
    assert cls.syscall_tracer and cls.tracing.auto_when in AUTO_WHEN
    assert cls.tracing.captures and cls.tracing.cost
    assert _fields_hold_no_callables(cls.tracing)


def test_tracers_are_the_syscall_tracers_ranked_without_ties():
    from kdiag.collectors.base import AUTO_FALLBACK

    assert set(TRACER_CLASSES) == {c for c in REGISTRY if c.syscall_tracer}
    ranks = [c.tracing.rank for c in TRACER_CLASSES]
    assert ranks == sorted(set(ranks))
    # The fallback is tried last, and it is the one tracer that serves every mode.
    assert [c.tracing.auto_when for c in TRACER_CLASSES].count(AUTO_FALLBACK) == 1
    assert TRACER_CLASSES[-1].tracing.auto_when == AUTO_FALLBACK
    assert TRACER_CLASSES[-1].modes == MODES


def test_the_tracer_choices_and_policy_come_from_the_declarations():
    from kdiag.capture import attach, tracers

    names = [c.name for c in TRACER_CLASSES]
    assert attach.TRACERS == tracers.TRACERS == ("auto", *names)
    assert [name for name, _ in tracers.auto_policy()] == names
    assert tracers.fallback() == names[-1]
    assert tracers.threadless() == tuple(c.name for c in TRACER_CLASSES if not c.tracing.stops_threads)


def test_attach_and_trace_name_no_tracer_module():
    import ast

    root = Path(collectors.__file__).resolve().parent.parent / "kdiag" / "capture"
    tracer_modules = {c.__module__ for c in TRACER_CLASSES}
    for name in ("attach.py", "trace.py"):
        tree = ast.parse((root / name).read_text())
        imported = {f"{n.module}.{a.name}" if isinstance(n, ast.ImportFrom) else a.name
                    for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not imported & tracer_modules, (name, imported & tracer_modules)


def test_the_which_tracer_table_in_the_docs_is_the_registry_in_full():
    import docs_tables

    from kdiag.capture import tracers

    page = Path(collectors.__file__).resolve().parent.parent / "docs" / "tracers.md"
    assert "\n## Which tracer\n" in page.read_text()
    table = docs_tables.table_in(page.read_text(), "kdiag.capture.tracers.markdown_table()")
    assert table == tracers.markdown_table(), "docs/tracers.md: run python tests/docs_tables.py"
    rows = [line for line in table.splitlines()[2:]]
    assert len(rows) == len(TRACER_CLASSES)
    for row, cls in zip(rows, TRACER_CLASSES):
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells == [f"`{cls.name}`", cls.tracing.auto_when, "yes" if cls.tracing.stops_threads else "no",
                         cls.tracing.captures, cls.tracing.cost]
