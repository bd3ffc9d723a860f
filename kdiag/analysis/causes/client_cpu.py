"""The producer's thread was runnable but without a core: the response was
there, the producer could not run to read it."""
from __future__ import annotations

from kdiag.analysis import samples
from kdiag.analysis.samples import cpu_starvation
from kdiag.analysis.spark_plumbing import rounded
from kdiag.analysis.thresholds import CPU_STARVED_SHARE, SLOW_MS

NAME = "client_cpu"
# A CPU limit stalls a few requests for long (the rest of a CFS period).
TAIL = True
COLUMNS = ("total_ms", "runq_ms", "stalled_ms")
# send_ms: on the wire, the part of stalled_ms held between a request's own writes.
SUMMED = ("runq_ms", "stalled_ms", "send_ms")
EXAMPLE_COLUMNS = ("pid", "runq_ms")
MEETS = {"wait_ms": 80.0, "total_ms": 80.5, "n_writes": 3, "runq_ms": 75.0}
COLOUR = "#bcbd22"
PART = "wait"
SIGNATURE = (
    "A tail of requests stalls for up to a CFS period (100 ms) while the broker and path are "
    "fast, and the thread that sent each one was runnable but without a core for at least half of"
    " it (run-queue wait from `/proc/PID/task/TID/schedstat`, sampled every 100 ms). The evidence"
    " adds the producer cgroup's CPU limit and how often it was throttled (`cpu.stat`). Named the"
    " verdict, like `packet_loss`, when its requests take 25 % of the time. Without a completed request,"
    " an strace of the producer's own threads spinning: a poll() that asks POLLOUT, returns at once and is"
    " followed by a read that gets EAGAIN, 5 times or more in a row in a thread, or thousands of polls with a"
    " timeout of 1 ms or less that time out while the thread moves almost no data (strace lines, or lines"
    " counted by `uniq -c`)."
    " From a packet capture, where most requests leave within a millisecond of their newest message's "
    "CreateTime (the record batch's timestamp): a tail that left 10 ms or more after it, which no "
    "batching explains; or, taken on the producer's side, a tail whose own writes (TLS records, segments) left"
    " 10 ms or more apart, four handshake round trips or more, with no ACK from the broker ending the gap (Nagle's"
    " hold ends with one)."
)
FIX_DOC = (
    "Give the producer CPU: raise or remove its CPU limit (Kubernetes `limits.cpu`, `cpu.max`), "
    "move busy neighbours off its cores. No librdkafka property fixes a starved thread. A client that spins"
    " is fixed in the client: with 1 ms polls, `queue.buffering.max.ms` (`linger.ms`) of 5 ms or more (0.8"
    " polled its sockets with it as the timeout); with empty POLLOUT wake-ups, librdkafka 1.7.0 or later."
)


def rule(x):
    from pyspark.sql import functions as F

    # Against the whole request: a thread can lose its core while writing or
    # after reading the response, not only while it waits.
    starved = F.coalesce(x.col("runq_ms") >= CPU_STARVED_SHARE * x.total, F.lit(False))
    # A packet capture: the request left long after its newest message was
    # produced, where most left at once (analysis.wire.requests).
    held = F.coalesce(x.col("stalled_ms") >= CPU_STARVED_SHARE * x.total, F.lit(False))
    return (x.total > SLOW_MS) & (starved | held)


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}   # no librdkafka property fixes a starved thread; a spinning one's is in fix_text


# The release whose CHANGELOG says it fixed a busy loop with POLLOUT set
# while a TLS handshake waited to read (rdkafka_transport.c).
POLLOUT_LOOP_FIXED = (1, 7, 0)
# 0.9 waits on a wake-up fd beside the socket instead of a linger-long poll.
WAKEUP_FD_SINCE = (0, 9)


# An excerpt of an strace whose broker thread spins on a writable socket.
RUN_MEETS = {"requests": 0, "meta": {"spin": {
    "kind": "empty_pollout", "source": "strace", "threads": 1, "wakeups": 40, "per_thread_max": 40,
    "timeout_ms": None, "per_s": None, "iterations_per_ms": 3.0, "read_bytes": 5, "example": None}}}


def from_signals(facts) -> dict | None:
    """No completed request: the producer's threads spinning, from the
    strace (kdiag.analysis.spinning) judged as all the excerpt shows."""
    spin = facts.meta.get("spin")
    if not spin or facts.requests:   # beside completed requests, their own rule decides
        return None
    return {"requests": spin["wakeups"], "share": 1.0, "time_share": 1.0, "rests_on": ["syscalls"]}


def signal_evidence(facts) -> list[str]:
    spin = facts.meta.get("spin") or {}
    counted = " (lines counted by uniq -c)" if spin.get("source") == "counted" else ""
    threads = f"{spin['threads']} thread(s)" if spin.get("threads", 1) > 1 else "a thread"
    if spin.get("kind") == "empty_pollout":
        ev = [f"{threads} of the producer came back from poll() {spin['wakeups']:,} times with the broker "
              f"socket writable (POLLOUT), then read it and got EAGAIN, writing nothing{counted}: poll() "
              f"returns at once for a writable socket, so the thread spins"]
        if spin.get("iterations_per_ms"):
            ev.append(f"the poll timeout librdkafka passed fell by about a millisecond over those calls: "
                      f"{spin['iterations_per_ms']:g} wake-ups a millisecond")
        if spin.get("read_bytes") == 5:
            ev.append("each read asks 5 bytes, the size OpenSSL reads a TLS record header in: likely a TLS "
                      "connection")
    else:
        ev = [f"{threads} of the producer returned from poll() with a timeout of {spin.get('timeout_ms')} ms "
              f"{spin['wakeups']:,} times in all (up to {spin['per_thread_max']:,} in one){counted}, moving almost "
              f"no data between them: each wakes about a thousand times a second to wait again"]
    if spin.get("per_s"):
        ev.append(f"about {spin['per_s']:,} wake-ups a second in the busiest thread, by the strace's clock")
    ev.append("no request completed in the excerpt: the client's own threads use the CPU its requests and "
              "delivery reports need")
    return ev


