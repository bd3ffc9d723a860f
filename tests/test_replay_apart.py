"""``kdiag replay`` of several bundles: each run reported apart, as its own
replay reports it; one analysis of them all only with --merge, which the
findings then say."""
from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest

from conftest import CAPTURES
from made_bundles import ON, healthy_bundle
from kdiag.cli import Environment, main
from kdiag.status import ExitStatus




def run(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = main([*map(str, argv)], Environment(stdout=out, stderr=err))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def off(tmp_path_factory) -> Path:
    return healthy_bundle(tmp_path_factory.mktemp("off"))


@pytest.fixture(scope="module")
def alone(off, spark) -> dict:
    """Each bundle's findings from a replay of it alone."""
    found = {}
    for b in (ON, off):
        rc, out, err = run("replay", "--json", b)
        assert rc == ExitStatus.OK, err
        found[str(b)] = json.loads(out)
    return found


def _key(f: dict) -> dict:
    s = f["summary"]
    return {"verdict": f["verdict"], "requests": s["requests"], "p50": s["latency_p50_ms"],
            "p99": s["latency_p99_ms"], "probe": f["probe"], "causes": [x["cause"] for x in f["findings"]],
            "version": f["librdkafka_version"], "retrans": s.get("tcp_retransmits")}


def test_each_bundle_is_reported_as_its_own_replay_reports_it(off, alone):
    rc, out, err = run("replay", "--json", ON, off)
    assert rc == ExitStatus.OK, err
    apart = json.loads(out)["apart"]
    assert [f["source"] for f in apart] == [[str(ON)], [str(off)]]
    assert [f["verdict"] for f in apart] == ["nagle_delayed_ack", "healthy"]
    for f in apart:
        assert _key(f) == _key(alone[f["source"][0]])
        assert "merged" not in f


def test_the_text_reports_each_then_a_line_each(off, alone):
    rc, out, _ = run("replay", off, ON)
    assert rc == ExitStatus.OK
    sections = re.split(r"^=== \d of 2: ", out, flags=re.M)
    assert sections[0] == "" and len(sections) == 3
    assert sections[1].startswith(str(off)) and "VERDICT: healthy" in sections[1]
    assert sections[2].startswith(str(ON)) and "VERDICT: nagle_delayed_ack" in sections[2]
    # Each section's probe line is its own bundle's.
    assert "441.12 msg/s" in sections[1] and "19.96 msg/s" in sections[2]
    table = out[out.index("APART: 2 runs"):].splitlines()
    assert table[1].split()[:3] == ["INPUT", "REQUESTS", "VERDICT"]
    assert table[2].split()[:3] == [str(off), "30", "healthy"]
    assert table[3].split()[:3] == [str(ON), "30", "nagle_delayed_ack"]


def test_merge_is_one_analysis_and_says_so(off, alone):
    rc, out, _ = run("replay", "--json", "--merge", ON, off)
    assert rc == ExitStatus.OK
    f = json.loads(out)
    assert f["merged"] == [str(ON), str(off)]
    assert f["summary"]["requests"] == 60
    assert f["unknowns"][0].startswith("one analysis of the requests of 2 inputs together (--merge)")
    # Two probes, two runs: neither stands for both.
    assert f["probe"] is None and f["delivery_ms"] is None and f["summary"]["tcp_retransmits"] is None
    assert any("carry a probe of their own" in u for u in f["unknowns"])
    rc, text, _ = run("replay", "--merge", ON, off)
    assert "NOT KNOWN:\n  - one analysis of the requests of 2 inputs together (--merge)" in text


def test_raw_captures_beside_a_bundle_are_one_more_run(off, alone):
    d = CAPTURES / "nagle_off"
    rc, out, _ = run("replay", "--json", ON, d / "rdkafka.log", d / "strace.txt")
    assert rc == ExitStatus.OK
    apart = json.loads(out)["apart"]
    assert [f["source"] for f in apart] == [[str(ON)], [str(d / "rdkafka.log"), str(d / "strace.txt")]]
    assert [f["verdict"] for f in apart] == ["nagle_delayed_ack", "healthy"]
    assert apart[1]["probe"] is None   # raw captures carry no probe; the bundle's is not theirs


def test_one_bundle_that_fails_verification_refuses_all_before_any_analysis(off, tmp_path):
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(off) as src, tarfile.open(bad, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name == "raw/strace/strace.txt":
                data = data.replace(b"poll(", b"POLL(", 1)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    rc, out, err = run("replay", ON, bad)
    assert rc == ExitStatus.ERROR and out == ""
    assert f"{bad}: failed verification" in err and "strace.txt" in err


def test_report_refuses_several_runs_without_merge(off, tmp_path):
    page = tmp_path / "r.html"
    rc, _, err = run("report", ON, off, "-o", page)
    assert rc == ExitStatus.USAGE and "2 runs given" in err and "--merge" in err
    assert not page.exists()
