"""Requests read off a packet capture (tables ``wire_requests`` and
``wire_connections``, parsers/wire), in the shape the judge reads.

A capture sees what the producer's socket did, not what its threads did:

- a request "leaves" when its first byte is on the wire. What holds its
  last bytes back (Nagle waiting for the peer's ACK) then falls inside its
  wait, as it falls inside the broker thread's ``poll()`` in the syscalls.
  So ``wait_ms`` runs from the request's first byte to the response's first
  byte, and ``send_ms`` is 0, except for a request the client held between
  its own writes (``_client_held``);
- its writes are its TLS records over TLS (librdkafka writes a request as
  several), its segments over plaintext;
- the client socket's TCP_NODELAY is read from what the socket did
  (``nodelay`` of ``wire_connections``): off when a small segment left only
  after the peer acknowledged the one before it, about a delayed ACK later;
  on when small segments left back to back with one still unacknowledged.
  Linux's Nagle (Minshall's form, tcp_minshall_check) holds a small segment
  only while an earlier small one is unacknowledged.

Only the connections the producer made are judged (``hop`` "client"); a
relay's onward connection (a TLS terminator's or a proxy's, seen on the same
loopback) lends its decoded facts to the producer's exchange it carried.
"""
from __future__ import annotations

import bisect
import re
from pathlib import Path

from kdiag.analysis.spark_plumbing import RUN, frame, read_table

CLIENT_HOP = "client"
SOURCE = "wire"
# The wire is the record of what the producer's socket did: with Kafka's
# own headers read, a request's kind and id are known as from librdkafka's
# lines; over TLS alone they are not.
CONFIDENCE = {True: "high: requests read off a packet capture, Kafka's own headers decoded",
              False: "medium: requests read off a packet capture over TLS, told apart by their records"}
TLS_ONLY = ("requests read off a packet capture over TLS: told apart by their records' sizes and timing, "
            "no correlation ids or request kinds (a capture of the terminator's plaintext side, or librdkafka's "
            "log, names them)")


def _table(tables_dir: Path | None, table: str, columns: list[str]):
    """Those of ``columns`` the table's file has, read alone (a capture's
    requests can be millions of rows); None without the file."""
    import pyarrow.parquet as pq

    path = Path(tables_dir) / f"{table}.parquet" if tables_dir is not None else None
    if path is None or not path.exists():
        return None
    names = set(pq.read_schema(path).names)
    return pq.read_table(path, columns=[c for c in columns if c in names])


def _rows(tables_dir: Path | None, table: str, columns: list[str]) -> list[dict]:
    t = _table(tables_dir, table, columns)
    return [] if t is None else t.to_pylist()


def has_requests(tables_dir: Path | None) -> bool:
    """Whether the capture holds a completed exchange on a connection the
    producer made (two columns read, not walked row by row)."""
    import pyarrow.compute as pc

    t = _table(tables_dir, "wire_requests", ["hop", "response_first_us"])
    if t is None or not t.num_rows:
        return False
    return bool(pc.any(pc.and_(pc.equal(t["hop"], CLIENT_HOP), pc.is_valid(t["response_first_us"]))).as_py())


def connections(tables_dir: Path | None) -> list[dict]:
    """The producer's connections in the capture, in the shape
    ``connections.connections`` gives the syscalls' (fd: the flow)."""
    cols = ["flow", "client", "server", "hop", "syn_us", "first_us", "handshake_ms", "nodelay", "retransmits",
            "protocol"]
    out = []
    for r in _rows(tables_dir, "wire_connections", cols):
        if r.get("hop") != CLIENT_HOP:
            continue
        # A connection whose SYN the capture missed stands from its start.
        out.append({"fd": r["flow"], "pid": None, "connect_us": r["syn_us"] if r["syn_us"] is not None else 0,
                    "connect_line": None, "peer": r["server"], "nodelay": r["nodelay"],
                    "nodelay_line": None, "handshake_ms": r["handshake_ms"],
                    "handshake_upper_bound": False, "dns": False, "wire": True, "tls": r["protocol"] == "tls",
                    "retransmits": r["retransmits"] or 0})
    return out


