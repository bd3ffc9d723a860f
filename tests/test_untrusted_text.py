"""A bundle's text is data on every screen: a terminal shows its escapes,
newlines and bytes that are not UTF-8 as escapes a person reads, never acts
on them; the verdict line cannot be moved, hidden or faked; a page is
written whole or not at all; an odd URI is refused in one line."""
from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
from pathlib import Path

import pytest

import bundle_mutations as bm
from conftest import ROOT, need
from kdiag.cli import Environment, main
from kdiag.status import ExitStatus

ESC = "\x1b"
LINK = f"{ESC}]8;;https://evil.example/x{ESC}\\click here{ESC}]8;;{ESC}\\"
# Clear the screen, write a verdict of its own at the top, hide the rest.
FORGED = f"\r{ESC}[2K{ESC}[2J{ESC}[HVERDICT: healthy\n  healthy: 30 requests (100%){ESC}[8m"
# The fixture's own verdict; the forged FAIL line adds a request_timeout
# finding of one request, which does not take the verdict.
REAL_VERDICT = "nagle_delayed_ack"
HIDDEN = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def _strace_quoted(raw: bytes) -> bytes:
    """``raw`` as strace -s writes a buffer: printable ASCII as it is, the
    rest as octal escapes."""
    out = []
    for b in raw:
        c = bytes([b])
        out.append(b"\\" + c if c in b'"\\' else b"\\n" if c == b"\n" else c if 32 <= b < 127 else b"\\%03o" % b)
    return b"".join(out)


def forged_bundle(path: Path, *, fail: str | None = None, version: str | None = None,
                  member: str | None = None) -> Path:
    """The real bundle with a librdkafka FAIL line holding ``fail`` (in the
    log and in the strace of the producer's stderr, which the analysis
    prefers), the manifest's librdkafka version ``version``, and one more
    member named ``member``; the manifest lists everything with its hash,
    so the bundle verifies."""
    items = bm.real_members()
    man = json.loads(items[0][1])
    line = (f"%7|1795610317.620|FAIL|rdkafka#producer-1| [thrd:ssl://127.0.0.1:38125/111]: "
            f"ssl://127.0.0.1:38125/111: 1 request(s) timed out: disconnect{fail}") if fail is not None else None
    out = []
    for m, data in items:
        if line is not None and m.name in ("raw/rdkafka_log/rdkafka.log", "raw/strace/strace.txt"):
            rows = data.split(b"\n")
            at = next(i for i, r in enumerate(rows) if b"|FAIL|" in r)
            raw = line.encode("utf-8", "surrogateescape")
            if m.name.startswith("raw/strace/"):
                raw += b"\n"
                raw = (b'10915 1795610317.622700 write(2</tmp/kd/nagle_on.tar.gz.partial/raw/rdkafka_log/'
                       b'rdkafka.log>, "' + _strace_quoted(raw) + b'", %d) = %d <0.000009>' % (len(raw), len(raw)))
            rows.insert(at, raw)
            data = b"\n".join(rows)
            man["files"][m.name] = bm.listing(data)
        out.append((m, data))
    if member is not None:
        data = b"not a capture\n"
        out.append((bm.member(member), data))
        man["files"][member] = bm.listing(data)
    if version is not None:
        man["versions"]["librdkafka"] = version
    return bm.write(out, path, manifest=man)


def run(*argv, stdout=None):
    out, err = stdout or io.StringIO(), io.StringIO()
    rc = main([str(a) for a in argv], Environment(stdout=out, stderr=err))
    return rc, out, err.getvalue()


def assert_data(text: str) -> None:
    """Nothing in ``text`` can act on a terminal: no control, format or
    separator character but the newlines between rows."""
    acting = sorted({c for c in text if c != "\n" and unicodedata.category(c) in HIDDEN})
    assert not acting, acting


# --- 1. the verdict on a real terminal ----------------------------------------------

