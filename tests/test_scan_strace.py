"""strace's compiled reading (parsers/_scan_strace.c) gives what its
reference gives, line for line.

``line_fields`` reads the lines a file's layout reads, and that end as
most calls end, in one compiled pass, and leaves the rest to its patterns;
``rows._first_fd`` reads the first argument in compiled code. Both are run
here both ways on every strace capture in fixtures/, on lines built in
every layout from the pieces where the byte arithmetic could go wrong, and
on those lines cut and bent at random; the parser's whole table is compared
both ways too.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdiag.ingest.lines import iter_line_chunks
from kdiag.parsers import scan
from kdiag.parsers.strace.line_fields import layout_of, learn_layout, line_fields
from kdiag.parsers.strace.parser import StraceParser, as_string_array
from kdiag.parsers.strace.rows import _data, _first_fd

pytestmark = pytest.mark.skipif(not scan.COMPILED and not os.environ.get("CI"),
                                reason="kdiag's compiled scans were not built here (no C compiler at install)")

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted({p for pat in ("fixtures/**/strace*", "fixtures/strace/*.txt", "fixtures/strace/ff/*",
                                 "fuzz/seeds/strace*")
                   for p in ROOT.glob(pat) if p.is_file()})
LAYOUTS = [(p, t, d) for p, ts in (("o", ("num_o", "tod", "none")), ("b", ("num", "tod", "none")))
           for t in ts for d in (True, False)]

# What strace prints at the start of a line, in each layout, and bent.
PIDS = {"o": ["2482  ", "7 ", "123456789 ", "1234567890 ", "12", " 12 "],
        "b": ["", "[pid  5940] ", "[pid 1] ", "[pid 1234567890] ", "[pid 5] x", "[pi 5] "]}
TIMES = {"num_o": ["1795314016.121249 ", "1.5 ", "2147483647.999999 ", "2147483648.000001 ", "9999999999.999999 ",
                   "9007199254.740993 ", "4338935521.448199 ", "1795314016.1234567 ", "1795314016.123456789 ", "12345678901.1 ",
                   "1795314016.1234567890 ", "1795314016. ", ".5 ", "1795314016.121249"],
         "tod": ["02:24:05.260276 ", "02:24:05 ", "23:59:59.999999999 ", "02:24:05.1234567890 ", "2:24:05 ",
                 "02:24:05.", "02:24:5 ", "02:24:05.5x "],
         "none": [""]}
TIMES["num"] = TIMES["num_o"] + ["     0.000288 ", "  1795314016.121249 "]
TOKENS = ["write(", "sendto(", "???(", "_llseek(", "<... read resumed>", "<... resumed>", "<... readresumed>",
          "<... r\u00e9ad resumed>", "<...  resumed>", "--- ", "+++ ", "strace: ", "[ Process PID=", "write ",
          "<... read resumed", "9p("]
ARGS = ['7<TCP:[127.0.0.1:42018->127.0.0.1:19093]>, "\\x17\\x03\\x03", 5', "[{fd=7, events=POLLIN}], 1, -1", "",
        '2</tmp/x.log>, "%7|1795334606.649|SEND|c| [thrd:a]: Sent (v7, 5 bytes)\\n", 57', "3, ", "x" * 200,
        "\u00e9) = 5", "a)", '1</dev/pts/0<char 136:0>>, "', "0x7f, 4096", ") = 1 <0.5>"]
ENDS = [") = 137 <0.000011>", ") = -1 EAGAIN (Resource temporarily unavailable) <0.000069>",
        ") = 1 ([{fd=7, revents=POLLIN}]) <0.042753>", ") = 0x7f7c8b3fc000", ")       = ?", ") = ? <0.000001>",
        " <unfinished ...>", "<unfinished ...>", " <detached ...>", ") = 3</etc/ld.so.cache> <0.000027>",
        ") = -1 512 (Unknown error 512)", ") = 999999999999999999", ") = 9999999999999999999",
        ") = -999999999999999999", ") = -9999999999999999999", ") = 0xffffffffffffffff",
        ") = 0x1ffffffffffffffff", ") = 0XaB", ") = 0x", ") = -", ") = 3</dev/null<char 1:3>> <0.000014>",
        ") = 0 <1234567890.1>", ") = 0 <1.1234567>", ") = 0 <1.1234567890>", ") = 0 <.5>", ") = 0 <1.>",
        ") = 0 E", ") = 0 EIO", ") = 0 _X (y)", ") = 0 ERESTARTSYS (To be restarted if SA_RESTART is set)",
        ") = 0 (a(b)) <0.1>", ") = 0 (a)b <0.1>", ")= 5", ") =  5", ") = 5 ", ") = \u00e95", ") = 5>",
        ") = ?>", ") = 5 EAGAIN(x)", "", ")", ") = 1 ([{fd=7, revents=POLLIN}]) <0.042753> <0.1>"]
BITS = ["<", ">", "(", ")", " ", "=", ".", "0", "9", "E", "_", ",", "\u00e9", "<unfinished ...>", ") = ",
        "resumed>", "\t"]


def _same(lines: pa.Array, layout) -> None:
    got, ref = line_fields(lines, layout), line_fields(lines, layout, compiled=False)
    assert got.keys() == ref.keys()
    for k, r in ref.items():
        g = got[k]
        if isinstance(r, pa.Array):
            bad = [i for i in range(len(r)) if g[i].as_py() != r[i].as_py()]
        else:
            bad = np.flatnonzero(g != r).tolist()
        assert not bad, (k, layout[3:], [(lines[i].as_py(), g[i], r[i]) for i in bad[:3]])


def _fds_same(args: pa.Array, name: pa.Array, rows: np.ndarray) -> None:
    got, ref = _first_fd(args, name, rows), _first_fd(args, name, rows, compiled=False)
    for g, r in zip(got, ref):
        same = g.equals(r) if isinstance(r, pa.Array) else np.array_equal(g, r)
        assert same, (g, r)


def _table(path: Path) -> tuple[pa.Table, object]:
    p = StraceParser()
    out = [p.feed(c.lines, c.first_line_no) for c in iter_line_chunks(path)]
    return pa.concat_tables([*out, p.finish()]), p.counts


def test_ci_builds_the_compiled_scans():
    assert scan.COMPILED


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(p.relative_to(ROOT)))
def test_real_captures(path, monkeypatch):
    read = 0
    for chunk in iter_line_chunks(path):
        lines = as_string_array(chunk.lines)   # a pasted excerpt's quote markers off, as the parser does
        layout = learn_layout(lines)
        if layout is not None:
            _same(lines, layout)
            read += int(scan.strace_lines(lines, *layout[3:], layout.has_dur)[scan.L_OK].sum())
    got, counts = _table(path)
    monkeypatch.setattr(scan, "COMPILED", False)
    ref, ref_counts = _table(path)
    assert got.equals(ref) and counts == ref_counts
    # The compiled pass is not just handing every line to the patterns.
    assert read or not got.num_rows


def _built(rng: random.Random, pid_kind: str, ts_kind: str) -> str:
    """A line from the pieces; one in two from the first few of each, as
    strace prints them."""
    pick = (lambda xs, k: rng.choice(xs[:k])) if rng.random() < 0.5 else (lambda xs, k: rng.choice(xs))
    return (pick(PIDS[pid_kind], 2) + pick(TIMES[ts_kind], 1) + pick(TOKENS, 2) + pick(ARGS, 4)
            + pick(ENDS, 7))


@pytest.mark.parametrize("pid_kind,ts_kind,has_dur", LAYOUTS)
def test_built_lines_in_every_layout(pid_kind, ts_kind, has_dur):
    rng = random.Random(f"{pid_kind}{ts_kind}{has_dur}")
    lines = [_built(rng, pid_kind, ts_kind) for _ in range(4000)]
    # Every other layout's lines too: a head in another layout is the patterns'.
    other = [_built(rng, p, t) for p, t, _ in LAYOUTS for _ in range(100)]
    arr = pa.array(["x"] * 3 + lines + other, pa.string()).slice(3)
    layout = layout_of(pid_kind, ts_kind, has_dur)
    _same(arr, layout)
    assert scan.strace_lines(arr, pid_kind, ts_kind, has_dur)[scan.L_OK].sum() > 1000


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(LAYOUTS) - 1), st.integers(0, 2**32),
       st.lists(st.tuples(st.integers(-60, 260), st.sampled_from(BITS), st.booleans()), max_size=4))
def test_bent_lines(which, seed, edits):
    pid_kind, ts_kind, has_dur = LAYOUTS[which]
    rng = random.Random(seed)
    lines = []
    for _ in range(8):
        line = _built(rng, pid_kind, ts_kind)
        for at, bit, replace in edits:
            at = at % (len(line) + 1)
            line = line[:at] + bit + line[at + (len(bit) if replace else 0):]
        lines.append(line)
    _same(pa.array(lines, pa.string()), layout_of(pid_kind, ts_kind, has_dur))


def test_cut_lines():
    # Every line cut at every length: each end where the reading looks past it.
    rng = random.Random(5)
    for pid_kind, ts_kind, has_dur in LAYOUTS[::2]:
        whole = [_built(rng, pid_kind, ts_kind) for _ in range(40)]
        lines = [w[:k] for w in whole for k in range(len(w) + 1)]
        _same(pa.array(lines, pa.string()), layout_of(pid_kind, ts_kind, has_dur))


def test_ends_about_the_window():
    # The end is read from the line's last TAIL_WINDOW bytes: a ")" just
    # inside them and just outside.
    lines = [f"2482  1.5 write(7, {'a' * 50}) = 1{e} ({'y' * n}){d}" for n in range(170, 200)
             for e in ("", " EAGAIN") for d in ("", " <0.000011>")]
    for has_dur in (True, False):
        _same(pa.array(lines, pa.string()), layout_of("o", "num_o", has_dur))


def test_first_fds():
    rng = random.Random(9)
    heads = ["7", "3", "123456789", "1234567890", "0", "-1", "0x7f", "[{fd=7", "", "7 ", "\u00e9"]
    mids = ["", "<TCP:[127.0.0.1:42018->127.0.0.1:19093]>", "</dev/pts/0<char 136:0>>", "<", "<>", ">", "<\u00e9>",
            "<a>, b>, c", "<x"]
    tails = ["", ", 5", ",", ">, ", " 5", "x", ">"]
    args = [rng.choice(heads) + rng.choice(mids) + rng.choice(tails) for _ in range(5000)]
    names = pa.array([rng.choice(["write", "poll", "openat", None, "read"]) for _ in args], pa.string())
    rows = np.array([rng.random() < 0.9 for _ in args])
    _fds_same(pa.array(["z"] + args, pa.string()).slice(1), names, rows)


def test_quoted_data():
    # What a write to stdout/stderr carries: the first C string, decoded.
    rng = random.Random(11)
    bits = ["%7|1795334606.649|SEND|c| x", "\\n", "\\t", "\\r", '\\"', "\\\\", "\\x41", "\\303\\251",
            "\\e", "\\", '"', "\u00e9", "a", " ", ", ", "..."]
    args = []
    for _ in range(5000):
        head = rng.choice(['2, "', '1</dev/pts/0>, "', '2, [{iov_base="', "", "x"])
        args.append(head + "".join(rng.choice(bits) for _ in range(rng.randint(0, 8))) + rng.choice(['", 5', "", '"']))
    n = len(args)
    name = pa.array([rng.choice(["write", "writev", "read", None]) for _ in range(n)], pa.string())
    fd = np.array([rng.choice([1, 2, 3]) for _ in range(n)])
    fd_ok = np.array([rng.random() < 0.9 for _ in range(n)])
    arr = pa.array(["q"] + args, pa.string()).slice(1)
    got, ref = _data(arr, name, fd, fd_ok), _data(arr, name, fd, fd_ok, compiled=False)
    bad = [i for i in range(n) if got[i].as_py() != ref[i].as_py()]
    assert not bad, [(args[i], got[i], ref[i]) for i in bad[:3]]
    assert got.equals(ref)
    assert n - got.null_count > 500   # strings were found, not all refused


def test_edge_bytes():
    for lines in (["a", "> b"], ["a\r", "b"], ["", ">"], ["x\r"], [""], [], [">\r"], ["a", "b"]):
        arr = pa.array(["> \r"] + lines, pa.string()).slice(1)
        assert scan.edge_bytes(arr, ">", "\r") == scan.edge_bytes(arr, ">", "\r", compiled=False), lines


def test_ends_with():
    lines = pa.array(["x", "a attached", "b detached", "attached", " attached", "d", "", None, "x detached\u00e9",
                      "strace: Process 1 attached"], pa.string()).slice(1)
    for suffixes in ((" attached", " detached"), ("d",), ("\u00e9",)):
        got = scan.ends_with(lines, suffixes)
        assert got.tolist() == scan.ends_with(lines, suffixes, compiled=False).tolist(), suffixes
    assert scan.ends_with(lines, (" attached", " detached")).sum() == 4


def test_short_buffers_are_refused():
    from kdiag.parsers import _scan

    lines = pa.array(["1 1.5 write(1) = 1"], pa.string())
    off, first, n, data = scan._buffers(lines)
    with pytest.raises(ValueError):
        _scan.strace_lines(off, first, n + 5, data, np.zeros((scan.L_FIELDS, n + 5), np.int64), 0)
    with pytest.raises(ValueError):
        _scan.strace_lines(off, first, n, data, np.zeros((scan.L_FIELDS - 1, n), np.int64), 0)
    with pytest.raises(ValueError):
        _scan.first_fds(off, first, n, data, np.zeros(1, np.int64))
    with pytest.raises(ValueError):
        _scan.quoted_data(off, first, n, data, np.zeros((scan.Q_FIELDS, n), np.int64), np.ones(n, np.uint8),
                          np.zeros(1, np.uint8))
    with pytest.raises(ValueError):
        _scan.edge_bytes(off, first, n, data, np.zeros(1, np.uint8), 0)


def test_resumed_calls_joined_args(monkeypatch):
    """An <unfinished ...> call's arguments and its <... resumed> rest are
    joined in one compiled copy: the same as the reference's join, across
    threads, with UTF-8 and empty halves, and a feed's end between the two
    halves."""
    lines = []
    for i in range(300):
        a, b, t = 100 + i % 3, 200 + i % 2, f"10:00:{i // 10:02d}.{i:06d}"
        lines += [f"{a} {t} read(7<TCP:[1]>, <unfinished ...>",
                  f"{b} {t} poll([{{fd=7, events=POLLIN}}], 1, {i} <unfinished ...>",
                  f"{a} {t} <... read resumed>\"é{i}\", 4096) = 3 <0.000011>",
                  f"{b} {t} <... poll resumed>) = 0 (Timeout) <0.001000>"]

    def table():
        p = StraceParser()
        out = [p.feed(pa.array(lines[s:s + 101], pa.string()), s + 1) for s in range(0, len(lines), 101)]
        return pa.concat_tables([*out, p.finish()]).sort_by("line_no")

    got = table()
    monkeypatch.setattr(scan, "COMPILED", False)
    ref = table()
    assert got.equals(ref)
    assert got.num_rows == 600 and not any(got["unfinished"].to_pylist())
    assert got["args"].to_pylist()[10:12] == ['7<TCP:[1]>,"é5", 4096', "[{fd=7, events=POLLIN}], 1, 5"]
