"""Parsing speed: ``kdiag parse FILE -o DIR``, file to Parquet, whole process.

Inputs are real captures made long: the steady-state lines of a real
librdkafka debug log (fixtures/logs/librdkafka_stderr.log: PRODUCE, SEND,
WAKEUP, RECV, MSGSET for each request) and a whole real strace capture of a
producer (fixtures/captures/nagle_on/strace.txt: start-up, TLS handshake,
Produce round trips), repeated with the time and the correlation ids moved
on, so that every line stays one the parsers meet in the field.

The reference, in the same run, is the plain way: one compiled ``re`` over
each line, in a Python loop, into a pyarrow table written to Parquet.

Beside them, the shapes users have (SHAPES): an async producer's log over
three brokers with many requests in flight (Sent and Received lines far
apart and out of order, long PRODUCE lines, every facility), and strace
with -tt, -r, -f interleaving of several threads with <unfinished ...> and
<... resumed> halves, and -ff files. Each has the goal of its kind.
KDIAG_BENCH_PARSE_SHAPES picks some (comma separated names),
KDIAG_BENCH_PARSE_LINES sets the lines (10 M).

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


# ---- the shapes users have, beside the two above ----

# The broker the log fixture's steady-state lines name, and its port.
_FIX_BROKER = b"ssl://127.0.0.1:33377/111"
ASYNC_BROKERS = 3
ASYNC_IN_FLIGHT = 8          # requests a broker has sent before the first's response
_ASYNC_REQUESTS = 40          # a broker's requests per cycle
# An idempotent producer's topic, sequence and codec: the longest PRODUCE
# lines librdkafka writes ("%s [%d]: Produce MessageSet with %d message(s)
# (%zd bytes, ApiVersion %d, MsgVersion %d, MsgId %lu, BaseSeq %d, %s, %s)",
# rdkafka_msgset_writer.c; the PID as rd_kafka_pid2str prints it).
_ASYNC_TOPIC = b"payments.card-authorisations.eu-west-1.v3"
_ASYNC_PID = b"PID{Id:40061,Epoch:0}"


def _fixture_line(facility: bytes, has: bytes) -> bytes:
    """The log fixture's first line of ``facility`` whose text holds ``has``,
    without its end of line."""
    for ln in LOG_FIXTURE.read_bytes().splitlines():
        if b"|%s|" % facility in ln and has in ln:
            return ln
    raise LookupError(f"{LOG_FIXTURE.name}: no {facility!r} line with {has!r}")


def _async_cycle() -> bytes:
    """One cycle of an async producer's debug log over several brokers:
    every request's PRODUCE lines (one a partition) and Sent line, its
    Received line ``ASYNC_IN_FLIGHT`` requests later and its MSGSET lines,
    the brokers' lines interleaved in a different order at each step, so
    that a request's Sent and Received lines lie far apart and out of
    order; the app thread's WAKEUP lines, and each broker's METADATA
    request, TOPPAR, TOPBRK, STATE, FEATURE, CONNECT and BROKER lines. The
    fixture's lines, their broker, topic and numbers changed."""
    def stamp(line: bytes, ms: int) -> bytes:
        return _LOG_TS.sub(lambda m: b"%s%d.%03d|" % (m.group(1), ms // 1000, ms % 1000), line, count=1)

    produce = _fixture_line(b"PRODUCE", b"Produce MessageSet")
    sent = _fixture_line(b"SEND", b"Sent ProduceRequest")
    recv = _fixture_line(b"RECV", b"Received ProduceResponse")
    msgset = _fixture_line(b"MSGSET", b"delivered")
    wakeup = _fixture_line(b"WAKEUP", b"Wake-up")
    others = [_fixture_line(f, h) for f, h in (
        (b"SEND", b"Sent ApiVersionRequest"), (b"RECV", b"Received ApiVersionResponse"),
        (b"TOPPAR", b"queued"), (b"TOPBRK", b"joining broker"), (b"STATE", b"Broker changed state"),
        (b"FEATURE", b"Updated enabled"), (b"CONNECT", b"Connected to"), (b"BROKER", b"Added new broker"))]
    # A MetadataRequest's pair, worded as the ApiVersion pair is.
    others[0] = others[0].replace(b"ApiVersionRequest (v3, 68", b"MetadataRequest (v12, 91")
    others[1] = others[1].replace(b"ApiVersionResponse (v3, 279", b"MetadataResponse (v12, 1493")
    t0 = int(_LOG_TS.search(produce).group(2)) * 1000
    out, ms, corr = [], t0, [1000 * (b + 1) for b in range(ASYNC_BROKERS)]
    msgid = 0
    brokers = [b"ssl://127.0.0.1:%d/%d" % (33377 + b, 111 + b) for b in range(ASYNC_BROKERS)]
    in_flight: list[list] = [[] for _ in brokers]
    for step in range(_ASYNC_REQUESTS + ASYNC_IN_FLIGHT):
        for b in [(step + k * (step % 2 + 1)) % ASYNC_BROKERS for k in range(ASYNC_BROKERS)]:
            name = brokers[b]
            if step < _ASYNC_REQUESTS:
                parts = [(3 * b + k) for k in range(1 + (step + b) % 3)]
                size = 0
                for p in parts:
                    n_msgs = 1 + (step * 7 + p) % 50
                    nbytes = 60 + n_msgs * 211
                    size += nbytes
                    line = produce.replace(b"kdiag-probe [0]", b"%s [%d]" % (_ASYNC_TOPIC, p))
                    line = re.sub(rb"with \d+ message\(s\) \(\d+ bytes", b"with %d message(s) (%d bytes" % (n_msgs, nbytes), line)
                    line = re.sub(rb"MsgId \d+, BaseSeq -?\d+, PID\{Invalid\}, uncompressed",
                                  b"MsgId %d, BaseSeq %d, %s, lz4" % (msgid + 1, msgid % 2**31, _ASYNC_PID), line)
                    msgid += n_msgs
                    out.append(stamp(line.replace(_FIX_BROKER, name), ms))
                    in_flight[b].append((p, n_msgs, msgid))
                line = re.sub(rb"\(v10, \d+ bytes @ 0, CorrId \d+\)", b"(v10, %d bytes @ 0, CorrId %d)" % (size + 120, corr[b]), sent)
                out.append(stamp(line.replace(_FIX_BROKER, name), ms))
                in_flight[b].append(corr[b])
                corr[b] += 1
            if step >= ASYNC_IN_FLIGHT and in_flight[b]:
                # The oldest request's response, with its partitions' deliveries.
                at = next(i for i, x in enumerate(in_flight[b]) if isinstance(x, int))
                parts, c = in_flight[b][:at], in_flight[b][at]
                del in_flight[b][:at + 1]
                rtt = 2 + ASYNC_IN_FLIGHT + (step * 13 + b) % 17
                line = re.sub(rb"CorrId \d+, rtt [\d.]+ms", b"CorrId %d, rtt %d.%02dms" % (c, rtt, (step * 37) % 100), recv)
                out.append(stamp(line.replace(_FIX_BROKER, name), ms))
                for p, n_msgs, last in parts:
                    line = msgset.replace(b"kdiag-probe [0]", b"%s [%d]" % (_ASYNC_TOPIC, p))
                    line = re.sub(rb"with \d+ message\(s\) \(MsgId \d+, BaseSeq -?\d+\)",
                                  b"with %d message(s) (MsgId %d, BaseSeq %d)" % (n_msgs, last - n_msgs + 1, (last - n_msgs) % 2**31), line)
                    out.append(stamp(line.replace(_FIX_BROKER, name), ms))
            if step % 4 == 0:
                out.append(stamp(wakeup, ms))
        ms += 1
        if step % 10 == 5:
            for b, name in enumerate(brokers):
                out.extend(stamp(ln.replace(_FIX_BROKER, name).replace(b"kdiag-probe [0]", b"%s [%d]" % (_ASYNC_TOPIC, 3 * b)), ms)
                           for ln in others)
    return b"\n".join(out) + b"\n"


def make_log_async(path: Path, lines: int) -> list[Path]:
    """An async producer's librdkafka log of ``lines`` lines: _async_cycle
    repeated, later in time and with later correlation ids."""
    cycle = _async_cycle()
    n_cycle = cycle.count(b"\n")
    stamps = [int(a) * 1000 + int(b) for _, a, b in _LOG_TS.findall(cycle)]
    ids = [int(x) for x in _CORRID.findall(cycle)]
    span_ms, id_span = max(stamps) - min(stamps) + 1, max(ids) - min(ids) + 1
    _repeat(path, lines, n_cycle, lambda k: _shift_log(cycle, k * span_ms, k * id_span))
    return [path]


# "20500 07:33:37.922903 clone3(...": pid, -tt's time of day.
_STRACE_TOD = re.compile(rb"^(\d+ +)(\d\d):(\d\d):(\d\d)\.(\d{6}) ", re.M)
_DAY_US = 86_400_000_000


# librdkafka's own "%7|1795334606.649|" inside the writes strace shows.
_EMBEDDED_TS = re.compile(rb"(%\d\|)(\d+)\.(\d{3})\|")


def _shift_embedded(body: bytes, us: int) -> bytes:
    """The librdkafka lines the producer wrote, ``us`` later: the parse
    dates -tt and -r times by them."""
    def ts(m):
        t = int(m.group(2)) * 1000 + int(m.group(3)) + us // 1000
        return b"%s%d.%03d|" % (m.group(1), t // 1000, t % 1000)
    return _EMBEDDED_TS.sub(ts, body)


def make_strace_tt(path: Path, lines: int) -> list[Path]:
    """strace -f -tt -T -y: a real capture (three of librdkafka's threads
    and the application's, a third of its calls <unfinished ...> and
    <... resumed>), repeated later in the day (past midnight as strace
    wraps it), librdkafka's lines in it as much later, every repeat."""
    body = (ROOT / "fixtures" / "strace" / "nagle_tt_y.txt").read_bytes()

    def us(m) -> int:
        return ((int(m.group(2)) * 60 + int(m.group(3))) * 60 + int(m.group(4))) * 1_000_000 + int(m.group(5))
    stamps = [us(m) for m in _STRACE_TOD.finditer(body)]
    span = max(stamps) - min(stamps) + 1000

    def shifted(k: int) -> bytes:
        def ts(m):
            t = (us(m) + k * span) % _DAY_US
            s = t // 1_000_000
            return b"%s%02d:%02d:%02d.%06d " % (m.group(1), s // 3600, s // 60 % 60, s % 60, t % 1_000_000)
        return _shift_embedded(_STRACE_TOD.sub(ts, body), k * span)
    _repeat(path, lines, body.count(b"\n"), shifted, block=1)
    return [path]


# "20454      0.000031 clone3(...": pid, -r's delta.
_STRACE_REL = re.compile(rb"^\d+ +(\d+)\.(\d{6}) ", re.M)


def make_strace_r(path: Path, lines: int) -> list[Path]:
    """strace -f -r -T -yy: a real capture repeated (its deltas as they
    are), librdkafka's lines in it later by the time they span, every
    repeat."""
    body = (ROOT / "fixtures" / "strace" / "nagle_r.txt").read_bytes()
    deltas = [int(a) * 1_000_000 + int(b) for a, b in _STRACE_REL.findall(body)]
    # strace cuts each delta to the microsecond: the clock moved on by half
    # a microsecond a line more than the deltas say (as the parser assumes).
    twice = 2 * sum(deltas) + len(deltas)
    _repeat(path, lines, body.count(b"\n"), lambda k: _shift_embedded(body, k * twice // 2), block=1)
    return [path]


def _ttt_span(body: bytes, pattern: re.Pattern) -> int:
    stamps = [int(a) * 1_000_000 + int(b) for _, a, b in pattern.findall(body)]
    return max(stamps) - min(stamps) + 1000


def _shifted_ttt(body: bytes, pattern: re.Pattern, lines: int, path: Path, span: int | None = None) -> None:
    span = span or _ttt_span(body, pattern)

    def shifted(k: int) -> bytes:
        def ts(m):
            t = int(m.group(2)) * 1_000_000 + int(m.group(3)) + k * span
            return b"%s%d.%06d " % (m.group(1), t // 1_000_000, t % 1_000_000)
        return pattern.sub(ts, body)
    _repeat(path, lines, body.count(b"\n"), shifted)


def make_strace_threads(path: Path, lines: int) -> list[Path]:
    """strace -f -ttt -T -yy of six threads and processes that interleave
    (a quarter of the lines <unfinished ...> or <... resumed>), repeated
    later in time."""
    _shifted_ttt((ROOT / "fixtures" / "strace" / "threads_loopback.txt").read_bytes(), _STRACE_TS, lines, path)
    return [path]


# -ff's lines: no pid, "1795332820.454039 rseq(...".
_FF_TS = re.compile(rb"^()(\d+)\.(\d{6}) ", re.M)


def make_strace_ff(path: Path, lines: int) -> list[Path]:
    """strace -ff -ttt -T -yy -o DIR/strace: one file a thread
    (DIR/strace.PID), each a real thread's file repeated later in time,
    ``lines`` in all, each file's share as in the capture."""
    files = sorted((ROOT / "fixtures" / "strace" / "ff").glob("strace.*"))
    bodies = [f.read_bytes() for f in files]
    total = sum(b.count(b"\n") for b in bodies)
    path = path.with_suffix("")
    # The threads' files move on together: the capture's span, not a file's.
    stamps = [int(a) * 1_000_000 + int(b) for body in bodies for _, a, b in _FF_TS.findall(body)]
    span = max(stamps) - min(stamps) + 1000
    path.mkdir(parents=True, exist_ok=True)
    out, left = [], lines
    for i, (f, body) in enumerate(zip(files, bodies)):
        n = left if i == len(files) - 1 else lines * body.count(b"\n") // total
        left -= n
        if n > 0:
            _shifted_ttt(body, _FF_TS, n, path / f.name, span)
            out.append(path / f.name)
    return out


def _repeat(path: Path, lines: int, per: int, piece, block: int = 64) -> int:
    """Write piece(0), piece(1), ... until ``lines`` lines; the shifted
    copies are made once per ``block`` repeats (the time moves on by
    blocks)."""
    written = 0
    block_k = block
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
    # pid (none in -ff files), time (-ttt, -r, or -tt's time of day), call,
    # arguments, return value, errno, -T duration
    line = re.compile(r"(?:(\d+) +)?([\d:]+)\.(\d+) (?:<\.\.\. )?([\w?]+)(?: resumed>|\()(.*) += "
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
    "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(f'KDIAG_MEASURE {secs} {r.ru_maxrss} {r.ru_utime + r.ru_stime}')\n"
    "sys.exit(p.returncode)\n"
)


def _timed(cmd: list[str]) -> tuple[float, float, float]:
    """(seconds, peak RSS MiB, CPU seconds) of one command."""
    p = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    last = p.stdout.rstrip("\n").rsplit("\n", 1)[-1].split()
    return float(last[1]), int(last[2]) / 1024, float(last[3])


def _one(make):
    def one(path: Path, lines: int) -> list[Path]:
        make(path, lines)
        return [path]
    return one


# (name, generator, goal, what it is): the benchmark's first two shapes,
# then the others users have.
# Names some SHAPES to run, comma separated (all when unset).
SHAPES_ENV = "KDIAG_BENCH_PARSE_SHAPES"
SHAPES = (
    ("rdkafka_log", _one(make_log), LOG_GOAL, "librdkafka log, one broker, request by request"),
    ("strace", _one(make_strace), STRACE_GOAL, "strace -f -ttt -T -yy, a whole capture"),
    ("rdkafka_log_async", make_log_async, LOG_GOAL,
     f"librdkafka log, async producer, {ASYNC_BROKERS} brokers, {ASYNC_IN_FLIGHT} requests in flight each"),
    ("strace_tt", make_strace_tt, STRACE_GOAL, "strace -f -tt -T -y, 4 threads, unfinished/resumed"),
    ("strace_r", make_strace_r, STRACE_GOAL, "strace -f -r -T -yy, 4 threads, unfinished/resumed"),
    ("strace_threads", make_strace_threads, STRACE_GOAL, "strace -f -ttt -T -yy, 6 threads, unfinished/resumed"),
    ("strace_ff", make_strace_ff, STRACE_GOAL, "strace -ff -ttt -T -yy, a file a thread (5)"),
)


def _shapes() -> list[tuple]:
    """SHAPES, or those KDIAG_BENCH_PARSE_SHAPES names (comma separated)."""
    want = [w for w in os.environ.get(SHAPES_ENV, "").split(",") if w.strip()]
    unknown = set(want) - {s[0] for s in SHAPES}
    if unknown:
        raise ValueError(f"{SHAPES_ENV}: no shape {', '.join(sorted(unknown))} "
                         f"(shapes: {', '.join(s[0] for s in SHAPES)})")
    return [s for s in SHAPES if not want or s[0] in want]


def _concat(paths: list[Path], to: Path) -> Path:
    """The reference reads one file: a -ff directory's files, one after the other."""
    if len(paths) == 1 and paths[0].is_file():
        return paths[0]
    with open(to, "wb") as f:
        for p in paths:
            f.write(p.read_bytes())
    return to


def _remove(paths: list[Path]) -> None:
    for p in paths:
        if p.is_dir():
            for q in p.iterdir():
                q.unlink()
            p.rmdir()
        elif p.exists():
            p.unlink()


def run(smoke: bool, work: Path) -> list[Figure]:
    work.mkdir(parents=True, exist_ok=True)
    n = 20_000 if smoke else int(os.environ.get("KDIAG_BENCH_PARSE_LINES", 10_000_000))
    n_ref = n if smoke else min(n, 2_000_000)
    figs = []
    for shape, make, goal, about in _shapes():
        kind = "rdkafka_log" if shape.startswith("rdkafka_log") else "strace"
        path = work / f"{shape}.txt"
        inputs = make(path, n)
        lines = sum(p.read_bytes().count(b"\n") for p in inputs)
        ref_in = make(work / f"{shape}.ref.txt", n_ref)
        ref_path = _concat(ref_in, work / f"{shape}.ref.all.txt")
        cmd = [*kdiag.python_m(kdiag), "parse", *map(str, inputs), "-o", str(work / f"{shape}.tables")]
        best, best_cpu, rss = None, None, 0.0
        for _ in range(1 if smoke else 3):
            secs, rss_i, cpu = _timed(cmd)
            best = secs if best is None else min(best, secs)
            best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
            rss = max(rss, rss_i)
        ref_secs, ref_rss, ref_cpu = _timed([sys.executable, "-c", _REF_SCRIPT, kind, str(ref_path),
                                             str(work / f"{shape}.ref.parquet")])
        rate, ref_rate = lines / best, n_ref / ref_secs
        size = sum(p.stat().st_size for p in inputs) / 2**20
        args = f"{shape}/strace.*" if len(inputs) > 1 else f"{shape}.txt"
        shown = f"python -m kdiag parse {args} -o tables/  # {about}: {lines:,} lines, {size:,.0f} MiB"
        # Small inputs time the start-up, not the parsing: no goal for them.
        goal = None if smoke else goal
        figs.append(Figure("parse", f"{shape} lines/s", round(rate), "lines/s", goal, goal and check(rate, goal),
                           f"Python re loop into pyarrow ({n_ref:,} lines)", round(ref_rate), shown,
                           f"best of {1 if smoke else 3}; CPU {lines / best_cpu:,.0f} lines/s (reference "
                           f"{n_ref / ref_cpu:,.0f}); peak RSS {rss:.0f} MiB (reference {ref_rss:.0f} MiB); "
                           f"load average {_loadavg()}"))
        figs.append(Figure("parse", f"{shape} peak RSS", round(rss, 1), "MiB", None if smoke else RSS_GOAL,
                           None if smoke else check(rss, RSS_GOAL), "reference peak RSS", round(ref_rss, 1), shown))
        # Memory bound: a quarter of the input must need about as much.
        small = make(work / f"{shape}.small.txt", max(n // 4, 1))
        _, rss_small, _ = _timed([*kdiag.python_m(kdiag), "parse", *map(str, small), "-o", str(work / "small")])
        figs.append(Figure("parse", f"{shape} peak RSS growth 4x input", round(rss / rss_small, 2), "x",
                           "<= 1.25" if not smoke else None, check(rss / rss_small, "<= 1.25") if not smoke else None,
                           f"peak RSS at {max(n // 4, 1):,} lines (MiB)", round(rss_small, 1), shown))
        _remove([*inputs, *ref_in, ref_path, *small])
    return figs


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"