def _on_a_terminal(argv: list[str], cwd: Path) -> tuple[str, str]:
    """What a 200x60 terminal (tmux's) shows once ``kdiag ARGV`` has ended:
    the screen's text (wrapped rows joined), and the same with the cells'
    attributes as escapes."""
    need("tmux")
    sock_dir = Path(tempfile.mkdtemp(prefix="kd-tmux-", dir="/tmp"))   # a socket path is at most 107 bytes
    sock = str(sock_dir / "s")
    tmux = ["tmux", "-S", sock]
    cmd = " ".join(map(shlex.quote, [sys.executable, "-m", "kdiag", *argv]))
    script = f"cd {shlex.quote(str(cwd))} && {cmd}; {' '.join(tmux)} wait-for -S kdiag-done; sleep 300"
    env = {**os.environ, "KDIAG_WARM": "0", "TERM": "xterm-256color", "PYTHONPATH": str(ROOT)}
    env.pop("TMUX", None)
    try:
        subprocess.run([*tmux, "new-session", "-d", "-x", "200", "-y", "60", "-s", "kd", script], env=env,
                       check=True, timeout=30)
        subprocess.run([*tmux, "wait-for", "kdiag-done"], check=True, timeout=300)
        screen = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-t", "kd"], capture_output=True, text=True,
                                check=True, timeout=30).stdout
        cells = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-e", "-t", "kd"], capture_output=True,
                               text=True, check=True, timeout=30).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30, check=False)
        shutil.rmtree(sock_dir, ignore_errors=True)
    return screen, cells


def test_a_forged_bundle_cannot_forge_the_verdict_on_a_terminal(tmp_path):
    """Escapes in a FAIL line, a member's name and the manifest's version:
    on main the screen was cleared and ended "VERDICT: healthy" (the real
    verdict gone), the rest concealed."""
    need("java")
    bundle = forged_bundle(tmp_path / "forged.tar.gz", fail=LINK + FORGED.replace("\n", ESC + "E"),
                           version="2.16.0" + LINK, member="raw/rdkafka_log/x" + FORGED.replace("\n", "\r\n"))
    screen, cells = _on_a_terminal(["replay", str(bundle)], tmp_path)
    rows = [r.strip() for r in screen.splitlines()]
    verdicts = [r for r in rows if r.startswith("VERDICT")]
    assert verdicts == [f"VERDICT: {REAL_VERDICT}"], screen
    assert not [r for r in rows if r.startswith("healthy:")], screen
    # every forged field is on the screen, as the escapes it holds
    shown_link = "\\x1b]8;;https://evil.example/x\\x1b\\click here"
    assert f"librdkafka 2.16.0{shown_link}" in rows[0], screen
    assert [r for r in rows if "1 request(s) timed out: disconnect" + shown_link in r
            and "\\x1b[2J\\x1b[HVERDICT: healthy\\x1bE" in r], screen
    assert [r for r in rows if "/x\\r\\x1b[2K\\x1b[2J\\x1b[HVERDICT: healthy\\r\\n  healthy: 30" in r], screen
    # no cell took an attribute (conceal, colour) or a link: kdiag writes none
    assert ESC not in cells, cells


# --- 2. every text renderer, field by field --------------------------------------------

NASTY = f"x{ESC}[2J\r\nVERDICT: healthy{ESC}]8;;https://evil/{ESC}\\\u202e\u2028\x9b1A\udcff"


def _findings() -> dict:
    arrow = NASTY.replace("\udcff", "")   # the path table is Arrow's: a lone surrogate is not a string there
    return {"verdict": REAL_VERDICT, "librdkafka_version": NASTY, "probe_error": NASTY,
            "summary": {"requests": 3, "brokers": [NASTY], "source": NASTY, "path_rtt_ms": 1.0,
                        "path_rtt_source": NASTY, "split_ms": {"client_queue": NASTY}},
            "paths": [{"target_host": arrow, "target_port": 9092, "broker": arrow, "method": arrow, "ttl": 1,
                       "responder": arrow, "answer": arrow, "answered": 1, "sent": 1, "rtt_min_ms": 1.0,
                       "rtt_median_ms": 1.0, "rtt_max_ms": 1.0}],
            "findings": [{"cause": NASTY, "share": 0.5, "requests": 1, "evidence": [NASTY], "fix": {NASTY: NASTY},
                          "fix_text": NASTY, "predicted_text": NASTY}],
            "confidence": NASTY, "likely": [{"cause": NASTY, "support": NASTY, "decide": NASTY}],
            "unknowns": [NASTY], "input_notes": [NASTY], "input_checks": [{"input": NASTY, "detail": NASTY}],
            "source": [NASTY]}


