"""A thread walked in time pieces gives each request what the walk of the
whole thread gives it: runs of writes that cross a piece's edge (or
several), responses read pieces later, calls without a time, markers in a
piece without a call, lines without a pid."""
from __future__ import annotations

import random

import pytest

from kdiag.analysis import per_request as pr
from kdiag.analysis.time_pieces import UNTIMED, Pieces, pieces_of

SYSCALLS = ("line_no long, pid int, ts_us long, dur_us long, kind string, syscall string, fd int, "
            "fd_info string, ret long")
REQS = ("client string, broker string, corr_id int, recv_us long, recv_line long, rtt_ms double, "
        "resp_bytes long, request string, req_bytes long, send_us long, send_line long, pid int")


def _thread(rng: random.Random, pid, line: list, t: int, untimed: int, n: int, calls: list, reqs: list):
    """n requests on one thread: writes (TLS records, sometimes with other
    calls or long gaps between them), the Sent line's write(2), a wait,
    the response's read, the Received line; a few calls without a time
    first, and some Sent lines whose call the capture lacks."""
    def call(ts, syscall, fd=None, ret=0, info=None):
        line[0] += rng.randint(1, 3)
        calls.append((line[0], pid, ts, 5, "syscall", syscall, fd, info, ret))
        return line[0]
    for _ in range(untimed):
        call(None, rng.choice(["write", "poll", "read", "write"]), 7, rng.randint(1, 900))
    for k in range(n):
        t += rng.choice([3, 50, 900, 20_000, 400_000])
        sent = 0
        for _ in range(rng.choice([0, 1, 2, 3, 5])):
            t += rng.choice([1, 10, 70_000])
            size = rng.randint(20, 3000)
            sent += size
            call(t, rng.choice(["write", "sendmsg"]), 7, size, rng.choice([None, "TCP:[1->2]"]))
            if rng.random() < 0.1:
                call(t, "futex")
        t += rng.choice([0, 2, 30])
        send_us = t
        if rng.random() < 0.9:
            send_line = call(t, "write", 2, 80)
        else:   # a Sent line whose write the capture lacks
            line[0] += 1
            send_line = line[0]
        if rng.random() < 0.05:   # two Sent lines in one write(2)
            reqs.append(("c", "b1", 10_000 + k, send_us + 5, send_line + 1, 1.0, 10, "Produce", sent, send_us,
                         send_line, pid))
        t += rng.choice([5, 40_000, 2_000_000])
        call(t, "poll", None, 1)
        t += 3
        if rng.random() < 0.8:
            call(t, rng.choice(["read", "recvmsg"]), 7, rng.randint(10, 200))
        t += 2
        recv_line = call(t, "write", 2, 80)
        reqs.append(("c", "b1", k, t, recv_line, 1.0, 50, rng.choice(["Produce", "Metadata"]), sent + rng.choice([0, 0, 500]),
                     send_us, send_line, pid))
    # A marker of this thread after all its calls, and one in a gap with none.
    reqs.append(("c", "b2", 1, t + 9_000_000, line[0] + 2, 1.0, 5, "Produce", 100, t + 8_000_000, line[0] + 1, pid))


def _capture(spark, seed: int):
    rng = random.Random(seed)
    calls, reqs, line = [], [], [0]
    for pid, t0, untimed in ((101, 1_000_000, 0), (102, 1_500_000, 4), (None, 900_000, 2)):
        _thread(rng, pid, line, t0, untimed, rng.randint(20, 60), calls, reqs)
    rng.shuffle(calls)
    sc = spark.createDataFrame(calls, SYSCALLS)
    return spark.createDataFrame(reqs, REQS), pr.flag_syscalls(sc), calls, reqs


