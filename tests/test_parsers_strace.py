"""kdiag.parsers.strace on real strace captures (fixtures/strace/*.txt, each with
the command that made it in NAME.txt.cmd) and on input that is not strace.

Row counts below were checked against the fixtures with grep, e.g.
  grep -c 'resumed>' F; grep -c '<unfinished \\.\\.\\.>$' F; grep -c -- '--- SIG' F
rows = lines - resumed lines joined to their start - halves of cut lines.
"""
from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdiag.parsers.base import ParseCounts
from kdiag.parsers.strace import SCHEMA, StraceParser, looks_like, parse_lines, unescape

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "strace"
NAMES = ["nagle_tls_slice", "threads_loopback", "sh_fork_stderr", "nofork_relative", "nofork_seconds"]
RDKAFKA_LINE = (
    "%7|1795314017.477|SEND|rdkafka#producer-1| [thrd:ssl://127.0.0.1:19093/111]: "
    "ssl://127.0.0.1:19093/111: Sent ProduceRequest (v10, 2164 bytes @ 0, CorrId 20)"
)


def lines_of(name: str) -> list[str]:
    return (FIXTURES / f"{name}.txt").read_text(encoding="utf-8", errors="replace").splitlines()


_parsed: dict[str, tuple[pa.Table, ParseCounts]] = {}


def parsed(name: str) -> tuple[pa.Table, ParseCounts]:
    if name not in _parsed:
        _parsed[name] = parse_lines(lines_of(name))
    return _parsed[name]


def row_at(table: pa.Table, line_no: int) -> dict:
    rows = table.filter(pc.equal(table["line_no"], line_no)).to_pylist()
    assert len(rows) == 1, f"no single row for line {line_no}: {rows}"
    return rows[0]


def balanced(c: ParseCounts) -> bool:
    return c.lines == c.parsed + c.skipped_total


def feed_in_pieces(lines: list[str], cuts: list[int]) -> tuple[pa.Table, ParseCounts]:
    p = StraceParser()
    out, start = [], 0
    for cut in [*cuts, len(lines)]:
        out.append(p.feed(pa.array(lines[start:cut], pa.string()), start + 1))
        start = cut
    out.append(p.finish())
    t = pa.concat_tables(out)
    return t.take(pc.sort_indices(t["line_no"])), p.counts


# --- The fixtures ------------------------------------------------------------


def test_fixtures_are_small_and_documented():
    for name in NAMES:
        assert (FIXTURES / f"{name}.txt").stat().st_size < 150_000
        cmd = (FIXTURES / f"{name}.txt.cmd").read_text().splitlines()
        assert cmd[0].lstrip().startswith(("strace ", "BOOTSTRAP=")) and "strace" in cmd[0]
        assert len(cmd) >= 2


@pytest.mark.parametrize(
    "name, lines, rows, kinds, unfinished, skipped",
    [
        # 85 resumed, 2 of them (lines 1-2) before the slice's first line;
        # the last poll (line 294) never resumes.
        ("nagle_tls_slice", 300, 217, {"syscall": 217}, 1, {"orphan_resumed": 2}),
        # 248 unfinished, all resumed; SIGUSR1; 5 threads + main exit.
        ("threads_loopback", 997, 749, {"syscall": 742, "exit": 6, "signal": 1}, 0, {}),
        # 26 resumed, 3 lines cut by "strace: Process N attached".
        ("sh_fork_stderr", 238, 209, {"syscall": 202, "signal": 3, "exit": 3, "killed": 1}, 0, {}),
        ("nofork_relative", 89, 89, {"syscall": 86, "signal": 2, "exit": 1}, 0, {}),
        ("nofork_seconds", 51, 51, {"syscall": 50, "exit": 1}, 0, {}),
    ],
)
def test_fixture_rows_and_counts(name, lines, rows, kinds, unfinished, skipped):
    t, c = parsed(name)
    assert t.schema == SCHEMA
    assert t.num_rows == rows
    assert dict(Counter(t["kind"].to_pylist())) == kinds
    assert sum(t["unfinished"].to_pylist()) == unfinished
    assert c.lines == lines
    assert c.skipped == skipped
    assert balanced(c)
    assert c.parsed == lines - sum(skipped.values())
    line_no = t["line_no"].to_pylist()
    assert line_no == sorted(line_no) and len(set(line_no)) == len(line_no)