def spin_fix(kind: str | None, version: tuple[int, ...] | None) -> str:
    if kind == "empty_pollout":
        if version is not None and version >= POLLOUT_LOOP_FIXED:
            return ("the broker thread spins on a writable socket with nothing to write: capture librdkafka's log "
                    "with debug=broker,protocol and report it with the strace")
        return ("upgrade librdkafka to 1.7.0 or later (it fixed a busy loop of the broker threads with POLLOUT set "
                "while a TLS handshake waited to read); if it persists, report it with debug=broker,protocol")
    if version is not None and version < WAKEUP_FD_SINCE:
        return ("set queue.buffering.max.ms to 5 ms or more: this librdkafka polls its broker sockets with it as "
                "the timeout, so 1 ms wakes every broker thread a thousand times a second; or upgrade (0.9 and "
                "later wait on a wake-up fd)")
    return ("raise queue.buffering.max.ms (linger.ms) to 5 ms or more (librdkafka 0.8 polls its broker sockets with "
            "it as the timeout), or upgrade librdkafka")


def _wire_evidence(facts) -> list[str]:
    agg, n, waits = facts.agg, facts.requests, facts.meta.get("wire_waits") or {}
    path_rtt = facts.path_rtt_ms
    mid = agg.max.get("send_ms") or 0.0
    between = (f"; some were held between their own writes, up to {mid:.1f} ms, with no ACK from the broker "
               f"awaited (a gap Nagle's hold would end with one)" if mid > 0 else "")
    return [f"{agg.k} of {n} Produce requests were held in the client {agg.p50['stalled_ms']:.1f} ms (median; up to "
            f"{agg.max['stalled_ms']:.1f} ms): from their newest message's CreateTime (the record batches' "
            f"timestamp) to their first byte on the wire, where most left {waits.get('last_p50_ms')} ms after it"
            f"{between}: the producer could not run to send them (a CPU limit, a busy host, a runtime's pause)",
            f"the path ({rounded(path_rtt, 3) if path_rtt is not None else '?'} ms) and the broker answer fast "
            f"(median request {facts.summary['latency_p50_ms']} ms on the wire): the time is lost in the client",
            "the capture cannot see the producer's threads: its CPU samples (kdiag trace --pid PID) say whether "
            "they waited for a core"]


def evidence(facts) -> list[str]:
    agg, n = facts.agg, facts.requests
    if facts.summary.get("source") == "wire":
        return _wire_evidence(facts)
    ev = [f"{agg.k} of {n} Produce requests stalled: median {agg.total:.1f} ms from first write to "
          f"response, while the median request took {facts.summary['latency_p50_ms']} ms",
          f"their thread was runnable but waiting for a core for up to {agg.p50['runq_ms']:.1f} ms of that "
          f"(median; run-queue wait from /proc/PID/task/TID/schedstat, sampled ~every 100 ms): the "
          f"response was there, the producer could not run to read it"]
    ev += _cpu_samples(cpu_starvation(samples.of(facts.meta), facts.example.get("pid")))
    path_rtt = facts.path_rtt_ms
    ev.append(f"the path ({rounded(path_rtt, 3) if path_rtt is not None else '?'} ms) and the broker answer fast; "
              f"the time is lost in the client")
    return ev


def _cpu_samples(cpu: dict | None) -> list[str]:
    if not cpu:
        return []
    ev = []
    th = cpu.get("thread")
    if th and th.get("runq_ms") is not None:
        ev.append(f"thread {th['name']} ({th['tid']}) waited {th['runq_ms']:.0f} ms for a core in "
                  f"{cpu['wall_ms']:.0f} ms of samples, with {th['nonvoluntary']} involuntary context "
                  f"switches; the whole process waited {cpu['process_runq_ms']:.0f} ms")
    cg = cpu.get("cgroup")
    if cg and cg["periods"]:
        limit = (f"limited to {cg['quota_cores']:.2f} cores per {cg['period_ms']:g} ms period"
                 if cg["quota_cores"] else "with no CPU limit of its own")
        ev.append(f"the producer's cgroup is {limit} and was throttled in {cg['throttled']} of "
                  f"{cg['periods']} periods, {cg['throttled_ms']:.0f} ms in all (cpu.stat)")
    return ev


def fix_text(facts) -> str:
    spin = facts.meta.get("spin")
    if spin:
        from kdiag.analysis.causes import version_tuple

        return spin_fix(spin.get("kind"), version_tuple(facts.version))
    return ("give the producer CPU: raise or remove its CPU limit (Kubernetes limits.cpu, cgroup "
            "cpu.max / cpu.cfs_quota_us), or move busy neighbours off its cores; no librdkafka "
            "property fixes a starved thread")