def _pieces(calls, reqs, us: int, packed: bool = True) -> Pieces:
    """``packed``: the footers told the calls' line numbers (edges then
    aggregates each call's place as one long)."""
    ts = [c[2] for c in calls if c[2] is not None] + [r[9] for r in reqs if r[9] is not None]
    t0 = min(ts)
    return Pieces(us, t0, -1, (max(ts) - t0) // us + 1, max(c[0] for c in calls).bit_length() if packed else None)


def _rows(df) -> list:
    cols = [c for c in df.columns if c != "write_sizes"]
    return sorted((tuple(r) for r in df.select(*cols).collect()), key=repr)


@pytest.mark.parametrize("seed", [1, 2])
def test_pieces_give_what_the_whole_thread_gives(spark, seed):
    reqs, sc, calls, raw_reqs = _capture(spark, seed)
    whole = _rows(pr.split_requests(spark, reqs, sc))
    assert len(whole) == len(raw_reqs)
    for us, packed in ((7_000, True), (7_000, False), (1_000_000, True), (10 ** 12, True), (10 ** 12, False)):
        got = _rows(pr.split_requests(spark, reqs, sc, _pieces(calls, raw_reqs, us, packed)))
        assert got == whole, f"pieces of {us} us, packed {packed}"


def test_the_capture_crosses_edges(spark):
    """The pieces above do split runs and waits: at 7 ms, some request's
    writes and some request's wait span a piece's edge (else the test
    above proves nothing about the carry)."""
    reqs, sc, calls, raw_reqs = _capture(spark, 1)
    split = pr.split_requests(spark, reqs, sc).collect()
    us = 7_000
    p = _pieces(calls, raw_reqs, us)
    piece = lambda ts: UNTIMED if ts is None else (ts - p.t0_us) // us  # noqa: E731
    runs = [r for r in split if r.n_writes and r.send_start_us is not None and r.send_us is not None]
    assert any(piece(r.send_start_us) != piece(r.send_us) for r in runs)
    waits = [r for r in split if r.first_read_us is not None]
    assert any(piece(r.first_read_us) != piece(r.send_us) for r in waits)
    # The thread without a pid, and its calls without a time, have runs too.
    assert any(r.pid is None and r.n_writes for r in split)


def test_a_small_capture_is_walked_whole_and_a_large_one_in_pieces(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(n, name):
        pq.write_table(pa.table({"ts_us": pa.array([1_000_000 + 10 * i for i in range(n)], pa.int64())}),
                       tmp_path / f"{name}.parquet", row_group_size=1 << 20)
    table(1000, "syscalls")
    table(10, "log_writes")
    assert pieces_of(tmp_path) is None
    p = pieces_of(tmp_path, us=1000)
    assert p == Pieces(1000, 1_000_000, -1, (10 * 999) // 1000 + 1)
    from kdiag.analysis import time_pieces

    old = time_pieces.PIECE_MIN_ROWS
    time_pieces.PIECE_MIN_ROWS = 1000
    try:
        p = pieces_of(tmp_path)
    finally:
        time_pieces.PIECE_MIN_ROWS = old
    assert p is not None and p.us == -(-9991 * time_pieces.PIECE_ROWS // 1000)


def test_calls_at_the_sent_lines_time_are_placed_by_line(spark):
    """Coarse clocks (strace -t's estimates, -r) give several calls one
    time. A request's run is the writes right before its Sent line's
    write(2), and its window starts at that line: a read of the same time
    on an earlier line (an earlier response) ends the run before it and is
    not this request's response."""
    t = 5_000_000
    calls = [(10, 7, t, 5, "syscall", "write", 9, "TCP:[1->2]", 300),
             (11, 7, t, 5, "syscall", "read", 9, "TCP:[1->2]", 60),    # an earlier request's response
             (12, 7, t, 5, "syscall", "write", 9, "TCP:[1->2]", 2000),
             (13, 7, t, 5, "syscall", "write", 9, "TCP:[1->2]", 40),
             (14, 7, t, 5, "syscall", "write", 2, None, 80),            # Sent
             (15, 7, t, 5, "syscall", "poll", None, None, 1),
             (16, 7, t + 40_000, 5, "syscall", "read", 9, "TCP:[1->2]", 50),
             (17, 7, t + 40_010, 5, "syscall", "write", 2, None, 80)]   # Received
    reqs = spark.createDataFrame([("c", "b1", 3, t + 40_010, 17, 40.0, 50, "Produce", 2040, t, 14, 7)], REQS)
    sc = pr.flag_syscalls(spark.createDataFrame(calls, SYSCALLS))
    for pieces in (None, Pieces(1_000, t - 1_000, -1, 42, 5)):
        r = pr.split_requests(spark, reqs, sc, pieces).first()
        assert (r.n_writes, r.written_bytes, r.last_write_bytes) == (2, 2040, 40), pieces
        assert (r._run_lo, r._run_hi) == ((t, 11), (t, 14)), pieces
        assert r.first_read_us == t + 40_000 and r.wait_ms == 40.0, pieces
