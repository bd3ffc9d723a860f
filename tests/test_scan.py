"""The compiled scans (parsers/_scan.c) give what their reference gives.

``kdiag.parsers.scan`` runs each scan in C where pip built it, else in
numpy and Arrow: the reference. Both are run here on real logs, on the
lines bent where the byte arithmetic could go wrong (test_parse_fast), on
random lines, and on arrays that start inside their buffers (a slice), and
the parser's whole table is compared both ways.
"""
from __future__ import annotations

import os
import random
import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdiag.ingest.lines import iter_line_chunks
from kdiag.parsers import scan
from kdiag.parsers.rdkafka_log import RdkafkaLogParser
from test_parse_fast import BENT, LOGS

pytestmark = pytest.mark.skipif(not scan.COMPILED and not os.environ.get("CI"),
                                reason="kdiag's compiled scans were not built here (no C compiler at install)")


def test_ci_builds_the_compiled_scans():
    # CI installs with the compiler setup.sh provides: it must not fall back.
    assert scan.COMPILED


def _cut_same(lines: pa.Array) -> None:
    c, ref = scan.rdkafka_plain_cut(lines, True), scan.rdkafka_plain_cut(lines, False)
    bad = np.flatnonzero((c != ref).any(axis=1))
    assert not len(bad), [(lines[int(i)].as_py(), c[i].tolist(), ref[i].tolist()) for i in bad[:3]]


def _mangle_superset(lines: pa.Array) -> None:
    c, ref = scan.mangle_candidates(lines, True), scan.mangle_candidates(lines, False)
    missed = np.flatnonzero(ref & ~c)
    assert not len(missed), [lines[int(i)].as_py() for i in missed[:3]]


def _table_same(lines: pa.Array, monkeypatch) -> None:
    got = RdkafkaLogParser().feed(lines, 1)
    with monkeypatch.context() as m:
        m.setattr(scan, "COMPILED", False)
        ref_parser = RdkafkaLogParser()
        ref = ref_parser.feed(lines, 1)
    assert got.equals(ref)


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.parent.name + "/" + p.name)
def test_real_logs(path, monkeypatch):
    for chunk in iter_line_chunks(path):
        _cut_same(chunk.lines)
        _mangle_superset(chunk.lines)
        _table_same(chunk.lines, monkeypatch)


def test_bent_lines_and_slices(monkeypatch):
    lines = pa.array(BENT * 3, pa.string())
    _cut_same(lines)
    _mangle_superset(lines)
    _table_same(lines, monkeypatch)
    for lo in (1, 5, len(BENT) + 3):
        part = lines.slice(lo, len(BENT))
        _cut_same(part)
        _mangle_superset(part)
        _table_same(part, monkeypatch)
    _cut_same(pa.array([], pa.string()))
    _cut_same(pa.array(["", "", "%"], pa.string()))


def test_mangled_lines_are_flagged():
    lines = pa.array(["> %7|1.000|A|c| x", "  >> x", "\u2003> x", "a &lt; b", "`x`", "[a](http://b)", "a\u00a0b",
                      "plain line", "%7|1795334606.649|SEND|c| [thrd:a]: x"], pa.string())
    got = scan.mangle_candidates(lines, True).tolist()
    assert got == [True] * 7 + [False, False]


def _marked(line: str) -> bool:
    """mangle_candidates' rule, as _scan.c states it."""
    b = line.encode()
    head = b.lstrip(bytes(range(0x21)))
    return (head[:1] == b">" or head[:1] >= b"\x80" or any(c in b for c in (b"<", b"&", b"`", b"](", b"\xc2\xa0")))


def test_a_mark_is_found_at_every_place_in_a_long_line():
    """The compiled scan reads 16 bytes at a time: a mark at each place,
    across each block's edge, and one that only begins in a block."""
    lines = []
    for n in (15, 16, 17, 31, 32, 33, 70):
        for mark in ("<", "&", "`", "](", "\u00a0", "]", "\u0080", "]x(", "(", ">"):
            for at in range(n):
                line = ("a" * at + mark + "b" * n)[:max(n, at + len(mark))]
                lines.append(line)
                lines.append(line[:-1])
    arr = pa.array(lines, pa.string())
    assert scan.mangle_candidates(arr, True).tolist() == [_marked(x) for x in lines]


