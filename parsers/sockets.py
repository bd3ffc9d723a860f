"""Socket and thread samples (``collectors/sockets.py``) -> tables
``sockets``, ``threads`` and ``host``.

Input: JSON lines, each an object with ``kind`` ``socket``, ``thread`` or
``host``, ``ts_us`` (epoch microseconds at the start of the sample; every
line of one sample has the same value), ``pid`` and ``sample`` (the
sample's number). The collector writes raw kernel units; here every time
becomes milliseconds and the unit is in the column name. A line is one row.

Skip reasons: ``empty``, ``not_json``, ``not_sample`` (JSON, but not an
object with a known ``kind``), ``bad_socket`` / ``bad_thread`` /
``bad_host`` (a known kind without an integer ``ts_us`` and ``pid``, or
without ``fd`` / ``tid``). A field of the wrong type becomes null; the row
is kept.

Table ``sockets``: one row per TCP socket per sample.

========================  =======  ============================================
column                    type     meaning (null when absent)
========================  =======  ============================================
line_no                   int64    1-based line number
ts_us                     int64    sample time, epoch microseconds
sample                    int64    sample number, from 0
pid                       int32    the target process
fd                        int32    the socket's descriptor in the target
inode                     int64    socket inode (``socket:[N]``); null when the
                                   socket could not be read
local, remote             string   ``ip:port`` (IPv6 ``[ip]:port``); remote
                                   null when not connected
local_port, remote_port   int32    the ports of ``local`` and ``remote``
state                     string   TCP state: ESTABLISHED, SYN_SENT, CLOSE_WAIT,
                                   ... (from TCP_INFO, else from the listing)
nodelay                   bool     the socket's TCP_NODELAY as read from the
                                   live socket: false means Nagle is on.
                                   Null when it could not be read (``error``)
error                     string   why ``nodelay`` and the TCP_INFO columns are
                                   null (e.g. ``pidfd_getfd: EPERM ...``);
                                   null when the socket was read
tcp_info_bytes            int32    length of struct tcp_info the kernel
                                   returned; fields past it are null
ca_state                  string   congestion state: open, disorder, cwr,
                                   recovery, loss
retransmits               int32    consecutive RTO retransmits of the head
                                   segment (0 when none is pending)
probes                    int32    zero-window / keepalive probes unanswered
backoff                   int32    RTO exponential backoff count
options                   int32    TCPI_OPT_* bits: 1 timestamps, 2 SACK,
                                   4 window scaling, 8 ECN, 16 ECN seen,
                                   32 SYN data
snd_wscale, rcv_wscale    int32    window scale shifts
delivery_rate_app_limited bool     the last delivery rate sample was limited
                                   by the application, not the network
fastopen_client_fail      int32    TFO client failure code
rto_ms                    float64  retransmission timeout
ato_ms                    float64  delayed-ACK timeout: about 40 ms while the
                                   receiver delays ACKs, 0 in quick-ACK mode
snd_mss_bytes             int64    send maximum segment size
rcv_mss_bytes             int64    estimated peer MSS
unacked                   int64    segments sent, not yet ACKed
sacked                    int64    segments SACKed by the peer
lost                      int64    segments thought lost
retrans                   int64    segments retransmitted, not yet ACKed
fackets                   int64    always 0 on current kernels
last_data_sent_ms         int64    since the last data segment was sent
last_data_recv_ms         int64    since the last data segment was received
last_ack_recv_ms          int64    since the last ACK was received
pmtu_bytes                int64    path MTU
rcv_ssthresh_bytes        int64    receive window clamp
rtt_ms                    float64  smoothed RTT. A Nagle stall shows here: the
                                   sender times the held segment's ACK, which
                                   the peer delays (tens of ms on loopback)
rttvar_ms                 float64  RTT variance
snd_ssthresh              int64    slow-start threshold, segments;
                                   2147483647 means not yet set
snd_cwnd                  int64    congestion window, segments
advmss_bytes              int64    advertised MSS
reordering                int64    reordering degree, segments
rcv_rtt_ms                float64  receiver-side RTT estimate
rcv_space_bytes           int64    receive buffer space estimate
total_retrans             int64    segments retransmitted, whole connection
pacing_rate_bytes_s       int64    pacing rate, bytes/s
max_pacing_rate_bytes_s   int64    SO_MAX_PACING_RATE; null when unlimited
bytes_acked               int64    bytes ACKed by the peer
bytes_received            int64    bytes received
segs_out, segs_in         int64    segments sent / received (with pure ACKs)
notsent_bytes             int64    bytes written but not yet sent: data held
                                   back by Nagle, cwnd or the peer's window
min_rtt_ms                float64  lowest RTT seen
data_segs_in              int64    data segments received
data_segs_out             int64    data segments sent
delivery_rate_bytes_s     int64    latest delivery rate sample, bytes/s
busy_time_ms              float64  time with data in flight
rwnd_limited_ms           float64  time limited by the peer's receive window
sndbuf_limited_ms         float64  time limited by the send buffer
delivered                 int64    segments delivered (ACKed or SACKed)
delivered_ce              int64    of those, ECN CE-marked
bytes_sent                int64    bytes sent, retransmits included
bytes_retrans             int64    bytes retransmitted
dsack_dups                int64    DSACKs received (spurious retransmits)
reord_seen                int64    reordering events seen
rcv_ooopack               int64    out-of-order packets received
snd_wnd_bytes             int64    peer's advertised window
rcv_wnd_bytes             int64    own advertised window
rehash                    int64    path rehash attempts (PLB or timeouts)
total_rto                 int64    RTO timeouts, SYN ones included
total_rto_recoveries      int64    RTO recoveries
total_rto_time_ms         int64    time spent in RTO recovery
========================  =======  ============================================

Table ``threads``: one row per thread of the target per sample.

=================  =======  ===================================================
line_no, ts_us,    int64    as above
sample
pid                int32    the target process
tid                int32    thread id (strace's ``[pid N]``)
name               string   the thread's comm: ``rdk:main``, ``rdk:broker1``
                            (librdkafka's broker thread), ...
state              string   R running, S sleeping, D disk wait, ...
cpu_ms             float64  user + system CPU time so far (clock ticks,
                            usually 10 ms each)
utime_ms, stime_ms float64  user / system CPU time so far
run_ms             float64  CPU time so far, from schedstat (exact)
runq_wait_ms       float64  time runnable but waiting for a core, so far:
                            CPU contention on the client host
timeslices         int64    times the thread was scheduled in
voluntary_ctxt     int64    voluntary context switches (blocking waits)
nonvoluntary_ctxt  int64    involuntary context switches (preempted)
last_cpu           int32    core the thread last ran on
=================  =======  ===================================================

Counters (``cpu_ms`` and below) run from the thread's start: the difference
between two samples is the activity between them.

Table ``host``: one row per sample.

=================  ==============  ============================================
line_no, ts_us,    int64           as above
sample
pid                int32           the target process
ncpu               int32           cores
cpu_pct            list<float64>   busy percent per core since the previous
                                   sample, core 0 first; null in the first
                                   sample; an element is null when no time
                                   passed on that core's clock
load1, load5,      float64         load averages
load15
collector_cpu_ms   float64         the sampler's own CPU time up to this
                                   sample
sample_cpu_ms      float64         CPU time this sample cost the sampler
cpu_quota_cores    float64         the CPU limit of the target's cgroup, in
                                   cores (quota / period); null when
                                   unlimited or unknown
cpu_period_ms      float64         the cgroup's CFS period
cpu_nr_periods     int64           CFS periods with the cgroup runnable, so far
cpu_nr_throttled   int64           of those, periods the cgroup was throttled
cpu_throttled_ms   float64         time its runnable tasks were held back by
                                   the limit, so far (summed over cores)
=================  ==============  ============================================
"""
from __future__ import annotations

