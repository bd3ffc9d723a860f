"""A connection's life, phase by phase: where a message waited before any
request existed.

librdkafka walks each broker handle through its states and logs each change
at debug ``broker``::

    Broker changed state INIT -> TRY_CONNECT
    Broker changed state TRY_CONNECT -> CONNECT
    Connecting to ipv4#10.0.0.5:9093 (ssl) with socket 8
    Connected to ipv4#10.0.0.5:9093
    Broker changed state CONNECT -> SSL_HANDSHAKE
    Broker changed state SSL_HANDSHAKE -> APIVERSION_QUERY
    Broker changed state APIVERSION_QUERY -> AUTH_HANDSHAKE
    Broker changed state AUTH_HANDSHAKE -> AUTH_REQ
    Broker changed state AUTH_REQ -> UP

(rdkafka_broker.c: ``rd_kafka_broker_connect()`` sets CONNECT, *then*
resolves the name with a blocking getaddrinfo() on the broker's thread, then
``rd_kafka_transport_connect()`` logs "Connecting to": so resolution is the
time from entering CONNECT to that line.) A failure ends the attempt with a
FAIL line that says how long the state lasted: ``Connect to ipv4#... failed:
Connection refused (after 0ms in state CONNECT)``, ``Failed to resolve
'h:9092': ... (after 5003ms in state CONNECT)``, ``Connection setup timed
out in state CONNECT (after 30029ms in state CONNECT)``.

Each attempt becomes a row of phases:

    backoff     TRY_CONNECT: waiting out reconnect.backoff.ms
    resolve     CONNECT until "Connecting to"
    connect     "Connecting to" until the next state (TCP's handshake,
                SYN retransmits among it); all of CONNECT when the
                "Connecting to" line is missing (``with_resolve``)
    tls         SSL_HANDSHAKE
    apiversion  APIVERSION_QUERY
    sasl        AUTH_LEGACY, AUTH_HANDSHAKE, AUTH_REQ, REAUTH

The syscalls add what the log cannot say: each lookup's exchange with the
resolver (a socket connect()ed to port 53 until its close), and TCP
handshakes long enough to hold a SYN retransmit (connections.py). After UP,
``metadata`` is the wait from the first MetadataRequest to the run's first
ProduceRequest while the client asked again and again (an unknown topic, a
leader not available).

Few rows (state changes and connection lines): computed on the driver.
"""
from __future__ import annotations

import re

from kdiag.analysis.spark_plumbing import RUN, one_run, rounded
from kdiag.analysis.thresholds import SYN_RETRANSMIT_MS

PHASES = ("backoff", "resolve", "connect", "tls", "apiversion", "sasl", "metadata")
# The cause a phase's stall is named (its colour in the report's timeline);
# apiversion has none of its own.
PHASE_CAUSE = {"backoff": "broker_down", "resolve": "dns_slow", "connect": "connect_slow", "tls": "tls_handshake_slow",
               "apiversion": None, "sasl": "sasl_slow", "metadata": "metadata_wait"}
STATE_PHASE = {"TRY_CONNECT": "backoff", "CONNECT": "resolve", "SSL_HANDSHAKE": "tls",
               "APIVERSION_QUERY": "apiversion", "AUTH_LEGACY": "sasl", "AUTH_HANDSHAKE": "sasl",
               "AUTH_REQ": "sasl", "REAUTH": "sasl"}
STARTS = ("TRY_CONNECT", "CONNECT")
ENDS = ("DOWN", "INIT")
# More state changes than a long reconnect storm holds are not walked: the
# first ones are, in time order, and the rest counted.
MAX_LINES = 200_000
# Attempts kept in the findings for the report's timeline: the slowest and
# the first ones.
SHOWN_ATTEMPTS = 40
# Metadata asked again this soon is librdkafka's fast refresh
# (topic.metadata.refresh.fast.interval.ms, 100 ms, backing off to
# retry.backoff.max.ms) for a topic or leader it lacks; the periodic refresh
# comes every topic.metadata.refresh.interval.ms (5 min).
METADATA_RETRY_GAP_US = 2_000_000
# ... and this many requests in a row are a client that is waiting, not one
# that refreshes once on connecting.
METADATA_WAIT_REQUESTS = 3
# The errors that say a topic or its leader is missing from the metadata:
# the broker's codes (UNKNOWN_TOPIC_OR_PART 3, LEADER_NOT_AVAILABLE 5,
# NOT_LEADER_OR_FOLLOWER 6) in rd_kafka_err2str()'s words or names, and
# librdkafka's own for a topic the cluster does not have.
METADATA_ERROR = (r"(?i)(Unknown topic or partition|UNKNOWN_TOPIC|Leader not available|LEADER_NOT_AVAILABLE|"
                  r"Not leader for partition|NOT_LEADER|not found in cluster|Unknown partition)")
