"""The analysis's steps as data (kdiag.analysis.steps): one run and a fleet
route a run by one rule, and what the fleet leaves out follows from the
steps it does not take and the run's input, not from a list of its own."""
from __future__ import annotations

import pytest

from kdiag.analysis import steps
from kdiag.parsers.format import ANALYSIS_INPUTS, PATH, REQUESTS, SIGNALS, SOCKET_SAMPLES, SYSCALLS, WIRE


def test_steps_are_named_once_and_need_inputs_formats_give():
    every = (*steps.STEPS, *steps.ROUTES)
    assert len({s.name for s in every}) == len(every)
    for s in every:
        assert s.does and s.needs <= set(ANALYSIS_INPUTS), s.name
        assert s.fleet_instead is None or s.fleet_instead.strip(), s.name
    for s in steps.STEPS:
        assert s.needs, f"{s.name} needs no input: it would be left out of no run"


@pytest.mark.parametrize("source, has_syscalls, way", [
    (None, False, steps.SIGNALS_ONLY), (None, True, steps.SIGNALS_ONLY),
    ("syscalls", True, steps.FROM_SYSCALLS),
    ("strace", True, steps.SPLIT), ("strace", False, steps.LOG_ALONE),
    ("log", False, steps.LOG_ALONE), ("log", True, steps.TYPICAL),
])
def test_a_run_is_routed_by_its_source_and_whether_it_has_syscalls(source, has_syscalls, way):
    assert steps.route(source, has_syscalls) is way


def test_the_fleet_takes_every_route_but_the_typical_exchange_and_the_wire():
    assert [r.name for r in steps.ROUTES if r.fleet_instead] == ["typical", "from_wire"]
    assert "replay the bundle alone" in steps.TYPICAL.fleet_instead
    assert "replay the bundle alone" in steps.FROM_WIRE.fleet_instead
    assert steps.route("wire", False) is steps.FROM_WIRE


def _called(*answers):
    calls = []

    def asked(i):
        calls.append(i)
        return answers[i]
    return calls, [lambda i=i: asked(i) for i in range(len(answers))]


@pytest.mark.parametrize("answers, source, asked", [
    ((True, True, True, True), "strace", [0]),
    ((False, True, True, True), "log", [0, 1]),
    ((False, False, True, False), "syscalls", [0, 1, 2, 3]),
    ((False, False, True, True), None, [0, 1, 2, 3]),    # logged, and no Sent line: nothing was sent
    ((False, False, False, True), None, [0, 1, 2]),
    # A capture's requests stand in only where no line and no syscall does.
    ((False, False, False, False, True), "wire", [0, 1, 2, 4]),
    ((False, False, False, True, True), "wire", [0, 1, 2, 4]),
    ((False, False, True, True, True), "wire", [0, 1, 2, 3, 4]),
    ((False, True, True, True, True), "log", [0, 1]),
    ((False, False, True, False, True), "syscalls", [0, 1, 2, 3]),
    ((False, False, False, False, False), None, [0, 1, 2, 4]),
])
def test_the_source_rule_asks_only_what_it_needs(answers, source, asked):
    calls, ask = _called(*answers)
    assert steps.source_of(*ask) == source
    assert calls == asked


def _omitted(*names):
    return [s.fleet_instead for s in steps.STEPS if s.name in names]


def test_what_the_fleet_leaves_out_follows_from_the_run_input():
    # The request rows and the predictions the fleet takes as the single run does.
    assert steps.fleet_omits({REQUESTS, SIGNALS}) == _omitted("clock_steps")
    assert steps.fleet_omits({REQUESTS, SIGNALS, PATH}) == _omitted("clock_steps", "path_table")
    assert steps.fleet_omits({SIGNALS}) == _omitted("clock_steps")
    assert steps.fleet_omits({PATH, SOCKET_SAMPLES}) == _omitted("path_table")
    assert steps.fleet_omits({SOCKET_SAMPLES}) == []
    assert steps.fleet_omits({SYSCALLS}) == _omitted("clock_steps")
    assert all(_omitted(n) for n in ("clock_steps", "path_table"))
    assert steps.fleet_omits({WIRE, PATH}) == _omitted("path_table", "wire")
