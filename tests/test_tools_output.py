"""Tool output users paste: strace's summary tables (fixtures made here by
real runs, fixtures/tools/README.md says how), read into their tables
however a chat mangled them, recognised by content alone, without taking
another format's files."""
from __future__ import annotations

import random
import time
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import FIXTURES
from kdiag.ingest.detect import detect
from kdiag.parsers import rdkafka_performance, strace_counts, strace_summary
from kdiag.parsers.rdkafka_performance import parse_lines as parse_performance
from kdiag.parsers.strace_counts import parse_counts
from kdiag.parsers.strace_summary import parse_summary

TOOLS = FIXTURES / "tools"
FORMATS = FIXTURES / "formats"
NO_LINE = dict.fromkeys(("pid", "repeats", "ret", "errno", "line", "ts_us"))
OURS = ("strace_summary", "strace_counts", "rdkafka_performance")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def accounted(counts) -> None:
    assert counts.lines == counts.parsed + counts.skipped_total, counts.to_dict()


def mangled(raw: list[str]) -> dict[str, list[str]]:
    return {
        "quote": ["> " + s for s in raw],
        "crlf": [s + "\r" for s in raw],
        "fence": ["```", *raw, "```"],
        "trailing": [s + "   " for s in raw],
        "prompt": ["$ strace -c -f -o out python3 producer.py", *raw],
    }


def _content(t: pa.Table, drop=("line_no",)) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in drop} for r in t.to_pylist()]


# ------------------------------------------------------------ strace -c

def test_strace_c_rows_total_and_blank_errors():
    t, c = parse_summary(lines(FORMATS / "strace_summary.txt"))
    accounted(c)
    assert c.parsed == c.lines == 54
    rows = t.to_pylist()
    assert len(rows) == 51
    assert rows[0] == {"line_no": 3, "summary": 1, "syscall": "futex", "total": False, "calls": 249, "errors": 24,
                       "seconds": 0.094542, "usecs_per_call": 379, "time_pct": 59.74, "shortest_s": None,
                       "longest_s": None, "wall": None, **NO_LINE}
    # A blank errors cell is no errors, not a missing column.
    assert rows[1]["syscall"] == "clock_nanosleep" and rows[1]["errors"] == 0 and rows[1]["calls"] == 200
    assert rows[4]["syscall"] == "read" and (rows[4]["calls"], rows[4]["errors"]) == (1127, 326)
    assert rows[-1] == {"line_no": 54, "summary": 1, "syscall": None, "total": True, "calls": 5136, "errors": 605,
                        "seconds": 0.158243, "usecs_per_call": 30, "time_pct": 100.0, "shortest_s": None,
                        "longest_s": None, "wall": None, **NO_LINE}
    body = [r for r in rows if not r["total"]]
    assert sum(r["calls"] for r in body) == 5136 and sum(r["errors"] for r in body) == 605


def test_strace_cw_is_wall_only_when_the_command_line_says_so():
    raw = lines(TOOLS / "strace_cw.txt")
    t, _ = parse_summary(raw)
    assert set(t["wall"].to_pylist()) == {None}
    assert t.to_pylist()[0]["syscall"] == "futex" and t.to_pylist()[0]["seconds"] == 2.187168
    for cmd, wall in (("$ strace -c -w -f -o o python3 p.py", True), ("# strace -cfw python3 p.py", True),
                      ("$ strace --summary-wall-clock -c python3 p.py", True), ("$ strace -c -f python3 p.py", False)):
        t, _ = parse_summary([cmd, *raw])
        assert set(t["wall"].to_pylist()) == {wall}, cmd