# A name that did not resolve: the FAIL line's errstr ("Failed to resolve
# '%s': %s", rdkafka_broker.c) and the application's copy of its code
# (RD_KAFKA_RESP_ERR__RESOLVE, -193, "Local: Host resolution failure").
RESOLVE_DETAIL = r"(?i)(Failed to resolve|Host resolution failure|^_RESOLVE$|^Local_Resolve$)"
# A state's age beyond a day is one counted from a time never set (seen as
# 40 days "in state INIT"): the phase's length is then unknown.
PLAUSIBLE_STATE_MS = 86_400_000
# A FAIL line this soon after the one that ended an attempt, naming the
# same state, is its copy.
COPY_US = 5_000
ERROR_COPY = r"in state [A-Z_]+\)|Failed to resolve|SSL handshake failed"
_STATE = re.compile(r"([A-Z_]+) -> ([A-Z_]+)")
_IN_STATE = re.compile(r"\(after (\d{1,12})ms in state ([A-Z_]+)")


def life(events, conns: list[dict] | None = None) -> dict:
    """The run's connection attempts, their phases and what they add up to,
    from an rdkafka_events-shaped DataFrame (None: the syscalls alone)."""
    if events is None:
        return summed([], conns or [], None, 0, 0)
    got = life_by_run(one_run(events), {})
    mine = next(iter(got.values())) if got else summed([], [], None, 0, 0)
    if conns:
        mine = {**mine, "dns": dns_exchanges(conns), "slow_handshakes": slow_handshakes(conns)}
    return mine


def life_by_run(events, conns_by_run: dict) -> dict:
    """run -> its life, for every run of ``events`` (one run's, or a
    fleet's in one pass): each run's rows walked apart, as broker names
    repeat across runs. ``conns_by_run``: run -> its connections."""
    from kdiag.analysis import timed_out

    rows, cut, firsts = _rows(events)
    expired = timed_out.rows_of(events)
    # Each run's rows, grouped once: a fleet has many runs.
    by_run: dict = {}
    for r in rows:
        by_run.setdefault(r[RUN], []).append(r)
    expired_by: dict = {}
    for r in expired:
        expired_by.setdefault(r[RUN], []).append(r)
    out = {}
    for run in set(by_run) | set(firsts) | set(expired_by) | set(conns_by_run):
        mine = by_run.get(run, [])
        attempts = walk(mine)
        meta = metadata_wait([r for r in mine if r["event"] in ("send", "meta_error")], firsts.get(run))
        got = summed(attempts, conns_by_run.get(run) or [], meta, len(mine), cut)
        got["timed_out"] = timed_out.where(expired_by.get(run, []), attempts, cause_of_failures(attempts))
        out[run] = got
    return out


