"""The analysis job: tables -> per-request latency split -> causes.

Runs in PySpark (local mode by default; the same code runs under
``spark-submit kdiag/analysis/__main__.py --tables DIR --out findings.json``
on a cluster). DataFrame operations only, no Python UDFs, so executors need
nothing but Spark.

Its steps, what each needs and how a run is routed by what its input has
are declared in ``kdiag.analysis.steps``, which the fleet reads too:
0. Input checks (``input_checks``): rows that repeat earlier rows are
   dropped, clock steps found per thread; requests that span a step or whose
   response is stamped before them are left out and counted in the
   findings' ``input_checks``.
1-3. Requests, their send bursts and waits (``per_request``).
4. Connections: connect(), setsockopt(TCP_NODELAY) and the handshake wait
   per socket (``connections``).
5. Causes per request (``causes``), then the verdict over all Produce
   requests (``judge``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kdiag.analysis import wire
from kdiag.analysis.connections import connections, path_rows, sampled_connections
from kdiag.analysis.judge import judge
from kdiag.analysis.life import life, life_shown
from kdiag.analysis.per_request import requests_from
from kdiag.analysis.signals import signals
from kdiag.analysis.spark_plumbing import (
    ORDER,
    Later,
    any_rows,
    at_once,
    cached,
    fits_in_plan,
    in_plan,
    read_table,
    release,
    resolved,
)
from kdiag.analysis.stats_windows import stats_summary
from kdiag.analysis.steps import FROM_SYSCALLS, FROM_WIRE, SIGNALS_ONLY, SPLIT, TYPICAL, route, source_of
from kdiag.analysis.thresholds import SLOW_MS
from kdiag.analysis.time_pieces import pieces_of
from kdiag.analysis.typical_exchange import UNSPLIT, log_of_another_run, split_by_typical, timing_unknowns
from kdiag.parsers.format import CLIENT_QUEUE, REQUESTS, SIGNALS, SYSCALLS
from kdiag.parsers.registry import format_filling, tables_feeding

# The tables the analysis reads, in the order their input checks are
# reported: those the format registry says give the requests, the syscalls,
# librdkafka's other lines and the client queue. The path and the samples
# are read apart (connections, samples), table by table.
TABLES = tables_feeding(REQUESTS, SYSCALLS, SIGNALS, CLIENT_QUEUE)
# The two clocks requests are timed on, by the name of the capture each
# table comes from ("the strace output"), as the input checks report them.
_SOURCE_NAMES = {table: f"the {format_filling(table).title}" for table in ("syscalls", "rdkafka_events")}
# What a run's findings say of where its requests came from.
UNTIMED = "the log has no timestamps: a request's time is librdkafka's rtt"
# typical_exchange.split_by_typical finds it by its start, UNSPLIT.
UNSPLIT_LOG = (f"{UNSPLIT}: a request's time cannot be split into socket and wait, and Nagle cannot be told "
               "from a slow broker")
CONFIDENCE = {"strace": "high: requests from librdkafka's own lines", "log": "low: librdkafka's log without syscalls",
              "syscalls": "medium: requests inferred from syscalls"}
INFERRED = ("the producer logged no librdkafka Sent/Received lines: requests were inferred from "
            "its syscalls (a burst of socket writes, then the first read of the response); "
            "no correlation ids, and pipelined requests would pair with the wrong response")
# The exchanges inferred from syscalls that are judged: Produce requests,
# and bursts no header named.
JUDGED_EXCHANGES = ("Produce", "exchange")
OPENINGS = ("each connection's opening (its TLS handshake and its first request, ApiVersions for every Kafka "
            "client) is not judged as a request: it is the connection's life, not a wait for messages")
INFERRED_NAMED = ("the producer logged no librdkafka Sent/Received lines: requests were inferred from "
                  "its syscalls (a burst of socket writes, then the first read of the response), each named "
                  "by the Kafka request header its first write begins with; pipelined requests would pair "
                  "with the wrong response")


def analyze(spark, tables_dir: Path, meta: dict | None = None) -> dict:
    """The findings, with ``input_checks``: what was wrong with the input as
    a whole (repeated blocks, clock steps) and how many requests it cost."""
    from kdiag.analysis import input_checks as quality
    from kdiag.analysis.spark import tables_bytes, tune_for

    tune_for(spark, tables_bytes(tables_dir))
    q = quality.Quality()
    try:
        result = _analyze(spark, Path(tables_dir), meta, q)
    finally:
        # What this analysis cached goes with it: a session that analyses
        # many inputs (the tests, a long replay) must not fill with them.
        release(q)
    result["input_checks"] = q.checks
    return result


@dataclass
class _Inputs:
    """The tables as checked, and what the run is judged from."""
    tables_dir: Path
    meta: dict
    small: bool
    local: bool           # small enough to hold as rows in the plan (spark_plumbing.cached)
    read: dict            # table -> DataFrame, copies dropped
    log: object
    syscalls: object
    log_writes: object
    stats: object
    version: str | None
    source: str | None    # "strace", "log", "syscalls" or None: nothing to analyse
    conns: list


def _analyze(spark, tables_dir: Path, meta: dict | None, q) -> dict:
    meta = {**(meta or {}), "tables_dir": str(tables_dir)}
    inp = _inputs(spark, tables_dir, meta, q)
    # The jobs whose results only the findings read start now, beside the
    # judge's (on a small input; see Later).
    with Later(inp.small) as later:
        result = _judged(spark, inp, q, later)
        q.settle()
    return result


def _judged(spark, inp: _Inputs, q, later: Later) -> dict:
    from kdiag.analysis import input_checks as quality

    # What librdkafka said besides Sent/Received: timeouts, retries, batches.
    # The judge reads it with its findings (see resolved).
    inp.meta["signals"] = later(lambda: signals(inp.log_writes if any_rows(inp.log_writes) else inp.log))
    # Each connection's phases before its first request (life.py).
    inp.meta["life"] = later(lambda: _life_of(inp))
    # The statistics' windows and counters, by themselves (stats_windows).
    topics = read_table(spark, inp.tables_dir, "stats_topics")
    perf = read_table(spark, inp.tables_dir, "perf_intervals")
    inp.meta["stats"] = later(lambda: stats_summary(inp.stats, topics, perf))
    inp.meta["evidence_read"] = tables_read(inp.tables_dir)
    way = route(inp.source, inp.syscalls is not None)
    if way is SIGNALS_ONLY:
        for table, name in _SOURCE_NAMES.items():
            quality.exclude_spanning(spark, None, table, q, name)
        result = _judge_signals(spark, inp)
        if (inp.tables_dir / "wire_connections.parquet").exists():
            result["wire"] = wire.summary(inp.tables_dir)
        result["signals"] = resolved(inp.meta["signals"])
        result["life"] = life_shown(resolved(inp.meta["life"]))
        rank_when_thin(result)
        return result
    timing = later(lambda: timing_unknowns(inp.syscalls))
    other_run = later(lambda: log_of_another_run(inp.log, inp.log_writes, inp.source))
    paths = later(lambda: path_rows(inp.tables_dir))
    if way is FROM_SYSCALLS:
        result = _judge_exchanges(spark, inp, q, later)
    elif way is FROM_WIRE:
        result = _judge_wire(spark, inp)
    else:
        result = _judge_logged(spark, inp, q, later, way)
    timing_costs(result, timing())
    result["unknowns"] += other_run()
    if inp.meta.get("wire") is not None:
        result["wire"] = inp.meta["wire"]
    result["paths"] = paths()
    result["signals"] = resolved(inp.meta["signals"])
    result["life"] = life_shown(resolved(inp.meta["life"]))
    rank_when_thin(result)
    return result


def _life_of(inp: _Inputs) -> dict:
    """Each connection's phases: from librdkafka's lines (life.py), or, where
    they show no attempt, from a packet capture's connections (wire.life)."""
    got = life(inp.log_writes if any_rows(inp.log_writes) else inp.log, inp.conns)
    if not got.get("attempts") and not got.get("metadata"):
        seen = wire.life(inp.tables_dir)
        if seen is not None:
            return seen
    return got