def test_schema_is_documented():
    assert SCHEMA.names == [
        "line_no", "pid", "ts_us", "dur_us", "kind", "syscall", "fd", "fd_info",
        "args", "ret", "errno", "unfinished", "data",
    ]
    assert [str(f.type) for f in SCHEMA] == [
        "int64", "int32", "int64", "int64", "string", "string", "int32", "string",
        "string", "int64", "string", "bool", "string",
    ]
    for f in SCHEMA:
        assert f.metadata and f.metadata[b"doc"]
    assert SCHEMA.field("ts_us").metadata[b"unit"] == b"us"
    assert SCHEMA.field("dur_us").metadata[b"unit"] == b"us"


def test_every_resumed_line_becomes_part_of_one_row():
    for name in NAMES:
        lines = lines_of(name)
        t, c = parsed(name)
        resumed = sum("resumed>" in s for s in lines)
        cut = sum(bool(re.search(r".strace: Process \d+ attached$", s)) for s in lines)
        assert t.num_rows == len(lines) - resumed - cut + c.skipped.get("orphan_resumed", 0), name


# --- Unfinished / resumed ------------------------------------------------------


def test_pairing_across_threads():
    # 570: 11330 connect(5<TCP:[37061]>, ..., 16 <unfinished ...>
    # 572: 11331 connect(6<TCP:[36249]>, ..., 16 <unfinished ...>
    # 573: 11330 <... connect resumed>) = 0 <0.001910>
    # 575: 11331 <... connect resumed>) = 0 <0.001479>
    t, _ = parsed("threads_loopback")
    a, b = row_at(t, 570), row_at(t, 572)
    assert (a["pid"], a["syscall"], a["fd"], a["fd_info"]) == (11330, "connect", 5, "TCP:[37061]")
    assert (b["pid"], b["syscall"], b["fd"], b["fd_info"]) == (11331, "connect", 6, "TCP:[36249]")
    assert (a["ret"], a["dur_us"], a["ts_us"]) == (0, 1910, 1795314374340004)
    assert (b["ret"], b["dur_us"], b["ts_us"]) == (0, 1479, 1795314374341930)
    assert a["args"] == '5<TCP:[37061]>, {sa_family=AF_INET, sin_port=htons(38549), sin_addr=inet_addr("127.0.0.1")}, 16'
    assert not a["unfinished"] and not b["unfinished"]
    assert t.filter(pc.is_in(t["line_no"], pa.array([573, 575]))).num_rows == 0


def test_unfinished_read_and_its_resumed_arguments_join():
    # 720: 11332 recvfrom(4<TCP:[127.0.0.1:38549->127.0.0.1:42170]>,  <unfinished ...>
    # 722: 11330 recvfrom(5<...>,  <unfinished ...>   724: 11330 <... recvfrom resumed>...
    # 730: 11332 <... recvfrom resumed>"req 1.1\tCorrId 11\n", 4096, 0, NULL, NULL) = 18 <0.000130>
    t, _ = parsed("threads_loopback")
    r = row_at(t, 720)
    assert (r["pid"], r["fd"], r["ret"], r["dur_us"]) == (11332, 4, 18, 130)
    assert r["fd_info"] == "TCP:[127.0.0.1:38549->127.0.0.1:42170]"
    assert r["args"] == '4<TCP:[127.0.0.1:38549->127.0.0.1:42170]>, "req 1.1\\tCorrId 11\\n", 4096, 0, NULL, NULL'
    assert row_at(t, 722)["args"].startswith("5<TCP:[127.0.0.1:42170->127.0.0.1:38549]>, \"req 1.0")


def test_signal_between_unfinished_and_resumed_does_not_break_the_pair():
    t, _ = parsed("threads_loopback")
    kill = row_at(t, 955)  # kill(11288, SIGUSR1 <unfinished ...>, resumed at 957
    assert (kill["syscall"], kill["args"], kill["ret"], kill["unfinished"]) == ("kill", "11288, SIGUSR1", 0, False)
    sig = row_at(t, 958)
    assert (sig["kind"], sig["syscall"], sig["pid"]) == ("signal", "SIGUSR1", 11288)
    assert sig["args"].startswith("SIGUSR1 {si_signo=SIGUSR1, si_code=SI_USER")