def _rows(events) -> tuple[list[dict], int, dict]:
    from pyspark.sql import functions as F

    cols = [c for c in (RUN, "line_no", "ts_us", "client", "broker", "event", "request", "detail", "text",
                        "elapsed_ms") if c in events.columns]
    text = F.col("text") if "text" in events.columns else F.lit(None).cast("string")
    err = F.col("error") if "error" in events.columns else F.lit(None).cast("string")
    ev = F.col("event")
    # Sent/Received lines are most of a large log: the patterns below are
    # never run on them.
    is_meta_err = ~ev.isin("send", "recv") & (text.rlike(METADATA_ERROR) | err.rlike(METADATA_ERROR))
    app_resolve = (ev == "app_error") & (err.rlike(RESOLVE_DETAIL) | text.rlike(RESOLVE_DETAIL))
    # librdkafka's ERROR copy of a broker failure, where no FAIL line was
    # logged beside it (older versions, debug off), and a wrapper's line
    # that prints no facility: read as its FAIL line (a copy beside one is
    # dropped as one, _copy_of).
    fac = F.col("facility") if "facility" in events.columns else F.lit(None).cast("string")
    error_copy = ((fac == "ERROR") | fac.isNull()) & (ev == "other") & text.rlike(ERROR_COPY)
    wanted = (ev.isin("state", "connect", "connected", "fail") | ((ev == "send") & (F.col("request") == "Metadata"))
              | is_meta_err | app_resolve | error_copy)
    picked = events.filter(wanted).select(*cols, F.when(~ev.isin("state", "connect", "connected", "fail", "send")
                                                        & is_meta_err, 1).alias("_meta_err"),
                                          F.when(app_resolve, 1).alias("_app_resolve"),
                                          F.when(error_copy & ~ev.isin("fail"), 1).alias("_error_copy"))
    got = picked.orderBy(F.col("ts_us").asc_nulls_first(), "line_no").limit(MAX_LINES + 1).collect()
    cut = 0
    if len(got) > MAX_LINES:
        cut = picked.count() - MAX_LINES
        got = got[:MAX_LINES]
    firsts = {r[RUN]: r.t for r in events.filter((ev == "send") & (F.col("request") == "Produce"))
              .groupBy(RUN).agg(F.min("ts_us").alias("t")).collect()}
    rows = []
    for r in got:
        d = r.asDict()
        if d.pop("_meta_err"):
            d["event"] = "meta_error"
        if d.pop("_app_resolve"):
            d["event"] = "app_resolve"
        if d.pop("_error_copy"):
            d["event"] = "fail"
        rows.append(d)
    return rows, cut, firsts


def walk(rows: list[dict]) -> list[dict]:
    """The attempts in ``rows`` (dicts with line_no, ts_us, client, broker,
    event, detail, text, elapsed_ms), in time order: each broker handle's
    own. Untimed lines time nothing; a FAIL line alone still gives the phase
    it ended and how long that lasted."""
    open_by: dict = {}
    last_by: dict = {}
    attempts: list[dict] = []
    for r in rows:
        if r.get("event") not in ("state", "connect", "connected", "fail", "app_resolve"):
            continue
        if r.get("ts_us") is None or r["event"] == "app_resolve":
            _untimed_fail(r, attempts)
            continue
        key = (r.get("client"), r.get("broker"))
        att = open_by.get(key)
        if r["event"] == "state":
            att = _state(r, att, key, attempts)
        elif r["event"] == "connect" and att is not None and _open_phase(att) == "resolve":
            _close(att, r)
            _open(att, "connect", r)
        elif r["event"] == "connect" and att is None:
            # An excerpt that starts inside an attempt: from here on.
            att = _new(key, r, attempts)
            att["partial"] = True
            _open(att, "connect", r)
        elif r["event"] == "fail":
            att = _fail(r, att, last_by.get(key), key, attempts)
        open_by[key] = att if att is not None and att["outcome"] is None else None
        last_by[key] = att or last_by.get(key)
    for att in attempts:
        if att["outcome"] is None:
            att["outcome"] = "open"
        att.pop("_open", None)
    return attempts


def _new(key, r: dict, attempts: list) -> dict:
    att = {"client": key[0], "broker": key[1], "start_us": r["ts_us"], "line": r.get("line_no"), "up_us": None,
           "outcome": None, "error": None, "phases": [], "_open": None}
    attempts.append(att)
    return att


def _open_phase(att: dict) -> str | None:
    return att["_open"]["phase"] if att.get("_open") else None


def _open(att: dict, phase: str, r: dict) -> None:
    att["_open"] = {"phase": phase, "start_us": r["ts_us"], "line": r.get("line_no"), "ms": None, "error": None}
    att["phases"].append(att["_open"])


def _close(att: dict, r: dict, error: str | None = None) -> None:
    ph = att.get("_open")
    if ph is None:
        return
    ph["ms"] = round((r["ts_us"] - ph["start_us"]) / 1000.0, 3)
    ph["end_line"] = r.get("line_no")
    if error:
        ph["error"] = error
    att["_open"] = None


def _state(r: dict, att: dict | None, key, attempts: list) -> dict | None:
    m = _STATE.search(r.get("detail") or r.get("text") or "")
    if not m:
        return att
    frm, to = m.groups()
    if att is None and to in STARTS:
        att = _new(key, r, attempts)
    elif att is None and frm in STATE_PHASE and (to in STATE_PHASE or to == "UP"):
        # An excerpt that starts inside an attempt: its phases from here.
        att = _new(key, r, attempts)
        att["partial"] = True
    if att is None:
        return None
    if _open_phase(att) == "resolve" and frm == "CONNECT":
        # No "Connecting to" line between: the state held both.
        att["_open"]["phase"], att["_open"]["with_resolve"] = "connect", True
    _close(att, r)
    if to == "UP":
        att["up_us"], att["outcome"] = r["ts_us"], "up"
    elif to in ENDS:
        att["outcome"], att["end_us"] = "failed", r["ts_us"]
    elif to in STATE_PHASE:
        _open(att, STATE_PHASE[to], r)
    return att


