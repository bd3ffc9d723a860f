"""The scenario registry (kdiag.lab.scenarios) against everything that reads
it: each module in the package is registered and declares what a scenario
must, names are unique, each expects a cause the analysis can name, the lab
knows how to start it, the help names it and the matrix runs it."""
from __future__ import annotations

import pkgutil
import subprocess
import sys
import types

import pytest

from conftest import ROOT
from kdiag.lab import scenarios


def _scenario_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(scenarios.__path__) if not m.name.startswith("_"))


def test_every_module_is_registered_and_every_registered_module_exists():
    assert sorted(scenarios.ORDER) == _scenario_modules()
    assert len(set(scenarios.ORDER)) == len(scenarios.ORDER)


@pytest.mark.parametrize("module_name", scenarios.ORDER)
def test_each_module_declares_every_required_attribute(module_name):
    import importlib

    module = importlib.import_module(f"{scenarios.__name__}.{module_name}")
    # Declared by the module itself, not inherited from an import.
    missing = [a for a in scenarios.REQUIRED if a not in vars(module)]
    assert not missing, f"{module_name} does not declare {missing}"
    sc = scenarios.from_module(module)
    assert sc.name and sc.name.replace("-", "_") == module_name
    assert sc.help and "\n" not in sc.help and sc.setup
    assert isinstance(sc.messages, int) and sc.messages >= 1
    assert sc.matrix_messages is None or sc.matrix_messages >= 1
    assert sc.rate is None or sc.rate > 0
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in sc.props.items())
    assert isinstance(sc.lab, (scenarios.Loopback, scenarios.NetworkPath))


def test_a_module_that_omits_an_attribute_is_refused():
    import importlib

    for attr in scenarios.REQUIRED:
        module = types.ModuleType("kdiag.lab.scenarios.incomplete")
        source = importlib.import_module(f"{scenarios.__name__}.{scenarios.ORDER[0]}")
        for a in scenarios.REQUIRED:
            if a != attr:
                setattr(module, a, getattr(source, a))
        with pytest.raises(scenarios.ScenarioError, match=attr):
            scenarios.from_module(module)


def test_names_are_unique_and_the_default_is_one():
    names = scenarios.names()
    assert len(set(names)) == len(names) == len(scenarios.ORDER)
    assert scenarios.DEFAULT in names and scenarios.get(None).name == scenarios.DEFAULT


def test_expected_causes_are_the_analysis_causes():
    from kdiag.analysis import causes

    known = {m.NAME for m in causes.load()}
    for sc in scenarios.all_scenarios():
        assert sc.cause in known, f"{sc.name} expects {sc.cause!r}, not a cause: {sorted(known)}"


def test_unknown_name_is_a_usage_error_listing_the_known_ones():
    from kdiag.errors import UsageError

    with pytest.raises(UsageError) as e:
        scenarios.get("no-such-scenario")
    assert all(n in str(e.value) for n in scenarios.names())


def test_the_labs_start_what_the_scenarios_declare():
    from kdiag.lab import network, relay, slowproxy, variants

    for sc in scenarios.all_scenarios():
        if isinstance(sc.lab, scenarios.Loopback):
            assert sc.lab.problem() is None, sc.name
            assert sc.lab.terminator in variants.TERMINATORS
            assert sc.lab.proxy in (None, slowproxy.PROCESS_NAME)
            assert (sc.lab.proxy is not None) == (sc.lab.response_delay_ms is not None
                                                  or sc.lab.quota_bytes_per_s is not None), sc.name
            assert sc.lab.relay in (None, relay.PROCESS_NAME)
            assert (sc.lab.relay is not None) == (sc.lab.first_flight_delay_ms is not None
                                                  or sc.lab.outage_ms is not None), sc.name
        else:
            path = network.get_scenario(sc.name, sc.lab)
            assert (path.name, path.delay_ms, path.loss_pct, path.jitter_ms, path.description) == (
                sc.name, sc.lab.delay_ms, sc.lab.loss_pct, sc.lab.jitter_ms, sc.lab.description)


LAB_MODULES = ("broker", "broker_start", "loopback", "network", "slowproxy", "relay", "variants", "netns",
               "delayline", "tls", "cpulimit", "processes", "resolver", "own_process")


@pytest.mark.parametrize("module", LAB_MODULES)
def test_the_labs_never_name_a_scenario_nor_import_the_registry(module):
    import ast

    source = (ROOT / "kdiag" / "lab" / f"{module}.py").read_text()
    tree = ast.parse(source)
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    names = set(scenarios.names()) - {"clean"}    # "clean" is also a plain word
    assert not strings & names, f"kdiag/lab/{module}.py branches on {strings & names}"
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.startswith("kdiag.lab.scenarios")}, module


def test_trace_help_names_every_scenario_with_its_help_line():
    res = subprocess.run([sys.executable, "-m", "kdiag", "trace", "--help"], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    text = " ".join(res.stdout.split())
    for sc in scenarios.all_scenarios():
        assert f"{sc.name} {' '.join(sc.help.split())}" in text, sc.name


def test_the_matrix_runs_exactly_the_registry():
    from kdiag.lab import matrix

    cases = matrix.cases()
    assert [c.name for c in cases] == scenarios.names()
    for case, sc in zip(cases, scenarios.all_scenarios()):
        assert (case.expected, case.how) == (sc.cause, sc.setup)
        assert case.messages == (sc.matrix_messages or sc.messages)
    assert [c.name for c in matrix.select(None)] == scenarios.names()


def _docs_lab() -> str:
    return (ROOT / "docs" / "lab.md").read_text()


def test_the_docs_scenario_table_is_the_registry_in_full():
    import docs_tables

    table = docs_tables.table_in(_docs_lab(), "kdiag.lab.scenarios.markdown_table()")
    assert table == scenarios.markdown_table(), "docs/lab.md: run python tests/docs_tables.py"
    rows = table.splitlines()[2:]
    assert len(rows) == len(scenarios.ORDER)
    for row, sc in zip(rows, scenarios.all_scenarios()):
        assert [c.strip() for c in row.strip("|").split(" | ")] == [f"`{sc.name}`", sc.help, f"`{sc.cause}`"]


def test_the_docs_network_lab_table_is_the_registry_in_full():
    lines = _docs_lab().split("\n## The network lab\n", 1)[1].splitlines()
    header = lines.index("| scenario | link | measured here |")
    rows = [line for line in lines[header + 2:] if line.startswith("| ")]
    paths = scenarios.network_paths()
    assert len(rows) == len(paths)
    for row, (name, path) in zip(rows, paths.items()):
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[:2] == [f"`{name}`", path.description] and cells[2], row
