"""Parsing speed: ``kdiag parse FILE -o DIR``, file to Parquet, whole process.

Inputs are real captures made long: the steady-state lines of a real
librdkafka debug log (fixtures/logs/librdkafka_stderr.log: PRODUCE, SEND,
WAKEUP, RECV, MSGSET for each request) and a whole real strace capture of a
producer (fixtures/captures/nagle_on/strace.txt: start-up, TLS handshake,
Produce round trips), repeated with the time and the correlation ids moved
on, so that every line stays one the parsers meet in the field.

The reference, in the same run, is the plain way: one compiled ``re`` over
each line, in a Python loop, into a pyarrow table written to Parquet.

Memory: the peak resident set of ``kdiag parse`` at two input sizes; bounded
means the larger input needs no more than the smaller one, give or take.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import kdiag
from bench.common import ROOT, Figure, check

LOG_GOAL = ">= 3000000"
STRACE_GOAL = ">= 2000000"
# Memory bounded by a constant, whatever the file's size.
RSS_GOAL = "<= 512"
LOG_FIXTURE = ROOT / "fixtures" / "logs" / "librdkafka_stderr.log"
STRACE_FIXTURE = ROOT / "fixtures" / "captures" / "nagle_on" / "strace.txt"

# "%7|1795334606.649|SEND|rdkafka#producer-1| [thrd:...]: ...": the epoch
# seconds.milliseconds field and every "CorrId N".
_LOG_TS = re.compile(rb"^(%\d\|)(\d+)\.(\d{3})\|", re.M)
_CORRID = re.compile(rb"CorrId (\d+)")
# "17901 1795315014.558913 mmap(...": pid, epoch seconds.microseconds.
_STRACE_TS = re.compile(rb"^(\d+ +)(\d+)\.(\d{6}) ", re.M)


def make_log(path: Path, lines: int) -> int:
    """A librdkafka stderr log of ``lines`` lines: the fixture's request
    cycles, repeated; returns the line count written."""
    src = LOG_FIXTURE.read_bytes().splitlines(keepends=True)
    first = next(i for i, ln in enumerate(src) if b"|PRODUCE|" in ln)
    last = max(i for i, ln in enumerate(src) if b"|MSGSET|" in ln)
    cycle = b"".join(src[first:last + 1])
    n_cycle = last + 1 - first
    m = _LOG_TS.search(cycle)
    t0 = int(m.group(2)) * 1000 + int(m.group(3))
    span_ms = 1 + (max(int(a) * 1000 + int(b) for _, a, b in _LOG_TS.findall(cycle)) - t0)
    ids = [int(x) for x in _CORRID.findall(cycle)]
    id_span = max(ids) - min(ids) + 1
    return _repeat(path, lines, n_cycle, lambda k: _shift_log(cycle, k * span_ms, k * id_span))


def _shift_log(cycle: bytes, ms: int, ids: int) -> bytes:
    def ts(m):
        t = int(m.group(2)) * 1000 + int(m.group(3)) + ms
        return b"%s%d.%03d|" % (m.group(1), t // 1000, t % 1000)
    out = _LOG_TS.sub(ts, cycle)
    return _CORRID.sub(lambda m: b"CorrId %d" % (int(m.group(1)) + ids), out) if ids else out


def make_strace(path: Path, lines: int) -> int:
    """strace -f -ttt -T -yy output of ``lines`` lines: the fixture's whole
    capture, repeated later in time."""
    body = STRACE_FIXTURE.read_bytes()
    n_body = body.count(b"\n")
    stamps = [int(a) * 1_000_000 + int(b) for _, a, b in _STRACE_TS.findall(body)]
    span = max(stamps) - min(stamps) + 1000

    def shifted(k: int) -> bytes:
        def ts(m):
            t = int(m.group(2)) * 1_000_000 + int(m.group(3)) + k * span
            return b"%s%d.%06d " % (m.group(1), t // 1_000_000, t % 1_000_000)
        return _STRACE_TS.sub(ts, body)
    return _repeat(path, lines, n_body, shifted)


def _repeat(path: Path, lines: int, per: int, piece) -> int:
    """Write piece(0), piece(1), ... until ``lines`` lines; the shifted
    copies are made once per 64 repeats (the time moves on by blocks)."""
    written = 0
    block_k = 64
    with open(path, "wb") as f:
        k = 0
        while written < lines:
            base = piece(k)
            reps = min(block_k, -(-(lines - written) // per))
            chunk = base * reps
            if written + per * reps > lines:
                chunk = b"".join(chunk.splitlines(keepends=True)[:lines - written])
            f.write(chunk)
            written += chunk.count(b"\n")
            k += reps
    return written


# ---- the reference: a compiled re per line, into pyarrow ----

_REF_SCRIPT = r'''
import re, sys
import pyarrow as pa, pyarrow.parquet as pq
kind, path, out = sys.argv[1:4]
if kind == "rdkafka_log":
    # the header, thread, broker and text, then a Sent/Received line's fields
    line = re.compile(r"%(\d)\|(\d+)\.(\d{3})\|([^|]*)\|([^|]*)\| \[thrd:([^\]]*)\]: (?:(\S+): )?(.*)")
    event = re.compile(r"(Sent|Received) ([A-Za-z]+)(?:Request|Response) \(v(\d+), (\d+) bytes"
                       r"(?: @ \d+)?, CorrId (\d+)(?:, rtt ([\d.]+)ms)?\)")
    none = (None,) * 6
else:
    # pid, time, call, arguments, return value, errno, -T duration
    line = re.compile(r"(\d+) +(\d+)\.(\d+) (?:<\.\.\. )?([\w?]+)(?: resumed>|\()(.*) += "
                      r"(-?\d+|0x[0-9a-f]+|\?)(?: (E\w+) )?.*?(?: <(\d+\.\d+)>)?$")
    event = None
rows, unparsed = [], 0
with open(path, encoding="utf-8", errors="replace") as f:
    for text in f:
        m = line.match(text.rstrip("\n"))
        if m is None:
            unparsed += 1
            continue
        g = m.groups()
        if event is not None:
            e = event.match(g[7])
            g += e.groups() if e else none
        rows.append(g)
cols = list(zip(*rows))
pq.write_table(pa.table({f"c{i}": pa.array(c, pa.string()) for i, c in enumerate(cols)}), out)
print(unparsed)
'''


# Runs one command and reports its wall time and peak RSS: the wrapper has
# no other child, so RUSAGE_CHILDREN is that command's alone.
_MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t0 = time.monotonic()\n"
    "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)\n"
    "secs = time.monotonic() - t0\n"
    "sys.stderr.write(p.stderr)\n"
    "print(p.stdout, end='')\n"
    "print(f'KDIAG_MEASURE {secs} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}')\n"
    "sys.exit(p.returncode)\n"
)


def _timed(cmd: list[str]) -> tuple[float, float, str]:
    """(seconds, peak RSS MiB, stdout) of one command."""
    p = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    last = p.stdout.rstrip("\n").rsplit("\n", 1)[-1].split()
    return float(last[1]), int(last[2]) / 1024, p.stdout


def run(smoke: bool, work: Path) -> list[Figure]:
    work.mkdir(parents=True, exist_ok=True)
    n = 20_000 if smoke else int(os.environ.get("KDIAG_BENCH_PARSE_LINES", 10_000_000))
    n_ref = n if smoke else min(n, 2_000_000)
    figs = []
    for kind, make, goal in (("rdkafka_log", make_log, LOG_GOAL), ("strace", make_strace, STRACE_GOAL)):
        path = work / f"{kind}.txt"
        lines = make(path, n)
        ref_path = work / f"{kind}.ref.txt"
        make(ref_path, n_ref)
        cmd = [*kdiag.python_m(kdiag), "parse", str(path), "-o", str(work / f"{kind}.tables")]
        best, rss = None, 0.0
        for _ in range(1 if smoke else 3):
            secs, rss_i, _ = _timed(cmd)
            best = secs if best is None else min(best, secs)
            rss = max(rss, rss_i)
        ref_secs, ref_rss, _ = _timed([sys.executable, "-c", _REF_SCRIPT, kind, str(ref_path),
                                       str(work / f"{kind}.ref.parquet")])
        rate, ref_rate = lines / best, n_ref / ref_secs
        shown = f"python -m kdiag parse {kind}.txt -o tables/  # {lines:,} lines, {path.stat().st_size / 2**20:,.0f} MiB"
        # Small inputs time the start-up, not the parsing: no goal for them.
        goal = None if smoke else goal
        figs.append(Figure("parse", f"{kind} lines/s", round(rate), "lines/s", goal, goal and check(rate, goal),
                           f"Python re loop into pyarrow ({n_ref:,} lines)", round(ref_rate), shown,
                           f"best of {1 if smoke else 3}; peak RSS {rss:.0f} MiB (reference {ref_rss:.0f} MiB)"))
        figs.append(Figure("parse", f"{kind} peak RSS", round(rss, 1), "MiB", None if smoke else RSS_GOAL,
                           None if smoke else check(rss, RSS_GOAL), "reference peak RSS", round(ref_rss, 1), shown))
        # Memory bound: a quarter of the input must need about as much.
        small = work / f"{kind}.small.txt"
        make(small, max(n // 4, 1))
        _, rss_small, _ = _timed([*kdiag.python_m(kdiag), "parse", str(small), "-o", str(work / "small")])
        figs.append(Figure("parse", f"{kind} peak RSS growth 4x input", round(rss / rss_small, 2), "x",
                           "<= 1.25" if not smoke else None, check(rss / rss_small, "<= 1.25") if not smoke else None,
                           f"peak RSS at {max(n // 4, 1):,} lines (MiB)", round(rss_small, 1), shown))
        for p in (path, ref_path, small):
            p.unlink()
    return figs