def _fail(r: dict, att: dict | None, last: dict | None, key, attempts: list) -> dict | None:
    text = r.get("text") or r.get("detail") or ""
    if att is None and _copy_of(last, r, text):
        # The same failure logged twice (at debug, then at its own level
        # when the application sets no error callback).
        return last
    if att is None and last is not None and last["outcome"] == "failed" and last["error"] is None:
        # The state went DOWN before its FAIL line was printed.
        last["error"] = text
        if last["phases"] and not last["phases"][-1].get("error"):
            last["phases"][-1]["error"] = text
        return last
    if att is None:
        # An excerpt that starts at the failure: the line says which phase
        # failed and, mostly, how long its state lasted.
        failed = _failed_phase(text)
        if failed is None:
            return None
        phase, ms = failed
        start = {**r, "ts_us": r["ts_us"] - int(ms * 1000) if ms is not None else r["ts_us"]}
        att = _new(key, start, attempts)
        _open(att, phase, start)
        if ms is None:
            att["_open"]["unknown_length"] = True
    if att["outcome"] is not None:
        return att
    if att.get("_open"):
        named = _failed_phase(text)
        if named and named[0] in ("resolve", "tls"):
            # The text says what failed (before v1.x the TLS handshake ran
            # in the CONNECT state).
            att["_open"]["phase"] = named[0]
        elif _open_phase(att) == "resolve":
            att["_open"]["phase"], att["_open"]["with_resolve"] = "connect", True
    _close(att, r, text)
    if att["phases"] and att["phases"][-1].pop("unknown_length", False):
        att["phases"][-1]["ms"] = None
    att["outcome"], att["error"], att["end_us"] = "failed", text, r["ts_us"]
    return att


def _copy_of(last: dict | None, r: dict, text: str) -> bool:
    """A FAIL line that repeats the one that ended ``last`` (printed again
    within COPY_US, the same failure)."""
    if last is None or last["outcome"] != "failed" or last.get("end_us") is None or not last["error"]:
        return False
    if r["ts_us"] - last["end_us"] > COPY_US:
        return False
    m = _IN_STATE.search(text)
    same = m.group(0) in last["error"] if m else (text in last["error"] or last["error"] in text)
    return bool(same)


def _failed_phase(text: str) -> tuple[str, float | None] | None:
    """The phase a FAIL line's errstr failed in, and how long its state
    lasted when the line says so: "Failed to resolve" is the lookup and
    "SSL handshake failed" the handshake whatever state is named (the
    resolve failure was logged "in state INIT" by some versions, with an
    age counted from no time at all; the handshake ran in CONNECT before
    v1.x), else the state named in "(after Nms in state X)"."""
    m = _IN_STATE.search(text)
    state, ms = (m.group(2), float(m.group(1))) if m else (None, None)
    if ms is not None and ms > PLAUSIBLE_STATE_MS:
        ms = None
    if re.search(r"(?i)Failed to resolve", text):
        return "resolve", ms if state == "CONNECT" else None
    if re.search(r"(?i)SSL handshake failed", text):
        return "tls", ms if state in ("CONNECT", "SSL_HANDSHAKE") else None
    if state not in STATE_PHASE:
        return None
    return _phase_of_failure(state, text), ms


def _untimed_fail(r: dict, attempts: list) -> None:
    """A FAIL line without a time (a wrapper that prints none): the attempt
    it ended, with the phase's length as the line states it."""
    text = r.get("text") or r.get("detail") or ""
    if r["event"] == "app_resolve":
        # The application's copy: counted only where no FAIL line says it
        # (summed), as an error_cb repeats every FAIL line.
        attempts.append({"client": r.get("client"), "broker": r.get("broker"), "start_us": None,
                         "line": r.get("line_no"), "up_us": None, "outcome": "failed", "error": text or "resolve",
                         "phases": [], "_open": None, "app": True})
        return
    failed = _failed_phase(text) if r["event"] == "fail" else None
    if failed is None:
        return
    ph = {"phase": failed[0], "start_us": None, "line": r.get("line_no"), "ms": failed[1], "error": text}
    attempts.append({"client": r.get("client"), "broker": r.get("broker"), "start_us": None,
                     "line": r.get("line_no"), "up_us": None, "outcome": "failed", "error": text, "phases": [ph],
                     "_open": None})


