"""strace excerpts as users paste them: no pid column, any timestamp style or
none, no -T, no -y, buffers elided, lines cut at either end, markdown
around them; and an excerpt beside a librdkafka log of another run.

The lines below are from fixtures/excerpts/strace_* (a real Nagle TLS lab
run, librdkafka's broker thread traced with ``strace -p TID``; see the
CASE files), some rewritten the way a paste changes them.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from kdiag.ingest.detect import detect
from kdiag.parsers.strace import looks_like, parse_lines
from test_parsers_strace import feed_in_pieces

EXCERPTS = FIXTURES / "excerpts"

# librdkafka's broker thread, strace -ttt -p TID, buffers elided: one
# request's last TLS record (26 bytes on fd 10), the ~43 ms wait, the response.
SEED = (EXCERPTS / "strace_seed_shape_tcptraceroute" / "strace.txt").read_text().splitlines()[:8]


def rows(lines):
    t, c = parse_lines(lines)
    return t.to_pylist(), c


def test_an_eight_line_excerpt_without_pid_or_T_is_strace():
    assert looks_like(SEED) == 1.0
    _, c = rows(SEED)
    assert (c.parsed, dict(c.skipped)) == (8, {})


def test_markdown_quotes_fences_and_crlf_are_taken_off():
    pasted = ["```text\r"] + [f"> {line}\r" for line in SEED] + ["```\r"]
    got, c = rows(pasted)
    plain, _ = rows(SEED)
    assert [{**r, "line_no": r["line_no"] - 1} for r in got] == plain
    assert c.skipped == {"markup": 2} and c.parsed == 8
    assert looks_like(pasted) == 1.0
    quoted_twice = ["> > " + line for line in SEED]
    assert rows(quoted_twice)[0] == plain


@pytest.mark.parametrize("cut", ["29.676318 read(10, ..., 5) = 5", "ad(10, ..., 5) = 5"])
def test_a_first_line_cut_inside_its_head_is_counted_and_sets_no_clock(cut):
    from kdiag.parsers.strace import StraceParser

    lines = [cut, *SEED]
    got, c = rows(lines)
    assert c.skipped == {"cut_at_start": 1} and c.parsed == 8
    assert [r["line_no"] for r in got] == list(range(2, 10))
    assert all(r["ts_us"] > 10**15 for r in got)
    p = StraceParser()
    p.feed(lines, 1)
    p.finish()
    assert p.clock == "epoch"
    # However the lines are fed.
    t, c2 = feed_in_pieces(lines, [1])
    assert t.to_pylist() == got and c2.skipped == c.skipped


def test_a_last_line_cut_short_is_counted_never_raised():
    got, c = rows([*SEED, SEED[1][:70]])
    assert c.skipped == {"truncated": 1} and len(got) == 8


def test_unfinished_and_resumed_without_T_give_the_call_its_duration():
    lines = [
        "1795773046.071423 write(12, ..., 30) = 30",
        "1795773046.072581 poll([{fd=12, events=POLLIN}, {fd=7, events=POLLIN}], 2, 538 <unfinished ...>",
        "1795773046.120417 <... poll resumed>) = 1 ([{fd=12, revents=POLLIN}])",
        "1795773046.120485 read(12, ..., 5) = 5",
    ]
    got, _ = rows(lines)
    assert [r["dur_us"] for r in got] == [None, 120417 - 72581, None]
    # -t prints whole seconds: their difference is no duration.
    whole = ["02:24:05 poll([{fd=12, events=POLLIN}], 1, 538 <unfinished ...>",
             "02:24:06 <... poll resumed>) = 1 ([{fd=12, revents=POLLIN}])"]
    assert rows(whole)[0][0]["dur_us"] is None


def test_excerpt_files_are_detected_as_strace():
    for case in sorted(EXCERPTS.glob("strace_*")):
        for f in case.iterdir():
            if f.name.startswith("strace"):
                assert detect(f) == "strace", f


# --- the analysis -------------------------------------------------------------

def tables_of(tmp_path: Path, *paths: Path) -> Path:
    from kdiag.ingest.tables import parse_paths

    out = tmp_path / "tables"
    parse_paths(list(paths), out)
    return out


def split_of(spark, tables: Path) -> list[dict]:
    from kdiag.analysis.per_request import flag_syscalls, requests, split_requests
    from kdiag.analysis.spark_plumbing import read_table

    reqs = requests(spark, read_table(spark, tables, "log_writes"))
    return [r.asDict() for r in split_requests(spark, reqs, flag_syscalls(read_table(spark, tables, "syscalls")))
            .orderBy("send_line").collect()]


def exchanges_of(spark, tables: Path) -> list[dict]:
    from kdiag.analysis.per_request import exchanges, prepare_syscalls
    from kdiag.analysis.spark_plumbing import read_table

    return [r.asDict() for r in exchanges(prepare_syscalls(read_table(spark, tables, "syscalls")))
            .orderBy("send_line").collect()]


def test_a_request_cut_by_the_excerpt_left_in_more_writes_than_seen(spark, tmp_path):
    """The excerpt begins at the request's last TLS record (26 bytes); its
    Sent line says 2164 bytes: at least one write more, 2138 bytes unseen."""
    got = split_of(spark, tables_of(tmp_path, EXCERPTS / "strace_cut_inside_request" / "strace.txt"))
    first = got[0]
    assert (first["n_writes"], first["n_writes_lower_bound"], first["unseen_bytes"]) == (2, True, 2138)
    assert first["last_write_bytes"] == 26 and 30 < first["wait_ms"] < 70
    # A request whose writes are all seen is no lower bound.
    whole = [r for r in got if r["written_bytes"] and r["written_bytes"] >= r["req_bytes"]]
    assert whole and all(r["n_writes"] == 3 and not r["n_writes_lower_bound"] for r in whole)


def test_a_burst_smaller_than_any_produce_request_at_the_start_is_a_tail(spark, tmp_path):
    f = tmp_path / "seed.txt"
    f.write_text("\n".join(SEED) + "\n")
    (ex,) = exchanges_of(spark, tables_of(tmp_path, f))
    assert (ex["n_writes"], ex["n_writes_lower_bound"], ex["last_write_bytes"], ex["fd"]) == (2, True, 26, 10)
    # Without -T the write lasted at most until the poll began.
    poll_us, read_us = (int(SEED[i].split()[0].replace(".", "")) for i in (1, 2))
    assert ex["wait_ms"] == pytest.approx((read_us - poll_us) / 1000.0)


def test_without_y_a_socket_is_an_fd_a_wait_names(spark, tmp_path):
    """A write to a file (fd 5, never polled) and a read of it are no
    exchange; fd 10, which poll() names, is."""
    f = tmp_path / "mixed.txt"
    lines = [*SEED[:2], "1795622329.650000 write(5, ..., 60) = 60", *SEED[2:],
             "1795622329.690000 read(5, ..., 4096) = 60"]
    f.write_text("\n".join(lines) + "\n")
    got = exchanges_of(spark, tables_of(tmp_path, f))
    assert [e["fd"] for e in got] == [10]


def replay(spark, tmp_path, case: str) -> dict:
    from kdiag.analysis.pipeline import analyse

    paths = sorted(p for p in (EXCERPTS / case).iterdir() if p.name != "CASE")
    findings, _ = analyse(paths, tmp_path / "t", {}, spark=spark)
    return findings


def test_seed_shape_excerpt_is_nagle_beside_a_fast_path(spark, tmp_path):
    f = replay(spark, tmp_path, "strace_seed_shape_tcptraceroute")
    assert f["verdict"] == "nagle_delayed_ack", (f["verdict"], f["unknowns"])
    assert f["summary"]["path_rtt_ms"] is not None and f["summary"]["path_rtt_ms"] < 1.0
    assert any("without -T" in u and "upper bound" in u for u in f["unknowns"])


def test_no_timestamps_shows_order_not_time(spark, tmp_path):
    f = replay(spark, tmp_path, "strace_no_timestamps")
    assert any("no timestamps" in u and "order, not their times" in u for u in f["unknowns"])
    assert f["summary"]["split_ms"]["wait_response"] is None      # no time invented
    assert f["verdict"] != "healthy"


def test_an_excerpt_and_a_log_from_another_run_are_both_kept(spark, tmp_path):
    f = replay(spark, tmp_path, "strace_plus_log_other_run")
    assert f["verdict"] == "nagle_delayed_ack", (f["verdict"], f["unknowns"])
    assert any("different runs" in u and "do not overlap" in u for u in f["unknowns"])
    assert not any(u.startswith("no librdkafka Sent lines inside an strace capture") for u in f["unknowns"])
    # The requests are the log's: its correlation ids and broker.
    ex = f["findings"][0]["example"]
    assert ex["corr_id"] is not None and ex["broker"].startswith("ssl://")


def test_a_log_of_another_run_beside_an_strace_with_its_own_sent_lines_is_named(spark, tmp_path):
    from kdiag.analysis.pipeline import analyse

    strace = EXCERPTS / "strace_cut_inside_request" / "strace.txt"
    other = EXCERPTS / "strace_plus_log_other_run" / "rdkafka.log"
    f, _ = analyse([strace, other], tmp_path / "t", {}, spark=spark)
    assert f["verdict"] == "nagle_delayed_ack"
    assert any("different runs" in u and "left out" in u for u in f["unknowns"])
    assert f["findings"][0]["example"]["corr_id"] in (17, 18)    # the strace's own requests


@pytest.mark.parametrize("rows", ["in the plan", "scanned"])
def test_a_log_is_of_another_run_only_when_none_of_its_sent_lines_was_seen(spark, monkeypatch, rows):
    """The log's first Sent lines are looked for first; when none of them
    was seen, all of them are: one seen past the first few still makes the
    log this run's. Rows in the plan are compared in the driver, others
    joined by Spark: the same answers."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    from kdiag.analysis import typical_exchange
    from kdiag.analysis.spark_plumbing import frame, in_driver

    def made(data, schema):
        # An Arrow table becomes rows in the plan, as read_table reads a small one.
        t = pa.Table.from_pylist([dict(zip(schema.names, r)) for r in data], schema)
        df = frame(spark, t, from_arrow_schema(schema))
        return df if rows == "in the plan" else df.repartition(1)

    monkeypatch.setattr(typical_exchange, "FEW_SENT", 5)
    fields = [("event", pa.string()), ("broker", pa.string()), ("corr_id", pa.int32())]
    log_t = pa.schema([*fields, ("ts_us", pa.int64())])
    lw_t = pa.schema([*fields, ("log_ts_us", pa.int64())])
    sent = [("send", "b1", i, 1_000 + i) for i in range(20)]
    log = made(sent, log_t)
    assert in_driver(log) == (rows == "in the plan")

    def named(seen_ids, log=log):
        lw = made([("send", "b1", i, 1_000 + i) for i in seen_ids] + [("recv", "b1", 0, 1_000)], lw_t)
        return typical_exchange.log_of_another_run(log, lw, "strace")

    # A key with a null is no match, in the driver as in a join.
    null_key = [("send", "b1", None, 1_000)]
    assert "different runs" in typical_exchange.log_of_another_run(made(null_key, log_t), made(null_key, lw_t),
                                                                   "strace")[0]

    assert named([17]) == []               # past the first five: found by the whole join
    assert named([2]) == []                # among the first five
    assert named([]) and "different runs" in named([])[0]
    assert named([30]) and "different runs" in named([30])[0]   # an id the log lacks
    # Fewer Sent lines than the first few: the broadcast look is the whole.
    monkeypatch.setattr(typical_exchange, "FEW_SENT", 50)
    assert named([17]) == [] and "different runs" in named([30])[0]