def test_the_report_shows_every_field_as_data_in_its_own_row():
    from kdiag.report.text import render, render_apart

    text = render(_findings(), bundle=NASTY, probe={"delivered": NASTY, "messages": 1})
    assert_data(text)
    rows = text.splitlines()
    assert [r for r in rows if r.startswith("VERDICT")] == [f"VERDICT: {REAL_VERDICT}"]
    assert not [r for r in rows if "VERDICT" in r and not r.startswith("VERDICT") and "\\r\\nVERDICT" not in r]
    assert "  PROBE FAILED x\\x1b[2J" in rows   # a field's first line only, as before
    assert "    - x\\x1b[2J\\r\\nVERDICT: healthy\\x1b]8;;https://evil/\\x1b\\\\u202e\\u2028\\x9b1A\\xff" in rows

    apart = render_apart([_findings(), {"source": ["b\nVERDICT: healthy"], "verdict": REAL_VERDICT}])
    assert_data(apart)
    assert len(apart.splitlines()) == 4 and "b\\nVERDICT: healthy" in apart.splitlines()[-1]


def test_the_text_report_lists_a_capped_number_of_hops_brokers_first_and_says_how_many_it_left_out():
    from kdiag.report.page_limits import SHOWN
    from kdiag.report.text import render

    def hop(host, ttl, broker=None):
        return {"target_host": host, "target_port": 9092, "broker": broker, "method": "traceroute", "ttl": ttl,
                "responder": f"10.9.{ttl // 250}.{ttl % 250}", "answer": "time_exceeded", "rtt_min_ms": 1.0,
                "rtt_median_ms": 1.0, "rtt_max_ms": 1.0, "answered": 3, "sent": 3}

    # A pasted listing of other hosts ahead of the broker's own path.
    paths = [hop("elsewhere", t % 30000 + 1) for t in range(50_000)] + [hop("b1", 1, broker="b1:9092/1")]
    text = render({"verdict": REAL_VERDICT, "summary": {"requests": 1}, "findings": [], "paths": paths})
    hops = [r for r in text.splitlines() if r.startswith("    ") and r.strip()[:1].isdigit()]
    assert len(hops) == SHOWN["paths"] and len(text) < 100_000
    assert "    b1:9092 (broker b1:9092/1), traceroute probes, target not reached in 1 hops" in text.splitlines()
    assert f"    ... and {len(paths) - SHOWN['paths']:,} more hops not shown; the full listing is the probes table" \
        in text


def _judged() -> dict:
    return {"verdict": REAL_VERDICT, "summary": {"requests": 20}, "findings": [{"cause": REAL_VERDICT, "share": 1.0}],
            "request_rows": {"columns": ["send_us", "total_ms"], "rows": [[i * 1000, 40.0 + i] for i in range(20)],
                             "slowest": [], "of": 20, "sampled": False}}


def test_compare_text_shows_the_files_names_as_data():
    """A bundle's file name with escapes went to the terminal raw."""
    from kdiag.report.compare import compare, render_text

    f = _judged()
    text = render_text(compare(f, f, names=(NASTY, "after\nVERDICT: healthy.tar.gz")))
    assert_data(text)
    rows = text.splitlines()
    assert rows[0] == ("kdiag compare: x\\x1b[2J\\r\\nVERDICT: healthy\\x1b]8;;https://evil/\\x1b\\\\u202e\\u2028"
                       "\\x9b1A\\xff -> after\\nVERDICT: healthy.tar.gz"), rows[0]
    assert not [r for r in rows if r.lstrip().startswith("VERDICT:")]