def test_pairing_across_a_chunk_boundary():
    # Line 147 is "poll([...], 2, 1000 <unfinished ...>", its resumed line is
    # 157: cut between them.
    lines = lines_of("nagle_tls_slice")
    assert lines[146].endswith("<unfinished ...>") and "<... poll resumed>" in lines[156]
    p = StraceParser()
    first = p.feed(pa.array(lines[:150]), 1)
    assert 147 not in first["line_no"].to_pylist()  # held back, not yet complete
    second = p.feed(pa.array(lines[150:]), 151)
    poll = row_at(second, 147)
    assert poll["syscall"] == "poll" and poll["pid"] == 12011
    assert poll["ret"] == 1 and poll["dur_us"] == 42692 and not poll["unfinished"]
    assert poll["ts_us"] == 1795314388521925  # timed at the unfinished line
    assert poll["args"].endswith("], 2, 1000")
    rest = p.finish()
    assert rest["line_no"].to_pylist() == [294] and rest["unfinished"].to_pylist() == [True]
    whole, _ = parsed("nagle_tls_slice")
    pieces = pa.concat_tables([first, second, rest])
    assert pieces.take(pc.sort_indices(pieces["line_no"])).to_pylist() == whole.to_pylist()
    assert balanced(p.counts) and p.counts.lines == 300


@pytest.mark.parametrize("name", ["nagle_tls_slice", "sh_fork_stderr", "threads_loopback"])
def test_any_chunking_gives_the_same_rows(name):
    lines = lines_of(name)
    whole, wc = parsed(name)
    rng = random.Random(name)
    for _ in range(6):
        cuts = sorted(rng.sample(range(1, len(lines)), rng.randint(1, 8)))
        t, c = feed_in_pieces(lines, cuts)
        assert t.to_pylist() == whole.to_pylist(), cuts
        assert (c.lines, c.parsed, c.skipped) == (wc.lines, wc.parsed, wc.skipped)


def test_blocks_inside_one_feed_keep_line_order(monkeypatch):
    import kdiag.parsers.strace.parser as strace_module

    expected = parsed("threads_loopback")[0].to_pylist()
    monkeypatch.setattr(strace_module, "BLOCK_LINES", 97)
    t, c = parse_lines(lines_of("threads_loopback"))
    assert t.to_pylist() == expected
    assert balanced(c) and c.lines == 997


def test_one_line_per_feed():
    lines = lines_of("sh_fork_stderr")[:120]
    t, c = feed_in_pieces(lines, list(range(1, len(lines))))
    assert t.to_pylist() == parse_lines(lines)[0].to_pylist()
    assert balanced(c)


def test_unfinished_at_end_and_before_exit():
    t, c = parse_lines([
        "2524  1795314018.057973 exit(0 <unfinished ...>",
        "2527  1795314018.058069 close(8<pipe:[4254]> <unfinished ...>",
        "2524  1795314018.058085 +++ exited with 0 +++",
    ])
    rows = {r["line_no"]: r for r in t.to_pylist()}
    assert rows[1]["unfinished"] and rows[1]["syscall"] == "exit" and rows[1]["ret"] is None
    assert rows[2]["unfinished"] and rows[2]["fd"] == 8 and rows[2]["fd_info"] == "pipe:[4254]"
    assert rows[3]["kind"] == "exit" and rows[3]["ret"] == 0 and rows[3]["syscall"] is None
    assert c.parsed == 3


def test_orphan_resumed_gives_a_row_and_is_counted():
    t, c = parsed("nagle_tls_slice")
    first = row_at(t, 1)  # "12006 ... <... futex resumed>) = 0 <0.000074>"
    assert (first["syscall"], first["ret"], first["dur_us"], first["args"], first["fd"]) == ("futex", 0, 74, "", None)
    assert c.skipped["orphan_resumed"] == 2
    assert [e[:2] for e in c.examples] == [(1, "orphan_resumed"), (2, "orphan_resumed")]


