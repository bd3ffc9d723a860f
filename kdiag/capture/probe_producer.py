"""kdiag's probe producer: the workload ``kdiag trace`` measures.

Run as its own process (``python -m kdiag.capture.probe_producer``) so that strace follows
only the producer and librdkafka writes its debug lines straight to this
process's stderr from its own threads: that is what lets the analysis see
each ``Sent ... CorrId N`` line inside the broker thread's syscalls.

Synchronous by default, as in the page that motivates kdiag: produce one
message, wait for its delivery, repeat.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kdiag.deadline import Deadline, wait_until

# The config (which may hold passwords) comes through the environment: strace
# prints a file's contents as the probe reads it, and argv in execve(), but
# shows the environment only as "/* N vars */".
CONFIG_ENV = "KDIAG_PROBE_CONFIG"
# A probe that cannot deliver stops soon instead of waiting out every message.
FLUSH_TIMEOUT_S = 15
GIVE_UP_AFTER = 3


@dataclass
class Tally:
    """Delivery reports, read in message order."""
    delivered: int = 0
    failed: int = 0
    consecutive_failures: int = 0
    first_error: str | None = None
    latencies_us: list[int] = field(default_factory=list)

    def add(self, t0_us: int, outcome: dict) -> None:
        done = outcome.get("done_us")
        ok = done is not None and outcome.get("err") is None
        self.delivered += ok
        self.failed += not ok
        self.consecutive_failures = 0 if ok else self.consecutive_failures + 1
        if ok:
            self.latencies_us.append(done - t0_us)
        elif self.first_error is None:
            self.first_error = outcome.get("err") or f"no delivery report within {FLUSH_TIMEOUT_S}s"

    @property
    def hopeless(self) -> bool:
        """Nothing ever delivered: the next message would only fail the same way."""
        return self.consecutive_failures >= GIVE_UP_AFTER or bool(self.failed and not self.delivered)

    def p50_ms(self) -> float | None:
        lat = sorted(self.latencies_us)
        return lat[len(lat) // 2] / 1000 if lat else None


def run(config: dict, topic: str, messages: int, size: int, stats_path: str | None,
        results_path: str | None, rate: float | None = None) -> dict:
    """Synchronous by default; with ``rate``, asynchronous at that many
    messages a second, as a producer that leaves batching to librdkafka."""
    from confluent_kafka import Producer

    stats_out = open(stats_path, "a", buffering=1) if stats_path else None
    if stats_out is not None:
        config = {**config, "stats_cb": lambda s: stats_out.write(s.replace("\n", " ") + "\n")}
    producer = Producer(config)
    metadata = brokers_of(producer)
    snmp_before = tcp_counters()
    results = open(results_path, "w", buffering=1) if results_path else None
    value = b"k" * size
    tally = Tally()
    start = time.time()
    pending: list[tuple[int, int, dict]] = []

    def send(i: int) -> dict:
        outcome: dict = {}

        def on_delivery(err, msg, outcome=outcome):
            outcome["err"] = None if err is None else str(err)
            outcome["done_us"] = int(time.time() * 1e6)

        pending.append((i, int(time.time() * 1e6), outcome))
        producer.produce(topic, value, on_delivery=on_delivery)
        return outcome

    try:
        if rate:
            next_t = time.time()
            for i in range(messages):
                send(i)
                next_t += 1.0 / rate
                while (left := next_t - time.time()) > 0:
                    producer.poll(left)
            producer.flush(FLUSH_TIMEOUT_S)
        for i in range(messages):
            if rate:
                if i >= len(pending):
                    break
                _, t0, outcome = pending[i]
            else:
                outcome = send(i)
                t0 = pending[-1][1]
                producer.flush(FLUSH_TIMEOUT_S)
            tally.add(t0, outcome)
            if results is not None:
                results.write(json.dumps({"seq": i, "produce_us": t0, "delivered_us": outcome.get("done_us"),
                                          "error": outcome.get("err", "no delivery report")}) + "\n")
            if not rate and tally.hopeless:
                break
    finally:
        producer.flush(5)
        elapsed = time.time() - start
        if results is not None:
            results.close()
        if stats_out is not None:
            stats_out.close()
    return {
        "messages": messages,
        "delivered": tally.delivered,
        "failed": tally.failed,
        "first_error": tally.first_error,
        "gave_up": tally.hopeless,
        "elapsed_s": round(elapsed, 3),
        "msgs_per_s": round(tally.delivered / elapsed, 2) if elapsed > 0 else None,
        "p50_delivery_ms": tally.p50_ms(),
        "size_bytes": size,
        "rate": rate,
        "brokers": metadata,
        # Counters of this network namespace (all its sockets): retransmits
        # during the run are evidence of loss on the path.
        "tcp_counters_before": snmp_before,
        "tcp_counters_after": tcp_counters(),
    }


def brokers_of(producer, timeout_s: float = 10.0) -> list[dict]:
    """Every broker in the cluster metadata, not only the bootstrap list:
    the path to each is probed."""
    try:
        md = producer.list_topics(timeout=timeout_s)
    except Exception as e:  # the run goes on; the summary says why
        return [{"error": str(e)}]
    return [{"id": b.id, "host": b.host, "port": b.port} for b in md.brokers.values()]


def tcp_counters(path: str = "/proc/net/snmp") -> dict[str, int] | None:
    """The Tcp: line of /proc/net/snmp (RetransSegs, OutSegs, ...), of this
    process's network namespace, or another's (/proc/PID/net/snmp)."""
    try:
        with open(path) as f:
            rows = [ln.split() for ln in f if ln.startswith("Tcp:")]
    except OSError:
        return None
    if len(rows) != 2:
        return None
    return {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:]) if v.lstrip("-").isdigit()}


def retransmits(summary: dict | None) -> int | None:
    """Segments TCP retransmitted in the probe's namespace during the run
    (or the traced producer's: a manifest's ``target``, which holds the
    same two counters)."""
    try:
        return summary["tcp_counters_after"]["RetransSegs"] - summary["tcp_counters_before"]["RetransSegs"]
    except (KeyError, TypeError):
        return None


def join_cgroup(cgroup_dir: str) -> None:
    """Move this process (and the threads it starts later) into the cgroup
    the lab made for it (a CPU limit)."""
    try:
        (Path(cgroup_dir) / "cgroup.procs").write_text("0")
    except OSError as e:
        raise SystemExit(f"cannot join the cgroup {cgroup_dir}: {e.strerror or e}") from e


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdiag.capture.probe_producer")
    ap.add_argument("--config-env", default=CONFIG_ENV,
                    help="environment variable holding the librdkafka properties as JSON")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--messages", type=int, default=100)
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--rate", type=float, help="asynchronous, this many messages a second")
    ap.add_argument("--stats", help="append statistics JSON lines here")
    ap.add_argument("--results", help="write one JSON line per message here")
    ap.add_argument("--summary", help="write the run's summary JSON here")
    ap.add_argument("--cgroup", help="join this cgroup first (the client-cpu scenario's CPU limit)")
    ap.add_argument("--stopped", action="store_true",
                    help="stop (SIGSTOP) before the producer exists, until SIGCONT: a tracer that does not "
                         "start the process (bpfcalls) attaches first and sees every call")
    a = ap.parse_args(argv)
    if a.cgroup:
        # Before the producer exists, so that librdkafka's threads start inside.
        join_cgroup(a.cgroup)
    if a.stopped:
        os.kill(os.getpid(), signal.SIGSTOP)
    config = json.loads(os.environ.get(a.config_env) or "{}")
    summary = run(config, a.topic, a.messages, a.size, a.stats, a.results, a.rate)
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump(summary, f)
    print(json.dumps(summary), file=sys.stdout)
    return 0 if summary["delivered"] else 1


# --- kdiag trace's side: the probe as its child ----------------------------------

def _probe_pid(proc: subprocess.Popen, timeout_s: float = 10.0) -> int | None:
    """The probe's own pid: ``proc`` itself, or below strace and ``ip netns exec``."""
    import psutil

    import kdiag

    def found() -> int | None:
        try:
            top = psutil.Process(proc.pid)
            for p in [top, *top.children(recursive=True)]:
                cmd = p.cmdline()
                # strace's and ip's own command lines name the probe too: match
                # only the process that runs it ("python -m kdiag.capture.probe_producer").
                if cmd[1:3] == kdiag.python_m(sys.modules[__name__])[1:]:
                    return p.pid
        except psutil.Error:
            pass
        return None

    return wait_until(found, timeout_s, 0.02, give_up=lambda: proc.poll() is not None)