_ALPHABET = st.sampled_from(list("%|[]: /.0123456789abc#-_\t<>&`(\u00a0\u2003") +
                            ["thrd:", "ssl://", "Sent ", "](", "é"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(BENT) - 1), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 200), st.lists(_ALPHABET, max_size=4).map("".join)), max_size=4),
       st.integers(0, 3))
def test_mutated_lines(picks, edits, lo):
    lines = []
    for i, (at, ins) in zip(picks, edits + [(0, "")] * len(picks)):
        line = BENT[i]
        at = min(at, len(line))
        lines.append(line[:at] + ins + line[at + len(ins):])
    arr = pa.array(["x"] * lo + lines, pa.string()).slice(lo)
    _cut_same(arr)
    _mangle_superset(arr)


def test_random_bytes_lines(monkeypatch):
    rng = random.Random(3)
    pieces = ["%7|", "1795334606.649", "|", "SEND", "rdkafka#producer-1", " [thrd:", "]: ", "ssl://h:1/2", ": ",
              " ", "]", "<", "&amp;", "`", "](", "\u00a0", ">", "Sent ProduceRequest (v1, 5 bytes, CorrId 1)"]
    lines = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(5000)]
    arr = pa.array(lines, pa.string())
    _cut_same(arr)
    _mangle_superset(arr)
    _table_same(arr, monkeypatch)


def test_short_buffers_are_refused():
    from kdiag.parsers import _scan

    lines = pa.array(["%7|1795334606.649|SEND|c| x"], pa.string())
    off, first, n, data = scan._buffers(lines)
    with pytest.raises(ValueError):
        _scan.rdkafka_plain_cut(off, first, n + 5, data, np.zeros((n + 5, scan.FIELDS), np.int64))
    with pytest.raises(ValueError):
        _scan.mangle_candidates(off, first, n, data, np.zeros(0, np.uint8))
    cut = scan.rdkafka_plain_cut(lines)
    with pytest.raises(ValueError):   # a row index past the lines
        _scan.plain_columns(off, first, n, data, cut, np.array([1], np.int64))
    with pytest.raises(ValueError):   # a selection that picks a line rdkafka_plain_cut did not cut
        _scan.plain_columns(off, first, n, data, np.zeros_like(cut), None)
    with pytest.raises(ValueError):   # out too small for the rows asked for
        _scan.sent_received(off, first, n, data, np.zeros((0, scan.S_FIELDS), np.int64), 0, np.array([0, 0]))
    with pytest.raises(ValueError):
        _scan.topic_lines(off, first, n, data, np.zeros((1, scan.T_FIELDS), np.int64), 0, np.array([3]))


def test_plain_columns_are_the_cut_pieces():
    # Every plain line of the real logs, all or some picked: the five
    # strings are the bytes rdkafka_plain_cut's positions bound.
    for path in LOGS:
        for chunk in iter_line_chunks(path):
            lines = chunk.lines
            cut = scan.rdkafka_plain_cut(lines)
            idx = np.flatnonzero(cut[:, scan.OK] == 1)[::2]
            if not len(idx):
                continue
            got = scan.plain_columns(lines, cut, idx)
            raw = [lines[int(i)].as_py().encode() for i in idx]
            off = np.frombuffer(lines.buffers()[1], np.int32)[lines.offset:]
            before, bad = None, 0
            for j, i in enumerate(idx):
                r, s = cut[i], int(off[i])
                cand = r[scan.CAND] == 1
                want = [(r[scan.P2] + 1, r[scan.P3]), (r[scan.P3] + 1, r[scan.P4]),
                        (r[scan.P4] + 8, r[scan.CLOSE]) if r[scan.THRD] == 1 else (s, s),
                        (r[scan.REST], r[scan.SPACE] - 1) if cand else (s, s),
                        (r[scan.SPACE] + 1 if cand else r[scan.REST], s + len(raw[j]))]
                pieces = [raw[j][a - s:b - s].decode() for a, b in want]
                assert [c[j].as_py() for c in got.strings] == pieces
                assert got.level[j] == int(raw[j][1:2])
                # fresh: a broker candidate unlike the candidate before it
                assert got.fresh[j] == (cand and pieces[3] != before)
                before = pieces[3] if cand else before
                bad += re.fullmatch(r"[A-Za-z0-9_\-]*", pieces[0]) is None
            assert got.bad_facilities == bad