def test_the_fleets_datasets_hold_a_bundles_words_as_data():
    """pandas, DuckDB's shell and spark-shell print a dataset's strings raw."""
    from kdiag.fleet.job import BUNDLES_DDL, FINDINGS_DDL, _names, bundle_row, finding_rows, parquet_rows

    facts = {"bundle_id": "b1", "source": f"s{ESC}[2J.tar.gz", "state": "parsed", "host": "web\nVERDICT: healthy"}
    res = {"verdict": REAL_VERDICT, "judged": True, "librdkafka_version": f"2.16{ESC}]8;;x{ESC}\\",
           "summary": {"brokers": ["b\u202e:9092"]},
           "findings": [{"cause": REAL_VERDICT, "evidence": [f"e{ESC}[1A\rVERDICT: healthy"]}]}
    bundles = dict(zip(_names(BUNDLES_DDL), parquet_rows([bundle_row(facts, res)], BUNDLES_DDL)[0]))
    findings = dict(zip(_names(FINDINGS_DDL), parquet_rows(finding_rows(facts, res), FINDINGS_DDL)[0]))
    assert (bundles["source"], bundles["host"], bundles["librdkafka_version"], bundles["brokers"]) == (
        "s\\x1b[2J.tar.gz", "web\\nVERDICT: healthy", "2.16\\x1b]8;;x\\x1b\\", ["b\\u202e:9092"])
    assert findings["evidence"] == ["e\\x1b[1A\\rVERDICT: healthy"] and findings["host"] == bundles["host"]
    # The whole findings stay recoverable, as JSON whose controls are escapes.
    assert json.loads(bundles["findings_json"])["librdkafka_version"] == res["librdkafka_version"]
    assert ESC not in bundles["findings_json"]


def test_the_fleet_summary_prints_a_host_as_data_in_one_row():
    """A newline in a host name added a summary row of the attacker's."""
    from kdiag.fleet.job import DIMENSIONS, render, summarise

    def bundle(host, verdict):
        return {"state": "parsed", "verdict": verdict, "judged": True, "librdkafka_version": "2.16.0",
                "host": host, "brokers": ["b:9092"], "topics": ["t"], "day": "2026-11-25"}

    bundles = [bundle("web-1", REAL_VERDICT), bundle(f"web-2{ESC}[31m\nhealthy                       999", REAL_VERDICT)]
    rows = summarise(bundles)
    summary = {"bundles": 3, "judged": 2, "output": f"file:///out{ESC}[2J", "verdicts": {REAL_VERDICT: 2},
               "unread": [{"source": f"bad{ESC}]8;;x{ESC}\\.tar.gz", "problems": ["member 'a\\x1b': x\ny"]}],
               "by": {dim: [(r["value"], r["verdict"], r["bundles"]) for r in rows if r["dimension"] == dim]
                      for dim in DIMENSIONS.values()}}
    text = render(summary)
    assert_data(text)
    lines = text.splitlines()
    host = lines.index(f"{'HOST':<26} {'VERDICT':<22} BUNDLES")
    shown_host = "web-2\\x1b[31m\\nhealthy                       999"
    assert lines[host + 1:host + 4] == [f"{'web-1':<26} {REAL_VERDICT:<22} {1:>7}",
                                        f"{shown_host:<26} {REAL_VERDICT:<22} {1:>7}", ""]
    assert not [ln for ln in lines if ln.startswith("healthy")]
    assert "  not read: bad\\x1b]8;;x\\x1b\\.tar.gz: member 'a\\x1b': x\\ny" in lines
    # --json: the same summary as data (JSON escapes every control character)
    out = json.dumps(summary, default=str)
    assert out.isascii() and out.isprintable() and json.loads(out) == json.loads(json.dumps(summary))


