"""Every parser against mutated real input (fuzz/mutate.py, a short run),
against hypothesis-built lines, and on the inputs that once crashed them.

The full run is ``python3 -m fuzz.mutate --lines 1000000``.
"""
from __future__ import annotations

import json
import random
import struct
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fuzz import mutate
from kdiag.parsers.pcap import pcapng_block

# Lines per target for the short run; the slow ones (4 KB statistics lines,
# a file per detect sample) get fewer.
SHORT_RUN = {
    "rdkafka_log": 20_000, "strace": 20_000, "stats": 6_000, "sockets": 10_000, "tcp_probe_pcap": 10_000,
    "probes_jsonl": 20_000, "handshakes_jsonl": 20_000, "detect": 4_000,
}


def test_short_run_covers_every_target():
    assert set(SHORT_RUN) == set(mutate.TARGETS)


@pytest.mark.parametrize("name", list(SHORT_RUN))
def test_short_mutation_run(name, tmp_path):
    r = mutate.run_target(name, SHORT_RUN[name], seed=7, crash_dir=tmp_path, minimise_s=5)
    assert r.crashes == 0, mutate.format_result(r) + "\n" + "\n".join(
        (tmp_path / p).read_text() for p in sorted(x.name for x in tmp_path.glob("*.txt")))
    assert r.lines >= SHORT_RUN[name]
    if name != "detect":
        # Both outcomes are exercised: lines that parse and lines skipped.
        assert r.parsed > 0 and sum(r.skipped.values()) > 0, mutate.format_result(r)


def test_runs_are_reproducible():
    a = [mutate.TARGETS["strace"](random.Random("1:strace")).make_input(300) for _ in range(2)]
    b = [mutate.TARGETS["strace"](random.Random("1:strace")).make_input(300) for _ in range(2)]
    assert a == b


def test_a_failure_is_saved_minimised_and_replays(tmp_path, monkeypatch, capsys):
    """A parser that raises on one line: the harness counts it, saves the
    batch and a minimised copy that still fails, and --replay shows it."""
    from kdiag.parsers import rdkafka_log

    real = rdkafka_log.parse_lines

    def broken(lines, first_line_no=1):
        lines = lines.to_pylist() if isinstance(lines, pa.Array) else list(lines)
        if any("Sent ProduceRequest" in (ln or "") for ln in lines):
            raise IndexError("boom")
        return real(lines, first_line_no)

    monkeypatch.setattr(rdkafka_log, "parse_lines", broken)
    r = mutate.run_target("rdkafka_log", 2000, seed=3, batch=500, crash_dir=tmp_path, minimise_s=20)
    assert r.crashes > 0 and len(r.failures) == 1
    small = next(iter(r.failures.values()))
    lines = mutate.decode_block(Path(small).read_bytes())
    assert len(lines) == 1 and "Sent ProduceRequest" in lines[0]
    assert mutate.main(["--replay", small]) == 1
    assert "IndexError: boom" in capsys.readouterr().err


# ---------------------------------------------------------------- hypothesis

def _run(name: str, lines: list[str], variant: dict | None = None):
    """One input through the harness's own checks; raises on any failure."""
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    return mutate.TARGETS[name](random.Random(0)).run(data, variant)


_VARIANTS = st.fixed_dictionaries({
    "first": st.sampled_from([1, 17, 2**40]), "mode": st.integers(0, 3), "cuts": st.integers(0, 2**32),
})
_INTS = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 2**31, 2**63, 2**64]))
_NUM_TEXT = st.one_of(_INTS.map(str), st.floats(allow_nan=True).map(repr), st.text("0123456789.-e+x", max_size=25))
_SOME_TEXT = st.text(max_size=40)