def tables_read(tables_dir: Path) -> dict[str, int]:
    """table -> its rows, from the files' footers (no job): what a run
    that decides nothing says it read."""
    import pyarrow.parquet as pq

    return {p.stem: pq.read_metadata(p).num_rows for p in sorted(Path(tables_dir).glob("*.parquet"))}


def timing_costs(result: dict, timing: list[str]) -> None:
    """What the strace's timestamps leave unknown (``typical_exchange.timing_unknowns``),
    added to a run's findings, and what it costs their confidence."""
    result["unknowns"] += timing
    if timing and str(result.get("confidence", "")).startswith("high"):
        # Syscalls in order but without their times back the split less.
        untimed = "no timestamps" in timing[0]
        result["confidence"] = ("low: the strace shows the calls' order, not their times" if untimed else
                                "medium: strace without -T, the calls' durations are upper bounds")


def rank_when_thin(result: dict) -> None:
    """Without syscalls, the path evidence decides how sure a verdict is;
    the likely causes are ranked, each with the capture that decides it."""
    from kdiag.analysis.likely_causes import rank

    if str(result.get("confidence", "")).startswith("high"):
        return
    # A measured path beside requests timed by the log alone: what it adds
    # to a verdict without requests is said by confidence_without_requests.
    if str(result.get("confidence", "")).startswith("low") and result["summary"].get("path_rtt_ms") is not None \
            and result["summary"].get("requests"):
        result["confidence"] = "medium: librdkafka's log and a measured path, no syscalls"
    result["likely"] = rank(result)