def test_strace_U_columns_in_any_order_with_blank_cells():
    raw = ["syscall              calls    errors  longest",
           "---------------- --------- --------- --------",
           "execve                   1           0.000206",
           "openat                  12         3 0.000031",
           "---------------- --------- --------- --------",
           "total                   13         3 0.000206"]
    t, c = parse_summary(raw)
    accounted(c)
    assert [(r["syscall"], r["calls"], r["errors"], r["longest_s"], r["total"]) for r in t.to_pylist()] == [
        ("execve", 1, 0, 0.000206, False), ("openat", 12, 3, 0.000031, False), (None, 13, 3, 0.000206, True)]
    # strace 4's total row leaves usecs/call blank.
    old = ["% time     seconds  usecs/call     calls    errors syscall",
           "------ ----------- ----------- --------- --------- ----------------",
           " 90.00    0.000900          90        10         1 sendmsg",
           "------ ----------- ----------- --------- --------- ----------------",
           "100.00    0.001000                    12         1 total"]
    t, c = parse_summary(old)
    assert t.to_pylist()[-1]["usecs_per_call"] is None and t.to_pylist()[-1]["calls"] == 12
    assert c.parsed == 5


def test_two_tables_in_one_paste_are_numbered():
    raw = lines(FORMATS / "strace_summary.txt")
    t, _ = parse_summary([*raw, "", "then with linger.ms=0:", *lines(TOOLS / "strace_cw.txt")])
    assert t["summary"].unique().to_pylist() == [1, 2]
    assert sum(t["total"].to_pylist()) == 2


@pytest.mark.parametrize("name", [FORMATS / "strace_summary.txt", TOOLS / "strace_cw.txt"], ids=lambda p: p.name)
def test_chat_and_markdown_mangling_reads_the_same(name, tmp_path):
    raw = lines(name)
    want, _ = parse_summary(raw)
    for how, text in mangled(raw).items():
        got, c = parse_summary(text)
        accounted(c)
        drop = ("line_no", "wall") if how == "prompt" else ("line_no",)
        assert _content(got, drop) == _content(want, drop), how
        blind = tmp_path / f"{how}.bin"
        blind.write_text("\n".join(text) + "\n")
        assert detect(blind) == "strace_summary", how


def test_strace_C_table_after_the_calls_is_counted_by_name():
    """-C prints the table after the calls: the file is strace output, the
    calls its rows, the table's lines skipped as summary_table."""
    from kdiag.parsers import strace

    calls = lines(FIXTURES / "captures" / "nagle_on" / "strace.txt")
    alone, ca = strace.parse_lines(calls)
    both, cb = strace.parse_lines([*calls, *lines(FORMATS / "strace_summary.txt")])
    assert both.equals(alone)
    assert cb.skipped == {**ca.skipped, "summary_table": 54} and cb.parsed == ca.parsed
    assert strace.looks_like(calls[:50]) == 1.0


def test_program_output_around_the_table_is_counted_not_read():
    raw = ["produced 200", "strace: Process 1234 detached", *lines(FORMATS / "strace_summary.txt")]
    t, c = parse_summary(raw)
    accounted(c)
    assert len(t) == 51 and c.skipped == {"not_summary": 1, "strace_message": 1}


# ------------------------------------------------------------ uniq -c

def test_counted_strace_lines_one_row_each_calls_counted_once():
    t, c = parse_counts(lines(FORMATS / "strace_counts.txt"))
    accounted(c)
    assert c.parsed == c.lines == 60 and len(t) == 60
    rows = t.to_pylist()
    assert rows[0] == {"line_no": 1, "ts_us": None, "summary": 1, "syscall": "clock_nanosleep", "total": False,
                       "calls": 196,
                       "errors": 0, "seconds": None, "usecs_per_call": None, "time_pct": None, "shortest_s": None,
                       "longest_s": None, "wall": None, "pid": 20272, "repeats": 196, "ret": 0, "errno": None,
                       "line": "20272 <... clock_nanosleep resumed>NULL) = 0"}
    # This thread's poll halves: the resumed ones hold more repeats, so they count the calls.
    unfinished = rows[3]
    assert (unfinished["syscall"], unfinished["repeats"], unfinished["calls"], unfinished["ret"]) == ("poll", 96, 0, None)
    failed = rows[13]
    assert (failed["syscall"], failed["calls"], failed["errors"], failed["ret"], failed["errno"]) == (
        "futex", 31, 31, -1, "EAGAIN")
    calls: dict = {}
    errors: dict = {}
    for r in rows:
        calls[r["syscall"]] = calls.get(r["syscall"], 0) + r["calls"]
        errors[r["syscall"]] = errors.get(r["syscall"], 0) + r["errors"]
    assert calls == {"clock_nanosleep": 196, "write": 212, "poll": 366, "futex": 266}
    assert errors == {"clock_nanosleep": 0, "write": 0, "poll": 0, "futex": 42}
    assert sum(r["repeats"] for r in rows) == sum(int(s.split()[0]) for s in lines(FORMATS / "strace_counts.txt"))