_rd_header = st.builds(
    lambda pre, lvl, sec, ms, fac, client: f"{pre}%{lvl}|{sec}.{ms}|{fac}|{client}| ",
    st.sampled_from(["", "2024-01-01 ", "x%"]), st.sampled_from(["7", "0", "9", "77"]), _NUM_TEXT,
    st.sampled_from(["477", "4", "4777", ""]), st.sampled_from(["SEND", "RECV", "STATE", "", "A|B"]),
    st.sampled_from(["rdkafka#producer-1", "", "x y"]),
)
_rd_message = st.one_of(
    st.builds(lambda t, b, req, v, size, corr, rtt, tail: f"{t}{b}{req}({v}, {size} bytes, CorrId {corr}, "
              f"rtt {rtt}ms){tail}",
              st.sampled_from(["", " [thrd:main]: ", " [thrd:ssl://h:1/1]: "]),
              st.sampled_from(["", "ssl://127.0.0.1:9093/111: ", ":0/internal: ", "bad: "]),
              st.sampled_from(["Sent ProduceRequest ", "Received ProduceResponse ", "Retrying ProduceRequest ",
                               "Sent partial ProduceRequest ", "Response for unknown CorrId "]),
              _NUM_TEXT.map(lambda s: "v" + s), _NUM_TEXT, _NUM_TEXT, _NUM_TEXT, _SOME_TEXT),
    st.builds(lambda p, x: p + x, st.sampled_from(["Broker changed state ", "Connecting to ", "Connected to ",
                                                  "librdkafka v"]), _SOME_TEXT),
    _SOME_TEXT,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.builds(str.__add__, _rd_header, _rd_message), _SOME_TEXT), max_size=20), _VARIANTS)
def test_rdkafka_log_lines(lines, variant):
    _run("rdkafka_log", lines, variant)


_st_head = st.builds(
    lambda pid, ts, rel: pid + ts + rel,
    st.sampled_from(["", "12345  ", "[pid 12345] ", "[pid  1] ", "999999999 ", "1234567890 "]),
    st.one_of(st.just(""), _NUM_TEXT.map(lambda s: s + " "), st.sampled_from(["02:24:05.260276 ", "99:99:99 "])),
    st.sampled_from(["", "(+     0.000318) ", "(+ 1e9) "]),
)
_st_body = st.one_of(
    st.builds(lambda name, args, tail: f"{name}({args}{tail}",
              st.sampled_from(["write", "read", "sendto", "futex", "???", "close", "x"]),
              st.one_of(_SOME_TEXT, st.builds(lambda fd, s: f'{fd}, "{s}", 5', st.sampled_from(
                  ["1", "2", "2</tmp/x.log>", "7<TCP:[1.2.3.4:5->6.7.8.9:10]>", "-1", "0x10"]),
                  st.text("ab\\x\"0123456789nrtv", max_size=30))),
              st.one_of(st.builds(lambda v, e, d: f") = {v}{e}{d}", _NUM_TEXT,
                                  st.sampled_from(["", " EAGAIN (Resource temporarily unavailable)", " 512"]),
                                  st.one_of(st.just(""), _NUM_TEXT.map(lambda s: f" <{s}>"))),
                        st.sampled_from([" <unfinished ...>", ") = ?", " <detached ...>", ""]))),
    st.builds(lambda name, rest: f"<... {name} resumed>{rest}", st.sampled_from(["write", "futex", "", "???"]),
              st.builds(lambda v, d: f") = {v}{d}", _NUM_TEXT, st.sampled_from(["", " <0.000011>"]))),
    st.builds(lambda b: f"--- {b} ---", st.sampled_from(["SIGCHLD {si_signo=SIGCHLD}", "stopped by SIGSTOP", "x"])),
    st.builds(lambda b: f"+++ {b} +++", st.one_of(_NUM_TEXT.map(lambda s: "exited with " + s),
                                                 st.sampled_from(["killed by SIGKILL (core dumped)", "x"]))),
    st.sampled_from(["strace: Process 1 attached", "[ Process PID=1 runs in x32 mode. ]",
                     " > /lib/libc.so.6(write+0x14) [0x114a74]", "wait4(-1, strace: Process 5 attached"]),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.builds(str.__add__, _st_head, _st_body), _SOME_TEXT), max_size=25), _VARIANTS)
def test_strace_lines(lines, variant):
    _run("strace", lines, variant)


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), _INTS, st.floats(allow_nan=True), st.text(max_size=10)),
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=6), kids, max_size=4)),
    max_leaves=12,
)


def _seed_objects(name: str) -> list[dict]:
    return [json.loads(ln) for ln in mutate._seed_lines(name)]


def _json_line(seed_file: str):
    """A seed object with some of its keys (nested ones included) given
    hypothesis-built values, dropped, or the whole object replaced."""
    objs = _seed_objects(seed_file)

    @st.composite
    def line(draw):
        obj = json.loads(json.dumps(draw(st.sampled_from(objs))))
        for _ in range(draw(st.integers(0, 4))):
            node = obj
            while isinstance(node, dict) and node and draw(st.booleans()):
                child = node[draw(st.sampled_from(sorted(node)))]
                if not isinstance(child, dict):
                    break
                node = child
            if not isinstance(node, dict) or not node:
                break
            key = draw(st.sampled_from(sorted(node)))
            if draw(st.integers(0, 4)) == 0:
                del node[key]
            else:
                node[key] = draw(_JSON)
        if draw(st.integers(0, 9)) == 0:
            obj = draw(_JSON)
        return json.dumps(obj, allow_nan=True)

    return line()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_json_line("stats.jsonl"), _SOME_TEXT), max_size=4), _VARIANTS)
