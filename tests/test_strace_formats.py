"""Every way of writing strace output that kdiag replay reads, each from a
real capture of the same Nagle-stalled librdkafka producer
(fixtures/strace/make.py; the commands in NAME.txt.cmd and ff.cmd):

  nagle_t       -f -t -T -yy -s 256      whole-second time of day
  nagle_r       -f -r -T -yy -s 256      each line's delta from the previous
  nagle_tt_y    -f -tt -T -y -s 256      -y: sockets as socket:[inode]
  nagle_stderr  -f -ttt -T -yy -s 256    no -o: [pid N] prefixes, and the
                                         producer's own stderr inside strace's
  ff/strace.*   -ff -ttt -T -yy -s 256   one file per thread, no pid on lines

Parse counts, pids, clocks, pairing and signals are read from the files
themselves, so a re-capture keeps these tests meaningful.
"""
from __future__ import annotations

import io
import json
import random
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import FIXTURES
from test_parsers_strace import feed_in_pieces

from kdiag.analysis.per_request import SOCKET_INFO
from kdiag.cli import Environment, main
from kdiag.ingest.detect import detect
from kdiag.ingest.tables import parse_paths
from kdiag.parsers.strace import StraceParser

STRACE = FIXTURES / "strace"
FF = sorted((STRACE / "ff").glob("strace.*"))
SINGLE = ["nagle_t", "nagle_r", "nagle_tt_y", "nagle_stderr"]
# name -> the parser's clock
CLOCKS = {"nagle_t": "time_of_day", "nagle_r": "relative", "nagle_tt_y": "time_of_day",
          "nagle_stderr": "epoch", "ff": "epoch"}
MESSAGES = 20
PID = re.compile(r"^(?:\[pid +(\d+)\] |(\d+) +)")


def path_of(name: str) -> Path:
    return STRACE / f"{name}.txt"


def all_files() -> list[Path]:
    return [path_of(n) for n in SINGLE] + FF


_parsed: dict[Path, tuple] = {}


def parsed(path: Path):
    if path not in _parsed:
        lines = path.read_text(errors="replace").splitlines()
        p = StraceParser()
        t = p.feed(pa.array(lines, pa.string()), 1)
        t = pa.concat_tables([t, p.finish()])
        _parsed[path] = (t.take(pc.sort_indices(t["line_no"])), p.counts, p.clock, lines)
    return _parsed[path]


# --- The fixtures --------------------------------------------------------------


def test_fixtures_are_real_small_and_documented():
    for name in SINGLE:
        assert path_of(name).stat().st_size < 300_000
        cmd = (STRACE / f"{name}.txt.cmd").read_text().splitlines()
        assert "strace " in cmd[0] and "nagle_tls_timer.py" in cmd[0]
        assert any(ln.startswith("trimmed:") for ln in cmd) and any(ln.startswith("shows:") for ln in cmd)
    cmd = (STRACE / "ff.cmd").read_text()
    assert "strace -ff " in cmd and "-o ff/strace" in cmd
    assert len(FF) >= 4 and all(f.stat().st_size < 200_000 for f in FF)
    assert all(re.fullmatch(r"strace\.\d+", f.name) for f in FF)


@pytest.mark.parametrize("path", all_files(), ids=lambda p: p.name)
def test_detected_by_content(path, tmp_path):
    assert detect(path) == "strace"
    renamed = tmp_path / "capture.log"
    shutil.copy(path, renamed)
    assert detect(renamed) == "strace"


# --- Parsing -------------------------------------------------------------------


@pytest.mark.parametrize("path", all_files(), ids=lambda p: p.name)
def test_every_line_is_counted(path):
    t, c, clock, lines = parsed(path)
    assert c.lines == len(lines) == c.parsed + c.skipped_total
    assert clock == CLOCKS["ff" if path in FF else path.stem]
    # the capture was cut where only the main thread ran: nothing is left open
    assert set(c.skipped) <= {"program_output", "strace_message"}
    resumed = sum("resumed>" in ln for ln in lines)
    unfinished = sum(ln.endswith("<unfinished ...>") for ln in lines)
    kinds = Counter(t["kind"].to_pylist())
    assert kinds["signal"] == sum(bool(re.search(r"--- SIG\w+ \{", ln)) for ln in lines)
    assert kinds["exit"] == sum(ln.endswith("+++ exited with 0 +++") for ln in lines)
    if path not in FF:
        assert kinds["signal"] >= 5 and kinds["exit"] == 5  # SIGALRMs; main thread and four of librdkafka's
        assert resumed >= 300
    else:
        assert resumed == unfinished == 0  # no other thread shares a file
    if path.stem != "nagle_stderr":
        assert t.num_rows == len(lines) - resumed - c.skipped_total
        assert sum(t["unfinished"].to_pylist()) == 0