import json
import math

import pyarrow as pa

from kdiag.parsers.base import ParseCounts, json_lines, scrub
from kdiag.parsers.format import BY_LINES, CHUNKS, SOCKET_SAMPLES, TEXT_SCANNER, THREAD_SAMPLES, Format

KINDS = ("socket", "thread", "host")

_CA_STATES = {0: "open", 1: "disorder", 2: "cwr", 3: "recovery", 4: "loss"}
_TCP_STATES = frozenset((
    "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT", "CLOSE",
    "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING", "NEW_SYN_RECV", "NONE",
))

# (column, key in the collector's tcp_info, Arrow type, divisor): a divisor
# turns the kernel's unit into the column's; None copies an integer.
_I32, _I64, _F64 = pa.int32(), pa.int64(), pa.float64()
_TCP_INFO_COLUMNS = (
    ("retransmits", "retransmits", _I32, None),
    ("probes", "probes", _I32, None),
    ("backoff", "backoff", _I32, None),
    ("options", "options", _I32, None),
    ("snd_wscale", "snd_wscale", _I32, None),
    ("rcv_wscale", "rcv_wscale", _I32, None),
    ("fastopen_client_fail", "fastopen_client_fail", _I32, None),
    ("rto_ms", "rto_us", _F64, 1000.0),
    ("ato_ms", "ato_us", _F64, 1000.0),
    ("snd_mss_bytes", "snd_mss_bytes", _I64, None),
    ("rcv_mss_bytes", "rcv_mss_bytes", _I64, None),
    ("unacked", "unacked", _I64, None),
    ("sacked", "sacked", _I64, None),
    ("lost", "lost", _I64, None),
    ("retrans", "retrans", _I64, None),
    ("fackets", "fackets", _I64, None),
    ("last_data_sent_ms", "last_data_sent_ms", _I64, None),
    ("last_data_recv_ms", "last_data_recv_ms", _I64, None),
    ("last_ack_recv_ms", "last_ack_recv_ms", _I64, None),
    ("pmtu_bytes", "pmtu_bytes", _I64, None),
    ("rcv_ssthresh_bytes", "rcv_ssthresh_bytes", _I64, None),
    ("rtt_ms", "rtt_us", _F64, 1000.0),
    ("rttvar_ms", "rttvar_us", _F64, 1000.0),
    ("snd_ssthresh", "snd_ssthresh", _I64, None),
    ("snd_cwnd", "snd_cwnd", _I64, None),
    ("advmss_bytes", "advmss_bytes", _I64, None),
    ("reordering", "reordering", _I64, None),
    ("rcv_rtt_ms", "rcv_rtt_us", _F64, 1000.0),
    ("rcv_space_bytes", "rcv_space_bytes", _I64, None),
    ("total_retrans", "total_retrans", _I64, None),
    ("pacing_rate_bytes_s", "pacing_rate_bytes_s", _I64, None),
    ("max_pacing_rate_bytes_s", "max_pacing_rate_bytes_s", _I64, None),
    ("bytes_acked", "bytes_acked", _I64, None),
    ("bytes_received", "bytes_received", _I64, None),
    ("segs_out", "segs_out", _I64, None),
    ("segs_in", "segs_in", _I64, None),
    ("notsent_bytes", "notsent_bytes", _I64, None),
    ("min_rtt_ms", "min_rtt_us", _F64, 1000.0),
    ("data_segs_in", "data_segs_in", _I64, None),
    ("data_segs_out", "data_segs_out", _I64, None),
    ("delivery_rate_bytes_s", "delivery_rate_bytes_s", _I64, None),
    ("busy_time_ms", "busy_time_us", _F64, 1000.0),
    ("rwnd_limited_ms", "rwnd_limited_us", _F64, 1000.0),
    ("sndbuf_limited_ms", "sndbuf_limited_us", _F64, 1000.0),
    ("delivered", "delivered", _I64, None),
    ("delivered_ce", "delivered_ce", _I64, None),
    ("bytes_sent", "bytes_sent", _I64, None),
    ("bytes_retrans", "bytes_retrans", _I64, None),
    ("dsack_dups", "dsack_dups", _I64, None),
    ("reord_seen", "reord_seen", _I64, None),
    ("rcv_ooopack", "rcv_ooopack", _I64, None),
    ("snd_wnd_bytes", "snd_wnd_bytes", _I64, None),
    ("rcv_wnd_bytes", "rcv_wnd_bytes", _I64, None),
    ("rehash", "rehash", _I64, None),
    ("total_rto", "total_rto", _I64, None),
    ("total_rto_recoveries", "total_rto_recoveries", _I64, None),
    ("total_rto_time_ms", "total_rto_time_ms", _I64, None),
)

