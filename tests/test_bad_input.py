"""Input that parses line by line but is wrong as a whole (repeated blocks,
clock steps), and input that is not what it claims to be: each is counted,
said in words, and leaves the answer the real capture gives.

Every damaged input is made here from the real nagle_on capture. Clean, it
gives nagle_delayed_ack for 30 Produce requests (34 requests of all kinds).
"""
import io
import json
import random
import re
from pathlib import Path

import pytest

from conftest import CAPTURES
from kdiag.cli import Environment, main
from kdiag.ingest import detect as detect_mod
from kdiag.ingest.tables import parse_paths
from kdiag.report.text import render
from kdiag.status import ExitStatus

CAP = CAPTURES / "nagle_on"
LOG = (CAP / "rdkafka.log").read_text().splitlines(keepends=True)
STRACE = (CAP / "strace.txt").read_text().splitlines(keepends=True)
# CorrId 17: its Sent line is strace line 2814, its Received line 2818.
INSIDE_REQUEST = 2816
# CorrId 13: Sent at log line 109, Received at 110.
LOG_INSIDE_REQUEST = 110


def replay(*paths):
    out, err = io.StringIO(), io.StringIO()
    rc = main(["replay", "--json", *map(str, paths)], Environment(stdout=out, stderr=err))
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return rc, json.loads(out.getvalue()) if out.getvalue() else None


def write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("".join(lines))
    return p


def shifted_strace(delta_us: int, from_line: int) -> list[str]:
    """strace -ttt lines from ``from_line`` (1-based) on, their timestamps
    moved: the clock stepped there."""
    def move(m):
        us = int(m.group(2)) * 1_000_000 + int(m.group(3)) + delta_us
        return f"{m.group(1)}{us // 1_000_000}.{us % 1_000_000:06d} "
    head = re.compile(r"^(\d+ )(\d+)\.(\d{6}) ")
    return STRACE[:from_line - 1] + [head.sub(move, ln, count=1) for ln in STRACE[from_line - 1:]]


def shifted_log(delta_ms: int, from_line: int, lines=None) -> list[str]:
    lines = lines or LOG
    head = re.compile(r"^%(\d)\|(\d+)\.(\d{3})\|")

    def move(m):
        ms = int(m.group(2)) * 1000 + int(m.group(3)) + delta_ms
        return f"%{m.group(1)}|{ms // 1000}.{ms % 1000:03d}|"
    return lines[:from_line - 1] + [head.sub(move, ln, count=1) for ln in lines[from_line - 1:]]


def checks(f) -> dict:
    """(input file name, check) -> (count, excluded requests)."""
    return {(c["input"].rsplit("/", 1)[-1], c["check"]): (c["count"], c["excluded_requests"])
            for c in f["input_checks"]}


def nagle(f, produce=30):
    assert f["verdict"] == "nagle_delayed_ack", json.dumps(f["findings"], indent=1)[:3000]
    assert f["findings"][0]["requests"] == produce and f["summary"]["requests"] == produce
    # whatever was left out, no latency is negative or a clock step's
    assert 40 < f["summary"]["latency_p50_ms"] < 50 and 40 < f["summary"]["latency_p99_ms"] < 100


def reported(f):
    """The human report says each check in words."""
    text = render(f)
    for c in f["input_checks"]:
        assert f"{c['input']}: {c['detail']}" in text
    return text


def test_clean_capture_has_no_input_checks(spark):
    rc, f = replay(CAP / "rdkafka.log", CAP / "strace.txt")
    assert rc == 0 and f["input_checks"] == []
    nagle(f)
    assert f["summary"]["requests_all_kinds"] == 34
    assert "INPUT:" not in render(f)


