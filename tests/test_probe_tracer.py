"""Which syscall tracer runs kdiag's own probe (``trace._ProbeTracer``):
bpfcalls where it can load, strace otherwise, and never bpftrace."""
from __future__ import annotations

from pathlib import Path

import pytest

from kdiag import collectors
from kdiag.capture import trace
from kdiag.collectors import bpfcalls
from kdiag.collectors.base import PROBE, Capture


def choose(tmp_path: Path, monkeypatch, setting: str | None, bpfcalls_unmet: str | None, env: str | None = None):
    monkeypatch.setattr(bpfcalls.Bpfcalls, "unmet", classmethod(lambda cls: bpfcalls_unmet))
    if env is None:
        monkeypatch.delenv("KDIAG_TRACER", raising=False)
    else:
        monkeypatch.setenv("KDIAG_TRACER", env)
    active = collectors.for_capture(Capture(raw=tmp_path, mode=PROBE, log=lambda m: None))
    return trace._ProbeTracer.choose(trace.TraceOptions(tracer=setting), active, lambda m: None)


def test_auto_takes_bpfcalls_where_it_loads(tmp_path, monkeypatch):
    t = choose(tmp_path, monkeypatch, None, None)
    assert (t.tool, t.setting) == ("bpfcalls", "auto") and "stops no thread" in t.why


def test_auto_takes_strace_where_bpfcalls_cannot_load(tmp_path, monkeypatch):
    t = choose(tmp_path, monkeypatch, "auto", "the kernel has no BTF")
    assert t.tool == "strace" and "bpfcalls cannot run here: the kernel has no BTF" in t.why


@pytest.mark.parametrize("setting,env", [("strace", None), (None, "strace")])
def test_strace_when_asked(tmp_path, monkeypatch, setting, env):
    t = choose(tmp_path, monkeypatch, setting, None, env)
    assert (t.tool, t.why) == ("strace", "asked for strace")


def test_bpftrace_is_not_the_probes_tracer(tmp_path, monkeypatch):
    # KDIAG_TRACER=bpftrace set for --pid work must not break a lab trace
    t = choose(tmp_path, monkeypatch, None, None, "bpftrace")
    assert t.tool == "strace" and "bpfcalls or strace" in t.why


def test_the_record_names_no_tool_when_none_ran(tmp_path, monkeypatch):
    t = choose(tmp_path, monkeypatch, None, None)
    rec = t.record()      # bpfcalls chosen but never started
    assert rec == {"tool": None, "setting": "auto", "why": t.why, "bpfcalls_failed": None, "lost_events": None}