_HEAD = [("line_no", _I64), ("ts_us", _I64), ("sample", _I64), ("pid", _I32)]

SOCKETS_SCHEMA = pa.schema([
    *_HEAD,
    ("fd", _I32),
    ("inode", _I64),
    ("local", pa.string()),
    ("remote", pa.string()),
    ("local_port", _I32),
    ("remote_port", _I32),
    ("state", pa.string()),
    ("nodelay", pa.bool_()),
    ("error", pa.string()),
    ("tcp_info_bytes", _I32),
    ("ca_state", pa.string()),
    ("delivery_rate_app_limited", pa.bool_()),
    *[(col, typ) for col, _, typ, _ in _TCP_INFO_COLUMNS],
])

THREADS_SCHEMA = pa.schema([
    *_HEAD,
    ("tid", _I32),
    ("name", pa.string()),
    ("state", pa.string()),
    ("cpu_ms", _F64),
    ("utime_ms", _F64),
    ("stime_ms", _F64),
    ("run_ms", _F64),
    ("runq_wait_ms", _F64),
    ("timeslices", _I64),
    ("voluntary_ctxt", _I64),
    ("nonvoluntary_ctxt", _I64),
    ("last_cpu", _I32),
])

HOST_SCHEMA = pa.schema([
    *_HEAD,
    ("ncpu", _I32),
    ("cpu_pct", pa.list_(_F64)),
    ("load1", _F64),
    ("load5", _F64),
    ("load15", _F64),
    ("collector_cpu_ms", _F64),
    ("sample_cpu_ms", _F64),
    ("cpu_quota_cores", _F64),
    ("cpu_period_ms", _F64),
    ("cpu_nr_periods", _I64),
    ("cpu_nr_throttled", _I64),
    ("cpu_throttled_ms", _F64),
])