def test_a_facility_outside_its_byte_class_is_counted():
    lines = pa.array(["%7|1795334606.649|SE ND|c| [thrd:a]: b: c", "%7|1795334606.649|SEND|c| x",
                      "%7|1795334606.649|Sé|c| x"], pa.string())
    cut = scan.rdkafka_plain_cut(lines)
    assert scan.plain_columns(lines, cut, None).bad_facilities == 2


def test_a_field_cut_at_the_line_end_does_not_borrow_the_next_line(monkeypatch):
    # Each line ends where the byte arithmetic looks one or two bytes on;
    # the next line starts with what it would look for.
    lines = []
    for cut in ("%7|1795334606.649|SEND|c|", "%7|1795334606.649|SEND|c| [thrd:a]", "%7|1795334606.649|SEND|c| [thrd:a]:",
                "%7|1795334606.649|SEND|c| [thrd:a]: ssl://h:1/2", "%7|1795334606.649|SEND|c| [thrd:a]: ssl://h:1/2:",
                "%7|1795334606.649", "%7|1795334606.649|", "x <", "x ]", "x \u00c2"):
        for nxt in (" ", ": ", " x", ": x", "|", "(", "\u00a0"):
            lines += [cut, nxt + "ssl://h:1/2: Sent x"]
    arr = pa.array(lines, pa.string())
    _cut_same(arr)
    _mangle_superset(arr)
    assert not scan.mangle_candidates(pa.array(["x ]", "(y"], pa.string()), True).any()
    _table_same(arr, monkeypatch)


def test_needle_flags():
    from kdiag.parsers.rdkafka_log.parser import _NEEDLES
    from kdiag.parsers.rdkafka_log.patterns import ANYWHERE

    needles = [(prefix, name in ANYWHERE) for name, prefix in _NEEDLES] + [("é", True), ("x", False)]
    texts = [prefix + " tail" for _, prefix in _NEEDLES] + [
        "topic [0]: Produce MessageSet with 1 message(s)", "a [1] 3 message(s) in xmit queue (1 added",
        "Sent", "", "xé", "Timed out 1 in-flight", None, "ProduceRequest failed: x: actions y"]
    rng = random.Random(5)
    texts += ["".join(rng.choice(["Sent ", "Sen", "x", "é", " in xmit queue", "Request failed: ", "MessageSet with "])
                      for _ in range(rng.randint(0, 5))) for _ in range(3000)]
    arr = pa.array(texts, pa.string())
    for part in (arr, arr.slice(3), arr.slice(7, 40)):
        got, ref = scan.needle_flags(part, needles, True), scan.needle_flags(part, needles, False)
        assert (got == ref).all()
    assert scan.needle_flags(arr, needles, True)[: len(_NEEDLES)].astype(bool).all()
    # A null whose offsets span bytes (an array built from buffers) flags nothing.
    odd = pa.Array.from_buffers(pa.string(), 2, [pa.py_buffer(bytes([0b10])), pa.py_buffer(
        np.array([0, 5, 10], np.int32)), pa.py_buffer(b"Sent Sent ")])
    assert scan.needle_flags(odd, [("Sent", False)], True).tolist() == [0, 1]
    with pytest.raises(ValueError):
        scan.needle_flags(arr, [("", False)])


