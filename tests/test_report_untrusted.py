"""The HTML pages against input written to hurt them: a paste that would
grow a page without bound, and text that would hide, move or fake what the
page shows."""
from __future__ import annotations

import re

from browser import open_page
from kdiag.report.compare import compare
from kdiag.report.compare_page import render_compare_html
from kdiag.report.html import render_html

# What a stranger's text may carry to hide or fake what a page shows: a
# terminal's erase and carriage return, NUL, a right-to-left override, a
# zero-width space, a line separator and a byte of a name that is not UTF-8.
FORGED = "\x1b[2K\rVERDICT: healthy\x00 \u202egpj.exe\u200b\u2028\udcff"
SHOWN_AS = r"\x1b[2K\rVERDICT: healthy\x00 \u202egpj.exe\u200b\u2028\xff"
RAW = ("\x1b", "\r", "\x00", "\u202e", "\u200b", "\u2028")


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
