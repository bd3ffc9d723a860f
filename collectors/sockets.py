"""Live samples of a producer's Kafka sockets and threads, to raw/sockets/.

strace sees TCP_NODELAY only if it was attached before the socket's
connect(); a sampler reads it from the live socket at any time, together with
what the kernel knows about the connection (TCP_INFO: RTT, unacked and
not-yet-sent data, retransmits, the delayed-ACK timeout) and what each of
the producer's threads is doing (CPU, context switches, run-queue wait).

Every ``interval_ms`` one sample is written as JSON lines, all with the same
``ts_us`` (epoch microseconds at the start of the sample), ``pid`` and
``sample`` (0, 1, ...):

``{"kind": "socket", ...}``  one per TCP socket of the target: ``fd``,
    ``inode``, ``local`` and ``remote`` (``ip:port``, ``[ip6]:port``),
    ``state`` (ESTABLISHED, SYN_SENT, ...), ``nodelay`` (the socket's own
    TCP_NODELAY) and ``tcp_info`` (struct tcp_info decoded, kernel units
    named in the keys: ``rtt_us``, ``last_data_sent_ms``, ...; only the fields
    the running kernel filled in) with ``tcp_info_bytes``. When the socket
    could not be read, ``nodelay`` and ``tcp_info`` are null and ``error``
    says why; ``local``/``remote``/``state`` then come from the last listing.
``{"kind": "thread", ...}`` one per thread: ``tid``, ``name`` (the thread's
    comm, e.g. rdk:broker1), ``state`` (R, S, D, ...), ``utime_ticks``,
    ``stime_ticks``, ``clk_tck``, ``run_ns`` and ``runq_wait_ns`` (from
    schedstat: exact CPU time and time spent runnable but waiting for a
    core), ``timeslices``, ``voluntary_ctxt``, ``nonvoluntary_ctxt``,
    ``last_cpu``.
``{"kind": "host", ...}``   one per sample, written last: ``cpu_pct`` (busy
    percent per core since the previous sample; null in the first),
    ``ncpu``, ``load1/5/15``,
    ``collector_cpu_ms`` (this sampler's CPU time so far),
    ``sample_cpu_ms`` (what this sample cost) and ``cgroup`` (the CPU limit
    of the target's own cgroup and how often it bit: ``path``,
    ``quota_us``/``period_us`` (quota null when unlimited), ``nr_periods``,
    ``nr_throttled``, ``throttled_us``; counters from the cgroup's
    ``cpu.stat``, v1 or v2; null when the cgroup cannot be read).

How a socket is read: ``pidfd_open(pid)`` once, then per socket and sample
``pidfd_getfd(pidfd, fd)`` duplicates the producer's descriptor into this
process; ``getsockopt`` reads TCP_NODELAY and TCP_INFO from the duplicate,
which is closed at once. The producer is never stopped or signalled and its
socket is not changed. This needs root or ptrace rights over the target.

Which sockets: psutil's ``net_connections`` (TCP, not LISTEN), optionally
only those whose remote port is in ``ports``. That listing costs ~8 ms, so it
runs at most once a second and the fd list is reused in between; a socket
opened since is seen at the next listing. psutil reads the connection table
of the sampler's network namespace, so for a target in another namespace
the target's socket descriptors are probed directly instead.

Cost, measured on 2 cores against a librdkafka producer (1 broker socket,
5 threads): ~1 ms CPU per sample, ~11 ms per listing, 2.4 % of one core at
the default 100 ms; the status reports it for every run.

Stops when the target exits, at ``duration_s``, when ``stop`` is set, or
(command line) on SIGTERM/SIGINT. The last stdout line of the command is the
status as JSON, with the sampler's own cost.

Command line::

    python -m kdiag.collectors.sockets --pid PID --out FILE.jsonl [--interval-ms 100]
        [--duration S] [--ports 9092,9093]
"""
from __future__ import annotations

import argparse
import json
import platform
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

import kdiag

# The sampler's parts; tests and the lab's cgroup limit import them from here.
from kdiag.collectors._socket_sampler import Sampler, cgroup_cpu, cgroup_mounts, compact_json, cpu_cgroup_dir  # noqa: F401
from kdiag.collectors._tcp_info import TCP_INFO_LAYOUT, decode_tcp_info  # noqa: F401
from kdiag.collectors.base import (
    COMMAND,
    MODES,
    PID,
    Collector,
    CollectorStatus,
    Requirement,
    dies_with_parent,
    status_from_output,
    unmet,
)
from kdiag.deadline import Deadline

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}