def summary(tables_dir: Path | None) -> dict:
    """What the findings say of the capture's connections: how many of each
    protocol and hop, and the relay hops that held requests (Nagle on a
    relay's onward socket)."""
    cols = ["flow", "client", "server", "protocol", "hop", "relayed_by", "nagle_holds", "nodelay", "requests",
            "unread"]
    rows = _rows(tables_dir, "wire_connections", cols)
    read = [r for r in rows if r.get("protocol")]
    return {"connections": len(rows), "kafka": sum(r["protocol"] == "kafka" for r in read),
            "tls": sum(r["protocol"] == "tls" for r in read), "other": len(rows) - len(read),
            "producer": sum(r["hop"] == CLIENT_HOP for r in read),
            "relays_holding": [{k: r[k] for k in ("flow", "client", "server", "relayed_by", "nagle_holds")}
                               for r in read if r["hop"] != CLIENT_HOP and r["nagle_holds"]],
            "holding": [{k: r[k] for k in ("flow", "client", "server", "nagle_holds")}
                        for r in read if r["hop"] == CLIENT_HOP and r["nagle_holds"]],
            "unread": [{"flow": r["flow"], "unread": r["unread"]} for r in read if r.get("unread")]}


def no_hold(seen: dict) -> str | None:
    """The sentence that rules Nagle out when the capture holds a relay's
    onward hop beside the producer's connections and no hop held a request
    for an ACK: Nagle delays a request only by holding its later segments,
    and the capture would show it on whichever hop runs it. None otherwise
    (a capture of the producer's side alone cannot see a hold beyond it)."""
    relays = seen.get("connections", 0) - seen.get("other", 0) - seen.get("producer", 0)
    if relays <= 0 or seen.get("holding") or seen.get("relays_holding"):
        return None
    return (f"Nagle is ruled out: the capture holds the producer's connections and {relays} relay hop(s) that carried "
            f"their requests, and no hop held a request's later segments for an ACK; what holds them is beyond the "
            f"last hop captured (the broker)")


# Client ids the libraries give a client that sets none, and the library.
# A client id is the application's to set (librdkafka's default is
# "rdkafka"): only these defaults name another library. As sent, measured
# in the lab: kafka-python 3.0.12 "kafka-python-producer-1", aiokafka
# 0.14.0 "aiokafka-producer-1", kafkajs 2.2.4 "kafkajs"; older kafka-python
# "kafka-python-2.0.2".
OTHER_CLIENTS = ((re.compile(r"^kafka-python-[\w.-]+$"), "kafka-python"), (re.compile(r"^aiokafka-[\w.-]+$"), "aiokafka"),
                 (re.compile(r"^kafkajs$"), "kafkajs"), (re.compile(r"^producer-\d+$"), "the Java client"),
                 (re.compile(r"^sarama$"), "sarama"))


def other_client(tables_dir: Path | None) -> tuple[str, str] | None:
    """(the libraries, the sentence) for the capture's Produce requests
    whose client id is another library's default (``other_client_of``)."""
    import pyarrow.compute as pc

    t = _table(tables_dir, "wire_requests", ["hop", "api", "client_id"])
    if t is None:
        return None
    ids = t.filter(pc.and_(pc.equal(t["hop"], CLIENT_HOP), pc.equal(t["api"], "Produce")))["client_id"]
    return other_client_of(ids.unique().to_pylist())


def other_client_of(client_ids: list) -> tuple[str, str] | None:
    """(the libraries, the sentence) when Produce requests' client ids are
    another library's default: the fixes name librdkafka's properties. The
    ids are the producer's word, shown as data; None when none is."""
    ids = sorted({x for x in client_ids if isinstance(x, str)})[:5]
    libs = sorted({lib for x in ids for pattern, lib in OTHER_CLIENTS if pattern.match(x)})
    if not libs:
        return None
    return ", ".join(libs), (
        f"the Produce requests' client id ({', '.join(ids)}) is the default of {', '.join(libs)}, not librdkafka: "
        f"the fixes name librdkafka's properties, which that client calls by its own names (linger_ms, "
        f"request_timeout_ms, ...)")