def _phase_of_failure(state: str, text: str) -> str:
    if state == "CONNECT":
        return "resolve" if re.search(r"(?i)resolve", text) else "connect"
    return STATE_PHASE[state]


def metadata_wait(rows: list[dict], first_produce_us: int | None) -> dict | None:
    """The wait for metadata before the run's first ProduceRequest: the
    MetadataRequests sent in a row (each within METADATA_RETRY_GAP_US of the
    last) up to it, and the errors about a missing topic or leader among
    them. None when the run shows no Produce request after them."""
    errors = [r for r in rows if r["event"] == "meta_error"]
    sends = [r["ts_us"] for r in rows if r["event"] == "send" and r.get("ts_us") is not None]
    if first_produce_us is not None:
        sends = [t for t in sends if t <= first_produce_us]
    run: list[int] = []
    for t in sorted(sends):
        run = run + [t] if run and t - run[-1] <= METADATA_RETRY_GAP_US else [t]
    if run and first_produce_us is not None and first_produce_us - run[-1] > METADATA_RETRY_GAP_US:
        run = []
    detail = next((r.get("text") or r.get("detail") for r in errors if r.get("text") or r.get("detail")), None)
    if not run and not errors:
        return None
    start = run[0] if run else None
    end = first_produce_us if first_produce_us is not None else (run[-1] if run else None)
    return {"requests": len(run), "error_lines": len(errors), "error": detail, "start_us": start,
            "produced": first_produce_us is not None,
            "ms": rounded((end - start) / 1000.0, 3) if start is not None and end is not None else None}


def summed(attempts: list[dict], conns: list[dict], meta: dict | None, lines: int, cut: int) -> dict:
    """What the findings read: per phase the slowest instance, the time
    summed and how many; failures by phase; the resolver's exchanges and the
    long TCP handshakes from the syscalls; the attempts to show."""
    phases: dict = {}
    for att in attempts:
        for ph in att["phases"]:
            if ph["ms"] is None:
                continue
            p = phases.setdefault(ph["phase"], {"n": 0, "total_ms": 0.0, "max_ms": None, "slowest": None,
                                                "failed": 0})
            p["n"] += 1
            p["total_ms"] = round(p["total_ms"] + ph["ms"], 3)
            if ph.get("error"):
                p["failed"] += 1
            if p["max_ms"] is None or ph["ms"] > p["max_ms"]:
                p["max_ms"] = ph["ms"]
                p["slowest"] = {"broker": att["broker"], "line": ph["line"], "end_line": ph.get("end_line"),
                                "error": ph.get("error"), "with_resolve": bool(ph.get("with_resolve"))}
    failed = [a for a in attempts if a["outcome"] == "failed"]
    up = [a for a in attempts if a["outcome"] == "up"]
    down_ms = _down_ms(attempts)
    backoffs = _waits_after_failures(attempts)
    return {"attempts": len(attempts), "up": len(up), "failed": len(failed), "phases": phases,
            "resolve_failures": _resolve_failures(failed),
            "slow_connect_failures": sum(1 for a in failed if _slow_connect_failure(a)),
            "down_ms": down_ms, "backoffs_ms": backoffs if failed else [], "metadata": meta, "dns": dns_exchanges(conns),
            "slow_handshakes": slow_handshakes(conns),
            "shown": shown(attempts), "lines": lines, "lines_cut": cut}


def _waits_after_failures(attempts: list[dict]) -> list[float]:
    """Per handle, from a failed attempt's end to the next attempt's start,
    in order (the first 20): reconnect.backoff.ms growing towards
    reconnect.backoff.max.ms, and the wait until a connection is wanted."""
    waits, last = [], {}
    for a in attempts:
        if a["start_us"] is None:
            continue
        key = (a["client"], a["broker"])
        prev = last.get(key)
        if prev is not None and prev["outcome"] == "failed" and prev.get("end_us") is not None:
            # Until it connects again: its backoff state included.
            again = next((p["start_us"] for p in a["phases"] if p["phase"] != "backoff"), a["start_us"])
            waits.append(round((again - prev["end_us"]) / 1000.0, 3))
        last[key] = a
    return waits[:20]