def test_half_of_the_log_repeated(spark, tmp_path):
    """cat log log-tail: the 36 request lines of the tail appear twice, and
    where the copy begins the clock goes back 0.8 s. Without the strace the
    log alone is the source: 30 requests, not 48."""
    dup = write(tmp_path, "dup.log", LOG + LOG[len(LOG) // 2:])
    rc, f = replay(dup, CAP / "strace.txt")
    assert rc == 0
    nagle(f)
    assert checks(f) == {("dup.log", "duplicate_lines"): (36, 0), ("dup.log", "clock_backwards"): (1, 0)}
    text = reported(f)
    assert "36 librdkafka request lines" in text and "the clock went back 1 time(s) in the librdkafka log" in text

    rc, alone = replay(dup)
    _, clean = replay(CAP / "rdkafka.log")
    assert alone["summary"]["requests"] == clean["summary"]["requests"] == 30
    assert alone["verdict"] == clean["verdict"]
    assert alone["summary"]["latency_p99_ms"] == clean["summary"]["latency_p99_ms"]
    assert checks(alone) == {("dup.log", "duplicate_lines"): (36, 0), ("dup.log", "clock_backwards"): (1, 0)}


def test_strace_given_twice_in_one_file(spark, tmp_path):
    """cat strace.txt strace.txt: every row of the copy (3016) is dropped;
    no step remains, so no request is lost."""
    rc, f = replay(CAP / "rdkafka.log", write(tmp_path, "twice.txt", STRACE + STRACE))
    assert rc == 0
    nagle(f)
    assert checks(f) == {("twice.txt", "duplicate_lines"): (3016, 0)}
    assert "3016 strace rows" in reported(f)
    # What the copy check cached went with the analysis: a warm server
    # analyses input after input in one session.
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()


def test_block_of_strace_repeated(spark, tmp_path):
    """Lines 2701-2900 repeated after line 2900. Their exact copies (158
    rows) are dropped. The copy's first line is the end of a call whose start
    was not copied, and its last line the start of one whose end was not: two
    rows that match nothing, stamped 0.4 s back, inside CorrId 21's request.
    That looks like a step back, so CorrId 21 is left out: 29 + 1 excluded."""
    block = write(tmp_path, "block.txt", STRACE[:2900] + STRACE[2700:2900] + STRACE[2900:])
    rc, f = replay(CAP / "rdkafka.log", block)
    assert rc == 0
    nagle(f, produce=29)
    assert checks(f) == {("block.txt", "duplicate_lines"): (158, 0), ("block.txt", "clock_backwards"): (1, 1)}
    # the unmatched halves are counted by the parser too
    entry = next(e for e in f["inputs"] if e["path"].endswith("block.txt"))
    assert entry["counts"]["skipped"] == {"orphan_resumed": 2}
    assert "1 request(s) spanning it (1 Produce)" in reported(f)


def test_same_files_given_twice(spark):
    rc, f = replay(CAP / "rdkafka.log", CAP / "strace.txt", CAP / "rdkafka.log", CAP / "strace.txt")
    assert rc == 0
    nagle(f)
    assert f["summary"]["requests_all_kinds"] == 34
    got = {c["table"]: (c["count"], c["excluded_requests"]) for c in f["input_checks"]}
    assert got == {"rdkafka_events": (68, 0), "syscalls": (3016, 0)}
    assert all(c["check"] == "duplicate_lines" for c in f["input_checks"])
    # two files fed the table: both are named
    assert all(str(CAP / "strace.txt") in c["input"] for c in f["input_checks"] if c["table"] == "syscalls")
    reported(f)


@pytest.mark.parametrize("delta_us,check,size", [(-30_000_000, "clock_backwards", "-30.0 s"),
                                                 (7_200_000_000, "clock_jump_forward", "+2.0 h")])
def test_strace_clock_step_inside_a_request(spark, tmp_path, delta_us, check, size):
    """The clock steps between CorrId 17's Sent and Received lines: that one
    request has no true latency (-30 s or +2 h) and is left out; the other 29
    keep theirs."""
    p = write(tmp_path, "step.txt", shifted_strace(delta_us, INSIDE_REQUEST))
    rc, f = replay(CAP / "rdkafka.log", p)
    assert rc == 0
    nagle(f, produce=29)
    assert checks(f) == {("step.txt", check): (1, 1)}
    text = reported(f)
    assert f"at line {INSIDE_REQUEST} ({size})" in text


@pytest.mark.parametrize("delta_us,check", [(-30_000_000, "clock_backwards"), (7_200_000_000, "clock_jump_forward")])
def test_strace_second_half_shifted(spark, tmp_path, delta_us, check):
    """The second half of the lines moved: the step falls before the first
    Produce request, so it is reported and costs nothing."""
    p = write(tmp_path, "half.txt", shifted_strace(delta_us, len(STRACE) // 2 + 1))
    rc, f = replay(CAP / "rdkafka.log", p)
    assert rc == 0
    nagle(f)
    assert checks(f) == {("half.txt", check): (1, 0)}
    assert "no request spanned it" in reported(f)


def test_log_clock_step_inside_a_request(spark, tmp_path):
    """The log alone: a step back of 30 s between CorrId 13's Sent and
    Received lines leaves 29 requests and one excluded."""
    p = write(tmp_path, "step.log", shifted_log(-30_000, LOG_INSIDE_REQUEST))
    rc, f = replay(p)
    assert rc == 0 and f["summary"]["source"] == "log"
    assert f["summary"]["requests"] == 29
    assert checks(f) == {("step.log", "clock_backwards"): (1, 1)}
    assert 0 < f["summary"]["latency_p50_ms"] < 50
    reported(f)


def test_log_forward_silence_counts_only_with_a_request_in_flight(spark, tmp_path):
    """An idle producer logs nothing for minutes: a two-hour silence between
    requests is not a clock jump; one inside a request is."""
    between = write(tmp_path, "idle.log", shifted_log(7_200_000, LOG_INSIDE_REQUEST + 1))
    rc, f = replay(between)
    assert rc == 0 and f["input_checks"] == [] and f["summary"]["requests"] == 30
    inside = write(tmp_path, "jump.log", shifted_log(7_200_000, LOG_INSIDE_REQUEST))
    rc, f = replay(inside)
    assert checks(f) == {("jump.log", "clock_jump_forward"): (1, 1)} and f["summary"]["requests"] == 29


def test_response_stamped_before_its_request(spark, tmp_path):
    """A Received line 50 ms before its Sent line: less than a step, but no
    latency either."""
    lines = list(LOG)
    sent_ms = int(re.match(r"^%7\|(\d+)\.(\d{3})\|", lines[LOG_INSIDE_REQUEST - 2]).expand(r"\1\2"))
    lines[LOG_INSIDE_REQUEST - 1] = re.sub(r"^%7\|\d+\.\d{3}\|", f"%7|{(sent_ms - 50) // 1000}.{(sent_ms - 50) % 1000:03d}|",
                                           lines[LOG_INSIDE_REQUEST - 1])
    rc, f = replay(write(tmp_path, "neg.log", lines))
    assert rc == 0 and f["summary"]["requests"] == 29
    assert checks(f) == {("neg.log", "negative_latency"): (1, 1)}
    assert "stamped before their request" in reported(f)


# ------------------------------------------------ files that are not what they seem

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
       b"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")


def test_wrong_kinds_of_file_beside_a_capture(spark, tmp_path):
    (tmp_path / "image.png").write_bytes(PNG)
    (tmp_path / "ls").write_bytes(Path("/bin/ls").read_bytes())
    (tmp_path / "empty.log").write_bytes(b"")
    rc, f = replay(tmp_path / "image.png", tmp_path / "ls", tmp_path / "empty.log", CAP / "rdkafka.log",
                   CAP / "strace.txt")
    assert rc == 0
    nagle(f)
    errors = {e["path"].rsplit("/", 1)[-1]: e.get("error") for e in f["inputs"]}
    assert errors["empty.log"] == "empty"
    assert errors["image.png"] == errors["ls"] == "not a format kdiag reads"
    assert f["input_checks"] == []
    # Alone, files about nothing hold nothing to judge; one about a Kafka
    # client that kdiag cannot read leaves the verdict undecided, not "none".
    rc, f = replay(tmp_path / "image.png", tmp_path / "ls")
    assert rc == ExitStatus.NO_DATA and f["verdict"] is None and f["no_data"] and not f.get("undecided"), f
    dump = tmp_path / "gdb.txt"
    dump.write_text("$1 = {rkb_link = {tqe_next = 0x0}, rkb_nodeid = 2, rkb_req_timeouts = 3}\n")
    rc, f = replay(tmp_path / "image.png", dump)
    assert rc == 0 and f["verdict"] is None and not f["no_data"] and f["undecided"], f
    assert any("gdb.txt: about a Kafka client (rkb_)" in u for u in f["unknowns"]), f["unknowns"]


def test_truncated_strace(spark, tmp_path):
    """Cut in the middle of a line after the last response: that line is
    counted, the rest stands."""
    data = (CAP / "strace.txt").read_bytes()
    cut = data.index(b"\n", len(data) - 2000) + 30
    p = tmp_path / "cut.txt"
    p.write_bytes(data[:cut])
    rc, f = replay(CAP / "rdkafka.log", p)
    assert rc == 0
    nagle(f)
    entry = next(e for e in f["inputs"] if e["path"].endswith("cut.txt"))
    assert entry["counts"]["skipped_total"] == 1


def test_binary_garbage_appended_to_the_log(spark, tmp_path):
    junk = random.Random(5).randbytes(64 << 10)
    p = tmp_path / "junk.log"
    p.write_bytes((CAP / "rdkafka.log").read_bytes() + junk)
    rc, f = replay(p, CAP / "strace.txt")
    assert rc == 0
    nagle(f)
    entry = next(e for e in f["inputs"] if e["path"].endswith("junk.log"))
    assert entry["kind"] == "rdkafka_log"
    c = entry["counts"]
    assert c["parsed"] == len(LOG) and c["skipped_total"] == c["lines"] - len(LOG) > 0
    assert f["input_checks"] == []


def test_three_megabyte_lines(spark, tmp_path):
    big = "x" * (3 << 20) + "\n"
    log = write(tmp_path, "big.log", LOG[:50] + [big] + LOG[50:])
    st = write(tmp_path, "big.txt", STRACE[:2000] + [big] + STRACE[2000:])
    rc, f = replay(log, st)
    assert rc == 0
    nagle(f)
    for name in ("big.log", "big.txt"):
        c = next(e for e in f["inputs"] if e["path"].endswith(name))["counts"]
        assert c["long_lines_cut"] == 1 and c["skipped_total"] == 1
    assert f["input_checks"] == []


def test_foreign_log_interleaved(spark, tmp_path):
    """Each librdkafka line followed by a syslog line: every foreign line is
    counted, and the log alone still gives its 30 requests."""
    foreign = [f"Nov 22 04:42:{i % 60:02d} host systemd[1]: Started session {i} of user root.\n"
               for i in range(len(LOG))]
    mixed = write(tmp_path, "mixed.log", [x for pair in zip(LOG, foreign) for x in pair])
    rc, f = replay(mixed, CAP / "strace.txt")
    assert rc == 0
    nagle(f)
    c = f["inputs"][0]["counts"]
    assert f["inputs"][0]["kind"] == "rdkafka_log"
    assert c["parsed"] == len(LOG) and c["skipped_total"] == len(LOG)
    rc, alone = replay(mixed)
    assert alone["summary"]["requests"] == 30 and alone["input_checks"] == []


def test_where_inputs_are_parsed_the_copies_are_seen_as_spark_sees_them(spark, tmp_path):
    """A fleet looks for copies in Spark only in the inputs whose parse
    said it has some (input_checks.has_copies): it must never say none where
    Spark's check drops a row. Each table of the clean capture, of one with
    a block given twice, and with a float that differs only in its sign of
    zero (-0.0 and 0.0: equal to Spark, not to every hash)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    from kdiag.analysis import input_checks as quality
    from kdiag.analysis.spark_plumbing import RUN, release, with_order
    from kdiag.ingest.tables import parse_paths

    def spark_drops(t: pa.Table, name: str) -> int:
        df = with_order(spark.createDataFrame(t.to_pandas(), schema=from_arrow_schema(t.schema)))
        q = quality.Quality()
        try:
            return df.count() - quality.drop_duplicates(df, name, q, quality.copy_candidates(df, name)).count()
        finally:
            release(q)

    stats = (CAP / "stats.jsonl").read_text().splitlines(keepends=True)
    seen = {}
    for case, files in (("clean", {"rdkafka.log": LOG, "strace.txt": STRACE, "stats.jsonl": stats}),
                        ("twice", {"rdkafka.log": LOG + LOG[-40:], "strace.txt": STRACE + STRACE[100:400],
                                   "stats.jsonl": stats + stats})):
        (tmp_path / case).mkdir()
        paths = [write(tmp_path / case, n, lines) for n, lines in files.items()]
        out = parse_paths(paths, tmp_path / case / "tables")
        for name in quality.COPY_TABLES:
            if name in out.paths:
                t = pq.read_table(out.paths[name])
                t = t.append_column(RUN, pa.array([""] * t.num_rows, pa.string()))
                seen[(case, name)] = (quality.has_copies(t, name), spark_drops(t, name))
    assert seen[("clean", "syscalls")] == (False, 0) and seen[("clean", "rdkafka_events")] == (False, 0)
    assert seen[("twice", "syscalls")][0] and seen[("twice", "syscalls")][1] > 0
    assert seen[("twice", "rdkafka_events")][0] and seen[("twice", "rdkafka_events")][1] > 0
    # A statistics file given twice: its snapshots' ordinals differ, their content does not.
    assert seen[("clean", "stats")] == (False, 0)
    assert seen[("twice", "stats")][0] and seen[("twice", "stats")][1] > 0
    # Never "none" where Spark drops one.
    assert all(has for has, drops in seen.values() if drops), seen
    signed = pa.table({"ts_us": [1, 1], "line_no": [1, 2], "rtt_avg_ms": [0.0, -0.0]})
    assert quality.has_copies(signed, "stats")
    assert not quality.has_copies(signed.slice(0, 1), "stats")


def test_a_file_kdiag_cannot_read_is_still_known_to_be_about_a_kafka_client(tmp_path):
    # Shapes no parser reads: a debugger's dump of a broker handle, the
    # statistics as a metrics exporter shows them.
    dump = tmp_path / "gdb.txt"
    dump.write_text("$1 = {rkb_link = {tqe_next = 0x0}, rkb_nodeid = 2, rkb_req_timeouts = 3}\n")
    typed = tmp_path / "stats.txt"
    typed.write_text('rdkafka_broker_int_latency_p99{broker="b:9092/1"} 912000\n')
    far = tmp_path / "far.txt"
    far.write_bytes(b"x" * (detect_mod.KAFKA_HEAD_BYTES + 10) + b" rdkafka\n")
    (tmp_path / "image.png").write_bytes(PNG)
    assert detect_mod.kafka_words(dump) == ["rkb_"]
    assert detect_mod.kafka_words(typed) == ["kafka"]
    assert detect_mod.kafka_words(far) == [], "only the head is read"
    assert detect_mod.kafka_words(tmp_path / "image.png") == detect_mod.kafka_words(Path("/bin/ls")) == []
    parsed = parse_paths([dump, typed, tmp_path / "image.png"], tmp_path / "out")
    about = {Path(e["path"]).name: e.get("about_kafka") for e in parsed.files}
    assert about == {"gdb.txt": ["rkb_"], "stats.txt": ["kafka"], "image.png": None}
    assert any("gdb.txt: not a format kdiag reads, though it is about a Kafka client (rkb_)" in n
               for n in parsed.notes), parsed.notes


def test_an_example_producers_output_is_about_a_kafka_client_though_it_never_says_kafka(tmp_path):
    # librdkafka's examples/producer.c, typed input between its lines: no
    # timing, and no word naming Kafka.
    typed = tmp_path / "typed.txt"
    typed.write_text("% Press Ctrl-C or Ctrl-D to exit\nhello\n% Enqueued message (5 bytes) for topic orders\n"
                     "% Message delivered (5 bytes, partition 3)\n")
    failed = tmp_path / "failed.txt"
    failed.write_text("% Message delivery failed: Local: Message timed out\n")
    # The same words inside a sentence are not the example's lines.
    prose = tmp_path / "prose.txt"
    prose.write_text("50% Enqueued message (rate) for topic orders\n")
    assert detect_mod.kafka_words(typed) == detect_mod.kafka_words(failed) == [detect_mod.EXAMPLE_OUTPUT]
    assert detect_mod.kafka_words(prose) == []