def test_fence_candidates():
    from kdiag.parsers.strace.markup import fences

    lines = ["```", "  ```text", "~~~", "\t~~~ x", "``", "`` `", "x ```", "```a`b", "~~", " \u00a0```", "```\u00e9",
             "", "12345 1795315014.558913 write(2, \"```\", 3) = 3"]
    rng = random.Random(9)
    lines += ["".join(rng.choice([" ", "\t", "`", "~", "x", "é"]) for _ in range(rng.randint(0, 6))) for _ in range(3000)]
    arr = pa.array(lines, pa.string())
    for part in (arr, arr.slice(2), arr.slice(5, 100)):
        got, ref = scan.fence_candidates(part, True), scan.fence_candidates(part, False)
        assert not (ref & ~got).any()
    want = scan.fence_candidates(arr, False)
    assert (fences(arr) == want).all() and want[:4].all() and not want[4:9].any()


def _lines_same(block: bytes) -> None:
    got, got_long = scan.split_lines(block, True)
    ref, ref_long = scan.split_lines(block, False)
    assert got_long == ref_long
    assert (got is None) == (ref is None), (block[:80], got is None)
    if got is not None:
        got.validate(full=True)
        assert got.equals(ref), (block[:80], got.to_pylist()[:3], ref.to_pylist()[:3])


def test_split_lines():
    for block in (b"", b"\n", b"\r\n", b"a", b"a\n", b"a\r\nb\r", b"\r", b"a\n\nb\n\r\n", "é\nx".encode(),
                  b"\xff\n", b"a\n\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\x80", b"\xe0\x9f\xbf",
                  b"\xf0\x8f\xbf\xbf", "\U0010ffff\n\u07ff\u0800\uffff".encode(), b"12345678\x80abcdefg", b"1234567\x80abcdefgh",
                  b"abcdefghijklmno\xff", b"\xffbcdefghijklmnop",
                  # more lines than the first guess at their number holds
                  b"a\n" * 10_000, b"\n" * 5_000 + b"x" * 100_000):
        _lines_same(block)
    # the file reader hands over views of its buffer
    got, _ = scan.split_lines(memoryview(b"xa\nb\r\nc")[1:], True)
    assert got.to_pylist() == ["a", "b", "c"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=12), st.sampled_from([b"\n", b"\r\n", b"\r", "é€😀".encode(), b"abcdefghij"])),
                max_size=30).map(b"".join))
def test_split_lines_random(block):
    _lines_same(block)


def test_a_file_reads_the_same_both_ways(tmp_path, monkeypatch):
    from kdiag.ingest.lines import iter_line_chunks

    path = LOGS[0]
    got = [c.lines for c in iter_line_chunks(path, 4096)]
    monkeypatch.setattr(scan, "COMPILED", False)
    ref = [c.lines for c in iter_line_chunks(path, 4096)]
    assert len(got) == len(ref) and all(a.equals(b) for a, b in zip(got, ref))


def _as_logged(texts: list[str], facility) -> tuple[pa.Array, pa.Table]:
    """The texts as librdkafka's stderr lines (``facility`` of each text),
    and the table the parser makes of them."""
    lines = pa.array([f"%7|1795334606.649|{facility(t)}|c| [thrd:a]: ssl://h:1/2: {t}" for t in texts], pa.string())
    return lines, RdkafkaLogParser().feed(lines, 1)


def _same_both_ways(lines: pa.Array, got: pa.Table, monkeypatch) -> None:
    """The table the reference scans make, and the one the patterns alone make."""
    _table_same(lines, monkeypatch)
    assert got.equals(RdkafkaLogParser(fast=False).feed(lines, 1))


