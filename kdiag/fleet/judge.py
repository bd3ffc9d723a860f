"""Every bundle of a fleet judged in one pass over the ingested tables.

The steps are the single analysis's (``kdiag.analysis.job``), keyed by
``bundle_id`` in every join, window and group: the copies dropped, the
requests paired and split, the connections, the path, what comes before the
causes, the causes, their sums, each cause's median request and the
request rows the predictions are built on. What a run
is judged from (its version, the source of its requests, its path RTT,
whether Nagle is possible) is a column joined on by ``bundle_id``, not a
job per run. Only the per-run aggregates come back to the driver, where
``judge.concluded`` writes each run's findings as it does for one.

The evidence read from a run's socket, thread and host samples is summed
for every run in Spark (``fleet.samples``). The steps and the routing of a
run by what its input has are the single analysis's (``analysis.steps``);
the steps the fleet does not take say so there (``fleet_instead``), and
each run's ``fleet_omits`` lists those its input would have taken: clock
steps, the per-broker path table. A run routed to the strace's typical exchange (a log beside an
strace of other requests) is left unjudged: replay it alone. None of these
changes a verdict or a share (tests/test_fleet.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from kdiag.analysis.spark_plumbing import ORDER, RUN, with_order
from kdiag.parsers.format import CLIENT_QUEUE, SYSCALLS


@dataclass
class Run:
    """One bundle as the fleet judges it."""
    bundle_id: str
    rows: dict               # table -> rows, of each table its parse wrote (some with none)
    version: str | None
    tcp_retrans: int | None
    source: str | None = None   # "strace", "log", "syscalls", or None: signals only
    topics: tuple = ()          # named by its MessageSet lines (debug=msg)
    copies_in: tuple = ()       # the tables its parse found copies in
    samples: object = None      # its analysis.samples.RunSamples
    life: dict | None = None    # its connections, phase by phase (analysis.life)

    @property
    def tables(self) -> set:
        """The tables its parse wrote: the single analysis reads a table
        that has no rows as there (a DataFrame), an absent one as None."""
        return set(self.rows)

    @property
    def inputs(self) -> frozenset:
        """The analysis inputs its tables give (kdiag.parsers.format)."""
        from kdiag.parsers.registry import inputs_of

        return inputs_of(self.tables)


def judged(spark, tables: dict, facts: list[dict], kdiag_version: str | None = None) -> dict[str, dict]:
    """bundle_id -> its findings, for every parsed bundle in ``facts`` (the
    ingest's ``bundles`` rows), from ``tables`` (table -> DataFrame of every
    bundle's rows)."""
    from kdiag.analysis import input_checks as quality

    runs = {f["bundle_id"]: Run(f["bundle_id"], dict(f.get("table_rows") or {}),
                                f.get("librdkafka_version"), f.get("tcp_retrans"),
                                copies_in=tuple(f.get("copies_in") or ()))
            for f in facts if f.get("state") == "parsed"}
    if not runs:
        return {}
    from kdiag.analysis.spark_plumbing import release

    q = quality.Quality()
    try:
        return _judged(spark, tables, runs, q, kdiag_version)
    finally:
        release(q)   # the copies' rows it held


def _judged(spark, tables: dict, runs: dict, q, kdiag_version) -> dict[str, dict]:
    from pyspark.sql import functions as F

    from kdiag.analysis.job import judged_by_signals, rank_when_thin
    from kdiag.analysis.life import life_by_run, life_shown
    from kdiag.analysis.signals import no_signals, signals_by_run
    from kdiag.analysis.steps import fleet_omits, route
    from kdiag.fleet.samples import run_samples

    t = _without_copies(tables, runs, q)
    _sources(t, runs)
    by_source = {s: [r for r in runs.values() if r.source == s] for s in ("strace", "log", "syscalls", None)}
    # As job: the lines written under strace when there are any, else the log.
    lw_runs = [r.bundle_id for r in runs.values() if r.rows.get("log_writes")]
    events = t["log_writes"].filter(F.col(RUN).isin(*lw_runs)).unionByName(
        t["rdkafka_events"].filter(~F.col(RUN).isin(*lw_runs)), allowMissingColumns=True)
    sig = signals_by_run(events)
    empty = no_signals(spark)
    # A run without one such line: a log with no rows has signals of nothing,
    # no log has none.
    signals = {b: sig.get(b, dict(empty) if "rdkafka_events" in r.tables else {}) for b, r in runs.items()}
    conns = _connections(t, runs)
    # Each run's connections, phase by phase (life.py), walked apart.
    lives = life_by_run(events, conns)
    for b, r in runs.items():
        r.life = lives.get(b)
    paths = _paths(t, runs, conns)
    sampled = run_samples(t, runs)
    for b, r in runs.items():
        r.samples = sampled[b]
    out: dict[str, dict] = {}
    for r in by_source[None]:
        out[r.bundle_id] = judged_by_signals(r.version, paths[r.bundle_id], _meta(r, signals, kdiag_version))
    # A run whose route the fleet does not take is left unjudged, saying why.
    unjudged = [r for s in ("strace", "log", "syscalls") for r in by_source[s]
                if route(r.source, SYSCALLS in r.inputs).fleet_instead]
    for r in unjudged:
        out[r.bundle_id] = {"verdict": None, "no_data": True, "judged": False, "librdkafka_version": r.version,
                            "findings": [], "summary": {},
                            "unknowns": [route(r.source, SYSCALLS in r.inputs).fleet_instead]}
    requesting = [r for s in ("strace", "log", "syscalls") for r in by_source[s] if r not in unjudged]
    if requesting:
        out.update(_judged_requests(spark, t, {r.bundle_id: r for r in requesting}, conns, paths, signals,
                                    kdiag_version))
    for b, res in out.items():
        res.setdefault("judged", True)
        res["signals"] = signals[b]
        res["life"] = life_shown(runs[b].life)
        res["fleet_omits"] = fleet_omits(runs[b].inputs)
        res["topics"] = list(runs[b].topics)
        if res["judged"]:
            rank_when_thin(res)
    return out


def _meta(r: Run, signals: dict, kdiag_version) -> dict:
    meta = {"kdiag_version": kdiag_version, "signals": signals[r.bundle_id], "samples": r.samples, "life": r.life}
    if r.tcp_retrans is not None:
        meta["tcp_retrans"] = r.tcp_retrans
    return meta


def _without_copies(tables: dict, runs: dict, q) -> dict:
    """Each table with its repeated rows dropped (a copy repeats its bundle_id
    too, so a run's copies are its own) and its rows' order (``ORDER``). Only
    the runs whose parse found copies (``input_checks.has_copies``) are
    looked at: at 1000 bundles with none, 9 s of hashing every row saved."""
    from pyspark.sql import functions as F

    from kdiag.analysis import input_checks as quality

    ordered = {n: with_order(df) for n, df in tables.items()}
    candidates = {}
    for n in quality.COPY_TABLES:
        mine = [b for b, r in runs.items() if n in r.copies_in]
        if mine:
            candidates[n] = quality.copy_candidates(ordered[n].filter(F.col(RUN).isin(*mine)), n)
    for n in quality.tables_with_copies(candidates):
        ordered[n] = quality.drop_duplicates(ordered[n], n, q, candidates[n])
    return ordered


def _sources(t: dict, runs: dict) -> None:
    """Each run's source of requests and librdkafka version (its manifest's,
    else its first init line's), in one job over the librdkafka lines, as
    ``job._facts`` finds them."""
    from functools import reduce

    from pyspark.sql import functions as F

    from kdiag.analysis.steps import source_of

    ev = F.col("event")
    parts = [t[n].groupBy(RUN).agg(F.lit(n).alias("tbl"), F.count("*").alias("n"),
                                   F.count(F.when(ev == "send", 1)).alias("sends"),
                                   F.min(F.when(ev == "init", F.struct(ORDER, "detail"))).alias("init"),
                                   F.sort_array(F.collect_set("topic")).alias("topics"))
             for n in ("rdkafka_events", "log_writes")]
    got: dict = {}
    for row in reduce(lambda a, b: a.unionByName(b), parts).collect():
        got.setdefault(row[RUN], {})[row.tbl] = row
    for b, r in runs.items():
        mine = got.get(b, {})
        log, lw = mine.get("rdkafka_events"), mine.get("log_writes")
        # Its parse's count: dropping copies keeps each row's first, so a
        # table with rows still has some (a scan of every syscall saved).
        calls = r.rows.get("syscalls") or 0
        r.topics = tuple(sorted({x for src in (log, lw) if src is not None for x in src.topics}))
        for src in (log, lw):
            if r.version is None and src is not None and src.init is not None:
                r.version = src.init.detail
        r.source = source_of(lambda: bool(lw is not None and lw.sends), lambda: bool(log is not None and log.sends),
                             lambda: bool(calls), lambda: bool((log and log.n) or (lw and lw.n)))


def _connections(t: dict, runs: dict) -> dict:
    """run -> its connections: from its strace, then its sockets sampled
    live whose connect() the strace did not see (``sampled_connections``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    from kdiag.analysis.connections import connections, sampled_connection

    with_sc = [b for b, r in runs.items() if SYSCALLS in r.inputs]
    got: dict = {b: [] for b in runs}
    if with_sc:
        for c in connections(t["syscalls"].filter(F.col(RUN).isin(*with_sc)), many=True):
            got[c.get(RUN, "")].append(c)
    seen = {b: {c["fd"] for c in cs} for b, cs in got.items()}
    so = t["sockets"].filter(F.col("nodelay").isNotNull())
    first = so.withColumn("_i", F.row_number().over(Window.partitionBy(RUN, "fd").orderBy(ORDER))).filter("_i = 1")
    for s in first.select(RUN, "fd", "remote", "nodelay").collect():
        if s[RUN] in got and s.fd not in seen[s[RUN]]:
            got[s[RUN]].append({**sampled_connection(s.fd, s.remote, s.nodelay), RUN: s[RUN]})
    return got


def _paths(t: dict, runs: dict, conns: dict) -> dict:
    """run -> (path RTT, its source, upper bound), each run from the best
    source it has (``connections.path_choice``), in three small jobs."""
    from pyspark.sql import functions as F

    from kdiag.analysis.connections import handshake_rtts, path_choice, probe_rtts, ss_choice

    hs = {r[RUN]: (r.k, r.m) for r in handshake_rtts(t["handshakes"], (RUN,)).collect() if r.k}
    by_method: dict = {}
    for r in probe_rtts(t["probes"], (RUN,)).collect():
        by_method.setdefault(r[RUN], {})[r.method] = (r.k, r.m)
    pasted: dict = {}
    for r in t["sockets"].filter(F.col("ts_us").isNull()).select(RUN, "min_rtt_ms", "rtt_ms").collect():
        m, s = pasted.setdefault(r[RUN], ([], []))
        m.append(r.min_rtt_ms)
        s.append(r.rtt_ms)
    out = {}
    for b, r in runs.items():
        # A log-only run's path is not timed by its (absent) connections.
        mine = conns[b] if r.source != "log" else []
        out[b] = path_choice(hs.get(b), by_method.get(b, {}), mine,
                             lambda b=b: ss_choice(*pasted[b]) if b in pasted else None)
    return out


def _judged_requests(spark, t: dict, runs: dict, conns: dict, paths: dict, signals: dict,
                     kdiag_version) -> dict:
    """The runs with requests, judged together: one pass of each step over
    all of them, the causes' sums per run, then each run concluded apart."""
    from pyspark.sql import functions as F

    from kdiag.analysis import causes
    from kdiag.analysis.job import CONFIDENCE, INFERRED, UNSPLIT_LOG, UNTIMED, timing_costs
    from kdiag.analysis.judge import (
        before_causes,
        before_of,
        cause_sums,
        concluded,
        median_requests,
        read_cause_sums,
        request_rows,
        with_causes,
    )
    from kdiag.analysis.per_request import fill_write_sizes
    from kdiag.analysis.samples import runq_of
    from kdiag.analysis.typical_exchange import timing_by_run

    of = lambda src: [b for b, r in runs.items() if r.source == src]  # noqa: E731
    reqs = _requests(spark, t, of).persist()
    inferred = of("syscalls")
    produce = reqs.filter((F.col("request") == "Produce") | F.col(RUN).isin(*inferred))

    with_stats = [b for b, r in runs.items() if CLIENT_QUEUE in r.inputs]
    stats = t["stats"].filter(F.col(RUN).isin(*with_stats)) if with_stats else None
    pre = {r[RUN]: r for r in before_causes(reqs, stats, (RUN,)).join(
        reqs.groupBy(RUN).agg(F.count(F.when(F.col("send_us").isNotNull() & F.col("recv_us").isNotNull(), 1))
                              .alias("timed")), RUN).collect()}
    before, nagle = {}, {}
    for b in runs:
        before[b], nagle[b] = before_of(pre.get(b), paths[b], b in with_stats)
    # What each run is judged from, joined on: a column, not a job per run.
    run_facts = spark.createDataFrame([(b, paths[b][0], nagle[b], "threads" in r.tables) for b, r in runs.items()],
                                      f"{RUN} string, _path_rtt double, _nagle boolean, _threads boolean")
    produce = produce.join(F.broadcast(run_facts), RUN)
    if any(r.tables & {"threads"} for r in runs.values()):
        produce = runq_of(spark, None, produce, threads=t["threads"]).withColumn(
            "runq_ms", F.when(F.col("_threads"), F.col("runq_ms")))
    else:
        produce = produce.withColumn("runq_ms", F.lit(None).cast("double"))
    mine = lambda df, ids: df.filter(F.col(RUN).isin(*ids))  # noqa: E731
    throttled = [b for b in with_stats if pre.get(b) is not None and pre[b].throttled]
    attached = [c for b, r in runs.items() if r.source != "log" for c in conns[b]]
    rq = with_causes(spark, produce, attached, mine(stats, throttled) if throttled else None, F.col("_path_rtt"),
                     F.col("_nagle")).persist()
    try:
        rows: dict = {}
        for row in cause_sums(rq, (RUN,)).collect():
            rows.setdefault(row[RUN], []).append(row)
        ex_cols = causes.example_columns() + [c for c in ("_run_lo", "_run_hi") if c in rq.columns]
        examples = median_requests(rq, {}, ex_cols, keys=(RUN,))
        each = request_rows(rq, None, keys=(RUN,))
        fill_write_sizes(mine(t["syscalls"], of("strace") + inferred), examples)
    finally:
        rq.unpersist()
        reqs.unpersist()
    with_sc = [b for b, r in runs.items() if SYSCALLS in r.inputs]
    timing = timing_by_run(mine(t["syscalls"], with_sc)) if with_sc else {}
    out = {}
    for b, r in runs.items():
        meta = {**_meta(r, signals, kdiag_version), "one_write": before[b].one_write,
                "nagle_possible": nagle[b], "has_stats": b in with_stats}
        unknowns = []
        if r.source == "syscalls":
            unknowns.append(INFERRED)
        if r.source == "log":
            if not (pre.get(b) and pre[b].timed):
                unknowns.append(UNTIMED)
            unknowns.append(UNSPLIT_LOG)
        s, per, _ = read_cause_sums(rows.get(b, []), meta.get("tcp_retrans"))
        mine_ex = {k[1]: e for k, e in examples.items() if k[0] == b}
        res = concluded(s, per, mine_ex, each.get(b), before[b], r.version, r.source, unknowns, meta)
        res["confidence"] = CONFIDENCE[r.source]
        timing_costs(res, timing.get(b, []))
        out[b] = res
    return out


def _requests(spark, t: dict, of):
    """Every run's requests, each from its source (``of(source)``: its runs)
    as ``job`` takes them: librdkafka's lines split by the syscalls, the log
    alone, or exchanges inferred from syscalls."""
    from pyspark.sql import functions as F

    from kdiag.analysis.job import judged_exchanges, unsplit
    from kdiag.analysis.per_request import requests_from

    mine = lambda df, src: df.filter(F.col(RUN).isin(*of(src))) if df is not None else None  # noqa: E731
    # A response stamped before its request has no latency (see
    # input_checks.exclude_negative).
    positive = ~F.coalesce(F.col("recv_us") < F.col("send_us"), F.lit(False))
    parts = []
    for source, lines, syscalls in (("strace", t["log_writes"], t["syscalls"]), ("log", t["rdkafka_events"], None),
                                    ("syscalls", None, t["syscalls"])):
        if of(source):
            reqs = requests_from(spark, source, mine(lines, source), mine(syscalls, source)).filter(positive)
            if source == "syscalls":
                reqs = judged_exchanges(reqs)
            parts.append(unsplit(reqs) if source == "log" else reqs)
    reqs = parts[0]
    for p in parts[1:]:
        reqs = reqs.unionByName(p, allowMissingColumns=True)
    return reqs


def judged_apart(session, facts: list[dict], kdiag_version: str | None = None,
                 say=None) -> tuple[dict[str, dict], dict[str, str]]:
    """(bundle_id -> findings, bundle_id -> why the analysis failed on it):
    ``judged`` over all parsed bundles at once; when that pass fails, the
    bundles are split in halves and each half judged again, until a bundle
    whose rows fail the analysis stands alone and is set aside with the
    error. One bad bundle costs about two passes per halving, and never
    takes the other bundles' verdicts with it.

    ``session(failed)``: (spark, table -> DataFrame of every bundle's rows);
    ``failed`` is true after a pass failed: a bundle can take the JVM down
    with it (local mode: the driver's JVM is the executors'), and the
    halves must then run in a new one."""
    from pyspark.sql import functions as F

    from kdiag.analysis.spark import jvm_gone

    parsed = [f for f in facts if f.get("state") == "parsed"]
    found: dict[str, dict] = {}
    failed: dict[str, str] = {}
    parts, whole, after_failure = ([parsed] if parsed else []), True, False
    while parts:
        part = parts.pop(0)
        spark, tables = session(after_failure)
        ids = [f["bundle_id"] for f in part]
        if not whole:
            tables = {n: df.filter(F.col(RUN).isin(*ids)) for n, df in tables.items()}
        whole = False
        try:
            found.update(judged(spark, tables, part, kdiag_version))
            after_failure = False
            continue
        except Exception as e:  # noqa: BLE001 - Spark's, py4j's and the analysis's own: the bundles are set apart
            why = failure(e)
        if jvm_gone():
            why = f"Spark's JVM died ({why})"
        after_failure = True
        if len(part) == 1:
            failed[ids[0]] = why
            if say:
                say(f"the analysis failed on bundle {ids[0]}; set aside: {why}")
            continue
        if say:
            say(f"the analysis failed on {len(part)} bundles together; judging them in halves: {why}")
        half = len(part) // 2
        parts[:0] = [part[:half], part[half:]]
    return found, failed


def failure(e: BaseException) -> str:
    """An exception from Spark or the analysis as one short line: the JVM's
    root cause when there is one (py4j's text opens with the call that
    failed, then Spark's wrappers: "Exception thrown in awaitResult")."""
    from kdiag.visible import visible

    text = None
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            while java.getCause() is not None:
                java = java.getCause()
            text = str(java.toString())
        except Exception:  # noqa: BLE001 - the JVM may be gone: py4j's own text then
            text = None
    if text is None:
        lines = [x.strip().lstrip(": ") for x in str(e).splitlines() if x.strip()]
        lines = [x for x in lines if not x.startswith("An error occurred while calling")] or [""]
        text = f"{type(e).__name__}: {lines[0]}" if lines[0] else type(e).__name__
    text = visible(text.splitlines()[0] if text.strip() else text)
    return text if len(text) <= 300 else text[:297] + "..."