def _judge_signals(spark, inp: _Inputs) -> dict:
    """No Sent line and no syscalls: librdkafka's other lines (timeouts,
    disconnects, retries) are judged alone, or there is nothing to judge."""
    from kdiag.analysis.connections import path_rtt_of
    from kdiag.analysis.spinning import spinning

    return judged_by_signals(inp.version, path_rtt_of(spark, str(inp.tables_dir),
                                                      inp.conns + wire.connections(inp.tables_dir)),
                             {**inp.meta, "tables_dir": inp.tables_dir, "signals": resolved(inp.meta["signals"]),
                              "life": resolved(inp.meta.get("life")),
                              "stats": resolved(inp.meta.get("stats")),
                              "spin": spinning(inp.syscalls, inp.tables_dir)})


def judged_by_signals(version: str | None, path: tuple, meta: dict) -> dict:
    """A run judged from its signals (in ``meta``) and its path alone."""
    from kdiag.analysis.causes import Facts, version_tuple
    from kdiag.analysis.causes.nagle_delayed_ack import NAGLE_DEFAULT_FLIPPED
    from kdiag.analysis.judge import from_signals_only, statistics_in_summary

    unknowns = ["no librdkafka Sent/Received lines and no syscalls in the inputs: no request to split"]
    vt = version_tuple(version)
    path_rtt, source, bound = path
    summary = {"requests": 0, "path_rtt_ms": path_rtt, "path_rtt_source": source,
               "path_rtt_upper_bound": bound if path_rtt is not None else None,
               **statistics_in_summary(meta.get("stats"), 0)}
    run = Facts(None, {}, 0, path_rtt, bound, version, None if vt is None else vt >= NAGLE_DEFAULT_FLIPPED,
                summary, {**meta, "completed_ms": 0.0}, None)
    result = from_signals_only(run, vt, unknowns)
    if result["no_data"]:
        result["unknowns"] = ["no librdkafka Sent/Received lines and no syscalls in the inputs: nothing to analyse"]
    elif result.get("undecided"):
        result["unknowns"] += undecided_unknowns(summary, result.get("evidence_read") or {})
        result["unknowns"] += syscall_totals_said(meta.get("tables_dir"))
    result["confidence"] = confidence_without_requests(result)
    return result