def test_only_unfinished_halves_count_their_calls():
    # A ticket's grep kept the <unfinished ...> halves of a poll loop alone.
    raw = ["   5001 [pid  711] poll([{fd=9, events=POLLIN}], 1, 1 <unfinished ...>",
           "   4990 [pid  712] poll([{fd=10, events=POLLIN}], 1, 1 <unfinished ...>",
           "     20 [pid  712] <... poll resumed>)     = 0 (Timeout)"]
    t, _ = parse_counts(raw)
    assert [(r["pid"], r["calls"], r["repeats"]) for r in t.to_pylist()] == [(711, 5001, 5001), (712, 4990, 4990),
                                                                            (712, 0, 20)]


def test_counted_names_and_lines_without_pid():
    t, c = parse_counts(lines(TOOLS / "strace_counts_names.txt"))
    assert c.parsed == 40
    assert [(r["syscall"], r["calls"], r["errors"], r["line"]) for r in t.to_pylist()[:2]] == [
        ("newfstatat", 942, None, "newfstatat("), ("read", 315, None, "read(")]
    t, _ = parse_counts(lines(TOOLS / "strace_counts_names_f.txt"))
    assert sum(t["calls"].to_pylist()) == 730 + 446 + 330 + 200 + 6 + 5 + 4 + 3 + 2 + 2 + 2 + 2
    t, c = parse_counts(lines(TOOLS / "strace_counts_plain.txt"))
    assert c.parsed == 30 and set(t["pid"].to_pylist()) == {None}
    assert t.to_pylist()[0]["syscall"] == "write" and t.to_pylist()[0]["calls"] == 205


def test_counted_lines_with_timestamps_durations_signals_and_the_command():
    raw = ["$ sort strace.log | uniq -c",
           "     12 [pid  4242] 10:00:00.123456 sendmsg(7, {msg_iov=[{iov_base=\"x\", iov_len=1}]}, 0) = 1 <0.000150>",
           "      3 ? ERESTARTSYS",
           "      2 --- SIGALRM {si_signo=SIGALRM, si_code=SI_KERNEL} ---",
           "      5 connect(7, {sa_family=AF_INET, sin_port=htons(9092)}, 16) = -1 EINPROGRESS (Operation now in progress)",
           "hello"]
    t, c = parse_counts(raw)
    accounted(c)
    assert c.parsed == 3 and c.skipped == {"not_counted": 2, "not_a_call": 1}
    a, b = t.to_pylist()
    assert (a["pid"], a["syscall"], a["calls"], a["ret"]) == (4242, "sendmsg", 12, 1)
    assert a["seconds"] == pytest.approx(12 * 0.000150)
    assert (b["syscall"], b["calls"], b["errors"], b["errno"]) == ("connect", 5, 5, "EINPROGRESS")


@pytest.mark.parametrize("name", [FORMATS / "strace_counts.txt", TOOLS / "strace_counts_names.txt"],
                         ids=lambda p: p.name)