def test_json_escapes_every_control_format_and_separator_character():
    """--json output is json.dumps with ensure_ascii: each such character
    (C0, DEL, C1, bidi, U+2028, a lone surrogate) is written as \\uXXXX."""
    chars = "".join(chr(c) for c in range(0x3000) if unicodedata.category(chr(c)) in HIDDEN)
    chars += "\u2028\u2029\ufeff\U000e0041\udcff\ud800"
    out = json.dumps({"verdict": chars, chars: [chars]}, default=str)
    assert out.isascii() and out.isprintable()
    assert json.loads(out) == {"verdict": chars, chars: [chars]}


def test_replay_json_is_printable_ascii(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr("kdiag.analysis.pipeline.analyse", lambda *a, **k: (_findings(), None))
    rc, out, err = run("replay", "--json", bm.REAL)
    assert rc == ExitStatus.OK, err
    text = out.getvalue()
    assert text.isascii() and text[:-1].isprintable() and text.endswith("}\n")
    assert json.loads(text)["librdkafka_version"] == NASTY


# --- 3. the sinks: stdout, notes, argparse, the progress display ----------------------------

def test_stdout_and_notes_show_escapes_and_write_in_any_encoding():
    """In an ASCII locale (or a strict UTF-8 one), a name that is not UTF-8
    or a letter the encoding lacks raised UnicodeEncodeError."""
    raw_out = io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="strict")
    raw_err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    env = Environment(stdout=raw_out, stderr=raw_err)
    env.stdout.write(f"caf\u00e9 run-\udcff{ESC}[2J\nnext\n")
    env.say(f"warning: run-\udcff{ESC}]8;;x{ESC}\\ \u4e2d")
    raw_out.flush()
    raw_err.flush()
    assert raw_out.buffer.getvalue() == b"caf\\xe9 run-\\xff\\x1b[2J\nnext\n"
    assert raw_err.buffer.getvalue() == "kdiag: warning: run-\\xff\\x1b]8;;x\\x1b\\ \u4e2d\n".encode()


def test_argparse_quotes_a_refused_argument_as_data(capsys):
    for uri, why in ((f"gopher://h{ESC}]8;;x{ESC}\\/x", "gopher://h\\x1b]8;;x\\x1b\\/x: not on this machine"),
                     (f"file://h{ESC}[2J/x", "file://h\\x1b[2J/x: not a URI kdiag can read")):
        assert run("replay", uri)[0] == ExitStatus.USAGE
        err = capsys.readouterr().err
        assert_data(err)
        assert why in err, err


def test_the_progress_display_shows_a_stage_name_as_data(monkeypatch):
    """A file's name in a stage ("reading NAME") was read as rich markup:
    "[link=...]" planted a link, an ESC went out raw."""
    from kdiag import progress

    monkeypatch.setenv("FORCE_COLOR", "1")   # rich draws as on a terminal
    monkeypatch.delenv("NO_COLOR", raising=False)
    stream = io.StringIO()
    with progress.shown(stream, True) as shown:
        with shown.stage(f"reading [link=https://evil.example]x[/link]{ESC}[2J.log"):
            shown.say(f"kdiag: note {ESC}]8;;https://evil.example{ESC}\\y")
    drawn = stream.getvalue()
    assert "evil.example" in drawn and "\x1b]8;" not in drawn and "\x1b[2J" not in drawn, drawn
    assert "[link=https://evil.example]x[/link]\\x1b[2J.log" in drawn, drawn


def test_bundle_verify_shows_names_as_data(tmp_path):
    """A member's name that is not UTF-8 was shown as \\udcff (Python's own
    escape), and a bundle's file name raw."""
    items = bm.real_members() + [(bm.member("raw/strace/caf\udce9\nVERDICT: ok"), b"x")]
    path = tmp_path / f"b{ESC}[2J\n.tar.gz"
    bm.write(items, path)
    rc, out, _ = run("bundle", "verify", path)
    text = out.getvalue()
    assert rc == ExitStatus.ERROR and text.splitlines() == [
        f"{tmp_path}/b\\x1b[2J\\n.tar.gz: TAMPERED",
        "  raw/strace/caf\\xe9\\nVERDICT: ok: not listed in the manifest"], text