def test_stderr_prefixes_and_lines_cut_by_strace_messages():
    t, _ = parsed("sh_fork_stderr")
    # 50: "02:26:16.009113 clone(...|SIGCHLDstrace: Process 11464 attached"
    # 51: ", child_tidptr=0x7fc4a879ea10) = 11464 <0.000093>"
    clone = row_at(t, 50)
    assert clone["pid"] is None and clone["syscall"] == "clone" and clone["ret"] == 11464
    assert clone["args"].endswith("SIGCHLD, child_tidptr=0x7fc4a879ea10")
    assert 51 not in t["line_no"].to_pylist()
    # 104: "[pid 11464] ... vfork(strace: Process 11466 attached" / " <unfinished ...>"
    vfork = row_at(t, 104)
    assert (vfork["pid"], vfork["syscall"], vfork["args"], vfork["ret"], vfork["unfinished"]) == (11464, "vfork", "", 11466, False)
    # Started as "[pid 11463] rt_sigsuspend([], 8 <unfinished ...>", resumed
    # after the other processes were gone, so without a prefix (line 231).
    sus = row_at(t, 99)
    assert (sus["pid"], sus["syscall"], sus["dur_us"], sus["errno"]) == (11463, "rt_sigsuspend", 55470, "ERESTARTNOHAND")
    assert sus["ret"] is None
    killed = row_at(t, 70)
    assert (killed["kind"], killed["syscall"], killed["pid"], killed["ret"]) == ("killed", "SIGKILL", 11465, None)
    unknown = row_at(t, 62)  # "???( <unfinished ...>" ... "<... ??? resumed>) = ?"
    assert unknown["syscall"] == "???" and not unknown["unfinished"]


# --- Fields ----------------------------------------------------------------------


def test_yy_annotations_and_fds():
    t, _ = parsed("nagle_tls_slice")
    tls = row_at(t, 143)
    assert (tls["fd"], tls["fd_info"], tls["ret"]) == (7, "TCP:[127.0.0.1:48214->127.0.0.1:33655]", 134)
    pipe = row_at(t, 140)  # read(8<pipe:[37899]>, ...) = -1 EAGAIN (...)
    assert (pipe["fd"], pipe["fd_info"], pipe["ret"], pipe["errno"]) == (8, "pipe:[37899]", -1, "EAGAIN")
    log = row_at(t, 146)
    assert (log["fd"], log["fd_info"]) == (2, "/root/stw/kafka/log_nagle.txt")
    poll = row_at(t, 142)  # poll([{fd=7<...>, ...}], 2, 0) = 1 ([{fd=7, revents=POLLOUT}])
    assert poll["fd"] is None and poll["fd_info"] is None and poll["ret"] == 1
    nodelay = row_at(parsed("threads_loopback")[0], 576)
    assert (nodelay["syscall"], nodelay["fd"]) == ("setsockopt", 5)
    assert nodelay["fd_info"] == "TCP:[127.0.0.1:42170->127.0.0.1:38549]"
    assert nodelay["args"].endswith("SOL_TCP, TCP_NODELAY, [1], 4")


def test_fd_without_annotation_only_for_fd_calls():
    t, _ = parse_lines([
        'write(1, "hi\\n", 3) = 3',
        "close(3) = 0",
        "exit_group(0) = ?",
        "kill(2483, SIGTERM) = 0",
        "mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, -1, 0) = 0x7f7c8b3fc000",
        'openat(AT_FDCWD</tmp/exp>, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3</etc/ld.so.cache>',
        'write(1</dev/pts/0<char 136:0>>, "x", 1) = 1',
    ])
    fds = t["fd"].to_pylist()
    assert fds == [1, 3, None, None, None, None, 1]
    assert t["fd_info"].to_pylist()[6] == "/dev/pts/0<char 136:0>"
    assert t["ret"].to_pylist() == [3, 0, None, 0, 0x7F7C8B3FC000, 3, 1]


def test_send_line_data_carries_the_corrid():
    t, _ = parsed("nagle_tls_slice")
    send = row_at(t, 146)
    assert send["data"] == (
        "%7|1795314388.521|SEND|rdkafka#producer-1| [thrd:ssl://127.0.0.1:33655/111]: "
        "ssl://127.0.0.1:33655/111: Sent ProduceRequest (v10, 2164 bytes @ 0, CorrId 20)\n"
    )
    assert send["ret"] == 157 and send["dur_us"] == 19
    data = t.filter(pc.invert(pc.is_null(t["data"])))
    corr = [int(m.group(1)) for d in data["data"].to_pylist() for m in [re.search(r"Sent ProduceRequest .*CorrId (\d+)\)", d)] if m]
    assert corr == [17, 18, 19, 20, 21, 22, 23]
    # Only writes to fd 1/2 carry data; the TLS records on fd 7 do not.
    assert set(data["fd"].to_pylist()) == {2}
    assert row_at(t, 143)["data"] is None