def test_counted_mangled_reads_the_same(name, tmp_path):
    raw = lines(name)
    want, _ = parse_counts(raw)
    for how, text in {**mangled(raw), "prompt": ["$ sort strace.log | uniq -c | sort -rn", *raw]}.items():
        got, c = parse_counts(text)
        accounted(c)
        assert _content(got) == _content(want), how
        blind = tmp_path / f"{how}.bin"
        blind.write_text("\n".join(text) + "\n")
        assert detect(blind) == "strace_counts", how


def test_counted_lines_whose_padding_a_paste_trimmed(tmp_path):
    for path in (FORMATS / "strace_counts.txt", TOOLS / "strace_counts_names.txt"):
        blind = tmp_path / "trimmed.bin"
        blind.write_text("\n".join(s.lstrip() for s in lines(path)) + "\n")
        assert detect(blind) == "strace_counts", path.name
    # Trimmed, a count before a bare call is strace -f's pid: strace's own.
    assert strace_counts.looks_like([s.lstrip() for s in lines(TOOLS / "strace_counts_plain.txt")]) == 0.0


def test_an_strace_file_stays_strace():
    for p in sorted((FIXTURES / "strace").glob("*")) + [FIXTURES / "captures" / "nagle_on" / "strace.txt"]:
        if p.is_file() and p.suffix not in (".cmd", ".md"):
            assert strace_counts.looks_like(lines(p)[:50]) < 0.5, p.name


# ------------------------------------------------------------ rdkafka_performance

def perf(raw: list[str]) -> tuple[list[dict], list[dict], object]:
    tables, c = parse_performance(raw)
    accounted(c)
    return tables["perf_intervals"].to_pylist(), tables["stats"].to_pylist(), c


def _set(row: dict) -> dict:
    return {k: v for k, v in row.items() if v is not None}


def test_performance_table_with_latency_and_a_climbing_rtt():
    rows, stats_rows, c = perf(lines(FORMATS / "rdkafka_performance.txt"))
    assert c.skipped == {"log_line": 1} and c.parsed == 38
    table = [r for r in rows if r["form"] == "table"]
    assert len(table) == 26
    assert _set(table[0]) == {
        "line_no": 5, "ts_us": 1_986_000, "run": 1, "mode": "producer", "form": "table", "elapsed_ms": 1986, "msgs": 8000,
        "bytes": 8192000, "rtt_ms": 123, "delivered": 967, "msgs_per_s": 486, "mb_per_s": 0.5, "dr_err": 0,
        "tx_err": 0, "outq": 7033, "offset": 966, "latency_curr_ms": 294.32, "latency_avg_ms": 297.09,
        "latency_lo_ms": 294.32, "latency_hi_ms": 300.13}
    # The rtt column climbs as the quota holds the responses: one row per interval.
    measured = [(r["elapsed_ms"], r["rtt_ms"]) for r in table if r["rtt_ms"]]
    assert measured == [(1986, 123), (4003, 3476), (5003, 3476), (7017, 6780), (11019, 10058), (14025, 13347),
                        (17042, 16627), (21046, 19943), (24071, 23242)]
    assert [r["outq"] for r in table][::5] == [7033, 5099, 4132, 2198, 1231, 0]
    throttles = [(r["line_no"], r["throttle_ms"], r["broker_id"]) for r in rows if r["form"] == "throttle"]
    assert throttles[:3] == [(3, 3234, 111), (7, 0, 111), (8, 3300, 111)] and len(throttles) == 10
    # The statistics rows: one per producer table row, rtt null where the tool printed 0 (no measurement).
    assert len(stats_rows) == 26
    assert [r["rtt_avg_ms"] for r in stats_rows][:6] == [123.0, None, 3476.0, 3476.0, None, 6780.0]
    first = stats_rows[0]
    assert (first["client"], first["broker"], first["ts_us"], first["line_no"]) == (
        "rdkafka_performance", None, 1_986_000, 5)
    assert all(v is None for k, v in first.items() if k not in ("line_no", "ts_us", "client", "rtt_avg_ms",
                                                                "msg_cnt"))
    assert first.get("msg_cnt", 7033) == 7033   # outq, when the statistics table has msg_cnt