# What a finding judged without a request is as sure as, by what it rests
# on: the statistics are librdkafka's own measure of every request.
_CONFIDENCE_BY_EVIDENCE = (
    ("packets", "high: the producer's connections in a packet capture"),
    ("statistics", "medium: librdkafka's statistics, no request seen"),
    ("syscalls", "medium: the producer's system calls, no request seen"),
    ("error lines", "low: librdkafka's log lines other than Sent/Received"),
    ("log lines", "low: librdkafka's log lines other than Sent/Received"),
    ("path", "low: the path alone, no request, statistics or log line of the client seen"),
    ("requests", "low: a connection's opening request, no Produce request seen"),
)


def confidence_without_requests(result: dict) -> str:
    if result.get("undecided"):
        return "none: the evidence given decides no cause"
    top = (result.get("findings") or [{}])[0].get("rests_on") or []
    return next((c for kind, c in _CONFIDENCE_BY_EVIDENCE if kind in top), _CONFIDENCE_BY_EVIDENCE[1][1])


def syscall_totals_said(tables_dir) -> list[str]:
    """What an strace summary (``strace -c``, or calls counted with uniq -c)
    shows, when it decides nothing: the call that took the most of the
    traced time (else the most calls), with its count and time per call."""
    import pyarrow.parquet as pq

    path = Path(tables_dir) / "syscall_totals.parquet" if tables_dir else None
    if path is None or not path.exists():
        return []
    rows = [r for r in pq.read_table(path, columns=["syscall", "calls", "usecs_per_call", "time_pct"]).to_pylist()
            if r["syscall"] and r["syscall"] != "total"]
    if not rows:
        return []
    top = max(rows, key=lambda r: (r["time_pct"] or 0.0, r["calls"] or 0))
    said = [f"{top['time_pct']:g}% of the traced time" if top["time_pct"] is not None else None,
            f"{top['calls']:,} calls" if top["calls"] is not None else None,
            f"{top['usecs_per_call']} µs a call" if top["usecs_per_call"] is not None else None]
    return [f"the strace summary: {top['syscall']}: " + ", ".join(x for x in said if x)
            + (": the thread woke often to wait again; alone this decides no cause"
               if top["syscall"] in ("poll", "epoll_wait", "select", "futex", "ppoll") else "; alone it decides no cause")]


def undecided_unknowns(summary: dict, read: dict) -> list[str]:
    """What an input that decides nothing held, and what to capture next."""
    from kdiag.analysis.causes import CAPTURE_LOG as DEBUG_MSG
    from kdiag.analysis.causes import CAPTURE_PATH as PATH
    from kdiag.analysis.causes import CAPTURE_STATS as STATS

    out = ["read, without deciding a cause: " + ", ".join(f"{t} {n} row(s)" for t, n in read.items())]
    path, st = summary.get("path_rtt_ms"), summary.get("statistics")
    if path is not None:
        out.append(f"the path's round trip is {path:g} ms ({summary.get('path_rtt_source')}): "
                   + ("too short alone to be why a request is slow" if path < SLOW_MS else
                      "every request pays it, but alone it does not say it is why they are slow"))
    rtt = (st or {}).get("rtt_p50_ms")
    if rtt is not None and rtt > SLOW_MS and path is None:
        out.append(f"librdkafka's rtt is {rtt:g} ms: the broker or the path; a ping or {PATH} decides which")
    if not st:
        out.append(f"capture next: {STATS}")
    if "rdkafka_events" not in read:
        out.append(f"capture next: librdkafka's log with {DEBUG_MSG}")
    if path is None:
        out.append(f"capture next: {PATH}")
    return out