def retransmits(conns: list[dict]) -> int | None:
    """Segments the producer's connections sent again, as the capture saw."""
    wire = [c for c in conns if c.get("wire")]
    return sum(c["retransmits"] for c in wire) if wire else None


# A record's CreateTime further from its request's send than this is the
# application's own timestamp (an event's time), not its produce() call's;
# a little before it is the millisecond the timestamp was cut to.
CREATED_BEFORE_MAX_MS = 300_000.0
CREATED_AFTER_MAX_MS = 2.0


def _client_connections(tables_dir: Path | None, columns: list[str]) -> list[dict]:
    """The producer's own connections (hop "client"): ``columns`` and the
    side each was seen from."""
    return [c for c in _rows(tables_dir, "wire_connections", ["hop", "seen_from", *columns])
            if c.get("hop") == CLIENT_HOP]


def _near_broker(conns: list[dict]) -> bool:
    """Whether most of ``_client_connections`` were seen from the broker's
    side of the path (``seen_from``)."""
    sides = [c["seen_from"] for c in conns]
    return bool(sides) and sides.count("server") * 2 > len(sides)


def client_waits(tables_dir: Path | None) -> dict | None:
    """How long the Produce requests' messages waited in the client: from
    their CreateTime (the record batch's timestamps, set when the
    application produced them, on the capture's clock when captured on the
    producer's host) to the request's first byte. ``first_p50_ms``: the
    oldest message of each request, ``last_p50_ms``: the newest; None when
    no request's batches were read."""
    import pyarrow.compute as pc

    t = _table(tables_dir, "wire_requests", ["hop", "api", "first_us", "first_record_ms", "last_record_ms", "records"])
    if t is None:
        return None
    if _near_broker(_client_connections(tables_dir, [])):
        return None   # taken near the broker: another host's clock stamped the messages
    t = t.filter(pc.and_(pc.equal(t["hop"], CLIENT_HOP), pc.equal(t["api"], "Produce")))
    sent = pc.divide(pc.cast(t["first_us"], "double"), 1000.0)
    first, last = (pc.subtract(sent, pc.cast(t[c], "double")) for c in ("first_record_ms", "last_record_ms"))
    ok = pc.fill_null(pc.and_(pc.greater_equal(first, -CREATED_AFTER_MAX_MS),
                              pc.less_equal(first, CREATED_BEFORE_MAX_MS)), False)
    if not pc.any(ok).as_py():
        return None
    first, last, records = first.filter(ok), last.filter(ok), t["records"].filter(ok)
    median = lambda a: pc.quantile(a, q=0.5, interpolation="midpoint")[0].as_py()  # noqa: E731
    return {"n": len(first), "of": t.num_rows, "first_p50_ms": round(median(first), 3),
            "last_p50_ms": round(median(last), 3), "records_p50": median(records)}


def _client_requests(tables_dir: Path | None):
    """The producer's own requests (hop "client"): their flow, api and
    times, read with filters (a capture's millions of Produce rows are not
    walked); None without a capture."""
    import pyarrow.compute as pc

    t = _table(tables_dir, "wire_requests", ["flow", "hop", "api", "first_us", "response_last_us"])
    return None if t is None else t.filter(pc.equal(t["hop"], CLIENT_HOP))


def _first_produces(t):
    """Each connection's first Produce request, of ``_client_requests``:
    a table of flow, first_us_min."""
    import pyarrow.compute as pc

    return t.filter(pc.equal(t["api"], "Produce")).group_by("flow").aggregate([("first_us", "min")])