def test_performance_table_without_latency_and_summary_lines():
    rows, stats_rows, c = perf(lines(TOOLS / "rdkafka_performance_u.txt"))
    assert len(rows) == len(stats_rows) == 37 and c.parsed == 39
    assert _set(rows[-1]) == {
        "line_no": 40, "ts_us": 19_040_000, "run": 1, "mode": "producer", "form": "table", "elapsed_ms": 19040, "msgs": 20000,
        "bytes": 20480000, "rtt_ms": 0, "delivered": 20000, "msgs_per_s": 1050, "mb_per_s": 1.08, "dr_err": 0,
        "tx_err": 0, "outq": 0, "offset": 19999}
    rows, stats_rows, c = perf(lines(TOOLS / "rdkafka_performance_summary.txt"))
    assert len(rows) == 40 and c.parsed == 41
    from kdiag.parsers.stats import SCHEMA as STATS

    # Summary lines hold no rtt: statistics rows carry only the queue, where that table has msg_cnt.
    assert [(r["ts_us"], r["msg_cnt"], r["rtt_avg_ms"]) for r in stats_rows] == (
        [(r["ts_us"], r["outq"], None) for r in rows if r.get("outq") is not None] if "msg_cnt" in STATS.names else [])
    assert _set(rows[2]) == {
        "line_no": 5, "ts_us": 1_529_000, "run": 1, "mode": "producer", "form": "summary", "elapsed_ms": 1529, "msgs": 741,
        "bytes": 758784, "delivered": 358, "offset": 40357, "dr_err": 0, "msgs_per_s": 234, "mb_per_s": 0.24,
        "tx_err": 0, "outq": 383}
    rows, _, _ = perf(lines(TOOLS / "rdkafka_performance_ul.txt"))
    assert _set(rows[-1])["latency_hi_ms"] == 1181.16 and _set(rows[-1])["latency_avg_ms"] == 481.68


# Written here, with numbers of our own, in the structure of the 2014-2015
# tool (no offset column), as a ticket shows it: the command line without
# a prompt, librdkafka's log lines among the rows, the last row cut.
OLD_TOOL = [
    " ./rdkafka_performance -P -t t1 -p 0 -s 100 -u -b b1:9092",
    "% Sending messages of size 100 bytes",
    "|    elapsed |       msgs |      bytes |        rtt |         dr |     dr_m/s |    dr_MB/s |     dr_err |"
    "     tx_err |       outq ",
    "|          0 |          1 |        100 |          0 |          0 |          0 |       0.00 |          0 |"
    "          0 |          1 ",
    "%5|1500000000.100|TOPICBRK|rdkafka#producer-0| Topic t1 [0] migrated to unknown broker 3",
    "|       1001 |     400000 |   40000000 |         12 |     150000 |     149850 |      14.99 |          0 |"
    "          0 |     250000 ",
    "|       2003 |     700000 |   70000000 |        240 |     300000 |     149775 |      14.98 |          0 |"
    "        410 |     400000 ",
    "|       3004 |     820000 |   82000000 |        310 |     450000 |     149800 |      14.98 |          0 |"
    "        655 |     370000 ",
    "|       4006 |     900000 |   90000000 |        298 |     600000 |     149775 |      14.98 |          0",
]


def test_an_older_table_cut_and_interleaved_with_log_lines():
    rows, stats_rows, c = perf(OLD_TOOL)
    assert c.skipped == {"log_line": 1, "cut_row": 1} and c.parsed == 7
    assert [(r["elapsed_ms"], r["rtt_ms"], r["tx_err"], r["outq"], r["offset"]) for r in rows] == [
        (0, 0, 0, 1, None), (1001, 12, 0, 250000, None), (2003, 240, 410, 400000, None),
        (3004, 310, 655, 370000, None), (4006, 298, None, None, None)]
    # The cut row keeps its complete cells, not its last one (it may be cut).
    assert rows[-1]["mb_per_s"] == 14.98 and rows[-1]["dr_err"] is None
    assert [r["rtt_avg_ms"] for r in stats_rows] == [None, 12.0, 240.0, 310.0, 298.0]