SCHEMAS = {"sockets": SOCKETS_SCHEMA, "threads": THREADS_SCHEMA, "host": HOST_SCHEMA}
_TABLE_OF_KIND = {"socket": "sockets", "thread": "threads", "host": "host"}

_I32_RANGE = (-(2**31), 2**31 - 1)
_I64_RANGE = (-(2**63), 2**63 - 1)


def _num(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _int(v, rng=_I64_RANGE):
    v = _num(v)
    if v is None or (isinstance(v, float) and not v.is_integer()):
        return None
    v = int(v)
    return v if rng[0] <= v <= rng[1] else None


def _float(v, div=None):
    v = _num(v)
    if v is None:
        return None
    try:
        return float(v) / div if div else float(v)
    except OverflowError:  # an integer past float range
        return None


def _str(v):
    return v if isinstance(v, str) else None


def _bool(v):
    return v if isinstance(v, bool) else None


def _port_of(addr):
    if not isinstance(addr, str):
        return None
    head, sep, tail = addr.rpartition(":")
    if not sep or not head or not tail.isdecimal() or len(tail) > 10:
        return None
    p = int(tail)
    return p if p <= 65535 else None


def _head(obj, no):
    ts, pid = _int(obj.get("ts_us")), _int(obj.get("pid"), _I32_RANGE)
    if ts is None or pid is None:
        return None
    return {"line_no": no, "ts_us": ts, "sample": _int(obj.get("sample")), "pid": pid}


def _socket_row(obj, no):
    head = _head(obj, no)
    fd = _int(obj.get("fd"), _I32_RANGE)
    if head is None or fd is None:
        return None
    info = obj.get("tcp_info")
    info = info if isinstance(info, dict) else {}
    state = _str(obj.get("state"))
    ca = _int(info.get("ca_state"))
    app_limited = _int(info.get("delivery_rate_app_limited"))
    row = {
        **head,
        "fd": fd,
        "inode": _int(obj.get("inode")),
        "local": _str(obj.get("local")),
        "remote": _str(obj.get("remote")),
        "local_port": _port_of(obj.get("local")),
        "remote_port": _port_of(obj.get("remote")),
        "state": state if state in _TCP_STATES else None,
        "nodelay": _bool(obj.get("nodelay")),
        "error": _str(obj.get("error")),
        "tcp_info_bytes": _int(obj.get("tcp_info_bytes"), _I32_RANGE),
        "ca_state": _CA_STATES.get(ca) if ca is not None else None,
        "delivery_rate_app_limited": None if app_limited is None else bool(app_limited),
    }
    for col, key, typ, div in _TCP_INFO_COLUMNS:
        v = info.get(key)
        if typ == _F64:
            row[col] = _float(v, div)
        else:
            # An all-ones u64 (max_pacing_rate: unlimited) does not fit an
            # int64 and becomes null, as documented.
            row[col] = _int(v, _I32_RANGE if typ == _I32 else _I64_RANGE)
    return row


def _ticks_ms(ticks, hz):
    return None if ticks is None or not hz else ticks * 1000.0 / hz


def _thread_row(obj, no):
    head = _head(obj, no)
    tid = _int(obj.get("tid"), _I32_RANGE)
    if head is None or tid is None:
        return None
    hz = _int(obj.get("clk_tck"))
    hz = hz if hz and hz > 0 else None
    ut, stt = _int(obj.get("utime_ticks")), _int(obj.get("stime_ticks"))
    return {
        **head,
        "tid": tid,
        "name": _str(obj.get("name")),
        "state": _str(obj.get("state")),
        "cpu_ms": _ticks_ms(ut + stt, hz) if ut is not None and stt is not None else None,
        "utime_ms": _ticks_ms(ut, hz),
        "stime_ms": _ticks_ms(stt, hz),
        "run_ms": _float(obj.get("run_ns"), 1e6),
        "runq_wait_ms": _float(obj.get("runq_wait_ns"), 1e6),
        "timeslices": _int(obj.get("timeslices")),
        "voluntary_ctxt": _int(obj.get("voluntary_ctxt")),
        "nonvoluntary_ctxt": _int(obj.get("nonvoluntary_ctxt")),
        "last_cpu": _int(obj.get("last_cpu"), _I32_RANGE),
    }


def _host_row(obj, no):
    head = _head(obj, no)
    if head is None:
        return None
    pct = obj.get("cpu_pct")
    return {
        **head,
        "ncpu": _int(obj.get("ncpu"), _I32_RANGE),
        "cpu_pct": [_float(v) for v in pct] if isinstance(pct, list) else None,
        "load1": _float(obj.get("load1")),
        "load5": _float(obj.get("load5")),
        "load15": _float(obj.get("load15")),
        "collector_cpu_ms": _float(obj.get("collector_cpu_ms")),
        "sample_cpu_ms": _float(obj.get("sample_cpu_ms")),
        **_cgroup_cols(obj.get("cgroup")),
    }


def _cgroup_cols(cg) -> dict:
    cg = cg if isinstance(cg, dict) else {}
    quota, period = _int(cg.get("quota_us"), _I64_RANGE), _int(cg.get("period_us"), _I64_RANGE)
    throttled = _int(cg.get("throttled_us"), _I64_RANGE)
    return {
        "cpu_quota_cores": quota / period if quota and period and quota > 0 and period > 0 else None,
        "cpu_period_ms": period / 1000.0 if period else None,
        "cpu_nr_periods": _int(cg.get("nr_periods"), _I64_RANGE),
        "cpu_nr_throttled": _int(cg.get("nr_throttled"), _I64_RANGE),
        "cpu_throttled_ms": throttled / 1000.0 if throttled is not None else None,
    }


_ROW_OF_KIND = {"socket": _socket_row, "thread": _thread_row, "host": _host_row}


class SocketsParser:
    source = "sockets"

    def __init__(self) -> None:
        self.counts = ParseCounts(self.source)

    def feed(self, lines, first_line_no: int = 1) -> dict[str, pa.Table]:
        rows: dict[str, list[dict]] = {name: [] for name in SCHEMAS}
        for no, text, obj in json_lines(lines, self.counts, first_line_no):
            kind = obj.get("kind") if isinstance(obj, dict) else None
            if not isinstance(kind, str) or kind not in _ROW_OF_KIND:
                self.counts.reject(no, "not_sample", text)
                continue
            row = _ROW_OF_KIND[kind](obj, no)
            if row is None:
                self.counts.reject(no, f"bad_{kind}", text)
                continue
            self.counts.parsed += 1
            rows[_TABLE_OF_KIND[kind]].append(row)
        try:
            return {name: pa.Table.from_pylist(r, schema=SCHEMAS[name]) for name, r in rows.items()}
        except UnicodeEncodeError:
            return {name: pa.Table.from_pylist(scrub(r), schema=SCHEMAS[name]) for name, r in rows.items()}

    def finish(self) -> dict[str, pa.Table]:
        return {name: s.empty_table() for name, s in SCHEMAS.items()}


def parse_lines(lines, first_line_no: int = 1) -> tuple[dict[str, pa.Table], ParseCounts]:
    p = SocketsParser()
    got = p.feed(lines, first_line_no)
    end = p.finish()
    return {name: pa.concat_tables([got[name], end[name]]) for name in SCHEMAS}, p.counts


def looks_like(sample: list[str]) -> float:
    """Share of non-empty sample lines that are socket, thread or host
    samples: JSON objects with a known ``kind``, ``ts_us`` and ``pid``."""
    lines = [s for s in sample if s.strip()]
    if not lines:
        return 0.0
    hits = 0
    for s in lines:
        if '"kind"' not in s:
            continue
        try:
            obj = json.loads(s)
        except (ValueError, RecursionError):
            continue
        hits += (isinstance(obj, dict) and obj.get("kind") in KINDS
                 and "ts_us" in obj and "pid" in obj)
    return hits / len(lines)


FORMATS = (
    Format(name="sockets", recognised_by=BY_LINES, recognise=looks_like, tables=SCHEMAS,
           schema_version=1, reads=CHUNKS, parser=SocketsParser,
           title="socket, thread and host samples", pseudonymised=TEXT_SCANNER,
           feeds={"sockets": (SOCKET_SAMPLES,), "threads": (THREAD_SAMPLES,), "host": (THREAD_SAMPLES,)}, bundle_dir="sockets"),
)