def _ready(tables_dir: Path | None) -> dict[tuple[int, int], int]:
    """When each connection's first Produce request could have left: its
    TCP and TLS handshakes done, and every request the producer asked before
    it answered (ApiVersions, SASL, the Metadata asked again while a
    topic's leader was unknown). Keyed by (flow, that request's first_us).
    A message produced before then waited for the connection's life, which
    the connection causes judge, not for the client's threads."""
    import pyarrow.compute as pc

    t = _client_requests(tables_dir)
    if t is None:
        return {}
    firsts = _first_produces(t)
    answered = sorted(x for x in t.filter(pc.invert(pc.fill_null(pc.equal(t["api"], "Produce"), False)))
                      ["response_last_us"].to_pylist() if x is not None)
    conns = {c["flow"]: c for c in _rows(tables_dir, "wire_connections",
                                         ["flow", "synack_us", "tls_hello_us", "tls_handshake_ms"])}
    out = {}
    for flow, first in zip(firsts["flow"].to_pylist(), firsts["first_us_min"].to_pylist()):
        if first is None:
            continue
        i = bisect.bisect_right(answered, first)
        c = conns.get(flow, {})
        tls = (c["tls_hello_us"] + int(c["tls_handshake_ms"] * 1000)
               if c.get("tls_hello_us") is not None and c.get("tls_handshake_ms") is not None else None)
        marks = [x for x in (answered[i - 1] if i else None, c.get("synack_us"), tls) if x is not None and x <= first]
        if marks:
            out[(flow, first)] = max(marks)
    return out


# A gap inside a request must be this many of its connections' handshake
# round trips to be the client's: a sender limited by its congestion window
# waits about one round trip for the ACKs that open it.
CLIENT_HELD_RTTS = 4.0


def _handshake_rtt_ms(tables_dir: Path | None) -> float | None:
    """The slowest TCP handshake round trip (``handshake_ms``, from the last
    SYN) of the producer's connections, where the capture was taken on the
    producer's side; None otherwise (near the broker, a segment lost on the
    path leaves a gap that only its retransmission ends, as a held one
    would)."""
    conns = _client_connections(tables_dir, ["handshake_ms"])
    if not conns or _near_broker(conns):
        return None
    rtts = [c["handshake_ms"] for c in conns if c.get("handshake_ms") is not None]
    return max(rtts) if rtts else None


def _client_held(tables_dir: Path | None):
    """The milliseconds from a request's first byte to its last where the
    client held it between its own writes: the longest gap between two of
    them was SLOW_MS or more, CLIENT_HELD_RTTS handshakes or more, and no
    ACK from the peer ended it (``held_after_ack``; Nagle's hold is ended by
    one). Its thread lost the CPU mid-request: in the client-cpu lab a
    Produce request's three TLS records left with the last about 80 ms (a
    CFS period's rest) after the first, and its wait seemed the broker's.
    0 where the capture cannot say (no handshake seen, or taken near the
    broker)."""
    from pyspark.sql import functions as F

    from kdiag.analysis.thresholds import SLOW_MS

    rtt = _handshake_rtt_ms(tables_dir)
    if rtt is None:
        return F.lit(0.0)
    held = ((F.col("held_ms") >= F.lit(max(SLOW_MS, CLIENT_HELD_RTTS * rtt)))
            & ~F.coalesce(F.col("held_after_ack"), F.lit(True)))
    return F.when(held, (F.col("last_us") - F.col("first_us")) / 1000.0).otherwise(F.lit(0.0))


