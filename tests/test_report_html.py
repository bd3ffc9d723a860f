"""kdiag report: the HTML page, rendered in a real browser, and what it
does with findings a stranger wrote."""
from __future__ import annotations

import io
import json
import re
import tarfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from browser import open_page
from conftest import FIXTURES
from kdiag.cli import Environment, main
from kdiag.report.html import render_html

BUNDLE = FIXTURES / "bundles" / "nagle_on.tar.gz"
CHARTS = ("waterfall", "over_time", "distribution", "socket_nodelay", "socket_unacked", "socket_notsent_bytes",
          "socket_total_retrans", "socket_snd_cwnd", "paths")
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'


def _report(tmp_path, *paths):
    out, err = io.StringIO(), io.StringIO()
    page = tmp_path / "report.html"
    rc = main(["report", *map(str, paths), "-o", str(page)], Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    assert out.getvalue().strip() == str(page)
    return page


def test_report_of_a_bundle_in_chromium(spark, tmp_path):
    page = _report(tmp_path, BUNDLE)
    html = page.read_text()
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    got = open_page(page, "report-nagle_on.png")
    assert not [e for e in got.console if e["level"] in ("SEVERE", "WARNING")], got.console
    assert got.title == "kdiag: nagle_delayed_ack"
    for name in CHARTS:
        said, width, height, tag, drawn = got.charts[name]
        assert said > 0 and drawn >= said and width > 300 and height > (30 if tag == "table" else 60), name
    assert got.charts["waterfall"][0] == 4             # the typical request and the three slowest
    assert got.charts["over_time"][0] == 30            # every request of the bundle
    assert "fix: -X socket.nagle.disable=true" in got.text
    assert got.screenshot.stat().st_size > 20_000


def test_report_of_raw_captures_says_what_it_cannot_draw(spark, tmp_path):
    page = _report(tmp_path, FIXTURES / "captures" / "nagle_on" / "rdkafka.log")
    got = open_page(page, "report-log-only.png")
    assert not [e for e in got.console if e["level"] == "SEVERE"], got.console
    assert got.charts["over_time"][0] > 0
    assert got.charts["sockets"][:1] == (0,) and got.charts["sockets"][3] == "p"
    assert "no socket samples in these inputs" in got.text


def _findings_with(value) -> dict:
    """The fixture bundle's findings with ``value`` planted wherever a
    string goes into the page."""
    with tarfile.open(BUNDLE) as t:
        f = json.load(t.extractfile("findings.json"))
    f["verdict"] = value
    f["confidence"] = value
    f["findings"][0]["cause"] = value
    f["findings"][0]["evidence"].append(value)
    f["findings"][0]["fix"] = {value: value}
    f["summary"]["brokers"] = [value]
    f["summary"]["path_rtt_source"] = value
    f["paths"][0]["responder"] = value
    f["unknowns"] = [value]
    f["input_notes"] = [value]
    f["input_checks"] = [{"input": value, "check": value, "count": 1, "detail": value}]
    f["likely"] = [{"cause": value, "support": value, "decide": value}]
    f["request_rows"] = {"columns": ["send_us", "total_ms", "cause", "broker", "corr_id"],
                         "rows": [[1, 5.0, value, value, value], [2, 7.0, "healthy", value, 3]], "of": 2,
                         "sampled": False}
    return f


def test_a_strangers_markup_stays_text(tmp_path):
    page = tmp_path / "hostile.html"
    page.write_text(render_html(_findings_with(HOSTILE), [{"ts_us": 1, "fd": HOSTILE, "remote": HOSTILE,
                                                          "nodelay": True}], source=HOSTILE))
    html = page.read_text()
    assert not re.search(r"<\s*(script|img)", html, re.I)
    assert html.count("&lt;script&gt;") >= 10
    got = open_page(page, "report-hostile.png")
    assert not [e for e in got.console if e["level"] == "SEVERE"], got.console
    assert HOSTILE in got.text                    # shown, as text


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                       lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                                                max_size=4), max_leaves=20)
KEYS = ("verdict", "confidence", "summary", "findings", "paths", "input_checks", "unknowns", "likely",
        "request_rows", "probe", "inputs", "kdiag_version", "librdkafka_version")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), JSONISH, max_size=len(KEYS)),
       st.lists(st.dictionaries(st.sampled_from(("ts_us", "fd", "remote", "nodelay", "unacked", "snd_cwnd")),
                                JSONISH, max_size=6), max_size=5))
def test_any_findings_render(findings, sockets):
    html = render_html(findings, sockets)
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert "<script" not in html


def test_statistics_series_is_a_table_bounded_by_the_page_and_shows_only_numbers():
    from kdiag.report.page_limits import SHOWN

    series = [{"snapshot": i + 1, "rtt_p50_ms": 2.5, "rtt_p99_ms": 9.0, "int_latency_p50_ms": 400.0 + i,
               "int_latency_p99_ms": 900.0, "throttle_avg_ms": 0, "msg_cnt": 9000 + i} for i in range(70)]
    series[1]["rtt_p50_ms"] = HOSTILE
    html = render_html({"summary": {"statistics": {"snapshots": 70, "brokers": 1, "series": series + [HOSTILE]}}})
    table = re.search(r'<table id="statistics">(.*?)</table>', html, re.S).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", table)
    assert len(rows) == 1 + SHOWN["statistics"]
    assert re.findall(r"<td>(.*?)</td>", rows[1]) == ["1", "2.5", "9", "400", "900", "0", "9000"]
    assert re.findall(r"<td>(.*?)</td>", rows[2])[1] == ""       # not a number: shown empty
    assert "70 snapshot(s) of 1 broker(s)" in html and "snapshots not shown" in html
    assert "script" not in table
    # Without statistics the section is not there.
    assert 'id="statistics"' not in render_html({"summary": {}})


def test_connection_timeline_in_chromium(tmp_path):
    """The connections' phases (life.py) drawn one attempt a row, a broker's
    name from a stranger's log staying text."""
    from test_life import healthy

    from kdiag.analysis import life

    hostile_broker = f"ssl://{HOSTILE}:9093/1"
    rows = healthy(resolve=2007) + healthy(start=3000, tls=1500, broker=hostile_broker, line=20)
    got = life.summed(life.walk(rows), [], None, len(rows), 0)
    with tarfile.open(BUNDLE) as t:
        f = json.load(t.extractfile("findings.json"))
    f["life"] = {**got, "timed_out": {"kinds": [{"kind": "queued for a connection", "messages": 5,
                                                 "brokers": [hostile_broker], "cause": "dns_slow"}]}}
    page = tmp_path / "life.html"
    page.write_text(render_html(f))
    html = page.read_text()
    assert "<script" not in html and "onerror=alert" not in html.replace("onerror=alert(2)&gt;", "")
    opened = open_page(page, "report-connections.png")
    assert not [e for e in opened.console if e["level"] in ("SEVERE", "WARNING")], opened.console
    said, width, height, tag, drawn = opened.charts["connections"]
    assert said == 2 and drawn >= 2 * 5 and width > 300 and height > 40
    assert "slowest ms" in opened.text and "tls 2 1500" in " ".join(opened.text.split())
    assert "5 queued for a connection on ssl://<script>" in opened.text
    assert "resolve" in opened.text and "2007" in opened.text and HOSTILE.split(">")[0] in opened.text