NAME = "sockets"
# Not a hard need: without it the sockets are still listed, without
# TCP_NODELAY and TCP_INFO.
PREFERS = (Requirement(root=True, why="pidfd_getfd of the producer's sockets (or ptrace rights over it)"),)


@dataclass
class SocketsStatus(CollectorStatus):
    """The collector status plus what sampling cost."""

    samples: int = 0
    stopped_by: str | None = None       # target_exit, duration, stop, signal, error
    interval_ms: float | None = None
    cpu_ms: float | None = None         # the sampler's CPU time, all samples
    cpu_ms_per_sample: float | None = None
    cpu_ms_max_sample: float | None = None
    cpu_pct: float | None = None        # of one core, over the sampling wall time


def sample_loop(pid: int, out_path, interval_ms: float = 100, duration_s: float | None = None,
                ports=None, stop: threading.Event | None = None) -> SocketsStatus:
    """Sample ``pid`` every ``interval_ms`` into ``out_path`` (JSON lines)
    until it exits, ``duration_s`` passes or ``stop`` is set."""
    out_path = Path(out_path)
    st = SocketsStatus(NAME, files=[str(out_path)], version=platform.release(), interval_ms=float(interval_ms))
    st.started_us = time.time_ns() // 1000
    stop = stop or threading.Event()
    interval = max(float(interval_ms), 1.0) / 1000.0
    try:
        sampler = Sampler(pid, set(ports) if ports else None)
    except psutil.NoSuchProcess:
        st.state, st.reason, st.stopped_by = "failed", f"no process {pid}", "error"
        st.ended_us = time.time_ns() // 1000
        return st
    except psutil.Error as e:
        st.state, st.reason, st.stopped_by = "failed", f"process {pid}: {e}", "error"
        st.ended_us = time.time_ns() // 1000
        return st
    if sampler.pidfd_error:
        sampler.problems["pidfd"] = sampler.pidfd_error
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        f = open(out_path, "w", encoding="utf-8")
    except OSError as e:
        sampler.close()
        st.state, st.reason, st.stopped_by = "failed", f"cannot write {out_path}: {e.strerror or e}", "error"
        st.ended_us = time.time_ns() // 1000
        return st

    cpu0 = time.thread_time()
    wall0 = time.monotonic()
    deadline = None if duration_s is None else Deadline(float(duration_s), start=wall0)
    costs: list[float] = []
    next_at = wall0
    try:
        while True:
            # A stop that comes before the first sample still gets one while
            # the target lives: the capture's socket state rests on it.
            if stop.is_set() and (costs or sampler.target_exited()):
                st.stopped_by = "stop"
                break
            if sampler.target_exited():
                st.stopped_by = "target_exit"
                break
            now = time.monotonic()
            if deadline is not None and deadline.expired():
                st.stopped_by = "duration"
                break
            if now < next_at:
                wait = next_at - now if deadline is None else min(next_at - now, deadline.remaining_s())
                stop.wait(max(wait, 0.0))
                continue
            c0 = time.thread_time()
            lines = sampler.sample()
            host = lines[-1]
            cost = (time.thread_time() - c0) * 1000.0
            # Writing a sample happens after its host line is built, so its
            # cost shows in the next line's collector_cpu_ms (and in the status).
            host["sample_cpu_ms"] = round(cost, 3)
            host["collector_cpu_ms"] = round((time.thread_time() - cpu0) * 1000.0, 3)
            f.write("\n".join(compact_json(o) for o in lines) + "\n")
            f.flush()
            costs.append((time.thread_time() - c0) * 1000.0)
            # Fixed rate: a slow sample delays the next slot, it does not
            # pile up catch-up samples.
            next_at += interval
            if next_at < time.monotonic():
                next_at = time.monotonic() + interval
    except KeyboardInterrupt:
        st.stopped_by = "signal"
    except OSError as e:
        st.stopped_by = "error"
        sampler.problems["write"] = f"sampling stopped: {e.strerror or e}"
    finally:
        f.close()
        sampler.close()
    _account(st, sampler, costs, cpu0, wall0, out_path)
    return st