def _request_text(rng: random.Random) -> str:
    """A Sent or Received line's text as librdkafka prints it, or bent at
    one of the places its pattern counts digits or takes a part as optional."""
    bent = rng.random() < 0.5   # else every part as printed (the first of each choice)
    pick = lambda *xs: rng.choice(xs) if bent else xs[0]  # noqa: E731
    digits = lambda lo, hi: "".join(rng.choice("0123456789") for _ in range(rng.randint(lo, hi)))  # noqa: E731
    recv = rng.random() < 0.5
    name = pick("Produce", "Metadata", "", "ProduceRequest", "Produce Request", "Prodüce", "ApiVersion")
    suffix = "Response" if recv else "Request"
    suffix = pick(suffix, suffix, suffix, "Request" if recv else "Response", suffix[:-1])
    api = pick("", f"v{digits(1, 4)}, ", f"v{digits(5, 6)}, ", "v, ", f"v{digits(1, 3)} ")
    size = pick(digits(1, 18), digits(1, 6), digits(19, 20), "")
    at = pick("" if recv else f" @ {digits(1, 25)}", "", f" @ {digits(1, 25)}", " @ ", " @x")
    corr = pick("", "-") + pick(digits(1, 10), digits(1, 3), digits(11, 12), "")
    rtt = ""
    if recv:
        rtt = pick(f", rtt {digits(1, 3)}.{digits(1, 2)}ms", "", f", rtt {digits(1, 12)}.{digits(1, 6)}ms",
                   f", rtt {digits(1, 3)}ms", f", rtt {digits(13, 14)}.1ms", f", rtt 1.{digits(7, 8)}ms",
                   ", rtt 1.ms", ", rtt .5ms", f", rtt {digits(12, 12)}.{digits(6, 6)}ms")
    tail = pick(")", ")", ") trailing", "", ") in 100ms")
    head = "Received " if recv else pick("Sent ", "Sent ", "Sent partial ", "Sent")
    return f"{head}{name}{suffix} ({api}{size} bytes{at}, CorrId {corr}{rtt}{tail}"


def test_sent_and_received_lines_read_as_their_patterns_read_them(monkeypatch):
    rng = random.Random(11)
    texts = [_request_text(rng) for _ in range(20000)]
    lines, got = _as_logged(texts, lambda t: "RECV" if t.startswith("Rec") else "SEND")
    # Both ways somewhere: the compiled read and the pattern's.
    cut_send = scan.sent_received(pa.array(texts, pa.string()), False)
    cut_recv = scan.sent_received(pa.array(texts, pa.string()), True)
    assert (cut_send[:, scan.S_OK] == 1).sum() > 1000 and (cut_recv[:, scan.S_OK] == 1).sum() > 1000
    # A stricter compiled read only leaves more to the pattern; a looser one
    # would differ from it below.
    assert (got["event"].to_numpy(zero_copy_only=False) == "other").sum() > 1000
    assert got["rtt_ms"].null_count < len(got) - 3000 and got["api_version"].null_count > 1000
    _same_both_ways(lines, got, monkeypatch)


def _topic_text(rng: random.Random) -> str:
    """A Produce MessageSet or MessageSet line's text as librdkafka prints
    it, or bent where its pattern counts digits, cuts the topic or takes a
    part as optional."""
    bent = rng.random() < 0.5
    pick = lambda *xs: rng.choice(xs) if bent else xs[0]  # noqa: E731
    digits = lambda lo, hi: "".join(rng.choice("0123456789") for _ in range(rng.randint(lo, hi)))  # noqa: E731
    produce = rng.random() < 0.4
    topic = pick("kdiag-probe", "t\u00e9", "", "a\tb", "a\u00a0b", "x[0]", "a\vb")
    part = pick(digits(1, 2), "-1", digits(1, 10), digits(11, 12), "", "-")
    sep = pick("]: ", "] ", "]:", "]::", "]x ")
    msgs = pick(digits(1, 3), digits(9, 9), digits(10, 11), "")
    if produce:
        what = pick("Produce MessageSet with ", "MessageSet with ", "Produce MessageSet with  ")
        size = pick(digits(1, 5), digits(18, 18), digits(19, 19), "")
        rest = pick(f" ({size} bytes, ApiVersion 10, MsgVersion 2)", f"({size} bytes", f" ({size}bytes", "")
    else:
        what = pick("MessageSet with ", "Produce MessageSet with ", "MessageSet with")
        rest = pick(" (MsgId 0, BaseSeq -1) delivered", " delivered", " (a) (b) delivered", " (a delivered",
                    " (MsgId 1) encountered error: Broker: Not leader (actions Refresh,MsgNotPersisted)",
                    " encountered error: x (actions y)", " (x) deliveredfoo", " (x)delivered", "")
    return f"{topic} [{part}{sep}{what}{msgs} message(s){rest}"