@pytest.mark.parametrize("name", ["nagle_t", "nagle_r", "nagle_tt_y"])
def test_unfinished_calls_resume_across_threads(name):
    """Each '<unfinished ...>' whose next line is another thread's pairs with
    its own thread's '<... resumed>' line further down."""
    t, _, _, lines = parsed(path_of(name))
    rows = {r["line_no"]: r for r in t.to_pylist()}
    crossed = 0
    for i, ln in enumerate(lines[:-1]):
        if not ln.endswith("<unfinished ...>"):
            continue
        pid = int(PID.match(ln).group(2))
        nxt = PID.match(lines[i + 1])
        if nxt and int(nxt.group(2)) != pid:
            end = next(j for j in range(i + 1, len(lines))
                       if int(PID.match(lines[j]).group(2)) == pid)
            assert "resumed>" in lines[end]
            r = rows[i + 1]
            assert r["pid"] == pid and not r["unfinished"]
            assert r["dur_us"] is not None or lines[end].endswith("= ?")  # what the resumed line gave
            assert end + 1 not in rows
            crossed += 1
    assert crossed >= 100


@pytest.mark.parametrize("path", all_files(), ids=lambda p: p.name)
def test_pids(path):
    t, _, _, lines = parsed(path)
    pids = t["pid"]
    if path in FF:
        assert pids.null_count == t.num_rows  # the pid is in the file name only
        return
    on_lines = {int(m.group(1) or m.group(2)) for m in map(PID.match, lines) if m}
    assert set(pids.drop_null().to_pylist()) == on_lines and len(on_lines) == 5
    if path.stem == "nagle_stderr":
        # on stderr strace prints "[pid N] " only while more than one process is traced
        bare = [r["line_no"] for r in t.to_pylist() if r["pid"] is None]
        assert 0 < len(bare) < 30 and not any(lines[i - 1].startswith("[pid ") for i in bare)
    else:
        assert pids.null_count == 0


@pytest.mark.parametrize("path", all_files(), ids=lambda p: p.name)
def test_timestamps_run_forward(path):
    t, _, _, _ = parsed(path)
    ts = t["ts_us"].to_numpy(zero_copy_only=False)
    assert not np.isnan(ts).any()
    # rows are in the order their calls began, and strace stamps the start
    assert (np.diff(ts) >= 0).all()
    if path.stem == "nagle_t":
        assert (ts % 1_000_000 == 0).all()
    else:
        assert (ts % 1_000_000 != 0).mean() > 0.99
    dur = t["dur_us"].drop_null().to_numpy()
    assert len(dur) > 0.9 * t.num_rows * (0 if path.stem == "nagle_t" else 0.9)


def test_relative_times_are_summed():
    """-r: ts_us is the running sum of the printed deltas, resumed lines'
    included, so it agrees with librdkafka's own clock in every log line to
    librdkafka's millisecond."""
    t, _, _, lines = parsed(path_of("nagle_r"))
    deltas = [float(m.group(1)) for m in (re.match(r"^\d+ +(\d+\.\d+) ", ln) for ln in lines) if m]
    assert abs(t["ts_us"][-1].as_py() - round(sum(deltas) * 1e6)) < len(deltas)
    out = parse_paths([path_of("nagle_r")], Path(_tmp()) / "tables")
    lw = out.read("log_writes")
    gap = pc.subtract(lw["log_ts_us"], lw["ts_us"]).to_numpy()
    assert len(gap) > 100 and np.abs(gap).max() < 1_500
    assert any("strace -r times" in n and "dated" in n for n in out.notes)


def _tmp() -> str:
    import tempfile

    d = tempfile.mkdtemp(prefix="kdiag-formats-")
    _TMPS.append(d)
    return d


