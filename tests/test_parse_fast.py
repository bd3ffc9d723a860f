"""The byte-level path for plain librdkafka lines gives what the regexes give.

RdkafkaLogParser cuts lines in librdkafka's own stderr format by byte
position (``plain_lines``); ``fast=False`` reads every line with the
regexes. Both must give the same table for any input: real logs, every
client format, and lines bent at each place where the byte arithmetic
could go wrong.
"""
from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdiag.ingest.lines import iter_line_chunks
from kdiag.parsers.rdkafka_log import RdkafkaLogParser

ROOT = Path(__file__).resolve().parent.parent
LOGS = sorted((ROOT / "fixtures" / "logs").glob("*.log")) + [
    ROOT / "fuzz" / "seeds" / "rdkafka.log", ROOT / "fuzz" / "seeds" / "rdkafka_clients.log",
    *sorted((ROOT / "fixtures" / "captures").glob("*/rdkafka.log"))]


def both(lines: list[str]) -> tuple[pa.Table, pa.Table, RdkafkaLogParser, RdkafkaLogParser]:
    arr = pa.array(lines, pa.string())
    fast, slow = RdkafkaLogParser(fast=True), RdkafkaLogParser(fast=False)
    return fast.feed(arr, 7), slow.feed(arr, 7), fast, slow


def assert_same(lines: list[str]) -> None:
    a, b, pa_, pb = both(lines)
    for name in a.column_names:
        assert a[name].equals(b[name]), (name, a[name].to_pylist()[:5], b[name].to_pylist()[:5])
    assert pa_.counts.to_dict() == pb.counts.to_dict()


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.parent.name + "/" + p.name)
def test_real_logs(path):
    for chunk in iter_line_chunks(path):
        assert_same(chunk.lines.to_pylist())


SEND = ("%7|1795334606.649|SEND|rdkafka#producer-1| [thrd:ssl://127.0.0.1:33377/111]: "
        "ssl://127.0.0.1:33377/111: Sent ProduceRequest (v10, 2170 bytes @ 0, CorrId 10)")

# Each one bends SEND where a field boundary is found by position.
BENT = [
    SEND,
    "prefix " + SEND,                                   # text before the "%"
    SEND.replace("%7|", "%8|"),                         # level out of range
    SEND.replace("1795334606.649", "1795334606.64"),    # two digits of ms
    SEND.replace("1795334606.649", "1234567890123.649"),  # 13 digits of seconds
    SEND.replace("1795334606.649", "1.649"),
    SEND.replace("1795334606.649", ".649"),
    SEND.replace("1795334606.649", "17953x4606.649"),
    SEND.replace("|SEND|", "|SE ND|"),                  # facility the header refuses
    SEND.replace("|SEND|", "||"),
    SEND.replace("rdkafka#producer-1", ""),
    SEND.replace("| [thrd:", "|[thrd:"),                # no space after the 4th "|"
    SEND.replace("]: ssl", "] ssl"),                    # "]" without ": "
    SEND.replace("[thrd:ssl://127.0.0.1:33377/111]", "[thrd:ssl://[::1]:33377/111]"),
    SEND.replace("thrd:", "thread:"),
    SEND.replace("ssl://127.0.0.1:33377/111: Sent", "ssl://127.0.0.1:33377/111 Sent"),
    SEND.replace("ssl://127.0.0.1:33377/111: Sent", "ssl://127.0.0.1:33377/111:Sent"),
    SEND.replace("ssl://127.0.0.1:33377/111: Sent", "127.0.0.1:33377/111: Sent"),
    SEND.replace("ssl://127.0.0.1:33377/111: Sent", ":0/internal: Sent"),
    SEND.replace("ssl://127.0.0.1:33377/111: Sent", "ssl://h\t:1/2: Sent"),
    SEND.replace("ssl://127.0.0.1:33377/111: Sent", "nobroker: Sent"),
    SEND.replace("ssl://127.0.0.1:33377/111: Sent", "Sent"),
    SEND.replace(" Sent ProduceRequest (v10, 2170 bytes @ 0, CorrId 10)", ""),
    SEND[: SEND.index("]:") + 1],                       # cut inside the thread
    SEND[: SEND.index("| [")],                          # cut before the message
    SEND[:5],
    "%7|1795334606.649|SEND|c| x",
    "%7|1795334606.649|SEND|c|  [thrd:a]: b: c",
    "%7|1795334606.649|SEND|c| [thrd:]: : c",
    "%7|1795334606.649|SEND|c| [thrd:a]: b:",
    "%7|1795334606.649|SEND|c| [thrd:a]: b: ",
    "%7|1795334606.649|SEND|c| [thrd:a|b]: b|c: d|e",
    "%7|1795334606.649|SE|ND|c| [thrd:a]: x",
    "%7|1795334606.649|SEND|c| [thrd:a]: ssl://h:1/2: Received ProduceResponse (v10, 54 bytes, CorrId 9, rtt 47.66ms)",
    "%7|1795334606.649|SEND|c| [thrd:a]: ssl://h:1/2: Retrying ProduceRequest (v10, 54 bytes, retry 1/2, prev CorrId 9) in 100ms",
    "%7|1795334606.649|SEND|c| [thrd:a]: ssl://h:1/2: Sent partial ProduceRequest (v10, 5+6/54 bytes, CorrId 9)",
    SEND.replace("ProduceRequest", "Request"),          # no API name before the suffix
    SEND.replace("ProduceRequest", "ProduceRequestRequest"),
    SEND.replace("ProduceRequest", "ProduceResponse"),
    SEND.replace("ProduceRequest", "Produce Request"),
    "%7|1795334606.649|RECV|c| [thrd:a]: ssl://h:1/2: Received ProduceRequest (v10, 54 bytes, CorrId 9, rtt 4ms)",
    "%7|1795334606.649|RECV|c| [thrd:a]: ssl://h:1/2: Received Response (v10, 54 bytes, CorrId 9, rtt 4ms)",
    "",
    "é%7|1795334606.649|SEND|cé| [thrd:aé]: ssl://hé:1/2: Sent é",
    "%7|1795334606.649|SEND|c| [thrd:a]: ssl://h:1/2: \u00a0x",
    "%7|1795334606.649|SEND|c| [thrd:a]: ssl://h\u00a0:1/2: x",
]