def _account(st: SocketsStatus, sampler: Sampler, costs: list[float], cpu0: float, wall0: float,
             out_path: Path) -> None:
    """The status once sampling ended: what it cost, and how it went."""
    wall = time.monotonic() - wall0
    cpu_ms = (time.thread_time() - cpu0) * 1000.0
    st.samples = len(costs)
    st.cpu_ms = round(cpu_ms, 3)
    st.cpu_ms_per_sample = round(sum(costs) / len(costs), 3) if costs else None
    st.cpu_ms_max_sample = round(max(costs), 3) if costs else None
    st.cpu_pct = round(100.0 * cpu_ms / 1000.0 / wall, 2) if wall > 0 else None
    st.ended_us = time.time_ns() // 1000
    try:
        st.bytes = out_path.stat().st_size
    except OSError:
        st.bytes = None
    problems = list(sampler.problems.values())
    if not costs:
        st.state = "failed"
        problems.insert(0, "no sample taken" + (" (the target had already exited)"
                                                  if st.stopped_by == "target_exit" else ""))
    elif problems:
        st.state = "partial"
    else:
        st.state = "ok"
    st.reason = "; ".join(problems) or None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdiag.collectors.sockets", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pid", required=True, type=int)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--interval-ms", type=float, default=100.0)
    ap.add_argument("--duration", type=float, default=None, help="seconds; default: until the target exits")
    ap.add_argument("--ports", default=None, help="only sockets whose remote port is one of these, e.g. 9092,9093")
    a = ap.parse_args(argv)
    ports = None
    if a.ports:
        try:
            ports = {int(p) for p in a.ports.split(",") if p.strip()}
        except ValueError:
            ap.error(f"--ports: not a list of port numbers: {a.ports!r}")
    if a.interval_ms <= 0:
        ap.error("--interval-ms must be positive")

    stop = threading.Event()
    got: list[int] = []

    def on_signal(signum, frame):
        got.append(signum)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    # spawn() blocks these until here, so a stop sent while Python starts
    # waits for the handler instead of killing the sampler without a status.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    # The handlers stay until the status line is out: a sampler that ended
    # with its target is still sent the caller's stop, and the default
    # action would kill it before it says what it took.
    try:
        st = sample_loop(a.pid, a.out, interval_ms=a.interval_ms, duration_s=a.duration, ports=ports, stop=stop)
        if got and st.stopped_by == "stop":
            st.stopped_by = "signal"
        st.command = [*kdiag.python_m(sys.modules[__name__]), *(sys.argv[1:] if argv is None else argv)]
        print(json.dumps(st.to_dict()), flush=True)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 0 if st.state in ("ok", "partial") else 1


def check() -> str | None:
    """Why sockets will be listed without TCP_NODELAY/TCP_INFO, if so."""
    return unmet(PREFERS)


if __name__ == "__main__":
    sys.exit(main())


def spawn(pid: int, out, duration_s: float | None = None):
    """The sampler as a child process of the caller, dying with it."""
    import subprocess

    cmd = [*kdiag.python_m(sys.modules[__name__]), "--pid", str(pid), "--out", str(out)]
    if duration_s:
        cmd += ["--duration", str(duration_s)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            preexec_fn=_preexec, start_new_session=True, text=True)


def _preexec() -> None:
    # A blocked signal stays pending across exec; main() unblocks it once
    # its handler is in place.
    dies_with_parent()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def collect(proc) -> dict:
    """Stop a spawned sampler (if still running) and return its status."""
    import subprocess

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return status_from_output(NAME, out, f"exit {proc.returncode}, no status")


class Sockets(Collector):
    """The sampler beside any producer, from its pid on. With ``--pid`` or
    ``-- CMD`` it may be the only source of TCP_NODELAY (strace attached
    after the connect, or not at all), so there a failed sampler leaves the
    capture partial; beside kdiag's probe, strace sees every socket call."""

    name = NAME
    raw_dir = "sockets"
    requirements = ()
    preferences = PREFERS
    modes = MODES
    partial_without = frozenset({PID, COMMAND})

    def __init__(self, capture) -> None:
        super().__init__(capture)
        self.proc = None

    def start(self, pid: int) -> None:
        self.proc = spawn(pid, self.out_dir / "samples.jsonl", self.capture.window_s)

    def stop(self, started_us: int, ended_us: int, interrupted: bool) -> None:
        if self.proc is not None:
            self.record = collect(self.proc)