def test_data_of_stderr_lines_in_threads_capture():
    t, _ = parsed("threads_loopback")
    data = [d for d in t["data"].to_pylist() if d]
    assert 'client 2: sent "req 2.0\tCorrId 20" (CorrId 20)\n' in data
    assert len([d for d in data if d.startswith("client ")]) == 6


def test_data_escapes():
    t, _ = parse_lines([
        r'write(1, "\x68\xc3\xa9\x0a", 4) = 4',
        r'write(2, "a\\nb\"c\tq\303\251\0z"..., 99) = 99',
        r'sendto(2, "\1\2", 2, 0, NULL, 0) = 2',
        r'writev(2, [{iov_base="ab\n", iov_len=3}], 1) = 3',
        r'read(2, "not a write\n", 99) = 12',
        r'write(7, "x\n", 2) = 2',
    ])
    assert t["data"].to_pylist() == ["hé\n", 'a\\nb"c\tqé\0z', "\x01\x02", "ab\n", None, None]


def test_unescape():
    assert unescape("plain") == "plain"
    assert unescape(r"a\nb\tc\"d\\e") == 'a\nb\tc"d\\e'
    assert unescape(r"\x41\102\0\12") == "AB\0\n"
    assert unescape(r"\303\251t\303\251") == "été"
    assert unescape(r"\377") == "\ufffd"
    assert unescape("trailing\\") == "trailing\\"
    assert unescape(r"\q") == r"\q"
    assert unescape("\udc80\\n").endswith("\ufffd\n")  # a lone surrogate does not raise


def test_timestamps_and_clock():
    t, _ = parsed("sh_fork_stderr")
    assert row_at(t, 1)["ts_us"] == (2 * 3600 + 26 * 60 + 16) * 10**6 + 6634  # 02:26:16.006634
    assert row_at(parsed("nofork_relative")[0], 2)["ts_us"] == 288  # "     0.000288 brk(NULL)"
    secs = parsed("nofork_seconds")[0]["ts_us"].to_pylist()
    assert all(s % 10**6 == 0 for s in secs) and secs[0] == (2 * 3600 + 26 * 60 + 22) * 10**6
    assert parsed("nofork_seconds")[0]["dur_us"].null_count == 51
    clocks = {}
    for name in NAMES:
        p = StraceParser()
        p.feed(pa.array(lines_of(name)), 1)
        clocks[name] = p.clock
    assert clocks == {
        "nagle_tls_slice": "epoch", "threads_loopback": "epoch", "sh_fork_stderr": "time_of_day",
        "nofork_relative": "relative", "nofork_seconds": "time_of_day",
    }
    p = StraceParser()
    assert p.clock is None
    p.feed(pa.array(["garbage", 'write(1, "a", 1) = 1']), 1)
    assert p.clock is None  # first parsed line has no timestamp


def test_other_timestamp_layouts():
    t, _ = parse_lines([
        "1795314242.769597 (+     0.000318) brk(NULL) = 0x55a6f75ef000",  # -ttt -r
        "29444 1795316051.344746220 write(1, \"a\\n\", 2) = 2 <0.000009123>",  # ns
        "[pid  5940] 02:24:05.260276 getpid() = 5940",
        "12 02:24:02 getpid() = 12",
    ])
    assert t["ts_us"].to_pylist() == [1795314242769597, 1795316051344746, 8645260276, 8642000000]
    assert t["pid"].to_pylist() == [None, 29444, 5940, 12]
    assert t["dur_us"].to_pylist() == [None, 9, None, None]