# --- 4. names that are not UTF-8, in report and compare -------------------------------------

def test_report_of_a_bundle_with_a_name_that_is_not_utf8_is_written_whole(spark, tmp_path, monkeypatch):
    """main: UnicodeEncodeError, and an empty page left behind."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    bundle = forged_bundle(tmp_path / "b.tar.gz", member="raw/rdkafka_log/caf\udce9-\udcff.log")
    page = tmp_path / "page.html"
    rc, _, err = run("report", bundle, "-o", page)
    assert rc == ExitStatus.OK, err
    html = page.read_text(encoding="utf-8")
    assert "caf\\xe9-\\xff.log" in html and html.rstrip().endswith("</html>")


def test_compare_of_a_file_named_in_no_utf8_in_a_strict_locale(tmp_path, monkeypatch):
    """main: the text's write raised UnicodeEncodeError in a strict UTF-8
    locale; -o left an empty page. The names are the files'; what the
    analysis finds does not matter here."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr("kdiag.analysis.pipeline.analyse", lambda *a, **k: (_judged(), None))
    before = tmp_path / os.fsdecode(b"run-\xff\x1b[2J.tar.gz")
    shutil.copy(bm.REAL, before)
    page = tmp_path / "cmp.html"
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    rc, _, err = run("compare", before, bm.REAL, "-o", page, stdout=stdout)
    assert rc == ExitStatus.OK, err
    stdout.flush()
    text = stdout.buffer.getvalue().decode()
    assert text.splitlines()[0] == "kdiag compare: run-\\xff\\x1b[2J.tar.gz -> nagle_on.tar.gz", text
    assert_data(text)
    assert "run-\\xff" in page.read_text(encoding="utf-8")


def test_a_page_that_cannot_be_written_leaves_the_old_one(tmp_path, monkeypatch):
    from kdiag.commands.report import write_page
    from kdiag.errors import KdiagError

    page = tmp_path / "page.html"
    page.write_text("the old page")
    monkeypatch.setattr("os.replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(KdiagError, match="No space left on device"):
        write_page(page, "<html>new</html>")
    assert page.read_text() == "the old page" and os.listdir(tmp_path) == ["page.html"]


# --- 5. odd URIs ------------------------------------------------------------------------------

@pytest.mark.parametrize("uri, why", [
    ("file:///P%00x", "a NUL byte (%00)"),
    ("file:///a%zz.log", "a % that starts no %XX escape"),
    ("file:///a%2.log", "a % that starts no %XX escape"),
    ("file:///tmp/x.log?y#z", "no query or fragment"),
    ("file:///tmp/x.log#", "no query or fragment"),
    ("gopher://h/x", "not on this machine (gopher://)"),
    ("file://elsewhere/x", "not on this machine (host elsewhere)"),
])
def test_an_odd_uri_is_refused_in_one_line(uri, why, capsys):
    """main: file:///P%00x gave a ValueError traceback; %zz and a query
    were read as another file's name."""
    for argv in (["replay", uri], ["bundle", "verify", uri], ["parse", uri, "-o", "/nonexistent"]):
        rc, _, err = run(*argv)
        said = [ln for ln in (err + capsys.readouterr().err).splitlines() if "error" in ln]
        assert rc == ExitStatus.USAGE and len(said) == 1 and why in said[0] and "Traceback" not in said[0], said


def test_a_file_uri_names_a_file_whose_name_is_not_utf8(tmp_path):
    """main: %FF was read as U+FFFD, another file's name."""
    log = ROOT / "fixtures" / "captures" / "nagle_on" / "rdkafka.log"
    name = os.fsencode(tmp_path) + b"/r\xff.log"
    shutil.copy(log, name)
    rc, out, err = run("parse", f"file://{tmp_path}/r%FF.log", "-o", tmp_path / "t")
    assert rc == ExitStatus.OK, err
    assert out.getvalue().splitlines()[0].startswith(f"{tmp_path}/r\\xff.log: rdkafka_log"), out.getvalue()