_TMPS: list[str] = []


@pytest.fixture(autouse=True, scope="module")
def _cleanup():
    yield
    for d in _TMPS:
        shutil.rmtree(d, ignore_errors=True)


def test_producer_output_inside_strace_lines():
    """No -o: the producer's stderr lines land inside strace's own lines
    (after the write's arguments, or another thread's), and come out again."""
    t, c, _, lines = parsed(path_of("nagle_stderr"))
    spliced = sum(bool(re.search(r'", \d+%7\|', ln)) for ln in lines)
    assert spliced >= 100
    assert c.skipped.get("program_output", 0) == sum(ln.startswith("%7|") for ln in lines)
    writes = t.filter(pc.and_(pc.equal(t["syscall"], "write"), pc.equal(t["fd"], 2)))
    assert writes.num_rows == sum(bool(re.search(r"\] \d+\.\d+ write\(2<", ln)) for ln in lines)
    assert all(d.startswith("%7|") for d in writes["data"].to_pylist())
    sent = [d for d in writes["data"].to_pylist() if "Sent ProduceRequest" in d]
    assert len(sent) == MESSAGES
    # the end of the call came back to it: return value and -T duration
    assert writes["ret"].null_count == 0 and writes["dur_us"].null_count == 0
    whole = [(r["ret"], r["data"]) for r in writes.to_pylist() if r["data"].endswith("\n")]  # not cut by -s
    assert len(whole) > 150 and all(ret == len(d.encode()) for ret, d in whole)
    # and the calls whose line the text landed in are whole again
    other = pc.invert(pc.fill_null(pc.equal(t["fd"], 2), False))
    assert t.filter(pc.and_(pc.match_substring(t["args"], "%7|"), other)).num_rows == 0


@pytest.mark.parametrize("name", ["nagle_stderr", "nagle_r"])
def test_any_chunking_gives_the_same_rows(name):
    whole, wc, _, lines = parsed(path_of(name))
    rng = random.Random(name)
    for _ in range(4):
        cuts = sorted(rng.sample(range(1, len(lines)), 12))
        t, counts = feed_in_pieces(lines, cuts)
        assert t.to_pylist() == whole.to_pylist(), cuts
        assert (counts.parsed, counts.skipped) == (wc.parsed, wc.skipped)


# --- Tables: what the file name and the librdkafka lines add ------------------------


def test_per_thread_files_take_the_pid_from_the_name(tmp_path):
    out = parse_paths(FF, tmp_path / "t")
    sc = out.read("syscalls")
    assert sc["pid"].null_count == 0
    assert set(sc["pid"].to_pylist()) == {int(f.suffix[1:]) for f in FF}
    # line numbers run on, so a librdkafka line names one syscall row
    assert len(set(sc["line_no"].to_pylist())) == sc.num_rows
    assert any("line numbers run on" in n for n in out.notes)
    lw = out.read("log_writes")
    sent = lw.filter(pc.and_(pc.equal(lw["event"], "send"), pc.equal(lw["request"], "Produce")))
    assert sent.num_rows >= MESSAGES and sent["pid"].null_count == 0
    assert len(set(sent["pid"].to_pylist())) == 1  # the broker thread
    # the name supplies only the pid: without a ".PID" there is none
    plain = tmp_path / "broker-thread.txt"
    shutil.copy(FF[-1], plain)
    assert parse_paths([plain], tmp_path / "u").read("syscalls")["pid"].null_count > 0