TICK_S = 0.25


def run_child(cmd: list[str], log_path: Path, timeout_s: float, log, env: dict, on_start=lambda pid: None,
               raw: Path | None = None, cap_bytes: int | None = None,
               tick=lambda: None) -> tuple[str | None, int | None]:
    """Run the probe with its stderr (librdkafka's log) streaming to disk;
    ``on_start`` gets the probe's pid, ``tick`` is called every TICK_S while
    it runs. A disk budget on ``raw`` stops it at ``cap_bytes`` or a nearly
    full disk. Returns (why it was stopped early or None, exit code)."""
    from kdiag.capture import disk_budget

    stopped = None
    with open(log_path, "wb") as err, contextlib.ExitStack() as stack:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
        budget = None
        if raw is not None:
            budget = stack.enter_context(disk_budget.DiskBudget(
                raw, cap_bytes, lambda why: (log(f"stopping the probe: {why}"), _interrupt(proc))))
        deadline = Deadline(timeout_s)
        try:
            # Inside: a Ctrl-C while the tracers start (bpfcalls takes a
            # second to load) still stops the probe.
            pid = _probe_pid(proc)
            if pid is not None:
                on_start(pid)
            while True:
                try:
                    proc.wait(timeout=min(TICK_S, deadline.remaining_s()))
                    break
                except subprocess.TimeoutExpired:
                    if deadline.expired():
                        raise
                    tick()
        except subprocess.TimeoutExpired:
            log(f"probe still running after {timeout_s:.0f}s: stopping it")
            stopped = f"the probe was stopped after --timeout {timeout_s:g}s"
            _stop(proc)
        except KeyboardInterrupt:
            log("interrupted: stopping the probe and keeping what was captured")
            stopped = "interrupted (Ctrl-C or SIGTERM)"
            _stop(proc)
        if budget is not None and budget.exceeded:
            _stop(proc)
            stopped = budget.reason
    return stopped, proc.returncode


def _interrupt(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)


def _stop(proc: subprocess.Popen) -> None:
    # Our own child (and its strace): SIGINT lets strace detach and flush.
    # SIGCONT: a probe still stopped, waiting for its tracer, gets it too.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
        os.killpg(proc.pid, signal.SIGCONT)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