def test_bent_lines_one_by_one():
    for line in BENT:
        assert_same([line])


def test_bent_lines_together_and_shuffled():
    lines = BENT * 3
    random.Random(1).shuffle(lines)
    assert_same(lines)


_ALPHABET = st.sampled_from(list("%|[]: /.0123456789abc#-_\t") + ["thrd:", "ssl://", "Sent ", "CorrId ", "é"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(BENT) - 1), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 200), st.lists(_ALPHABET, max_size=4).map("".join)), max_size=4))
def test_mutated_lines(picks, edits):
    lines = []
    for i, (at, ins) in zip(picks, edits + [(0, "")] * len(picks)):
        line = BENT[i]
        at = min(at, len(line))
        lines.append(line[:at] + ins + line[at + len(ins):])
    assert_same(lines)


def test_a_field_cut_at_the_line_end_does_not_borrow_the_next_line():
    # Each line ends where the byte arithmetic looks one or two bytes on;
    # the next line starts with what it would look for.
    for cut in ("%7|1795334606.649|SEND|c|", "%7|1795334606.649|SEND|c| [thrd:a]", "%7|1795334606.649|SEND|c| [thrd:a]:",
                "%7|1795334606.649|SEND|c| [thrd:a]: ssl://h:1/2", "%7|1795334606.649|SEND|c| [thrd:a]: ssl://h:1/2:"):
        for nxt in (" ", ": ", " x", ": x", "|"):
            assert_same([cut, nxt + "ssl://h:1/2: Sent x"])


STRACES = sorted((ROOT / "fuzz" / "seeds").glob("strace_*.txt")) + sorted((ROOT / "fixtures" / "strace").glob("*.txt")) + [
    ROOT / "fixtures" / "captures" / "nagle_on" / "strace.txt"]


def _tables(paths, tmp, workers, chunk_bytes, monkeypatch):
    import pyarrow.parquet as pq

    from kdiag.ingest import feeding, tables

    monkeypatch.setattr(feeding, "WORKERS", workers)
    monkeypatch.setattr(feeding, "CHUNK_BYTES", chunk_bytes)
    out = tables.parse_paths(paths, tmp)
    # Rows of a call left unfinished across chunks come when it resumes:
    # compare in line order.
    return ({name: pq.read_table(p).sort_by([("line_no", "ascending")]) for name, p in out.paths.items()},
            out.files, out.notes)


@pytest.mark.parametrize("path", STRACES + LOGS[:3], ids=lambda p: p.name)
def test_parsing_on_several_threads_in_small_chunks_gives_the_same_tables(path, tmp_path, monkeypatch):
    # 4 KiB chunks: every few lines a chunk ends, so strace's calls left
    # unfinished across chunks meet the lines parsed ahead in the other thread.
    one = _tables([path], tmp_path / "one", 1, 4096, monkeypatch)
    many = _tables([path], tmp_path / "many", 2, 4096, monkeypatch)
    assert one[0].keys() == many[0].keys()
    for name in one[0]:
        assert one[0][name].equals(many[0][name]), name
    assert one[1] == many[1] and one[2] == many[2]
    # The log lines among strace's writes are read on a thread of their own,
    # a few chunks behind: none lost or doubled against one chunk.
    whole = _tables([path], tmp_path / "whole", 2, 1 << 26, monkeypatch)
    if "log_writes" in whole[0]:
        a, b = whole[0]["log_writes"], many[0]["log_writes"]
        if any("whole second" in n for n in whole[2]):
            # -t: the estimate of each line's time within its second
            # follows the chunks (it did before the log lines had a thread).
            a, b = a.drop_columns(["ts_us"]), b.drop_columns(["ts_us"])
        assert a.equals(b)


def test_the_footers_keep_the_bounds_the_analysis_reads(tmp_path):
    # writer_options: line_no and ts_us delta-encoded, min/max for numbers
    # only, zstd for the strings. The analysis cuts a large capture into
    # pieces by ts_us's and line_no's bounds in each row group's footer
    # (analysis.pieces.pieces_of).
    import pyarrow.parquet as pq

    from kdiag.analysis.time_pieces import _line_bits
    from kdiag.ingest import tables

    out = tables.parse_paths([ROOT / "fixtures" / "captures" / "nagle_on" / "strace.txt"], tmp_path)
    meta = pq.read_metadata(out.paths["syscalls"])
    names = meta.schema.to_arrow_schema().names
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        cols = {names[i]: rg.column(i) for i in range(rg.num_columns)}
        assert "DELTA_BINARY_PACKED" in cols["line_no"].encodings and "DELTA_BINARY_PACKED" in cols["ts_us"].encodings
        assert cols["ts_us"].statistics.has_min_max and cols["line_no"].statistics.has_min_max
        assert cols["args"].statistics is None or not cols["args"].statistics.has_min_max
        assert cols["args"].compression == "ZSTD" and cols["line_no"].compression == "SNAPPY"
    rows = pq.read_table(out.paths["syscalls"])
    assert _line_bits(meta) == int(max(rows["line_no"].to_pylist())).bit_length()