def test_whole_seconds_are_estimated_and_said_so(tmp_path):
    out = parse_paths([path_of("nagle_t")], tmp_path / "t")
    assert any("whole seconds" in n and "estimate" in n for n in out.notes)
    sc = out.read("syscalls")
    ts = sc["ts_us"].to_numpy()
    assert (ts % 1_000_000 != 0).mean() > 0.5 and (np.diff(ts) >= 0).all()
    # each call still in the second strace printed for it
    raw = parsed(path_of("nagle_t"))[0]["ts_us"].to_numpy()
    day = (ts[0] - raw[0]) // 86_400_000_000 * 86_400_000_000
    assert ((ts - day) // 1_000_000 == raw // 1_000_000).all()


# --- Replay to a verdict ------------------------------------------------------------


def replay(*paths):
    out, err = io.StringIO(), io.StringIO()
    rc = main(["replay", "--json", *map(str, paths)], Environment(stdout=out, stderr=err))
    return rc, json.loads(out.getvalue()) if out.getvalue() else None


_Y_SOCKETS = re.match(SOCKET_INFO, "socket:[1033403]") is not None


@pytest.mark.parametrize("name, note", [
    ("nagle_t", "whole seconds"),
    ("nagle_r", "strace -r times"),
    ("ff", "line numbers run on"),
    ("nagle_stderr", "program_output"),
    pytest.param("nagle_tt_y", "time of day only", marks=pytest.mark.xfail(
        not _Y_SOCKETS, strict=True,
        reason="-y annotates a socket as socket:[inode]; kdiag.analysis.per_request.SOCKET_INFO does not take it for one")),
])
def test_replay_names_nagle(spark, name, note):
    paths = [*FF, STRACE / "ff" / "rdkafka.log"] if name == "ff" else [path_of(name)]
    rc, f = replay(*paths)
    assert rc == 0 and f["verdict"] == "nagle_delayed_ack", json.dumps(f["findings"], indent=1)
    top = f["findings"][0]
    assert top["cause"] == "nagle_delayed_ack" and top["share"] >= 0.7
    assert f["summary"]["source"] == "strace" and f["summary"]["requests"] == MESSAGES
    assert 38 < f["summary"]["rtt_p50_ms"] < 60
    assert 38 < f["summary"]["split_ms"]["wait_response"] < 60
    assert any("TCP_NODELAY was not set" in e for e in top["evidence"])
    assert any(note in n for n in f["input_notes"]), f["input_notes"]


def test_time_of_day_dated_as_written_same_as_dated_after(tmp_path, monkeypatch):
    """-tt rows get their day as they are written (the first chunk's
    librdkafka lines say it), and no second pass; a guess that the whole
    file's lines overrule (another day) is put right after: the tables are
    the same either way, and the same as dating every row after the parse."""
    from kdiag.ingest import strace_clock

    def tables(guess):
        monkeypatch.setattr(strace_clock, "first_day", guess)
        out = parse_paths([path_of("nagle_tt_y")], tmp_path / str(len(list(tmp_path.iterdir()))))
        return {name: out.read(name) for name in ("syscalls", "log_writes")}, out.notes

    right = strace_clock.first_day
    got, notes = tables(right)
    assert got["syscalls"]["ts_us"].to_numpy().min() > 1_700_000_000 * 10**6
    assert any("dated from librdkafka" in n for n in notes)
    for guess in (lambda t: 0, lambda t: right(t) + strace_clock.DAY_US, lambda t: right(t) - 3 * strace_clock.DAY_US):
        other, other_notes = tables(guess)
        assert other_notes == notes
        for name in got:
            assert other[name].equals(got[name]), name


def test_relative_shift_taken_as_written_within_slack(tmp_path, monkeypatch):
    """-r rows are shifted onto librdkafka's clock as they are written, by
    the first chunk's lines; the whole file's shift overrules a guess
    further off than RELATIVE_SLACK_US (the tables are then those of no
    guess at all), else the times differ from it by at most that."""
    from kdiag.ingest import strace_clock

    def tables(guess):
        monkeypatch.setattr(strace_clock, "first_shift", guess)
        out = parse_paths([path_of("nagle_r")], tmp_path / str(len(list(tmp_path.iterdir()))))
        return {name: out.read(name) for name in ("syscalls", "log_writes")}, out.notes

    right = strace_clock.first_shift
    after, notes = tables(lambda t: 0)
    for guess in (lambda t: right(t) + 10_000, lambda t: right(t) - 2 * strace_clock.RELATIVE_SLACK_US):
        other, other_notes = tables(guess)
        assert other_notes == notes
        for name in after:
            assert other[name].equals(after[name]), name
    ahead, ahead_notes = tables(right)
    assert ahead_notes == notes
    for name in after:
        gap = pc.subtract(ahead[name]["ts_us"], after[name]["ts_us"]).to_numpy()
        assert np.abs(gap).max() <= strace_clock.RELATIVE_SLACK_US and len(set(gap)) == 1, name
        assert ahead[name].drop_columns(["ts_us"]).equals(after[name].drop_columns(["ts_us"])), name