def test_messageset_lines_read_as_their_patterns_read_them(monkeypatch):
    rng = random.Random(13)
    texts = [_topic_text(rng) for _ in range(20000)]
    lines, got = _as_logged(texts, lambda t: "PRODUCE" if "Produce" in t else "MSGSET")
    arr = pa.array(texts, pa.string())
    for msgset in (False, True):
        status = scan.topic_lines(arr, msgset)[:, scan.T_OK]
        assert (status == 1).sum() > 1000 and (status == 2).sum() > 100 and (status == 0).sum() > 100
    events = got["event"].to_numpy(zero_copy_only=False)
    assert (events == "msgset").sum() > 1000 and (events == "produce").sum() > 1000
    assert got["error"].null_count < len(got)
    _same_both_ways(lines, got, monkeypatch)


def test_gathered_strings_are_the_views_cut(monkeypatch):
    from kdiag.parsers import strings

    rng = random.Random(17)
    words = ["", "a", "é", "Sent ProduceRequest", "\u00a0x", "😀😀", "thrd:ssl://h:1/2"]
    arr = pa.array(["".join(rng.choice(words) for _ in range(rng.randint(0, 6))) for _ in range(4000)], pa.string())
    idx = np.array(rng.sample(range(len(arr)), 3000))
    ascii_idx = np.array([i for i in idx if arr[int(i)].as_py().isascii() and len(arr[int(i)].as_py()) > 2])
    lo = np.array([rng.randint(0, 1) for _ in ascii_idx])

    def both(fn):
        got = fn()
        with monkeypatch.context() as m:
            m.setattr(scan, "COMPILED", False)
            ref = fn()
        assert got.equals(ref)
        return got

    assert len(both(lambda: strings.take_str(arr, idx))) == 3000
    both(lambda: strings.take_str(arr.slice(7), idx[idx < len(arr) - 7]))
    both(lambda: strings.take_str(arr, idx, pa.binary()))
    both(lambda: strings.cut(arr, ascii_idx, lo, lo + 2))
    assert scan.copy_out(pa.py_buffer(b"abc"), np.array([2]), np.array([2])) is None   # past the end: the reference's


def test_pieces_of_several_buffers_are_the_views_cut(monkeypatch):
    # strace's arguments: most in the block's lines, those of a call joined
    # from two lines in a buffer of their own.
    from kdiag.parsers import strings

    rng = random.Random(23)
    texts = ["".join(rng.choice(["a", "é", "Sent ", "😀", "(7, "]) for _ in range(400)) for _ in range(3)]
    bufs = [pa.py_buffer(t.encode()) for t in texts]
    # Each buffer cut into pieces of whole characters, none overlapping (as
    # views() asks), some skipped, then the pieces of all buffers mixed.
    pieces = []
    for b, t in enumerate(texts):
        at = 0
        while t:
            k = rng.randint(0, 12)
            if rng.random() < 0.8:
                pieces.append((b, at, len(t[:k].encode())))
            at += len(t[:k].encode())
            t = t[k:]
    rng.shuffle(pieces)
    buf, start, length = (np.array(x) for x in zip(*pieces))
    got = strings.views(start, length, buf, bufs)
    with monkeypatch.context() as m:
        m.setattr(scan, "COMPILED", False)
        ref = strings.views(start, length, buf, bufs)
    assert got.equals(ref) and len(got) == len(pieces) > 100
    b, at, n = pieces[0]
    assert got[0].as_py() == texts[b].encode()[at:at + n].decode()
    # a piece past its buffer's end, or of no buffer: the reference's to make
    assert scan.copy_out_many(bufs, np.array([1]), np.array([bufs[1].size - 1]), np.array([2])) is None
    assert scan.copy_out_many(bufs, np.array([3]), np.array([0]), np.array([1])) is None