def requests(spark, tables_dir: Path, waits: dict | None = None):
    """The producer's exchanges as request rows (see ``per_request.exchanges``
    for the columns): decoded where the connection, or a relay's onward
    connection, is plaintext Kafka.

    ``waits`` (``client_waits``): where the messages of most requests left
    at once, a request whose newest message waited SLOW_MS or more before
    it left was held in the client (``stalled_ms``), and that wait is part
    of its time: nothing in batching holds the newest message of a batch.
    Where most waited, that is batching (client_queueing), judged over the
    run. A request held between its own writes (``_client_held``) was held
    in the client too: that time is its ``send_ms`` and part of its
    ``stalled_ms``, not its wait."""
    from pyspark.sql import functions as F

    from kdiag.analysis.thresholds import SLOW_MS

    df = read_table(spark, Path(tables_dir), "wire_requests")
    ready = _ready(tables_dir)
    if ready:
        df = df.join(frame(spark, [(f, t, r) for (f, t), r in ready.items()],
                           "flow long, first_us long, _ready_us long"), ["flow", "first_us"], "left")
        held_from = F.greatest(F.col("last_record_ms"), F.col("_ready_us") / 1000.0)
    else:
        held_from = F.col("last_record_ms")
    stall = F.col("first_us") / 1000.0 - held_from
    if waits is not None and waits["first_p50_ms"] < SLOW_MS:
        stalled = F.when((stall >= SLOW_MS) & (stall <= CREATED_BEFORE_MAX_MS), stall).otherwise(F.lit(0.0))
    else:
        stalled = F.lit(None).cast("double")
    sent = _client_held(tables_dir)
    held = F.when(sent > 0, F.coalesce(stalled, F.lit(0.0)) + sent).otherwise(stalled)
    tls = F.col("protocol") == "tls"
    ms = lambda a, b: (F.col(a) - F.col(b)) / 1000.0  # noqa: E731
    return (df.filter((F.col("hop") == CLIENT_HOP) & F.col("response_first_us").isNotNull())
              .select(RUN, F.coalesce(F.col("client_id"), F.col("client")).alias("client"),
                      F.concat(F.when(tls, F.lit("ssl://")).otherwise(F.lit("plaintext://")),
                               F.col("server")).alias("broker"),
                      "corr_id", F.coalesce(F.col("api"), F.lit("exchange")).alias("request"),
                      F.col("request_bytes").alias("req_bytes"), F.col("first_us").alias("send_us"),
                      F.col("response_last_us").alias("recv_us"), F.lit(None).cast("double").alias("rtt_ms"),
                      F.lit(None).cast("int").alias("pid"), F.col("flow").alias("fd"),
                      F.when(tls, F.col("request_records")).otherwise(F.col("request_segments"))
                       .cast("long").alias("n_writes"),
                      F.lit(None).cast("array<long>").alias("write_sizes"),
                      F.lit(None).cast("long").alias("send_line"), F.lit(None).cast("long").alias("recv_line"),
                      F.col("first_us").alias("send_start_us"), F.lit(None).cast("long").alias("last_write_bytes"),
                      F.lit(False).alias("n_writes_lower_bound"), F.lit(None).cast("long").alias("unseen_bytes"),
                      F.col("throttle_ms").cast("double").alias("throttle_ms"),
                      sent.alias("send_ms"), (ms("response_first_us", "first_us") - sent).alias("wait_ms"),
                      ms("response_last_us", "response_first_us").alias("read_ms"),
                      held.alias("stalled_ms"),
                      (ms("response_last_us", "first_us") + F.coalesce(stalled, F.lit(0.0))).alias("total_ms")))


# ---------------------------------------------------------------- a connection's life

# librdkafka connects right after its lookup returns (rdkafka_broker.c:
# rd_kafka_broker_connect() resolves, then connects on the same thread): a
# lookup answered this long before a SYN is not that connection's.
RESOLVE_BEFORE_CONNECT_US = 1_000_000
# The requests of a connection's opening, each a phase of its own.
OPENING = {"ApiVersions": "apiversion", "SaslHandshake": "sasl", "SaslAuthenticate": "sasl"}


# The connections whose first Produce request the metadata wait is weighed
# before, at most.
FIRST_PRODUCES = 50