def _inputs(spark, tables_dir: Path, meta: dict, q) -> _Inputs:
    """The tables, read, with their copies dropped and clock steps found;
    the version, the source of the requests and the connections, in jobs
    that run at once on a small input."""
    from kdiag.analysis import input_checks as quality
    from kdiag.analysis.spark import SMALL_INPUT_BYTES, tables_bytes
    from kdiag.ingest import table_facts

    # Rows that repeat earlier ones go before anything counts them; the
    # clock steps are found per thread in file order. A small input's tables
    # are held (as rows in the plan when they fit, else cached: see
    # spark_plumbing.cached): read by many actions, each then starts from them. A large
    # one's are not: holding them costs more than reading the few columns
    # each action needs again, and what is read again is what the job made
    # of them (the split requests), cached below.
    small = tables_bytes(tables_dir) < SMALL_INPUT_BYTES
    local = small and fits_in_plan(tables_dir)
    # data is the text of a write to stdout/stderr, already in args: it
    # neither tells copies apart nor is read below.
    # Each row's place in its table (spark_plumbing.with_order) is numbered as the
    # table is read: a table read into the plan then stays rows, which need
    # no holding below.
    ordered = {name: read_table(spark, tables_dir, name, ("data",) if name == "syscalls" else (), numbered=True)
               for name in TABLES}
    read = {name: None if df is None else df.drop(ORDER) for name, df in ordered.items()}
    raw_syscalls = read["syscalls"]
    # What the parse told of each table in its footer (kdiag.ingest.table_facts):
    # a table it saw hold no copies is not hashed again.
    told = {name: table_facts.read(Path(tables_dir) / f"{name}.parquet") for name in TABLES}
    candidates = {name: None if told[name].get("no_copies") else quality.copy_candidates(df, name)
                  for name, df in ordered.items()}
    copied, (version, source), conns = at_once(small, [
        lambda: quality.tables_with_copies(candidates), lambda: _facts(read, meta),
        lambda: connections(raw_syscalls) if raw_syscalls is not None else []])
    for name in (n for n in TABLES if n in copied):   # every later read must drop the copies too
        ordered[name] = read[name] = quality.drop_duplicates(ordered[name], name, q, candidates[name])
    checked = dict(ordered)
    if small:
        held = [n for n in TABLES if not (local and in_plan(ordered[n]))]
        checked.update(zip(held, at_once(True, [lambda df=ordered[n]: cached(df, q, local) for n in held])))
    # Clock steps are found per thread in file order, after the copies went
    # (none, where the parse saw none of either).
    stepped = {name: checked[name] for name in ("syscalls", "rdkafka_events")
               if not (told[name].get("no_copies") and told[name].get("no_clock_steps"))}
    quality.clock_steps(spark, stepped, q)
    if read["syscalls"] is not raw_syscalls:   # its copies were dropped: they are not connections
        conns = connections(read["syscalls"])
    return _Inputs(tables_dir, meta, small, local, read, checked["rdkafka_events"], checked["syscalls"],
                   checked["log_writes"], checked["stats"], version, source, conns)


def _facts(read: dict, meta: dict) -> tuple[str | None, str | None]:
    """librdkafka's version and where the requests come from."""
    from pyspark.sql import functions as F

    # Copies change none of these: the first copy of a row stays.
    log, lw, sc = read["rdkafka_events"], read["log_writes"], read["syscalls"]
    version = meta.get("librdkafka_version")
    for src in (log, lw):
        if version is None and src is not None:
            row = src.filter(F.col("event") == "init").select("detail").first()
            version = row.detail if row else None
    sends = lambda df: df is not None and any_rows(df.filter(F.col("event") == "send"))  # noqa: E731
    source = source_of(lambda: sends(lw), lambda: sends(log), lambda: any_rows(sc),
                       lambda: any_rows(log) or any_rows(lw), lambda: wire.has_requests(meta.get("tables_dir")))
    return version, source


def _checked(spark, reqs, table: str, q, later: Later):
    """Requests of ``table``'s clock without those a clock step or a response
    stamped before its request leaves without a true latency."""
    from kdiag.analysis import input_checks as quality

    name = _SOURCE_NAMES[table]
    for other, other_name in _SOURCE_NAMES.items():
        if other != table:   # steps there are reported; no request rests on them
            quality.exclude_spanning(spark, None, other, q, other_name)
    reqs = quality.exclude_spanning(spark, reqs, table, q, name)
    return quality.exclude_negative(reqs, table, q, name, later)


