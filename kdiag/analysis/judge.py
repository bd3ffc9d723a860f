"""Judging: per-request causes in Spark; only aggregates and one example
request per cause come back to the driver, however many requests there are.
The causes' rules and sentences are in ``kdiag.analysis.causes``."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kdiag.analysis import causes, predict
from kdiag.analysis.causes import (
    BY_NAME,
    LOG_LINES,
    OTHERWISE,
    PATH,
    REQUESTS,
    SLOW_WAIT,
    SOCKET_SAMPLES,
    STATISTICS,
    SYSCALLS,
    CauseAgg,
    Facts,
    classify,
    slow_wait_as,
    slow_wait_resolved_in,
    verdict_of,
    version_tuple,
)
from kdiag.analysis.causes.nagle_delayed_ack import NAGLE_DEFAULT_FLIPPED
from kdiag.analysis.connections import attach_connections, path_rtt_of
from kdiag.analysis.per_request import fill_write_sizes
from kdiag.analysis.samples import runq_of, throttle_of
from kdiag.analysis.spark_plumbing import at_once, cached, quantile, resolved, rounded
from kdiag.analysis.thresholds import (
    CONTRIBUTING_SHARE,
    ONE_RECORD_BYTES,
    ONE_WRITE_MIN,
    ONE_WRITE_WAIT_SHARE,
    SLOW_MS,
)

EXAMPLE_SORT_MAX = 100_000
EXAMPLE_BAND = 0.0005
# More rows in a band than this (the waits tie): the cause is sorted whole.
EXAMPLE_BAND_ROWS = 200_000
# The report's charts draw each request up to this many (an even sample
# beyond, plus the slowest): a 2,000-row findings.json is about 150 kB.
REQUEST_ROWS_MAX = 2000
REQUEST_ROWS_WORST = 20
REQUEST_COLUMNS = ("send_us", "total_ms", "send_ms", "wait_ms", "read_ms", "rtt_ms", "cause", "broker",
                   "corr_id", "n_writes")


def median_requests(rq, bands: dict, cols: list[str], keys: tuple = ()) -> dict:
    """cause -> its median request by (wait_ms, send_us), nulls first: the
    one at floor(k / 2) + 1. ``bands``: cause -> (k, requests with a wait,
    wait quantiles [.., .., 0.5 - EXAMPLE_BAND, 0.5 + EXAMPLE_BAND]), for
    every cause when they are to be found by band; the causes a band misses
    are sorted whole. ``keys``: columns (a fleet's run) whose every value
    has its own median per cause, sorted whole; the result is then keyed by
    (*keys, cause)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    found: dict = {}
    banded = {}
    for cause, (k, timed, wait) in bands.items():
        want = k // 2 + 1 - (k - timed)        # rank among the requests with a wait
        if wait and wait[2] is not None and timed > 1 and 0 < want \
                and 0.5 - EXAMPLE_BAND < (want - 1) / (timed - 1) < 0.5 + EXAMPLE_BAND:
            banded[cause] = (want, wait[2], wait[3])
    if banded:
        lo = F.create_map(*[x for c, (_, a, _) in banded.items() for x in (F.lit(c), F.lit(a))])[F.col("cause")]
        hi = F.create_map(*[x for c, (_, _, b) in banded.items() for x in (F.lit(c), F.lit(b))])[F.col("cause")]
        wait = F.col("wait_ms")
        got = rq.filter(F.col("cause").isin(*banded)).groupBy("cause").agg(
            F.count(F.when(wait < lo, 1)).alias("below"),
            F.count(F.when((wait >= lo) & (wait <= hi), 1)).alias("n"),
            F.collect_list(F.when((wait >= lo) & (wait <= hi), F.struct("wait_ms", "send_us", "send_line",
                                                                         "recv_line"))).alias("band")).collect()
        pick = {}
        for g in got:
            want = banded[g.cause][0]
            band = sorted(g.band, key=lambda r: (r.wait_ms, r.send_us is not None, r.send_us or 0))
            if g.n <= EXAMPLE_BAND_ROWS and 0 <= want - g.below - 1 < len(band):
                pick[g.cause] = band[want - g.below - 1]
        if pick:
            cond = None
            for cause, r in pick.items():
                c = (F.col("cause") == cause) & (F.col("send_line").eqNullSafe(r.send_line)) & \
                    (F.col("recv_line").eqNullSafe(r.recv_line)) & (F.col("wait_ms") == r.wait_ms)
                cond = c if cond is None else cond | c
            for r in rq.filter(cond).select(*cols).collect():
                found.setdefault(r.cause, r.asDict(recursive=True))
    if bands and set(found) >= set(bands):
        return found
    rest = rq if not found else rq.filter(~F.col("cause").isin(*found))
    group = [*keys, "cause"]
    w = Window.partitionBy(*group).orderBy("wait_ms", "send_us")
    name = (lambda r: r.cause) if not keys else (lambda r: (*(r[k] for k in keys), r.cause))  # noqa: E731
    found.update({name(r): r.asDict(recursive=True) for r in rest.withColumn("_i", F.row_number().over(w))
                  .withColumn("_n", F.count("*").over(Window.partitionBy(*group)))
                  .filter(F.col("_i") == F.floor(F.col("_n") / 2) + 1)
                  .select(*dict.fromkeys([*keys, *cols])).collect()})
    return found




def one_write_requests(reqs) -> dict:
    """Requests of any kind that left in a single write, and how long they
    waited for their response."""
    from pyspark.sql import functions as F

    row = reqs.filter((F.col("n_writes") == 1) & F.col("wait_ms").isNotNull()).agg(
        F.count("*").alias("n"), quantile("wait_ms", 0.5).alias("m")).first()
    return {"n": row.n, "wait_p50_ms": rounded(row.m, 3)}


def one_write_rules_out_nagle(n_one: int, one_wait_p50_ms: float | None, split_wait_p50_ms: float | None) -> bool:
    """Nagle holds back only what follows an unacknowledged segment: a
    request that left in one write has nothing held. When enough of those
    wait as long as the split ones, the wait is not Nagle's."""
    return (n_one >= ONE_WRITE_MIN and one_wait_p50_ms is not None and split_wait_p50_ms is not None
            and one_wait_p50_ms >= max(SLOW_MS, ONE_WRITE_WAIT_SHARE * split_wait_p50_ms))


# The requests librdkafka sends on a new connection before any Produce
# request (API names as its Sent lines give them, without "Request").
CONNECTION_OPENERS = ("ApiVersion", "SaslHandshake", "SaslAuthenticate")


def nagle_ruled_out(one_write: dict) -> str | None:
    """The sentence that says a small request of another kind ruled Nagle
    out (``before_of``), or None."""
    if not one_write.get("small_kind"):
        return None
    return (f"Nagle is ruled out: {one_write['small_n']} {one_write['small_kind']}Request(s) small enough to leave "
            f"in one TLS record and one segment took {one_write['small_p50_ms']} ms (median), as long as the Produce "
            f"requests ({one_write['produce_p50_ms']} ms): Nagle holds back nothing of a request sent whole, so "
            f"what holds them is the broker or the path")


def small_request_rules_out_nagle(n: int, took_ms: float | None, produce_ms: float | None) -> bool:
    """A request of another kind small enough to leave in one record (an
    ApiVersionRequest of 25 bytes) that took as long as the Produce
    requests: what holds them is not Nagle."""
    return (n >= 1 and took_ms is not None and produce_ms is not None
            and took_ms >= max(SLOW_MS, ONE_WRITE_WAIT_SHARE * produce_ms))


def judge(spark, produce, reqs, conns: list[dict], stats, version: str | None, source: str,
          unknowns: list[str], meta: dict, syscalls=None, parallel: bool = False, local: bool = False) -> dict:
    """The findings of the Produce requests ``produce`` (``reqs``: of every
    kind). ``parallel``: a small input, whose independent jobs run at once;
    ``local``: one whose requests are held as rows in the plan (see
    spark_plumbing.cached)."""
    pre, path = _before_causes(spark, reqs, stats, conns, meta, parallel)
    before, nagle_possible = before_of(pre, path, stats is not None)
    if meta.get("wire_no_hold"):
        # A capture that shows every hop of the requests (the producer's
        # connection and a relay's onward one) sending each request whole.
        nagle_possible = False
    meta = {**meta, "one_write": before.one_write, "nagle_possible": nagle_possible, "has_stats": stats is not None,
            "signals": resolved(meta.get("signals")), "stats": resolved(meta.get("stats")),
            "life": resolved(meta.get("life"))}
    # Statistics without one throttle time add nothing but a join.
    throttles = stats if stats is not None and pre.throttled else None
    rq, held = _classified(spark, produce, conns, throttles, before.path_rtt_ms, nagle_possible, meta, local)
    ex_cols = causes.example_columns() + [c for c in ("_run_lo", "_run_hi") if c in rq.columns]
    examples = each = None
    if parallel:   # few requests: sorted whole, beside the sums
        rows, examples, each = at_once(True, [cause_sums(rq).collect, lambda: median_requests(rq, {}, ex_cols),
                                             lambda: request_rows(rq, None)])
    else:
        rows = cause_sums(rq).collect()
    s, per, bands = read_cause_sums(rows, meta.get("tcp_retrans"))
    n = s.k if s is not None else 0
    if each is None and n:
        each = request_rows(rq, n)
    if n and examples is None:
        examples = median_requests(rq, bands if n > EXAMPLE_SORT_MAX else {}, ex_cols)
    if n:
        fill_write_sizes(syscalls, examples)
    if held:
        rq.unpersist()
    return concluded(s, per, examples, each, before, version, source, unknowns, meta)


@dataclass(frozen=True)
class Before:
    """What a run's requests say before their causes (``_before_causes``)."""
    all_kinds: int
    one_write: dict           # {"n": .., "wait_p50_ms": ..}
    client_ms: float | None
    path_rtt_ms: float | None
    path_rtt_source: str | None
    path_rtt_upper_bound: bool


def before_of(pre, path: tuple, has_stats: bool) -> tuple[Before, bool]:
    """What a run's ``before_causes`` row (None: the run has no request) and
    its path (RTT, source, upper bound) say before the causes, and whether
    Nagle is possible: one run's and each of a fleet's alike."""
    single = {"n": pre.n1 if pre else 0, "wait_p50_ms": rounded(pre.m1, 3) if pre else None}
    client_ms = pre.client_ms if pre is not None and has_stats else None
    nagle_possible = not one_write_rules_out_nagle(single["n"], single["wait_p50_ms"], pre.multi_wait if pre else None)
    small = pre.asDict() if pre is not None and "n_small" in pre.asDict() else {}
    if small.get("n_small") and small.get("m_small") is not None:   # read when no Produce request completed
        single = {**single, "opener_kind": small.get("small_kind"), "opener_n": small["n_small"],
                  "opener_p50_ms": rounded(small["m_small"], 3)}
    if nagle_possible and small_request_rules_out_nagle(small.get("n_small") or 0, small.get("m_small"),
                                                        small.get("produce_took")):
        nagle_possible = False
        single = {**single, "small_kind": small.get("small_kind"), "small_n": small["n_small"],
                  "small_p50_ms": rounded(small["m_small"], 3), "produce_p50_ms": rounded(small["produce_took"], 3)}
    return Before(pre.all_kinds if pre else 0, single, client_ms, *path), nagle_possible


def concluded(s, per: dict, examples: dict | None, each: dict | None, pre: Before, version: str | None,
              source: str, unknowns: list[str], meta: dict) -> dict:
    """A run's findings from its sums (``read_cause_sums``), its example request
    per cause and its request rows: no Spark here, so one run and each run
    of a fleet are concluded alike."""
    vt = version_tuple(version)
    default_nodelay = None if vt is None else vt >= NAGLE_DEFAULT_FLIPPED
    path_rtt, rtt_bound, client_ms = pre.path_rtt_ms, pre.path_rtt_upper_bound, pre.client_ms
    n = s.k if s is not None else 0
    meta["completed_ms"] = (s.time if s is not None else None) or 0.0
    summary = _summary(s, n, pre.all_kinds, source, client_ms, (path_rtt, pre.path_rtt_source, rtt_bound), meta)
    if not n and client_ms is None and (meta.get("stats") or {}).get("int_latency_p50_ms") is not None:
        client_ms = meta["stats"]["int_latency_p50_ms"]
    # A capture's record batches time the messages' wait in the client.
    _unknowns(unknowns, s, client_ms if not meta.get("wire_waits") else meta["wire_waits"]["first_p50_ms"],
              default_nodelay, version)
    if n == 0:
        unknowns.append("no Produce request completed in the capture")
        facts = Facts(None, {}, 0, path_rtt, rtt_bound, version, default_nodelay, summary, meta, client_ms)
        return from_signals_only(facts, vt, unknowns)

    examples = dict(examples or {})
    slow_as = slow_wait_resolved_in(per)
    if SLOW_WAIT in examples:
        examples[slow_as] = examples.pop(SLOW_WAIT)
    if each is not None:
        ci = each["columns"].index("cause")
        for r in each["rows"] + each["slowest"]:
            r[ci] = slow_as if r[ci] == SLOW_WAIT else r[ci]
    facts = Facts(None, {}, n, path_rtt, rtt_bound, version, default_nodelay, summary, meta, client_ms)
    findings = _findings(per, examples, facts, vt)
    ruled = nagle_ruled_out(pre.one_write) or meta.get("wire_no_hold")
    if ruled:
        summary["nagle_ruled_out"] = ruled
        for f in findings:
            if f["cause"] != OTHERWISE:
                f["evidence"].append(ruled)
    predict.attach(findings, each, pre.one_write["wait_p50_ms"], path_rtt, client_ms)
    verdict = verdict_of(findings)
    if verdict == OTHERWISE:
        other = BY_NAME[OTHERWISE]
        k = per[OTHERWISE].k if OTHERWISE in per else 0
        findings.insert(0, {"cause": other.NAME, "share": round(k / n, 3), "requests": k,
                            "evidence": other.evidence(facts), "fix": other.fix(vt),
                            "fix_text": other.fix_text(facts)})
    result = result_of(meta, version, verdict, findings, summary, unknowns)
    result["request_rows"] = each
    return result


def request_rows(rq, n: int | None, keys: tuple = ()) -> dict:
    """Each request's time and parts for the report's charts and the
    predictions, in send order: all of them up to REQUEST_ROWS_MAX, else an
    even sample of that many in ``rows`` and the REQUEST_ROWS_WORST slowest
    in ``slowest`` (so ``rows`` stays a fair sample). ``n`` None: a small
    input, collected whole and thinned here; else the sample is Spark's.
    Columnar, floats rounded to 3 places: findings.json carries it.
    ``keys``: columns (a fleet's run) each value of which has rows of its
    own, thinned by the same rule in Spark; the result is then keyed by
    the keys' values (one key: its value)."""
    from pyspark.sql import functions as F

    cols = [c for c in REQUEST_COLUMNS if c in rq.columns]
    if keys:
        return _request_rows_by(rq, cols, keys)
    picked = rq.select(*cols)
    if n is None or n <= REQUEST_ROWS_MAX:
        got = _in_send_order(picked.collect())
        n = len(got)
        slowest = sorted(got, key=lambda r: -(r.total_ms or 0))[:REQUEST_ROWS_WORST]
        got, slowest = (got[::_thinning(n)], slowest) if n > REQUEST_ROWS_MAX else (got, [])
    else:
        got = _in_send_order(picked.sample(fraction=min(1.0, 1.1 * REQUEST_ROWS_MAX / n), seed=7)
                             .limit(REQUEST_ROWS_MAX).collect())
        slowest = picked.orderBy(F.col("total_ms").desc_nulls_last()).limit(REQUEST_ROWS_WORST).collect()
    return _columnar(cols, got, slowest, n)


def _request_rows_by(rq, cols: list[str], keys: tuple) -> dict:
    """``request_rows`` of each value of ``keys``, as a small input's are
    thinned (every ``_thinning(n)``-th in send order, and the slowest), but
    in Spark: only the rows kept reach the driver, however many runs."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    run = Window.partitionBy(*keys)
    marked = (rq.select(*keys, *cols).withColumn("_n", F.count("*").over(run))
              .withColumn("_i", F.row_number().over(run.orderBy(F.col("send_us").asc_nulls_last())))
              .withColumn("_w", F.row_number().over(run.orderBy(F.col("total_ms").desc_nulls_last()))))
    every = (F.col("_i") - 1) % F.ceil(F.col("_n") / REQUEST_ROWS_MAX) == 0
    worst = (F.col("_n") > REQUEST_ROWS_MAX) & (F.col("_w") <= REQUEST_ROWS_WORST)
    by: dict = {}
    for r in marked.filter(every | worst).collect():
        by.setdefault(r[keys[0]] if len(keys) == 1 else tuple(r[k] for k in keys), []).append(r)
    out = {}
    for key, rows in by.items():
        n = rows[0]["_n"]
        got = [r for r in rows if (r["_i"] - 1) % _thinning(n) == 0]
        slowest = [r for r in rows if n > REQUEST_ROWS_MAX and r["_w"] <= REQUEST_ROWS_WORST]
        out[key] = _columnar(cols, _in_send_order(got), slowest, n)
    return out


def _thinning(n: int) -> int:
    """Every how many requests in send order one is kept, of ``n``."""
    return -(-n // REQUEST_ROWS_MAX)


def _in_send_order(rows: list) -> list:
    return sorted(rows, key=lambda r: (r["send_us"] is None, r["send_us"] or 0))


def _columnar(cols: list[str], got: list, slowest: list, n: int) -> dict:
    plain = lambda r: [round(r[c], 3) if isinstance(r[c], float) else r[c] for c in cols]  # noqa: E731
    return {"columns": cols, "rows": [plain(r) for r in got], "slowest": [plain(r) for r in _in_send_order(slowest)],
            "of": n, "sampled": n > REQUEST_ROWS_MAX}


def _before_causes(spark, reqs, stats, conns: list[dict], meta: dict, parallel: bool):
    """Everything that comes before the causes, in one job (beside the
    path's): the one-write requests, the split ones' wait, the statistics'
    queueing and throttles; and the path RTT."""
    pre = before_causes(reqs, stats)
    path, pre = at_once(parallel, [lambda: path_rtt_of(spark, meta.get("tables_dir"), conns), pre.first])
    return pre, path


def before_causes(reqs, stats, keys: tuple = ()):
    """The one-write requests and their wait, the split Produce requests'
    wait, the statistics' queueing and throttles: one row per ``keys``."""
    from pyspark.sql import functions as F

    one_write = (F.col("n_writes") == 1) & F.col("wait_ms").isNotNull()
    cols = [F.count("*").alias("all_kinds"), F.count(F.when(one_write, 1)).alias("n1"),
            quantile(F.when(one_write, F.col("wait_ms")), 0.5).alias("m1"),
            quantile(F.when((F.col("request") == "Produce") & (F.col("n_writes") >= 2), F.col("wait_ms")),
                     0.5).alias("multi_wait")]
    if "req_bytes" in reqs.columns:
        # A small request that opens a connection leaves in one TLS record,
        # one segment, with nothing unacknowledged before it: Nagle holds
        # nothing of it. (A later small request, a MetadataRequest behind a
        # Produce request's unacknowledged tail, can be held like it.)
        took = F.coalesce(F.col("wait_ms"), F.col("total_ms"), F.col("rtt_ms"))
        small = F.col("request").isin(*CONNECTION_OPENERS) & F.col("req_bytes").between(1, ONE_RECORD_BYTES) \
            & took.isNotNull()
        cols += [F.count(F.when(small, 1)).alias("n_small"), quantile(F.when(small, took), 0.5).alias("m_small"),
                 F.first(F.when(small, F.col("request")), ignorenulls=True).alias("small_kind"),
                 quantile(F.when(F.col("request") == "Produce", took), 0.5).alias("produce_took")]
    pre = reqs.groupBy(*keys).agg(*cols) if keys else reqs.agg(*cols)
    if stats is not None:
        scols = [quantile("int_latency_p50_ms", 0.5).alias("client_ms"),
                 F.count(F.when(F.col("throttle_max_ms") > 0, 1)).alias("throttled")]
        pre = pre.join(stats.groupBy(*keys).agg(*scols), list(keys), "left") if keys else \
            pre.crossJoin(stats.agg(*scols))
    return pre


def _classified(spark, produce, conns: list[dict], throttles, path_rtt, nagle_possible: bool, meta: dict,
                local: bool):
    """The requests with what the samplers saw joined on, and their cause;
    held (see spark_plumbing.cached) when the joins shuffle; cached (True) unless
    ``local``."""
    produce = runq_of(spark, meta.get("tables_dir"), produce)
    rq = with_causes(spark, produce, conns, throttles, path_rtt, nagle_possible)
    held = "runq_ms" in produce.columns and meta.get("tables_dir") and \
        (Path(meta["tables_dir"]) / "threads.parquet").exists() or throttles is not None
    if held and local:   # joins that shuffle: made once for the jobs below
        return cached(rq, None, local=True), False
    if held:
        rq = rq.cache()
    return rq, held


def with_causes(spark, produce, conns: list[dict], throttles, path_rtt, nagle_possible):
    """The requests (with their run queue wait, ``runq_ms``) with the
    statistics' throttles (``throttles``: None without one) and their
    connections joined on, and their cause. ``path_rtt`` and
    ``nagle_possible``: one run's values, or a fleet's columns by run."""
    from pyspark.sql import functions as F

    if "throttle_ms" in produce.columns:
        pass   # a capture's requests carry the broker's own figure, each its response's
    elif throttles is not None:
        produce = throttle_of(throttles, produce)
    else:
        produce = produce.withColumn("throttle_ms", F.lit(None).cast("double"))
    return classify(attach_connections(spark, produce, conns), path_rtt, nagle_possible)


def cause_sums(rq, keys: tuple = ()):
    """The causes and the whole in one job: each request counted once as
    itself and once under its cause, with only the columns each side is
    summed over (a percentile costs per value it is given). slow_wait is
    told apart later; all its requests get the same name. ``keys``: columns
    (a fleet's run) each value of which is summed apart."""
    from pyspark.sql import functions as F

    q = quantile
    none = lambda t: F.lit(None).cast(t)  # noqa: E731
    summed = causes.summed_columns()
    whole = rq.select(*keys, none("string").alias("_g"), "total_ms", "wait_ms", "rtt_ms", "send_ms", "read_ms",
                      "send_us", "recv_us", "broker", F.when(F.col("fd").isNotNull() & F.col("connect_us").isNull(),
                                                             F.col("fd")).alias("_ufd"),
                      *[none("double").alias(f"_s_{c}") for c in summed])
    each = rq.select(*keys, F.col("cause").alias("_g"), "total_ms", "wait_ms", none("double").alias("rtt_ms"),
                     none("double").alias("send_ms"), none("double").alias("read_ms"), none("long").alias("send_us"),
                     none("long").alias("recv_us"), none("string").alias("broker"), none("int").alias("_ufd"),
                     # A column only some sources have (a capture's stalled_ms) is null in the others.
                     *[(F.col(c) if c in rq.columns else none("double")).cast("double").alias(f"_s_{c}")
                       for c in summed])
    return whole.unionByName(each).groupBy(*keys, "_g").agg(
        F.count("*").alias("k"), F.count("wait_ms").alias("timed"),
        q("total_ms", [0.5, 0.99]).alias("total"), q("rtt_ms", [0.5, 0.99]).alias("rtt"),
        q("send_ms", 0.5).alias("send"), q("wait_ms", [0.5, 0.99, 0.5 - EXAMPLE_BAND, 0.5 + EXAMPLE_BAND]).alias("wait"),
        q("read_ms", 0.5).alias("read"), F.min("send_us").alias("first"), F.max("recv_us").alias("last"),
        F.sort_array(F.collect_set("broker")).alias("brokers"), F.sort_array(F.collect_set("_ufd")).alias("unknown_fds"),
        F.max("wait_ms").alias("wait_max"), F.sum("total_ms").alias("time"),
        *[q(f"_s_{c}", 0.5).alias(f"p50_{c}") for c in summed],
        *[F.max(f"_s_{c}").alias(f"max_{c}") for c in summed])


def read_cause_sums(rows, retrans: int | None):
    """The whole's row, cause -> CauseAgg (slow_wait resolved) and cause ->
    what ``median_requests`` finds its example by."""
    summed = causes.summed_columns()
    s = next((r for r in rows if r._g is None), None)
    per = {r._g: CauseAgg(r.k, r.wait[:2] if r.wait else r.wait, r.total[0] if r.total else None, r.wait_max,
                          r.time, {c: r[f"p50_{c}"] for c in summed}, {c: r[f"max_{c}"] for c in summed})
           for r in rows if r._g is not None}
    bands = {r._g: (r.k, r.timed, r.wait) for r in rows if r._g is not None}
    n = s.k if s is not None else 0
    if SLOW_WAIT in per:
        slow = per.pop(SLOW_WAIT)
        per[slow_wait_as(n, slow.k, retrans)] = slow
    return s, per, bands


def _summary(s, n: int, all_kinds: int, source: str, client_ms, path: tuple, meta: dict) -> dict:
    path_rtt, rtt_source, rtt_bound = path
    two = lambda v, i: None if v is None else v[i]  # noqa: E731
    return {
        "requests": n,
        "requests_all_kinds": all_kinds,
        "brokers": list((s.brokers if s is not None else None) or []),
        "source": source,
        "rtt_p50_ms": rounded(two(s and s.rtt, 0)), "rtt_p99_ms": rounded(two(s and s.rtt, 1)),
        "latency_p50_ms": rounded(two(s and s.total, 0)), "latency_p99_ms": rounded(two(s and s.total, 1)),
        "split_ms": {
            "client_queue": rounded(client_ms),
            "socket_send": rounded(s and s.send, 3),
            "wait_response": rounded(two(s and s.wait, 0), 3),
            "read_response": rounded(s and s.read, 3),
        },
        "path_rtt_ms": rounded(path_rtt, 3),
        "path_rtt_source": rtt_source,
        "path_rtt_upper_bound": rtt_bound if path_rtt is not None else None,
        "tcp_retransmits": meta.get("tcp_retrans"),
        "first_send_us": s and s.first,
        "last_recv_us": s and s.last,
        **statistics_in_summary(meta.get("stats"), n),
    }


def statistics_in_summary(st: dict | None, requests: int) -> dict:
    """The statistics' windows in the summary: their series always; with no
    completed request, their rtt and client queue stand for the requests'
    (``rtt_source`` says so), which the likely causes rank from."""
    if not st:
        return {}
    out: dict = {"statistics": st}
    if not requests:
        out.update({"rtt_p50_ms": st.get("rtt_p50_ms"), "rtt_p99_ms": st.get("rtt_p99_ms"),
                    "rtt_source": "statistics",
                    "split_ms": {"client_queue": st.get("int_latency_p50_ms"), "socket_send": None,
                                 "wait_response": None, "read_response": None}})
    return out


def _unknowns(unknowns: list[str], s, client_ms, default_nodelay: bool | None, version: str | None) -> None:
    if client_ms is None:
        unknowns.append("no statistics: time queued in the client before the send is unknown")
    if s is not None and s.unknown_fds:
        hint = ""
        if default_nodelay is not None:
            hint = (f"; librdkafka {version} defaults socket.nagle.disable to "
                    f"{'true' if default_nodelay else 'false'}")
        unknowns.append(f"TCP_NODELAY unknown on fd {list(s.unknown_fds)}: the capture started after connect(){hint}")


def _findings(per: dict, examples: dict, run: Facts, vt) -> list[dict]:
    """A finding per cause that explains enough requests or time, and the
    causes judged over the run; the largest share first."""
    n = run.requests
    all_time = sum((a.time or 0.0) for a in per.values()) or 1.0
    findings = []
    for name, agg in per.items():
        share = agg.k / n
        time_share = (agg.time or 0.0) / all_time
        # A tail cause is few requests but much of the time: listed by either.
        if name == OTHERWISE or max(share, time_share) < CONTRIBUTING_SHARE:
            continue
        facts = Facts(agg, examples[name], n, run.path_rtt_ms, run.rtt_upper_bound, run.version,
                      run.default_nodelay, run.summary, run.meta, run.client_ms)
        f = finding(BY_NAME[name], facts, share, vt)
        f["time_share"] = round(time_share, 3)
        findings.append(f)
    signal_findings(findings, run, vt)
    before_requests(findings)
    findings.sort(key=lambda f: (-f["share"], f["cause"]))
    return findings


def before_requests(findings: list[dict]) -> None:
    """A cause whose part comes before the request (PART "queue"), judged
    against the requests' own time, holds its share of each message's time:
    the requests' causes explain only the rest of it, so their shares are
    scaled by what is left."""
    queued = [f for f in findings if BY_NAME[f["cause"]].PART == "queue" and "example" not in f
              and REQUESTS in (f.get("rests_on") or [])]
    if not queued:
        return
    left = 1.0 - max(f["time_share"] for f in queued)
    for f in findings:
        if "example" in f:
            f["share"] = round(f["share"] * left, 3)
            f["time_share"] = round((f.get("time_share") or 0.0) * left, 3)


def signal_findings(findings: list[dict], run: Facts, vt) -> None:
    """The causes judged over the run from librdkafka's other lines or its
    statistics (``from_signals``): a new finding each, or more evidence for
    a finding the requests already gave."""
    by_cause = {f["cause"]: f for f in findings}
    for cause in causes.CAUSES:
        judged = getattr(cause, "from_signals", None)
        got = judged(run) if judged is not None else None
        if got is None or max(got["share"], got["time_share"]) < CONTRIBUTING_SHARE:
            continue
        said = getattr(cause, "signal_evidence", cause.evidence)(run)
        rests = list(got.get("rests_on") or [LOG_LINES])
        if cause.NAME in by_cause:
            by_cause[cause.NAME]["evidence"] += said
            was = by_cause[cause.NAME].setdefault("rests_on", [])
            was += [r for r in rests if r not in was]
            continue
        findings.append({"cause": cause.NAME, "share": round(got["share"], 3),
                         "time_share": round(got["time_share"], 3), "requests": got["requests"], "evidence": said,
                         "fix": getattr(cause, "signal_fix", lambda _: cause.fix(vt))(run),
                         "fix_text": cause.fix_text(run), "rests_on": rests})


def from_signals_only(run: Facts, vt, unknowns: list[str]) -> dict:
    """No completed Produce request: the run's other lines (requests that
    timed out, retries, errors), its statistics and its path are all there
    is to judge. Nothing named from evidence of a Kafka client is
    ``undecided``, saying what was read; ``no_data`` is an input without
    any (``meta["evidence_read"]``: table -> rows; a caller that does not
    count them keeps ``no_data``)."""
    findings: list[dict] = []
    signal_findings(findings, run, vt)
    findings.sort(key=lambda f: (-max(f["share"], f.get("time_share") or 0.0), f["cause"]))
    if not findings:
        read = {t: n for t, n in (run.meta.get("evidence_read") or {}).items() if n}
        if not read:
            return result_of(run.meta, run.version, OTHERWISE, [], run.summary, unknowns, no_data=True)
        result = result_of(run.meta, run.version, OTHERWISE, [], run.summary,
                           unknowns + idle_disconnects(run) + purged(run), undecided=True)
        result["evidence_read"] = read
        return result
    return result_of(run.meta, run.version, findings[0]["cause"], findings, run.summary, unknowns)


# rd_kafka_purge()'s errors, as the application gets them for each message
# it purged: RD_KAFKA_RESP_ERR__PURGE_QUEUE (-152, "Local: Purged in queue")
# and __PURGE_INFLIGHT (-151, "Local: Purged in flight"). librdkafka purges
# only when the application asks it to.
PURGED = re.compile(r"(?i)Purged in (?:queue|flight)|_PURGE_(?:QUEUE|INFLIGHT)\b|Local_Purge(?:Queue|Inflight)")


def purged(run: Facts) -> list[str]:
    """What purge errors that decide nothing say: messages were still
    waiting when the application purged them, not why they waited."""
    sig = run.meta.get("signals") or {}
    names = [n.split(": ", 1)[-1] for n in sig.get("other_error_names") or [] if PURGED.search(n)]
    if not names:
        return []
    return [f"the application purged messages before they were delivered ({', '.join(names)}): rd_kafka_purge() "
            "fails what is still queued or in flight, as a producer does when it is closed or gives up waiting for "
            "a flush; it says messages were still waiting, not why (a broker down or slow, or a shutdown with "
            "messages queued): librdkafka's log with debug=broker,msg around it would say"]


def idle_disconnects(run: Facts) -> list[str]:
    """What disconnects that decide nothing were: connections the broker
    closed while idle (its connections.max.idle.ms, 10 min by default)."""
    sig = run.meta.get("signals") or {}
    n = sig.get("idle_disconnects") or 0
    if not n:
        return []
    up = sig.get("idle_up_max_ms")
    return [f"{n} disconnect(s) (\"{sig.get('idle_detail')}\""
            + (f", up to {up / 1000:.0f} s after the connection came up" if up else "")
            + ") without a failed connect, a timeout or brokers down: idle connections the broker closed "
              "(connections.max.idle.ms); librdkafka reconnects when it next sends, so they cost nothing"]


def finding(cause, facts: Facts, share: float, vt) -> dict:
    """One cause's finding: its share, its sentences, its fix, what it
    rests on and its median request as the example."""
    ex = facts.example
    return {
        "cause": cause.NAME,
        "share": round(share, 3),
        "requests": facts.agg.k,
        "rests_on": request_rests_on(cause, facts),
        "evidence": cause.evidence(facts),
        "fix": cause.fix(vt),
        "fix_text": cause.fix_text(facts),
        "example": {k: ex.get(k) for k in ("broker", "corr_id", "n_writes", "write_sizes", "wait_ms",
                                            "rtt_ms", "send_line", "recv_line", "fd")},
    }


def request_rests_on(cause, facts: Facts) -> list[str]:
    """What a finding its requests gave rests on: the requests (librdkafka's
    lines, or syscalls alone), the syscalls that split them, and what the
    cause's rule reads besides (``ALSO_RESTS_ON``) when the run has it."""
    source = facts.summary.get("source")
    rests = {"syscalls": [SYSCALLS], "strace": [REQUESTS, SYSCALLS]}.get(source, [REQUESTS])
    has = {STATISTICS: bool(facts.meta.get("has_stats")), PATH: facts.path_rtt_ms is not None,
           SOCKET_SAMPLES: bool((facts.meta.get("evidence_read") or {}).get("sockets"))}
    rests += [k for k in getattr(cause, "ALSO_RESTS_ON", ()) if has.get(k, True) and k not in rests]
    return rests


def result_of(meta, version, verdict, findings, summary, unknowns, no_data=False, undecided=False) -> dict:
    return {
        "kdiag_version": meta.get("kdiag_version"),
        "librdkafka_version": version,
        # Nothing to judge is not "healthy": the verdict is then null, as it
        # is for evidence of a client that decides no cause (``undecided``).
        "verdict": None if no_data or undecided else verdict,
        "no_data": no_data,
        "undecided": undecided,
        "summary": summary,
        "findings": findings,
        "unknowns": unknowns,
    }
