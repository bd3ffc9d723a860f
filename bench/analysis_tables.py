"""The synthetic tables the analysis benchmark reads: what ``kdiag parse``
writes for a producer with three brokers, generated a chunk at a time so
that 1e7 requests need no more memory than one chunk (see bench/analysis.py
for what each request holds)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# Requests generated and written at a time: one Parquet row group per table.
CHUNK = 200_000
BROKERS = 3
T0_US = 1_795_315_015_000_000
CLIENT = "rdkafka#producer-1"

def _broker(b: int) -> str:
    return f"ssl://10.0.1.{b + 1}:9093/{b + 1}"


def _fd(b: int) -> int:
    return 8 + b


def _fd_info(b: int) -> str:
    return f"TCP:[10.0.0.1:{41550 + b}->10.0.1.{b + 1}:9093]"


def make_tables(out: Path, n: int, seed: int = 7) -> dict[str, int]:
    """Write ``out/<table>.parquet`` for ``n`` requests; returns rows per table."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kdiag.ingest import table_facts
    from kdiag.parsers.rdkafka_log import SCHEMA as EVENTS
    from kdiag.parsers.stats import SCHEMA as STATS
    from kdiag.parsers.strace import SCHEMA as SYSCALLS

    out.mkdir(parents=True, exist_ok=True)
    lw_schema = pa.schema([EVENTS.field("line_no"), pa.field("pid", pa.int32()), EVENTS.field("ts_us"),
                           pa.field("log_ts_us", pa.int64()),
                           *[f for f in EVENTS if f.name not in ("line_no", "ts_us")]])
    writers = {name: pq.ParquetWriter(out / f"{name}.parquet", schema) for name, schema in
               (("syscalls", SYSCALLS), ("log_writes", lw_schema), ("rdkafka_events", EVENTS), ("stats", STATS))}
    rows = dict.fromkeys(writers, 0)
    # What kdiag's parse tells of the tables it writes, told the same way.
    watches = {name: table_facts.Watch(name) for name in writers}

    def put(name: str, cols: dict) -> None:
        schema = writers[name].schema
        t = pa.table({f.name: _col(cols.get(f.name), f.type, _len(cols)) for f in schema}, schema=schema)
        watches[name].feed(t)
        writers[name].write_table(t, row_group_size=len(t))
        rows[name] += len(t)

    rng = np.random.default_rng(seed)
    head = _connects(T0_US - 1_000_000)
    put("syscalls", head)
    put("rdkafka_events", {"line_no": [1], "ts_us": [T0_US - 2_000_000], "level": [7], "facility": ["INIT"],
                           "client": [CLIENT], "thread": ["app"], "event": ["init"], "detail": ["2.16.0"],
                           "text": ["librdkafka v2.16.0 (0x21000ff) rdkafka#producer-1 initialized"]})
    line0, log_line0 = len(head["line_no"]), 1
    t = T0_US
    last_stats = T0_US // 1_000_000
    for k0 in range(0, n, CHUNK):
        m = min(CHUNK, n - k0)
        k = np.arange(k0, k0 + m, dtype=np.int64)
        b = (k % BROKERS).astype(np.int32)
        # One request at a time, as kdiag's probe sends them: each starts
        # after the previous response, so every line is in time order.
        wait = np.where(rng.random(m) < 0.03, rng.uniform(40_000, 48_000, m),
                        rng.lognormal(np.log(800), 0.4, m)).astype(np.int64)
        gap = 60 + rng.exponential(200, m).astype(np.int64)
        span = gap + 15 + 40 + 40 + wait + 5 + 12 + 30
        start = t + np.concatenate([[0], np.cumsum(span[:-1])]) + gap
        t = int(start[-1] + span[-1] - gap[-1])
        w_ts = start                      # write(8<TCP...>) of the request
        sent_ts = w_ts + 15 + 40          # write(2, "...Sent ProduceRequest...")
        poll_ts = sent_ts + 40
        read_ts = poll_ts + wait + 5
        recv_ts = read_ts + 12 + 30       # write(2, "...Received ProduceResponse...")
        corr = (k // BROKERS + 1).astype(np.int32)
        req_bytes = 2100 + (k % 97)
        resp_bytes = np.full(m, 54)
        line = line0 + 5 * k
        put("syscalls", _request_syscalls(k, b, line, w_ts, sent_ts, poll_ts, read_ts, recv_ts, wait,
                                          req_bytes, resp_bytes, corr))
        lw, ev = _log_rows(k, b, line, log_line0 + 2 * k, sent_ts, recv_ts, req_bytes, resp_bytes, corr)
        put("log_writes", lw)
        put("rdkafka_events", ev)
        sec = np.arange(last_stats + 1, recv_ts[-1] // 1_000_000 + 1, dtype=np.int64)
        if len(sec):
            put("stats", _stats_rows(sec, rows["stats"]))
            last_stats = int(sec[-1])
    for name, w in writers.items():
        watches[name].stamp(w)
        w.close()
    return rows


def _len(cols: dict) -> int:
    return len(cols["line_no"])


def _col(v, typ, n: int):
    import pyarrow as pa

    if v is None:
        return pa.nulls(n, typ)
    if isinstance(v, (pa.Array, pa.ChunkedArray)):
        return v.cast(typ)
    return pa.array(v, typ)


def _connects(t: int) -> dict:
    """Each broker socket's socket(), connect(), handshake wait and SO_ERROR,
    on its broker thread, before the requests."""
    cols: dict[str, list] = {c: [] for c in ("line_no", "pid", "ts_us", "dur_us", "kind", "syscall", "fd",
                                             "fd_info", "args", "ret", "errno", "unfinished")}
    line = 0
    for b in range(BROKERS):
        fd, info, pid = _fd(b), _fd_info(b), 2001 + b
        calls = [
            ("socket", None, None, "AF_INET, SOCK_STREAM|SOCK_CLOEXEC, IPPROTO_TCP", fd, None, 20),
            ("connect", fd, info, f'{fd}<{info}>, {{sa_family=AF_INET, sin_port=htons(9093), '
                                  f'sin_addr=inet_addr("10.0.1.{b + 1}")}}, 16', -1, "EINPROGRESS", 40),
            ("poll", None, None, f"[{{fd={fd}<{info}>, events=POLLOUT}}], 1, 1000", 1, None, 300),
            ("getsockopt", fd, info, f"{fd}<{info}>, SOL_SOCKET, SO_ERROR, [0], [4]", 0, None, 10),
        ]
        for name, f, fi, args, ret, errno, dur in calls:
            line += 1
            t += 100 + dur
            for c, v in zip(cols, (line, pid, t, dur, "syscall", name, f, fi, args, ret, errno, False)):
                cols[c].append(v)
    return cols


def _s(values) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(pa.array(values), pa.string())


def _cat(*parts) -> pa.Array:
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(*parts, "")


def _request_syscalls(k, b, line, w_ts, sent_ts, poll_ts, read_ts, recv_ts, wait, req_bytes, resp_bytes,
                      corr) -> dict:
    """Five rows a request, interleaved in line order: write, Sent, poll, read, Received."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    m = len(k)
    fd = (8 + b).astype(np.int32)
    info = pc.take(pa.array([_fd_info(x) for x in range(BROKERS)]), pa.array(b))
    fdx = _cat(_s(fd), pa.scalar("<"), info, pa.scalar(">"))
    # strace -s 256 shows the TLS record's first bytes; a few shapes are enough.
    blobs = pa.array([f'"\\27\\3\\3\\10{x:o}\\{(x * 7) % 256:o}i*\\33\\32}}\\346\\23\\220\\317KY"...'
                      for x in range(64)])
    blob = pc.take(blobs, pa.array(k % 64))
    sent_line = _log_text(b, sent_ts, "SEND", _cat(pa.scalar("Sent ProduceRequest (v10, "), _s(req_bytes),
                                                   pa.scalar(" bytes @ 0, CorrId "), _s(corr), pa.scalar(")")))
    rtt = _s(np.round((recv_ts - sent_ts) / 1000.0, 2))
    recv_line = _log_text(b, recv_ts, "RECV", _cat(pa.scalar("Received ProduceResponse (v10, "), _s(resp_bytes),
                                                   pa.scalar(" bytes, CorrId "), _s(corr), pa.scalar(", rtt "),
                                                   rtt, pa.scalar("ms)")))
    log_fd = pa.scalar("2</var/log/producer/stderr.log>")

    def write2(text):
        n = pc.binary_length(text)
        return _cat(log_fd, pa.scalar(', "'), text, pa.scalar('\\n", '), _s(pc.add(n, 1)))

    per = {
        "ts_us": [w_ts, sent_ts, poll_ts, read_ts, recv_ts],
        "dur_us": [np.full(m, 15), np.full(m, 12), wait, np.full(m, 12), np.full(m, 13)],
        "syscall": [np.full(m, "write"), np.full(m, "write"), np.full(m, "poll"), np.full(m, "read"),
                    np.full(m, "write")],
        "fd": [fd, np.full(m, 2, np.int32), None, fd, np.full(m, 2, np.int32)],
        "fd_info": [info, None, None, info, None],
        "args": [_cat(fdx, pa.scalar(", "), blob, pa.scalar(", "), _s(req_bytes)),
                 write2(sent_line),
                 _cat(pa.scalar("[{fd="), fdx, pa.scalar(", events=POLLIN}, {fd=9<pipe:[57434]>, events=POLLIN}], "
                                                         "2, 1000")),
                 _cat(fdx, pa.scalar(', "\\27\\3\\3\\0O\\245\\3\\22"..., 54')),
                 write2(recv_line)],
        "ret": [req_bytes, pc.add(pc.binary_length(sent_line), 1), np.ones(m, np.int64), resp_bytes,
                pc.add(pc.binary_length(recv_line), 1)],
        "data": [None, pc.binary_join_element_wise(sent_line, pa.scalar("\n"), ""), None, None,
                 pc.binary_join_element_wise(recv_line, pa.scalar("\n"), "")],
    }
    cols = {"line_no": _interleave([line + j + 1 for j in range(5)], pa.int64()),
            "pid": _interleave([(2001 + b).astype(np.int32)] * 5, pa.int32()),
            "kind": pa.array(np.full(5 * m, "syscall")),
            "unfinished": pa.array(np.zeros(5 * m, bool))}
    types = {"ts_us": pa.int64(), "dur_us": pa.int64(), "syscall": pa.string(), "fd": pa.int32(),
             "fd_info": pa.string(), "args": pa.string(), "ret": pa.int64(), "data": pa.string()}
    for c, parts in per.items():
        cols[c] = _interleave(parts, types[c], m)
    return cols


def _interleave(parts: list, typ, m: int | None = None):
    """Row j of part i goes to row 5*j + i: the parts are the successive
    lines of each request."""
    import numpy as np
    import pyarrow as pa

    m = m if m is not None else len(parts[0])
    arrays = [pa.nulls(m, typ) if p is None else (p.cast(typ) if isinstance(p, pa.Array) else pa.array(p, typ))
              for p in parts]
    whole = pa.concat_arrays(arrays)
    idx = (np.arange(m)[None, :] + m * np.arange(len(parts))[:, None]).T.ravel()
    return whole.take(pa.array(idx))


def _log_text(b, ts, facility: str, msg):
    import pyarrow as pa
    import pyarrow.compute as pc

    sec = _s(ts // 1_000_000)
    ms = pc.utf8_lpad(_s((ts // 1000) % 1000), 3, "0")
    name = pc.take(pa.array([_broker(x) for x in range(BROKERS)]), pa.array(b))
    return _cat(pa.scalar("%7|"), sec, pa.scalar("."), ms, pa.scalar(f"|{facility}|{CLIENT}| [thrd:"), name,
                pa.scalar("]: "), name, pa.scalar(": "), msg)


def _log_rows(k, b, line, log_line, sent_ts, recv_ts, req_bytes, resp_bytes, corr) -> tuple[dict, dict]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    m = len(k)
    name = pc.take(pa.array([_broker(x) for x in range(BROKERS)]), pa.array(b))
    rtt = np.round((recv_ts - sent_ts) / 1000.0, 2)
    sent = _cat(pa.scalar("Sent ProduceRequest (v10, "), _s(req_bytes), pa.scalar(" bytes @ 0, CorrId "),
                _s(corr), pa.scalar(")"))
    recv = _cat(pa.scalar("Received ProduceResponse (v10, "), _s(resp_bytes), pa.scalar(" bytes, CorrId "),
                _s(corr), pa.scalar(", rtt "), _s(rtt), pa.scalar("ms)"))

    def two(a, c, typ):
        return _interleave2(a, c, typ, m)

    common = {
        "level": pa.array(np.full(2 * m, 7, np.int8)),
        "facility": two(np.full(m, "SEND"), np.full(m, "RECV"), pa.string()),
        "client": pa.array(np.full(2 * m, CLIENT)),
        "thread": two(name, name, pa.string()),
        "broker": two(name, name, pa.string()),
        "event": two(np.full(m, "send"), np.full(m, "recv"), pa.string()),
        "request": pa.array(np.full(2 * m, "Produce")),
        "api_version": pa.array(np.full(2 * m, 10, np.int16)),
        "size_bytes": two(req_bytes, resp_bytes, pa.int64()),
        "corr_id": two(corr, corr, pa.int32()),
        "rtt_ms": two(pa.nulls(m, pa.float64()), rtt, pa.float64()),
        "text": two(sent, recv, pa.string()),
    }
    ts = two(sent_ts, recv_ts, pa.int64())
    log_ts = pc.multiply(pc.divide(ts, 1000), 1000)
    lw = {"line_no": two(line + 2, line + 5, pa.int64()), "pid": two((2001 + b), (2001 + b), pa.int32()),
          "ts_us": ts, "log_ts_us": log_ts, **common}
    ev = {"line_no": two(log_line + 1, log_line + 2, pa.int64()), "ts_us": log_ts, **common}
    return lw, ev


def _interleave2(a, c, typ, m: int):
    return _interleave([a, c], typ, m)


def _stats_rows(sec, first_line: int) -> dict:
    import numpy as np

    s = np.repeat(sec, BROKERS)
    b = np.tile(np.arange(BROKERS), len(sec))
    n = len(s)
    return {"line_no": first_line + 1 + np.arange(n), "ts_us": s * 1_000_000, "client": np.full(n, CLIENT),
            "broker": [_broker(x) for x in b], "nodeid": (b + 1).astype(np.int32), "state": np.full(n, "UP"),
            "rtt_avg_ms": np.full(n, 1.1), "rtt_p50_ms": np.full(n, 0.8), "rtt_p99_ms": np.full(n, 44.0),
            "int_latency_avg_ms": np.full(n, 0.2), "int_latency_p50_ms": np.full(n, 0.12),
            "int_latency_p99_ms": np.full(n, 0.9), "outbuf_latency_avg_ms": np.full(n, 0.05),
            "outbuf_latency_p50_ms": np.full(n, 0.04), "outbuf_latency_p99_ms": np.full(n, 0.2),
            "throttle_avg_ms": np.zeros(n), "throttle_max_ms": np.zeros(n), "tx": np.arange(n) * 300,
            "txretries": np.zeros(n, np.int64), "req_timeouts": np.zeros(n, np.int64),
            "waitresp_cnt": np.ones(n, np.int64), "outbuf_cnt": np.zeros(n, np.int64),
            "connects": np.ones(n, np.int64), "disconnects": np.zeros(n, np.int64)}