def test_old_summaries_backpressure_consumer_and_runs():
    raw = ["% 5000 messages and 500000 bytes produced in 1002ms: 4990 msgs/s and 0.50 Mb/s, 0 messages failed, "
           "no compression",
           "% 300000 messages produced (30000000 bytes), 290000 delivered (12 failed) in 2000ms: 145000 msgs/s and "
           "14.50 Mb/s, 33 produce failures, 10000 in queue, snappy compression",
           "% Backpressure 499990 (tx 310000, txerr 33)",
           "% 33 backpressures for 310000 produce calls: 0.011% backpressure rate",
           "% ERROR CALLBACK: rdkafka#producer-1: Local: Broker transport failure: b1:9092/1: Connect failed",
           "% Sending messages of size 10 bytes",
           "% 9000 messages (900000 bytes) consumed in 1000ms: 9000 msgs/s (0.90 MB/s), latency curr/avg/lo/hi "
           "1.50/2.25/0.75/9.00ms"]
    rows, stats_rows, c = perf(raw)
    assert c.parsed == 7
    from kdiag.parsers.stats import SCHEMA as STATS

    # Only the summary that states its queue ("10000 in queue") gives a statistics row, where that table has msg_cnt.
    assert [(r["ts_us"], r["msg_cnt"]) for r in stats_rows] == (
        [(2_000_000, 10000)] if "msg_cnt" in STATS.names else [])
    got = [_set(r) for r in rows]
    assert got[0] == {"line_no": 1, "ts_us": 1_002_000, "run": 1, "mode": "producer", "form": "summary",
                      "elapsed_ms": 1002, "msgs": 5000,
                      "bytes": 500000, "msgs_per_s": 4990, "mb_per_s": 0.5, "dr_err": 0}
    assert got[1]["delivered"] == 290000 and got[1]["dr_err"] == 12 and got[1]["tx_err"] == 33 \
        and got[1]["outq"] == 10000 and "offset" not in got[1]
    assert (got[2]["form"], got[2]["outq"], got[2]["produce_calls"], got[2]["tx_err"]) == (
        "backpressure", 499990, 310000, 33)
    assert (got[3]["form"], got[3]["produce_calls"], got[3]["tx_err"]) == ("backpressure", 310000, 33)
    assert got[4]["form"] == "error" and got[4]["detail"].startswith("ERROR CALLBACK: rdkafka#producer-1: Local")
    assert (got[5]["run"], got[5]["mode"], got[5]["latency_avg_ms"], got[5]["latency_hi_ms"]) == (
        2, "consumer", 2.25, 9.0)


def test_summary_lines_as_pasted_without_their_percent_or_after_ctrl_c():
    raw = ["./rdkafka_performance -P -t t2 -s 512 -a 1",
           "2000 messages produced (1024000 bytes), 1500 delivered (offset 7, 3 failed) in 1000ms: 1500 msgs/s and "
           "0.77 MB/s, 9 produce failures, 500 in queue, no compression",
           "^C% 4000 messages produced (2048000 bytes), 3800 delivered (offset 9, 3 failed) in 2000ms: 1900 msgs/s and "
           "0.97 MB/s, 12 produce failures, 200 in queue, no compression",
           "% 100 messages and 51200 bytes sent in 40ms: 2500 msgs/s and 1.28 Mb/s, 0 messages failed, no compression",
           "12 backpressures for 4012 produce calls: 0.299% backpressure rate"]
    rows, stats_rows, c = perf(raw)
    assert c.parsed == 5
    assert [(r["form"], r["run"], r["elapsed_ms"], r["outq"], r["tx_err"], r["dr_err"]) for r in rows] == [
        ("summary", 1, 1000, 500, 9, 3), ("summary", 1, 2000, 200, 12, 3), ("summary", 2, 40, None, None, 0),
        ("backpressure", 2, None, None, 12, None)]
    # Summary lines hold no rtt: statistics rows only for the queue, where that table has msg_cnt.
    from kdiag.parsers.stats import SCHEMA as STATS

    if "msg_cnt" in STATS.names:
        assert [(r["ts_us"], r["msg_cnt"], r["rtt_avg_ms"]) for r in stats_rows] == [(1_000_000, 500, None),
                                                                                     (2_000_000, 200, None)]
    else:
        assert stats_rows == []