def test_stats_lines(lines, variant):
    _run("stats", lines, variant)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_json_line("sockets.jsonl"), _SOME_TEXT), max_size=10), _VARIANTS)
def test_sockets_lines(lines, variant):
    _run("sockets", lines, variant)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_json_line("probes.jsonl"), _json_line("handshakes.jsonl"), _SOME_TEXT), max_size=10),
       st.booleans())
def test_probe_and_handshake_lines(lines, as_list):
    _run("probes_jsonl", lines, {"list": as_list})
    _run("handshakes_jsonl", lines, {"list": as_list})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.builds(str.__add__, _rd_header, _rd_message), st.builds(str.__add__, _st_head, _st_body),
                          _json_line("stats.jsonl"), _json_line("sockets.jsonl"), _SOME_TEXT), max_size=30),
       st.sampled_from([1 << 10, 1 << 16, 16 << 20]))
def test_detect_on_samples(lines, chunk_bytes):
    _run("detect", lines, {"chunk_bytes": chunk_bytes})


def _ng_block(e, btype, body):
    return pcapng_block(btype, body, e)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from("<>"), st.lists(st.tuples(st.integers(0, 0xFFFF), st.binary(max_size=12)), max_size=3),
       st.binary(max_size=3), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.booleans())
def test_pcapng_interface_options_and_timestamps(e, opts, tail, ticks, iface, obsolete):
    """Interface options of any code and length (cut ones too), any
    timestamp: never a crash, records always accounted for."""
    shb = _ng_block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1))
    raw = b"".join(struct.pack(e + "HH", c, len(v)) + v + b"\0" * (-len(v) % 4) for c, v in opts) + tail
    idb = _ng_block(e, 1, struct.pack(e + "HHI", 101, 0, 65535) + raw)
    frame = mutate.PcapTarget(random.Random(0)).frames[0][1]
    if obsolete:
        epb = struct.pack(e + "HHIII", iface & 0xFFFF, 0, ticks >> 32, ticks & 0xFFFFFFFF, len(frame))
        blk = _ng_block(e, 2, epb + struct.pack(e + "I", len(frame)) + frame)
    else:
        epb = struct.pack(e + "IIII", iface % 3, ticks >> 32, ticks & 0xFFFFFFFF, len(frame))
        blk = _ng_block(e, 6, epb + struct.pack(e + "I", len(frame)) + frame)
    mutate.PcapTarget(random.Random(0)).run(shb + idb + blk)


# ---------------------------------------------------------------- regressions
# Inputs the fuzzer found crashing a parser, each now read as documented.

def test_stats_regressions():
    from kdiag.parsers.stats import parse_lines

    lines = [
        '{"time": 1e400, "brokers": {"b": {"rtt": {"avg": 1' + "0" * 400 + '}}}}',   # inf, int past float
        '{"time": NaN, "brokers": {"\\ud800": {"state": "\\udc00"}}, "name": "\\ud83d"}',  # lone surrogates
        "[" * 100_000,                                                                    # nesting
        '{"time": 1' + "0" * 30 + ', "brokers": {"b": {}}}',                              # ts past int64
    ]
    t, c = parse_lines(lines)
    assert c.skipped == {"not_statistics": 1} and c.parsed == 3
    rows = t.to_pylist()
    assert [r["ts_us"] for r in rows] == [None, None, None]
    assert rows[0]["rtt_avg_ms"] is None and rows[1]["broker"] == "\ufffd" and rows[1]["client"] == "\ufffd"