def judged_exchanges(reqs):
    """The exchanges inferred from syscalls that are judged (the fleet's
    too): Produce requests and unnamed bursts, without each connection's
    opening (per_request.exchanges' ``opening``)."""
    from pyspark.sql import functions as F

    return reqs.filter(F.col("request").isin(*JUDGED_EXCHANGES) & ~F.col("opening")).drop("opening")


def _judge_exchanges(spark, inp: _Inputs, q, later: Later) -> dict:
    """A producer that logs nothing: its requests inferred from syscalls."""
    from pyspark.sql import functions as F

    from kdiag.analysis.spinning import spinning

    reqs = _checked(spark, requests_from(spark, "syscalls", None, inp.syscalls), "syscalls", q, later)
    conns = inp.conns + sampled_connections(inp.tables_dir, inp.conns)
    unknowns = [INFERRED]
    # Read only where no request completes (client_cpu.from_signals); a
    # small input's threads are walked once more for it.
    if inp.small:
        inp.meta["spin"] = spinning(inp.syscalls, inp.tables_dir)
    # Where the writes' first bytes named the requests (plaintext under
    # strace or bpfcalls), only the Produce requests are judged, as from a capture;
    # an unnamed burst (TLS) may be one.
    other = None
    if wire.has_requests(inp.tables_dir):
        reqs, named = wire.named_exchanges(spark, reqs, inp.tables_dir)
        if named:
            inp.meta["wire_named"] = named
            reqs = cached(reqs, q, inp.local)
    if any_rows(reqs.filter(F.col("request") != "exchange")):
        unknowns = [INFERRED_NAMED]
        ids = reqs.filter(F.col("request") == "Produce").select("client").distinct().limit(20).collect()
        other = wire.other_client_of([r.client for r in ids])
        if other:
            unknowns.append(other[1])
    elif any_rows(reqs.filter("opening")):
        unknowns.append(OPENINGS)
    if inp.meta.get("wire_named"):
        unknowns.append(wire.NAMED_BY_WIRE)
    produce = judged_exchanges(reqs)
    reqs = reqs.drop("opening")
    result = judge(spark, produce, reqs, conns, inp.stats, inp.version, inp.source, unknowns, inp.meta,
                   inp.read.get("syscalls"), inp.small, inp.local)
    result["confidence"] = CONFIDENCE["syscalls"]
    if other:
        result["client_library"] = other[0]
    return result


def _judge_wire(spark, inp: _Inputs) -> dict:
    """Neither librdkafka's lines nor syscalls: the producer's requests as a
    packet capture shows them (``wire``)."""
    from pyspark.sql import functions as F

    conns = _wire_connections(inp)
    inp.meta["wire_no_hold"] = wire.no_hold(inp.meta["wire"])
    inp.meta["wire_waits"] = wire.client_waits(inp.tables_dir)
    reqs = wire.requests(spark, inp.tables_dir, inp.meta["wire_waits"])
    decoded = any_rows(reqs.filter(F.col("request") != "exchange"))
    # The Produce responses' ThrottleTimeMs were read: a throttle is seen.
    inp.meta["wire_decoded"] = decoded
    # Over TLS alone a request's kind is not seen: every exchange stands for
    # one, as the syscalls' exchanges do.
    produce = reqs.filter(F.col("request") == "Produce") if decoded else reqs
    unknowns = [] if decoded else [wire.TLS_ONLY]
    other = wire.other_client(inp.tables_dir)
    if other:
        unknowns.append(other[1])
    result = judge(spark, produce, reqs, inp.conns + conns, inp.stats, inp.version, wire.SOURCE, unknowns, inp.meta,
                   None, inp.small, inp.local)
    result["confidence"] = wire.CONFIDENCE[decoded]
    if other:
        result["client_library"] = other[0]
    return result