@pytest.mark.parametrize("name", [FORMATS / "rdkafka_performance.txt", TOOLS / "rdkafka_performance_summary.txt"],
                         ids=lambda p: p.name)
def test_performance_mangled_reads_the_same(name, tmp_path):
    raw = lines(name)
    want, _ = parse_performance(raw)
    for how, text in {**mangled(raw), "prompt": ["$ ./rdkafka_performance -P -t t -u -l", *raw]}.items():
        got, c = parse_performance(text)
        accounted(c)
        for table in ("perf_intervals", "stats"):
            assert _content(got[table]) == _content(want[table]), (how, table)
        blind = tmp_path / f"{how}.bin"
        blind.write_text("\n".join(text) + "\n")
        assert detect(blind) == "rdkafka_performance", how
    blind = tmp_path / "old.bin"
    blind.write_text("\r\n".join(OLD_TOOL) + "\r\n")
    assert detect(blind) == "rdkafka_performance"


def test_performance_rows_reach_the_stats_table_through_parse(tmp_path):
    from kdiag.ingest.tables import parse_paths

    out = parse_paths([FORMATS / "rdkafka_performance.txt"], tmp_path / "t")
    assert [f["kind"] for f in out.files] == ["rdkafka_performance"]
    assert len(out.read("perf_intervals")) == 36
    st = out.read("stats")
    assert len(st) == 26 and st["rtt_avg_ms"].to_pylist()[-4] == 23242.0


def test_tool_tables_alone_or_beside_a_capture_are_analysed_not_failed(spark, tmp_path):
    """The analysis reads every table that feeds it; these must not fail it,
    alone or beside a capture whose verdict they leave as it was."""
    from kdiag.analysis.job import analyze
    from kdiag.ingest.tables import parse_paths

    tools = [FORMATS / "rdkafka_performance.txt", FORMATS / "strace_summary.txt", FORMATS / "strace_counts.txt"]
    parse_paths(tools, tmp_path / "tools")
    alone = analyze(spark, tmp_path / "tools")
    assert "verdict" in alone and alone["input_checks"] is not None
    capture = [FIXTURES / "captures" / "nagle_on" / n for n in ("rdkafka.log", "strace.txt", "stats.jsonl")]
    parse_paths([*capture, *tools], tmp_path / "both")
    assert analyze(spark, tmp_path / "both")["verdict"] == "nagle_delayed_ack"


# ------------------------------------------------------------ any input

def _junk(seed: int, fixtures: list[Path]) -> list[str]:
    rnd = random.Random(seed)
    alphabet = " \t*!()[]<>|`-.:/%0123456789abcdefms{}\"\r"
    junk = ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 80))) for _ in range(400)]
    for p in fixtures:
        junk += [s[:rnd.randrange(0, len(s) + 1)] for s in lines(p)]
    rnd.shuffle(junk)
    return junk


PARSERS = [(parse_summary, strace_summary), (parse_counts, strace_counts), (parse_performance, rdkafka_performance)]


@pytest.mark.parametrize("parse,module", PARSERS, ids=lambda p: getattr(p, "__name__", ""))
def test_junk_never_crashes_and_every_line_is_counted(parse, module):
    junk = _junk(40, [FORMATS / "strace_summary.txt", TOOLS / "strace_cw.txt", FORMATS / "rdkafka_performance.txt",
                      FORMATS / "strace_counts.txt", TOOLS / "strace_counts_names.txt",
                      TOOLS / "rdkafka_performance_summary.txt"])
    _, c = parse(junk)
    accounted(c)
    module.looks_like(junk[:50])