def test_return_values_and_errnos():
    t, _ = parse_lines([
        "exit_group(0)                  = ?",
        "rt_sigsuspend([], 8) = ? ERESTARTNOHAND (To be restarted if no handler) <0.000008>",
        'access("/etc/ld.so.preload", R_OK) = -1 ENOENT (No such file or directory) <0.000029>',
        "fcntl(3, F_GETFL) = 0x8002 (flags O_RDWR|O_LARGEFILE) <0.000010>",
        "poll([{fd=7, events=POLLIN}], 1, 1000) = 1 ([{fd=7, revents=POLLIN}]) <0.042753>",
        "brk(NULL) = 0xffffffffffffffff",
        "socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC, IPPROTO_IP) = 3<TCP:[35233]> <0.000023>",
        "openat(AT_FDCWD, \"/dev/null\", O_WRONLY) = 3</dev/null<char 1:3>> <0.000014>",
    ])
    assert t["ret"].to_pylist() == [None, None, -1, 0x8002, 1, -1, 3, 3]
    assert t["errno"].to_pylist() == [None, "ERESTARTNOHAND", "ENOENT", None, None, None, None, None]
    assert t["dur_us"].to_pylist() == [None, 8, 29, 10, 42753, None, 23, 14]
    assert t["args"].to_pylist()[4] == "[{fd=7, events=POLLIN}], 1, 1000"


def test_strace_messages_and_stack_lines():
    t, c = parse_lines([
        "strace: Process 123 attached",
        "[ Process PID=123 runs in x32 mode. ]",
        "strace: Process 123 detached",
        "[pid   123] 02:24:05.260276 getpid() = 123",
        " > /usr/lib/x86_64-linux-gnu/libc.so.6(__libc_start_main+0x85) [0x271c5]",
        "",
    ])
    assert t.num_rows == 1
    assert c.skipped == {"strace_message": 3, "stack_trace": 1, "blank": 1}
    assert balanced(c)


def test_args_are_capped():
    long = "x" * 10_000
    t, _ = parse_lines([f'write(1, "{long}", 10000) = 10000'])
    assert len(t["args"][0].as_py()) == 4096
    assert t["data"][0].as_py() == long  # data comes from the whole argument


# --- Input that is not (all) strace -------------------------------------------------


def test_empty_input():
    t, c = parse_lines([])
    assert t.num_rows == 0 and t.schema == SCHEMA
    assert (c.lines, c.parsed, c.skipped_total) == (0, 0, 0)
    p = StraceParser()
    assert p.feed(pa.array([], pa.string()), 1).num_rows == 0
    assert p.finish().num_rows == 0


def test_garbage_bytes():
    rng = random.Random(7)
    text = rng.randbytes(20_000).decode("utf-8", errors="replace")
    lines = text.split("\n")
    t, c = parse_lines(lines)
    assert balanced(c) and c.lines == len(lines)
    assert t.num_rows <= len(lines)
    assert 0 < len(c.examples) <= 5


def test_truncated_last_line():
    lines = lines_of("nagle_tls_slice")
    cut = lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]
    whole, _ = parsed("nagle_tls_slice")
    t, c = parse_lines(cut)
    assert c.skipped == {"orphan_resumed": 2, "truncated": 1}
    assert c.examples[-1][:2] == (300, "truncated")
    assert balanced(c)
    assert t.to_pylist() == [r for r in whole.to_pylist() if r["line_no"] != 300]


def test_megabyte_lines():
    real = lines_of("nagle_tls_slice")[145]  # the SEND write
    huge = real.replace("Sent ProduceRequest", "Sent " + "y" * 1_000_000)
    junk = "z" * 1_000_000
    t, c = parse_lines([huge, junk, real])
    assert c.skipped == {"unrecognised": 1} and balanced(c)
    assert t["ret"].to_pylist() == [157, 157]
    assert len(t["args"][0].as_py()) == 4096
    assert t["data"][0].as_py().endswith("CorrId 20)\n")


def test_foreign_formats_and_nulls():
    lines = [RDKAFKA_LINE, json.dumps({"name": "rdkafka#producer-1", "ts": 1}), "Traceback (most recent call last):",
             'print("x") = 1', None, "    0.1 x"]
    t, c = parse_lines(pa.array(lines, pa.string()))
    assert t.num_rows == 1  # the one that is shaped like a call
    assert c.lines == 6 and balanced(c)
    assert c.skipped["blank"] == 1


def test_crlf_and_other_array_types():
    lines = [s + "\r" for s in lines_of("nofork_seconds")]
    t, c = parse_lines(pa.chunked_array([pa.array(lines[:20]), pa.array(lines[20:])]))
    assert t.to_pylist() == parsed("nofork_seconds")[0].to_pylist()
    t2, _ = parse_lines(pa.array(lines_of("nofork_seconds"), pa.large_string()))
    assert t2.num_rows == 51