def _opening_requests(tables_dir: Path | None) -> tuple[dict, list[int], list[int]]:
    """The opening requests of each producer connection (flow -> rows), the
    Metadata requests' send times and each connection's first Produce
    request's, read with filters: a capture's millions of Produce rows are
    not walked."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = _client_requests(tables_dir)
    if t is None:
        return {}, [], []
    firsts = sorted(x for x in _first_produces(t)["first_us_min"].to_pylist() if x is not None)
    opening: dict[int, list[dict]] = {}
    for r in t.filter(pc.is_in(t["api"], pa.array(list(OPENING), pa.string()))).to_pylist():
        opening.setdefault(r["flow"], []).append(r)
    meta = t.filter(pc.equal(t["api"], "Metadata"))["first_us"]
    return opening, sorted(x for x in meta.to_pylist() if x is not None), firsts


def _attempt(c: dict, lookup: dict | None, opening: list[dict]) -> dict:
    """One connection as life.py's attempt: its phases from the packets."""
    phases = []
    if lookup is not None:
        phases.append({"phase": "resolve", "start_us": lookup["query_us"], "ms": lookup["ms"], "line": None,
                       "error": None})
    failed = c["synack_us"] is None
    if c["syn_us"] is not None:
        end = c["synack_us"] if not failed else (c["rst_us"] or c["last_us"])
        error = None if not failed else ("refused: the server answered the SYN with a reset" if c["rst_by"] == "server"
                                         else "no answer to the SYN")
        phases.append({"phase": "connect", "start_us": c["syn_us"],
                       "ms": None if end is None else round((end - c["syn_us"]) / 1000.0, 3), "line": None,
                       "error": error})
    if c["tls_hello_us"] is not None and c["tls_handshake_ms"] is not None:
        phases.append({"phase": "tls", "start_us": c["tls_hello_us"], "ms": round(c["tls_handshake_ms"], 3),
                       "line": None, "error": None})
    for phase in ("apiversion", "sasl"):
        mine = [r for r in opening if OPENING[r["api"]] == phase and r["first_us"] is not None]
        ends = [r["response_last_us"] for r in mine if r["response_last_us"] is not None]
        if mine and ends:
            start = min(r["first_us"] for r in mine)
            phases.append({"phase": phase, "start_us": start, "ms": round((max(ends) - start) / 1000.0, 3),
                           "line": None, "error": None})
    starts = [p["start_us"] for p in phases if p["start_us"] is not None]
    scheme = {"tls": "ssl://", "kafka": "plaintext://"}.get(c["protocol"], "")
    up = not failed and c["syn_us"] is not None and (c["requests"] or 0) > 0
    last = phases[-1] if phases else None
    done = None if last is None or last["ms"] is None else last["start_us"] + int(last["ms"] * 1000)
    return {"client": c["client"].rsplit(":", 1)[0], "broker": scheme + c["server"],
            "start_us": min(starts) if starts else c["first_us"], "line": None, "up_us": done if up else None,
            "end_us": None if up else (c["rst_us"] or c["last_us"]),
            "outcome": "up" if up else "failed", "error": None if up else (last or {}).get("error"),
            "phases": phases, "app": False}