def _slow_connect_failure(a: dict) -> bool:
    """An attempt whose connect waited out SYN retransmits and failed
    (timed out: "Operation timed out", "Connection setup timed out"), not
    one refused or unreachable at once."""
    last = a["phases"][-1] if a["phases"] else None
    return (last is not None and last["phase"] == "connect" and (last["ms"] or 0) >= SYN_RETRANSMIT_MS
            and not re.search(r"(?i)refused|unreachable|no route", a["error"] or ""))


def _resolve_failures(failed: list[dict]) -> int:
    said = [a for a in failed if re.search(RESOLVE_DETAIL, a["error"] or "") or
            re.search(r"(?i)resolve", a["error"] or "")]
    logged = [a for a in said if not a.get("app")]
    return len(logged) or len(said)


def _down_ms(attempts: list[dict]) -> float | None:
    """Per handle, from its first failed attempt to the attempt that came
    UP after it (or its last line): the time the client could not reach it;
    the longest of them."""
    by: dict = {}
    for a in attempts:
        if a["start_us"] is not None:
            by.setdefault((a["client"], a["broker"]), []).append(a)
    worst = None
    for mine in by.values():
        first_fail = next((a for a in mine if a["outcome"] == "failed"), None)
        if first_fail is None:
            continue
        after = [a for a in mine if a["start_us"] >= first_fail["start_us"]]
        end = next((a["up_us"] for a in after if a["outcome"] == "up"), None)
        if end is None:
            ends = [a["start_us"] + sum(p["ms"] or 0 for p in a["phases"]) * 1000 for a in after]
            end = max(ends)
        ms = (end - first_fail["start_us"]) / 1000.0
        worst = ms if worst is None else max(worst, ms)
    return rounded(worst, 3)


def slow_handshakes(conns: list[dict]) -> list[dict]:
    """The TCP handshakes long enough to hold a SYN retransmit."""
    return [c for c in conns if (c.get("handshake_ms") or 0) >= SYN_RETRANSMIT_MS and not c.get("dns")]


def dns_exchanges(conns: list[dict]) -> list[dict]:
    """Each socket connect()ed to a resolver (port 53), from its connect()
    to its close: one lookup's queries and answers."""
    out = []
    for c in conns:
        if not c.get("dns") or c.get("closed_us") is None:
            continue
        out.append({"pid": c["pid"], "server": c["peer"], "line": c["connect_line"],
                    "ms": round((c["closed_us"] - c["connect_us"]) / 1000.0, 3)})
    return out


def shown(attempts: list[dict]) -> list[dict]:
    """The attempts a report draws: the first ones and the slowest, in time
    order, each phase with its start and duration."""
    def took(a):
        return sum(p["ms"] or 0 for p in a["phases"])
    keep = sorted(attempts, key=lambda a: -took(a))[:SHOWN_ATTEMPTS // 2] + attempts[:SHOWN_ATTEMPTS // 2]
    seen, out = set(), []
    for a in sorted(keep, key=lambda a: (a["start_us"] is not None, a["start_us"] or 0, a["line"] or 0)):
        if id(a) in seen:
            continue
        seen.add(id(a))
        out.append({k: a[k] for k in ("client", "broker", "start_us", "line", "up_us", "outcome", "error")}
                   | {"phases": [{k: p.get(k) for k in ("phase", "start_us", "ms", "line", "error")}
                                 for p in a["phases"]]})
    return out


def life_shown(got: dict | None) -> dict | None:
    """What the findings carry of it: every figure, and the attempts to
    draw; None for a run without one connection line."""
    if not got or not (got.get("attempts") or got.get("dns") or got.get("slow_handshakes") or got.get("metadata")
                       or got.get("timed_out")):
        return None
    return got


def cause_of_failures(attempts: list[dict]) -> dict:
    """broker -> the cause its failed attempts are named: the phase they
    failed in (a name that did not resolve, a connect that timed out, a
    handshake), else a broker down."""
    out: dict = {}
    for a in attempts:
        if a.get("outcome") != "failed" or not a.get("phases"):
            continue
        ph = a["phases"][-1]["phase"]
        refused = re.search(r"(?i)refused|unreachable|no route", a.get("error") or "")
        out[a.get("broker")] = "broker_down" if refused or ph in ("backoff", "apiversion") else PHASE_CAUSE[ph]
    return out