# Lines of n characters that lead each pattern far before it fails.
HOSTILE = [lambda n: "% time " + " " * n + "calls syscall", lambda n: "-" * n, lambda n: "- " * (n // 2),
           lambda n: " 1" * (n // 2) + " futex", lambda n: "9" * n, lambda n: "| 1 " * (n // 4),
           lambda n: "|" * n, lambda n: "% 1 messages produced (" + "9" * n, lambda n: "% THROTTLED " + "1" * n,
           lambda n: "%5|1|" + "x" * n, lambda n: "% " + "1 " * (n // 2), lambda n: "   1 " + " = " * (n // 3),
           lambda n: "   1 poll(" + "<" * n, lambda n: "   1 [pid " + " " * n, lambda n: "   1 " + "1" * n + " x"]


@pytest.mark.parametrize("parse,module", PARSERS, ids=lambda p: getattr(p, "__name__", ""))
def test_a_10_mb_line_costs_linear_time(parse, module):
    head = lines(FORMATS / "strace_summary.txt")[:2] + lines(FORMATS / "rdkafka_performance.txt")[2:3]

    def cost(n: int) -> float:
        start = time.perf_counter()
        for make in HOSTILE:
            line = make(n)
            module.looks_like([line])
            t, c = parse([*head, line])
            accounted(c)
            assert all(len(x) <= 1 for x in (t.values() if isinstance(t, dict) else [t]))
        return time.perf_counter() - start

    # Ten times the length costs about ten times the time, not a hundred.
    small, big = cost(1_000_000), cost(10_000_000)
    assert big < 25 * small + 1.0, (small, big)


@pytest.mark.parametrize("parse,head,row", [
    (parse_summary, lines(FORMATS / "strace_summary.txt")[:2],
     "  0.00    0.000001           1         1         1 read"),
    (parse_performance, lines(FORMATS / "rdkafka_performance.txt")[3:4], lines(FORMATS / "rdkafka_performance.txt")[4]),
    (parse_counts, [], lines(FORMATS / "strace_counts.txt")[13]),
], ids=["strace_summary", "rdkafka_performance", "strace_counts"])
def test_many_rows_parse_in_linear_time(parse, head, row):
    def cost(n: int) -> float:
        start = time.perf_counter()
        t, c = parse([*head, *([row] * n)])
        t = t["perf_intervals"] if isinstance(t, dict) else t
        assert len(t) == n and c.parsed == n + len(head)
        return time.perf_counter() - start

    # Ten times the rows cost about ten times the time, not a hundred (a
    # million rows cost minutes on a loaded two-core runner).
    small, big = cost(20_000), cost(200_000)
    assert big < 25 * small + 1.0, (small, big)


# ------------------------------------------------------------ recognition

def _inputs() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix not in (".cmd", ".py")
                  and p.name not in ("CASE", "README.md", "CAPTURED"))


def test_each_tool_fixture_is_recognised():
    for p in sorted(TOOLS.glob("*.txt")) + sorted(FORMATS.glob("*")):
        want = next(f for f in OURS if p.name.startswith(f)) if p.name != "strace_cw.txt" else "strace_summary"
        assert detect(p) == want, p.name


def test_no_other_fixture_changes_its_format(monkeypatch):
    """Every fixture in the tree is detected as it was before these formats
    were registered, but for the tools' own output."""
    from kdiag.parsers import registry

    with_ours = {p: detect(p) for p in _inputs()}
    without = tuple(f for f in registry.formats() if f.name not in OURS)
    monkeypatch.setattr(registry, "formats", lambda: without)
    for p, kind in with_ours.items():
        if kind in OURS:
            assert detect(p) is None, p
        else:
            assert detect(p) == kind, p