def life(tables_dir: Path | None) -> dict | None:
    """The producer's connection attempts as the capture shows them, in the
    shape life.py gives the log's: the lookup before each SYN, the TCP
    handshake (its SYN retransmits, or the reset that refused it), the TLS
    handshake, the opening requests; and the Metadata requests asked again
    and again before the first Produce request. None without a capture."""
    from kdiag.analysis import life as timeline

    cols = ["flow", "client", "server", "protocol", "hop", "first_us", "last_us", "syn_us", "synack_us",
            "rst_us", "rst_by", "tls_hello_us", "tls_handshake_ms", "requests"]
    conns = _rows(tables_dir, "wire_connections", cols)
    if not conns:
        return None
    servers = {c["server"] for c in conns if c["hop"] == CLIENT_HOP}
    # A connection that carried no request to a server the producer talks
    # to is an attempt that failed (or was left unused); one to another
    # server, or of another protocol, is not the producer's.
    mine = [c for c in conns if c["hop"] == CLIENT_HOP
            or (c["protocol"] is None and not c["requests"] and c["server"] in servers and c["syn_us"] is not None)]
    lookups = sorted((d for d in _rows(tables_dir, "wire_dns", ["client", "server", "name", "query_us", "answer_us",
                                                                "ms", "rcode"])
                      if d["query_us"] is not None), key=lambda d: d["query_us"])
    opening, meta_sends, firsts = _opening_requests(tables_dir)
    attempts, used = [], set()
    for c in sorted(mine, key=lambda c: (c["syn_us"] or c["first_us"] or 0)):
        host = c["client"].rsplit(":", 1)[0]
        lookup = None
        if c["syn_us"] is not None:
            near = [i for i, d in enumerate(lookups) if i not in used and d["answer_us"] is not None
                    and d["client"].rsplit(":", 1)[0] == host
                    and 0 <= c["syn_us"] - d["answer_us"] <= RESOLVE_BEFORE_CONNECT_US]
            if near:
                used.add(near[-1])
                lookup = lookups[near[-1]]
        attempts.append(_attempt(c, lookup, opening.get(c["flow"], [])))
    rows = [{"event": "send", "ts_us": t} for t in meta_sends]
    # Metadata is asked on any connection, and produced on the leader's: the
    # longest wait before some connection's first Produce request (another
    # client in the capture has its own, often none).
    waits = [w for w in (timeline.metadata_wait(rows, p) for p in firsts[:FIRST_PRODUCES] or [None]) if w]
    meta = max(waits, key=lambda w: w.get("ms") or 0.0) if waits else None
    got = timeline.summed(attempts, [], meta, 0, 0)
    got["source"] = SOURCE
    # Lookups no connection followed: a name that did not resolve, or an
    # answer the client gave up waiting for.
    got["lookups"] = [{k: d[k] for k in ("client", "server", "name", "ms", "rcode")}
                      for i, d in enumerate(lookups) if i not in used][:20]
    return got


# ---------------------------------------------------------------- one join

# A Sent line is written once its request is in the socket, so its request's
# first byte is on the wire within a few milliseconds of it; librdkafka's
# log stamps milliseconds.
JOIN_WINDOW_US = 50_000
JOINED = ("librdkafka's log joined to the packet capture by correlation id and time: each request's wait, "
          "its writes and its connection's TCP_NODELAY are the wire's")
JOINED_CONFIDENCE = "high: librdkafka's lines joined to a packet capture of the same requests"
NOT_JOINED = ("a packet capture is in the input, but none of its requests matches one of the log's by correlation "
              "id within 50 ms (a capture of another host, or of another time): the log is judged alone")


def _keyed(reqs):
    """The rows with a key each, materialised: the key is read twice (the
    rows matched, then the rows joined back), and monotonically_increasing_id
    gives other ids when Spark computes the rows again (another plan,
    another partitioning); the names of one request landed on another."""
    from pyspark.sql import functions as F

    return reqs.withColumn("_key", F.monotonically_increasing_id()).localCheckpoint()


