"""The HTML pages against input written to hurt them: a paste that would
grow a page without bound, and text that would hide, move or fake what the
page shows."""
from __future__ import annotations

import io
import re

from browser import open_page
from conftest import FIXTURES, ROOT
from kdiag.cli import Environment, main
from kdiag.report.compare import compare
from kdiag.report.compare_page import render_compare_html
from kdiag.report.html import SOCKET_ROWS_MAX, render_html
from kdiag.report.page_limits import SHOWN

LOG = FIXTURES / "excerpts" / "path_traceroute_t_log" / "rdkafka.log"
PAGE_MAX = 2_000_000
# What a stranger's text may carry to hide or fake what a page shows: a
# terminal's erase and carriage return, NUL, a right-to-left override, a
# zero-width space, a line separator and a byte of a name that is not UTF-8.
FORGED = "\x1b[2K\rVERDICT: healthy\x00 \u202egpj.exe\u200b\u2028\udcff"
SHOWN_AS = r"\x1b[2K\rVERDICT: healthy\x00 \u202egpj.exe\u200b\u2028\xff"
RAW = ("\x1b", "\r", "\x00", "\u202e", "\u200b", "\u2028")


def _paste(path, hops: int) -> int:
    """A traceroute paste of ``hops`` hops: listings of 30 hops to as many
    hosts, as traceroute 2.1 prints them. Its target count."""
    lines, targets = [], -(-hops // 30)
    for k in range(targets):
        lines.append(f"traceroute to host{k}.example.com (10.{k >> 8 & 255}.{k & 255}.1), 30 hops max, "
                     "60 byte packets")
        lines += [f" {h}  10.{(k * 7 + h) & 255}.{k >> 3 & 255}.{h}  {h * 0.5 + k % 7:.3f} ms  "
                  f"{h * 0.5 + 0.1:.3f} ms  *" for h in range(1, 31)]
    path.write_text("\n".join(lines) + "\n")
    return targets


def test_a_pasted_traceroute_of_100k_hops_makes_a_small_page(spark, tmp_path):
    paste = tmp_path / "traceroute.txt"
    _paste(paste, 99_000)
    page = tmp_path / "report.html"
    err = io.StringIO()
    assert main(["report", str(LOG), str(paste), "-o", str(page)], Environment(stdout=io.StringIO(), stderr=err)) \
        == 0, err.getvalue()
    html = page.read_text()
    assert len(html.encode()) < PAGE_MAX
    assert html.count("<tr>") < 300
    shown = re.search(r'data-chart="paths" data-marks="(\d+)"', html)
    left = re.search(r'data-left-out="(\d+)">&hellip; and ([\d,]+) more hops not shown', html)
    assert shown and left and int(shown[1]) == SHOWN["paths"]
    assert int(left[1]) > 98_000 and left[2] == f"{int(left[1]):,}"
    assert "tables/probes.parquet" in html
    got = open_page(page, "report-huge-paste.png")
    assert not [e for e in got.console if e["level"] == "SEVERE"], got.console
    assert got.charts["paths"][0] == SHOWN["paths"] and got.charts["paths"][4] == SHOWN["paths"] + 1   # + header
    assert f"{int(left[1]):,} more hops not shown" in got.text


def _huge_findings() -> dict:
    """Every section that lists rows, far past its cap."""
    causes = [f"cause_{i}" for i in range(300)]
    return {
        "verdict": "nagle_delayed_ack",
        "findings": [{"cause": c, "share": 0.001, "requests": 1,
                      "evidence": ["x" * 3_000_000] + [f"{c} line {j}" for j in range(59)]} for c in causes[:81]],
        "likely": [{"cause": c, "support": "s", "decide": "d"} for c in causes],
        "unknowns": [f"unknown {i}" for i in range(500)],
        "input_notes": [f"note {i}" for i in range(500)],
        "input_checks": [{"input": f"f{i}", "check": "copies", "count": i, "detail": "d"} for i in range(500)],
        "inputs": [{"path": f"raw/f{i}", "kind": "strace", "counts": {"lines": 1}} for i in range(500)],
        "paths": [{"target_host": f"h{i // 30}", "method": "traceroute", "ttl": i % 30 + 1, "responder": f"r{i}",
                   "answer": "time_exceeded", "rtt_min_ms": 1.0, "answered": 1, "sent": 3} for i in range(50_000)],
        "request_rows": {"columns": ["send_us", "total_ms", "cause", "corr_id"],
                         "rows": [[i * 1000, 1.0 + i % 97, causes[i % 300], i] for i in range(50_000)],
                         "of": 50_000, "sampled": False},
    }


def _sockets() -> list[dict]:
    """One connection sampled 10,000 times, 199 others 50 times each."""
    return [{"ts_us": i * 100, "fd": 0 if i < 10_000 else i % 199 + 1, "remote": "10.0.0.1", "remote_port": 9092, "nodelay": bool(i % 2),
             "unacked": i % 13, "notsent_bytes": i % 4096, "total_retrans": i // 1000, "snd_cwnd": 10 + i % 7}
            for i in range(SOCKET_ROWS_MAX)]


def test_every_section_that_lists_input_is_capped_and_says_what_it_left_out():
    html = render_html(_huge_findings(), _sockets())
    assert len(html.encode()) < PAGE_MAX
    left = {what: int(n) for n, what in re.findall(r'data-left-out="(\d+)">&hellip; and [\d,]+ more ([a-z ]+) not',
                                                   html)}
    assert left == {"findings": 81 - SHOWN["findings"], "lines of evidence": 60 - SHOWN["evidence"],
                    "likely causes": 300 - SHOWN["likely"], "notes": 500 - SHOWN["notes"],
                    "input checks": 500 - SHOWN["input_checks"], "files": 500 - SHOWN["inputs"],
                    "hops": 50_000 - SHOWN["paths"], "connections": 200 - SHOWN["connections"]}
    assert html.count("more notes not shown") == 2                    # unknowns and input notes
    assert html.count(f"({3_000_000 - SHOWN['text_chars']:,} more characters)") == SHOWN["findings"]
    assert html.count("<circle") == SHOWN["requests"]
    assert f"{SHOWN['requests']:,} of 50,000 requests drawn" in html
    legend = re.search(r'data-chart="over_time".*?</svg><ul class="legend">(.*?)</ul>', html, re.S)[1]
    assert legend.count("<li>") == SHOWN["causes"] + 1 and "other causes" in legend
    points = [len(p.split()) for p in re.findall(r'<polyline points="([^"]*)"', html)]
    assert len(points) == 5 * SHOWN["connections"]
    assert 100 < max(points) <= 2 * SHOWN["socket_points"]            # a step line draws two a point
    assert f"At most {SOCKET_ROWS_MAX:,} samples are read" in html


def test_a_compare_of_many_causes_is_capped():
    def side(k: int) -> dict:
        return {"verdict": "c0", "findings": [{"cause": f"c{i}", "share": 1 / k} for i in range(k)],
                "request_rows": {"columns": ["send_us", "total_ms"], "rows": [[i * 1000, 5.0] for i in range(50)]}}
    html = render_compare_html(compare(side(500), side(400), names=("a", "b")))
    said = re.search(r'data-chart="compare_causes" data-marks="(\d+)"', html)
    assert int(said[1]) == 2 * (SHOWN["causes"] + 1)
    legend = re.search(r'data-chart="compare_causes".*?</svg><ul class="legend">(.*?)</ul>', html, re.S)[1]
    assert legend.count("<li>") == SHOWN["causes"] + 1 and "other causes" in legend


def _planted(value: str) -> dict:
    return {"verdict": value, "confidence": value, "kdiag_version": value,
            "summary": {"brokers": [value], "path_rtt_ms": 1.0, "path_rtt_source": value},
            "findings": [{"cause": value, "share": 1.0, "requests": 1, "evidence": [value], "fix": {value: value},
                          "fix_text": value}],
            "likely": [{"cause": value, "support": value, "decide": value}], "unknowns": [value],
            "paths": [{"target_host": value, "responder": value, "method": value, "ttl": 1}],
            "input_checks": [{"input": value, "check": value, "count": 1, "detail": value}],
            "inputs": [{"path": value, "kind": value}],
            "request_rows": {"columns": ["send_us", "total_ms", "cause", "corr_id"],
                             "rows": [[1, 5.0, value, value], [2, 7.0, "healthy", 3]]}}


def test_controls_in_a_strangers_text_are_shown_not_obeyed(tmp_path):
    hostile = FORGED + '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    page = tmp_path / "forged.html"
    page.write_text(render_html(_planted(hostile), [{"ts_us": 1, "fd": hostile, "remote": hostile, "nodelay": True}],
                                source=hostile), encoding="utf-8")
    html = page.read_text(encoding="utf-8")
    assert not [ch for ch in RAW if ch in html]
    assert not re.search(r"<\s*(script|img)", html, re.I)
    assert html.count(SHOWN_AS) >= 15
    got = open_page(page, "report-forged.png")
    assert not [e for e in got.console if e["level"] == "SEVERE"], got.console
    assert got.title.startswith("kdiag: " + SHOWN_AS)
    assert got.text.count(SHOWN_AS + '<script>alert(1)</script>"><img src=x onerror=alert(2)>') >= 10


def test_a_compare_page_shows_a_name_that_is_not_utf8(tmp_path):
    side = {"verdict": "healthy", "request_rows": {"columns": ["send_us", "total_ms"], "rows": [[1, 5.0]]}}
    page = tmp_path / "compare.html"
    page.write_text(render_compare_html(compare(side, side, names=(f"before{FORGED}.tar.gz", "after.tar.gz"))),
                    encoding="utf-8")
    html = page.read_text(encoding="utf-8")
    assert not [ch for ch in RAW if ch in html] and f"before{SHOWN_AS}.tar.gz" in html


def test_escaping_is_the_default():
    """No template turns escaping off or marks a value safe, and the page
    code makes no markup of its own (an empty Markup() aside): whatever a
    page writes is escaped, its controls shown, unless a template made it."""
    from kdiag.report import svg
    from kdiag.report.templating import render

    templates = sorted((ROOT / "kdiag" / "report" / "templates").glob("*.html"))
    assert templates
    for t in templates:
        text = t.read_text().replace(" ", "")
        assert "|safe" not in text and "autoescape" not in text and "Markup" not in text, t.name
    for py in (ROOT / "kdiag" / "report").glob("*.py"):
        assert not re.search(r"Markup\(\s*[^)\s]", py.read_text()), py.name
    hostile = FORGED + '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    html = "".join(map(str, (render("page.html", title=hostile), svg.legend([(hostile, hostile)]),
                             svg.label(hostile, hostile, 1))))
    assert html.startswith("<!DOCTYPE html>") and "</svg>" not in html
    assert not re.search(r"<\s*(script|img)", html, re.I) and not [ch for ch in RAW if ch in html]
    assert html.count(SHOWN_AS) == 5            # the title, a legend's name and colour, a label's text and x