def test_sockets_regressions():
    from kdiag.parsers.sockets import parse_lines

    head = '"ts_us": 1, "pid": 2, "sample": 0'
    lines = [
        '{"kind": {"a": 1}, ' + head + '}',                                                # unhashable kind
        '{"kind": ["socket"], ' + head + '}',
        '{"kind": "thread", ' + head + ', "tid": 3, "name": "\\ud800x", "run_ns": 1' + "0" * 400 + "}",
        '{"kind": "socket", ' + head + ', "fd": 4, "local": "1.2.3.4:\\u00b2", "remote": "h:' + "9" * 5000 + '"}',
        '{"kind": "host", ' + head + ', "cpu_pct": [1' + "0" * 400 + ', 5]}',
    ]
    tables, c = parse_lines(lines)
    assert c.skipped == {"not_sample": 2} and c.parsed == 3
    th, so, ho = (tables[k].to_pylist()[0] for k in ("threads", "sockets", "host"))
    assert th["name"] == "\ufffdx" and th["run_ms"] is None
    assert so["local_port"] is None and so["remote_port"] is None
    assert ho["cpu_pct"] == [None, 5.0]


def test_strace_unescape_regressions():
    from kdiag.parsers.strace import parse_lines, unescape

    assert unescape(r"a\x b\8\9\08\101\xzz") == "a\\x b\\8\\9\x008A\\xzz"
    t, c = parse_lines(['1 1.000000 write(2, "\\x\\8 ok\\n", 7) = 7 <0.000010>'])
    assert c.parsed == 1 and t["data"].to_pylist() == ["\\x\\8 ok\n"]


def test_tcp_probe_regressions():
    from kdiag.parsers.tcp_probe import parse_handshakes, parse_pcap, parse_probes_jsonl

    e = "<"
    frame = mutate.PcapTarget(random.Random(0)).frames[0][1]
    shb = _ng_block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1))

    def capture(opts: bytes, ticks: int) -> bytes:
        idb = _ng_block(e, 1, struct.pack(e + "HHI", 101, 0, 65535) + opts)
        epb = struct.pack(e + "IIII", 0, ticks >> 32, ticks & 0xFFFFFFFF, len(frame))
        return shb + idb + _ng_block(e, 6, epb + struct.pack(e + "I", len(frame)) + frame)

    # if_tsoffset whose value the block cuts short
    t, c = parse_pcap(capture(struct.pack(e + "HH", 14, 8) + b"\0\0\0\0", 10**15))
    assert c.parsed == c.lines == 1 and t["sent_us"].to_pylist() == [10**15]
    # if_tsresol 10^0 (seconds): the timestamp is past int64 microseconds
    t, c = parse_pcap(capture(struct.pack(e + "HHB3x", 9, 1, 0), 2**64 - 1))
    assert c.parsed == 1 and t["sent_us"].to_pylist() == [None]

    probe = {"target_host": "h", "target_port": 1, "ttl": 1, "round": 1, "answer": "open"}
    t, c = parse_probes_jsonl([
        "[" * 100_000,
        json.dumps({**probe, "rtt_ms": 10**400}),
        json.dumps({**probe, "broker": "\ud800"}),
        json.dumps({**probe, "target_port": None, "target": "h:\u00b2"}),
    ])
    assert c.skipped == {"not_json": 1, "not_probe": 1} and c.parsed == 2
    assert t["rtt_ms"].to_pylist() == [None, None] and t["broker"].to_pylist() == [None, "\ufffd"]
    t, c = parse_handshakes(["[" * 100_000, json.dumps({"target": "h:" + "1" * 5000, "rtt_ms": 1})])
    assert c.skipped == {"not_json": 1, "not_handshake": 1}


def test_detect_regressions(tmp_path):
    from kdiag.ingest.detect import detect

    p = tmp_path / "x"
    for text in ("[" * 100_000 + "\n", '{"kind": "x"}\n{"brokers": ' + "[" * 100_000 + "\n"):
        p.write_text(text)
        assert detect(p) is None


def test_reading_a_line_longer_than_a_chunk_keeps_line_numbers(tmp_path):
    from kdiag.ingest.lines import MAX_LINE_BYTES, iter_line_chunks

    p = tmp_path / "x.log"
    p.write_bytes(b"a\n" + b"x" * (3 * MAX_LINE_BYTES) + b"\nb\nc")
    for chunk_bytes in (1 << 10, 1 << 16, 1 << 24):
        chunks = list(iter_line_chunks(p, chunk_bytes))
        lines = [ln for ch in chunks for ln in ch.lines.to_pylist()]
        assert [len(ln) for ln in lines] == [1, MAX_LINE_BYTES, 1, 1]
        assert lines[2:] == ["b", "c"] and sum(ch.cut_lines for ch in chunks) == 1
        assert [ch.first_line_no for ch in chunks] == [1 + sum(len(x.lines) for x in chunks[:i])
                                                      for i in range(len(chunks))]

