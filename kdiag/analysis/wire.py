"""Requests read off a packet capture (tables ``wire_requests`` and
``wire_connections``, parsers/wire), in the shape the judge reads.

A capture sees what the producer's socket did, not what its threads did:

- a request "leaves" when its first byte is on the wire. What holds its
  last bytes back (Nagle waiting for the peer's ACK) then falls inside its
  wait, as it falls inside the broker thread's ``poll()`` in the syscalls.
  So ``wait_ms`` runs from the request's first byte to the response's first
  byte, and ``send_ms`` is 0;
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

from pathlib import Path

from kdiag.analysis.spark_plumbing import RUN, read_table

CLIENT_HOP = "client"
SOURCE = "wire"
PATH_SOURCE = "TCP handshakes in the packet capture"
# The wire is the record of what the producer's socket did: with Kafka's
# own headers read, a request's kind and id are known as from librdkafka's
# lines; over TLS alone they are not.
CONFIDENCE = {True: "high: requests read off a packet capture, Kafka's own headers decoded",
              False: "medium: requests read off a packet capture over TLS, told apart by their records"}
TLS_ONLY = ("requests read off a packet capture over TLS: told apart by their records' sizes and timing, "
            "no correlation ids or request kinds (a capture of the terminator's plaintext side, or librdkafka's "
            "log, names them)")


def _rows(tables_dir: Path | None, table: str, columns: list[str]) -> list[dict]:
    import pyarrow.parquet as pq

    path = Path(tables_dir) / f"{table}.parquet" if tables_dir is not None else None
    if path is None or not path.exists():
        return []
    t = pq.read_table(path)
    return t.select([c for c in columns if c in t.column_names]).to_pylist()


def has_requests(tables_dir: Path | None) -> bool:
    """Whether the capture holds a completed exchange on a connection the
    producer made (read from the file's footer and one column)."""
    return any(r["hop"] == CLIENT_HOP and r["response_first_us"] is not None
               for r in _rows(tables_dir, "wire_requests", ["hop", "response_first_us"]))


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


def retransmits(conns: list[dict]) -> int | None:
    """Segments the producer's connections sent again, as the capture saw."""
    wire = [c for c in conns if c.get("wire")]
    return sum(c["retransmits"] for c in wire) if wire else None


def requests(spark, tables_dir: Path):
    """The producer's exchanges as request rows (see ``per_request.exchanges``
    for the columns): decoded where the connection, or a relay's onward
    connection, is plaintext Kafka."""
    from pyspark.sql import functions as F

    df = read_table(spark, Path(tables_dir), "wire_requests")
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
                      F.lit(0.0).alias("send_ms"), ms("response_first_us", "first_us").alias("wait_ms"),
                      ms("response_last_us", "response_first_us").alias("read_ms"),
                      ms("response_last_us", "first_us").alias("total_ms")))


def path(conns: list[dict], below_ms: float) -> tuple[int, float] | None:
    """(count, median) of the producer's TCP handshakes in the capture
    shorter than ``below_ms`` (one that held a SYN retransmit times the
    retransmit): the path's round trip as the client's host saw it, SYN to
    SYN-ACK."""
    from kdiag.analysis.spark_plumbing import pctl

    got = [c["handshake_ms"] for c in conns if c.get("wire") and c.get("handshake_ms") is not None
           and c["handshake_ms"] < below_ms]
    return (len(got), pctl(got, 0.5)) if got else None