def _judge_logged(spark, inp: _Inputs, q, later: Later, way) -> dict:
    """Requests from librdkafka's Sent/Received lines: split by the syscalls
    when the lines were seen in strace, else timed by the log alone."""
    from pyspark.sql import functions as F

    unknowns: list[str] = []
    lines = {"strace": inp.log_writes, "log": inp.log}[inp.source]
    if way is SPLIT:
        # Cached before the input checks: their counts and every later
        # action read one computation of the split.
        # A large capture's threads are walked in time pieces (see pieces).
        pieces = None if inp.small else pieces_of(inp.tables_dir)
        split = requests_from(spark, inp.source, lines, inp.syscalls, pieces, hold=lambda df: cached(df, q, inp.local))
        reqs = _checked(spark, split, "syscalls", q, later)
        conns = inp.conns + sampled_connections(inp.tables_dir, inp.conns)
    else:
        # Not split: the lines' own times (TYPICAL splits them below).
        reqs = requests_from(spark, inp.source, lines, None)
        reqs = _checked(spark, reqs, "syscalls" if inp.source == "strace" else "rdkafka_events", q, later)
        conns = []
        reqs = _unsplit(reqs, unknowns)
        if way is TYPICAL:
            reqs = split_by_typical(reqs, inp.syscalls, unknowns)
        elif wire.has_requests(inp.tables_dir):
            reqs, conns = _joined_to_wire(spark, reqs, inp, unknowns)
        reqs = cached(reqs, q, inp.local)
    produce = reqs.filter(F.col("request") == "Produce")
    result = judge(spark, produce, reqs, conns, inp.stats, inp.version, inp.source, unknowns, inp.meta,
                   inp.read.get("syscalls"), inp.small, inp.local)
    result["confidence"] = CONFIDENCE[inp.source] if not inp.meta.get("wire_joined") else wire.JOINED_CONFIDENCE
    return result


def _joined_to_wire(spark, reqs, inp: _Inputs, unknowns: list[str]):
    """The log's requests split by a packet capture of them (``wire.joined_to_log``),
    with the capture's connections; as they were when none matches."""
    joined, matched = wire.joined_to_log(spark, reqs, inp.tables_dir)
    if not matched:
        unknowns.append(wire.NOT_JOINED)
        return reqs, []
    # The split is the wire's now: what the log alone could not say is known.
    unknowns[:] = [u for u in unknowns if u not in (UNSPLIT_LOG, UNTIMED)]
    unknowns.append(wire.JOINED)
    inp.meta["wire_joined"] = matched
    return joined, _wire_connections(inp)


def _wire_connections(inp: _Inputs) -> list[dict]:
    """The capture's producer connections, for the judge beside the
    requests; their retransmits and the capture's summary into the meta."""
    conns = wire.connections(inp.tables_dir)
    inp.meta["tcp_retrans"] = wire.retransmits(conns)
    inp.meta["wire"] = wire.summary(inp.tables_dir)
    return conns


def _unsplit(reqs, unknowns: list[str]):
    """Requests without syscalls: no split, a request's time is all there is."""
    from pyspark.sql import functions as F

    reqs = unsplit(reqs)
    if not any_rows(reqs.filter(F.col("send_us").isNotNull() & F.col("recv_us").isNotNull())):
        unknowns.append(UNTIMED)
    unknowns.append(UNSPLIT_LOG)
    return reqs


def unsplit(reqs):
    """The split's columns, null; the request's time from its lines, or
    librdkafka's rtt for each response when the log has no timestamps
    (basicConfig, Go, node)."""
    from pyspark.sql import functions as F

    for c in ("send_ms", "wait_ms", "read_ms", "n_writes", "fd", "first_read_us",
              "written_bytes", "write_sizes", "send_start_us", "fd_info"):
        reqs = reqs.withColumn(c, F.lit(None))
    return reqs.withColumn("total_ms", F.coalesce((F.col("recv_us") - F.col("send_us")) / 1000.0,
                                                  F.col("rtt_ms")))