def joined_to_log(spark, reqs, tables_dir: Path):
    """The log's requests (``job.unsplit``'s rows), each joined to the
    capture's exchange with its correlation id whose first byte is nearest
    its Sent line (within JOIN_WINDOW_US): the wire's wait and writes, on
    the wire's connection (``fd``: its flow). A request the capture lacks
    keeps the log's own times. Returns (rows, how many matched)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    wire = requests(spark, tables_dir).filter(F.col("corr_id").isNotNull()).select(
        F.col("corr_id").alias("_w_corr"), F.col("send_us").alias("_w_send"), F.col("fd").alias("_w_fd"),
        F.col("n_writes").alias("_w_writes"), F.col("wait_ms").alias("_w_wait"), F.col("read_ms").alias("_w_read"),
        F.col("send_ms").alias("_w_sent"))
    keyed = _keyed(reqs)
    near = (keyed.select("_key", "corr_id", "send_us")
            .join(wire, (F.col("corr_id") == F.col("_w_corr"))
                  & (F.abs(F.col("send_us") - F.col("_w_send")) <= JOIN_WINDOW_US))
            .withColumn("_rank", F.row_number().over(Window.partitionBy("_key").orderBy(
                F.abs(F.col("send_us") - F.col("_w_send")))))
            .filter(F.col("_rank") == 1).select("_key", "_w_fd", "_w_writes", "_w_wait", "_w_read", "_w_sent"))
    out = keyed.join(near, "_key", "left")
    matched = out.filter(F.col("_w_wait").isNotNull()).count()
    hit = F.col("_w_wait").isNotNull()
    # The log's own are null (job.unsplit), of no type.
    for col, w, kind in (("fd", "_w_fd", "int"), ("n_writes", "_w_writes", "long"), ("wait_ms", "_w_wait", "double"),
                         ("read_ms", "_w_read", "double"), ("send_ms", "_w_sent", "double")):
        out = out.withColumn(col, F.when(hit, F.col(w)).otherwise(F.col(col).cast(kind)).cast(kind))
    return out.drop("_key", "_w_fd", "_w_writes", "_w_wait", "_w_read", "_w_sent"), matched


# A burst of socket writes is the last request the capture saw leave for the
# same peer address while the burst was written: the tracer stamps each
# write as it starts, the capture each first byte as it leaves,
# microseconds apart on one host's clock. A burst can hold more than one
# request (a TLS Finished and ApiVersions; two requests written back to
# back): the response the burst's read pairs with is the last one's. The
# next request leaves only after that response: a window wider than a
# round trip after the burst would take it.
EXCHANGE_BEFORE_US = 1_000
EXCHANGE_AFTER_US = 200
NAMED_BY_WIRE = ("the syscalls' exchanges joined to a packet capture of them: each burst of writes is the request "
                 "the capture saw leave for the same broker while it was written, with the same correlation id where "
                 "its bytes named it; an unnamed one (TLS) takes the capture's api and correlation id (as the "
                 "terminator's plaintext side shows them)")


def named_exchanges(spark, reqs, tables_dir: Path):
    """The exchanges inferred from syscalls (``per_request.exchanges``),
    each joined to the last request the capture saw leave for the same
    broker while its writes were made (from EXCHANGE_BEFORE_US before the
    first to EXCHANGE_AFTER_US after the last), with the same correlation
    id where its own bytes named it. An unnamed one takes the capture's
    api, correlation id and client id, and is judged by that name, not as
    a connection's opening. Returns (rows, how many were joined)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    wire = (read_table(spark, Path(tables_dir), "wire_requests")
            .filter((F.col("hop") == CLIENT_HOP) & F.col("api").isNotNull())
            .select(F.col("server").alias("_w_broker"), F.col("first_us").alias("_w_us"),
                    F.col("api").alias("_w_api"), F.col("corr_id").alias("_w_corr"),
                    F.col("client_id").alias("_w_client")))
    keyed = _keyed(reqs)
    near = (keyed.select("_key", "broker", "send_start_us", "send_us", "request", "corr_id")
            .join(wire, (F.col("broker") == F.col("_w_broker"))
                  & F.col("_w_us").between(F.col("send_start_us") - EXCHANGE_BEFORE_US,
                                           F.col("send_us") + EXCHANGE_AFTER_US)
                  # A burst its own bytes named is the capture's request with its id.
                  & ((F.col("request") == "exchange") | (F.col("corr_id") == F.col("_w_corr"))))
            .withColumn("_rank", F.row_number().over(Window.partitionBy("_key").orderBy(F.col("_w_us").desc())))
            .filter(F.col("_rank") == 1).select("_key", "_w_api", "_w_corr", "_w_client"))
    out = keyed.join(near, "_key", "left")
    hit = F.col("_w_api").isNotNull()
    matched = out.filter(hit).count()
    out = (out.withColumn("request", F.when(hit, F.col("_w_api")).otherwise(F.col("request")))
              .withColumn("corr_id", F.when(hit, F.col("_w_corr")).otherwise(F.col("corr_id")))
              .withColumn("client", F.when(hit, F.col("_w_client")).otherwise(F.col("client")))
              .withColumn("opening", F.when(hit, F.lit(False)).otherwise(F.col("opening"))))
    return out.drop("_key", "_w_api", "_w_corr", "_w_client"), matched