def test_first_line_no_is_honoured():
    t, c = parse_lines(lines_of("nofork_seconds"), first_line_no=1001)
    assert t["line_no"].to_pylist()[0] == 1001 and t["line_no"].to_pylist()[-1] == 1051


# --- looks_like ---------------------------------------------------------------------


def test_looks_like():
    for name in NAMES:
        assert looks_like(lines_of(name)[:50]) >= 0.9, name
    assert looks_like([RDKAFKA_LINE] * 20) < 0.2
    assert looks_like([json.dumps({"a": i, "b": [1, 2]}) for i in range(20)]) < 0.2
    assert looks_like((FIXTURES / "nagle_tls_prod.py").read_text().splitlines()) < 0.3
    assert looks_like([]) == 0.0
    assert looks_like(["", ""]) == 0.0


# --- Properties ---------------------------------------------------------------------

_REAL = lines_of("sh_fork_stderr") + lines_of("nagle_tls_slice")[:120]
_FRAGMENTS = [
    "2482  ", "[pid  12] ", "1795314016.121249 ", "02:24:05.260276 ", "     0.000123 ", "(+ 0.1) ",
    "write(", "???(", "<... read resumed>", "<... resumed>", "--- ", "+++ ", " ---", " +++", "strace: ",
    ") = 0", ") = -1 EAGAIN (x)", " <0.000011>", " <unfinished ...>", " <detached ...>", "7<TCP:[a->b]>, ",
    '"a\\nb\\x41\\101\\\\"', ", ", "= ?", ")", "(", "<", ">", "exited with 3", "killed by SIGKILL",
    "99999999999999999999", "-", "0x", "\ufffd", "é", "\x00", "\t", " ", "strace: Process 5 attached",
]


def _mutated(rng: random.Random) -> str:
    line = rng.choice(_REAL)
    a = rng.randint(0, len(line))
    b = rng.randint(a, len(line))
    return line[:a] + rng.choice(_FRAGMENTS) + line[b:]


strace_ish = st.lists(
    st.one_of(
        st.sampled_from(_REAL),
        st.randoms(use_true_random=False).map(_mutated),
        st.lists(st.sampled_from(_FRAGMENTS), max_size=8).map("".join),
        st.text(max_size=60),
    ),
    max_size=25,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=120), max_size=30))
def test_random_text_never_raises_and_counts_balance(lines):
    t, c = parse_lines(lines)
    assert balanced(c) and c.lines == len(lines)
    assert t.num_rows <= len(lines) and t.schema == SCHEMA
    assert 0.0 <= looks_like(lines) <= 1.0


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strace_ish, st.integers(min_value=0, max_value=25))
def test_strace_like_text_any_split(lines, cut):
    cut = min(cut, len(lines))
    whole, c = parse_lines(lines)
    assert balanced(c) and c.lines == len(lines)
    whole.validate(full=True)
    t, c2 = feed_in_pieces(lines, [cut] if 0 < cut < len(lines) else [])
    assert t.to_pylist() == whole.to_pylist()
    assert (c2.parsed, c2.skipped) == (c.parsed, c.skipped)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=2000))
def test_binary_garbage_never_raises(blob):
    lines = blob.decode("utf-8", errors="replace").split("\n")
    t, c = parse_lines(lines)
    assert balanced(c) and c.lines == len(lines)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([-1, 7, 12, 12345, 4194304]), min_size=1, max_size=300),
       st.lists(st.integers(-1, 60), max_size=600))
def test_rows_grouped_by_thread_keep_their_line_order(few, late):
    """The pairing's order of a block's rows by thread is a stable sort's:
    with a few threads, with many, and with threads whose first rows come
    after the first 1,024 (the ones it looks at for the threads)."""
    import numpy as np

    from kdiag.parsers.strace.events import thread_order

    head = np.resize(np.array(few, dtype=np.int64), 1100)
    for pid in (np.array(few, dtype=np.int64), head, np.concatenate([head, np.array(late, dtype=np.int64)])):
        assert thread_order(pid).tolist() == np.argsort(pid, kind="stable").tolist()
