"""``kdiag trace``: run the probe producer under the collectors, analyse,
write the bundle.

The probe runs as a child process; kdiag stops only that child (it started
it). Ctrl-C or SIGTERM stop the probe early; what was captured until then is
still analysed and bundled, marked partial.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, Protocol

import kdiag
from kdiag import __version__, collectors, progress
from kdiag.bundle import archive as bundle
from kdiag.bundle import redact
from kdiag.capture import disk_budget, overhead, probe_producer, tracers

# seal and staged re-exported: the command line and tests know them as trace's.
from kdiag.capture.bundling import TraceResult, cap_bytes, default_bundle_path, finish, seal, staged, start_spark  # noqa: F401
from kdiag.collectors import probe_output
from kdiag.collectors.base import PROBE, Capture, Collector, gaps, wait_state
from kdiag.errors import UsageError

PROBE_TOPIC = "kdiag-probe"
SMALL_PROBE_MESSAGES = 10_000
# The probe measures request latency, not batching: send each message at
# once and wait for all replicas, as the synchronous producers kdiag is for.
# message.timeout.ms: a message that cannot be delivered fails in seconds,
# not librdkafka's default five minutes.
PROBE_DEFAULTS = {"acks": "all", "linger.ms": "0", "message.timeout.ms": "10000"}
DEFAULT_MESSAGES = 100


class LabTarget(Protocol):
    """A started lab, as the lab hands it to the trace (the product does not
    import the lab: the caller passes ``TraceOptions.lab``)."""

    config: dict[str, str]      # producer config for the lab's brokers, with the scenario's own
    info: dict                  # the manifest's "lab" record
    exec_prefix: list[str]      # runs the producer and the path probes where the lab's client is
    cgroup: Path | None         # the cgroup the probe producer joins, else None
    start: Callable[[], None]   # called as the producer starts: the lab's faults that start with it begin


@dataclass
class TraceOptions:
    brokers: str | None = None
    props: dict[str, str] = field(default_factory=dict)
    topic: str = PROBE_TOPIC
    messages: int = DEFAULT_MESSAGES
    size: int = 2048
    out: Path | None = None
    timeout_s: float = 300.0
    # Without brokers: starts the lab the probe runs against, given the
    # topic and the log; the command line passes the scenario registry's
    # ``running`` bound to a scenario's name.
    lab: Callable[[str, Callable[[str], None]], ContextManager[LabTarget]] | None = None
    rate: float | None = None       # asynchronous probe at this many messages a second
    path_probe: bool = True
    argv: list[str] = field(default_factory=list)
    max_capture_mb: float | None = disk_budget.DEFAULT_CAP_MB
    pseudonymise: Path | None = None    # the map file, kept outside the bundle
    tracer: str | None = None       # auto, strace, bpfcalls; None: $KDIAG_TRACER, else auto


def read_properties(path: Path) -> dict[str, str]:
    """A librdkafka/Java properties file: ``key=value`` lines, # comments."""
    props: dict[str, str] = {}
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UsageError(f"-F {path}: {e.strerror or e}") from e
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" not in line:
            raise UsageError(f"-F {path}:{n}: expected key=value, got {line!r}")
        k, _, v = line.partition("=")
        props[k.strip()] = v.strip()
    return props


def run(opts: TraceOptions, log=lambda msg: None) -> TraceResult:
    out = (opts.out or default_bundle_path()).resolve()
    with staged(out, opts.argv, log) as staging:
        return _run(opts, staging, out, log)


class _Answered:
    """Produce responses in the probe's librdkafka log so far, read from
    where the last look stopped: the progress bar's count. librdkafka:
    "RECV ... Received ProduceResponse (v7, 60 bytes, CorrId 4, rtt 43.38ms)"."""
    MARK = b"Received ProduceResponse"

    def __init__(self, path: Path) -> None:
        self._path, self._at, self._n, self._tail = path, 0, 0, b""

    def count(self) -> int:
        try:
            with open(self._path, "rb") as f:
                f.seek(self._at)
                new = f.read(1 << 20)
        except OSError:
            return self._n
        self._at += len(new)
        text = self._tail + new
        self._n += text.count(self.MARK)
        self._tail = text[-(len(self.MARK) - 1):]   # a mark cut across two reads is counted once
        return self._n


@dataclass
class ProbeRun:
    """How kdiag's probe producer's run went."""

    stopped: str | None         # why it was stopped early; None when it ran to its end
    exit_code: int | None
    tracer: dict                # the manifest's "tracer": which syscall tracer ran, and why


def _run(opts: TraceOptions, staging: Path, out: Path, log) -> TraceResult:
    capture = Capture(raw=staging / "raw", mode=PROBE, log=log)
    active = collectors.for_capture(capture)
    collectors.make_raw_dirs(capture.raw, active)
    # The probe's own capture: tens of kilobytes a hundred messages.
    spark_holder, warm = start_spark(small=opts.messages <= SMALL_PROBE_MESSAGES)

    with contextlib.ExitStack() as stack:
        with progress.current().stage("starting the lab" if opts.lab is not None and not opts.brokers
                                      else "connecting"):
            lab_info, cgroup, lab_start = _brokers(opts, capture, active, stack, log)
        _record_start(staging, opts, capture.producer_config, lab_info)
        run = _run_producer(opts, capture, active, cgroup, log, lab_start)
        probe = probe_output.read_summary(capture.raw)
        if opts.path_probe and run.stopped is None:
            with progress.current().stage("probing the path"):
                for c in active:
                    if not c.skipped:
                        c.after(probe)
    # The lab is down here: analysis needs no broker.

    probe_error = _probe_error(probe, run)
    reasons = [run.stopped] if run.stopped else []
    if probe_error:
        reasons.append(probe_error)
        probe_error += "; librdkafka's last lines:\n" + _tail(next(c.stderr_path() for c in active if c.stderr_path()))
        log(probe_error)
    statuses = [st for st in (c.status() for c in active) if st is not None]
    reasons += gaps(statuses, PROBE, active)

    import confluent_kafka

    meta = {"librdkafka_version": confluent_kafka.libversion()[0], "tcp_retrans": probe_producer.retransmits(probe)}
    raw_inputs = [p for c in active for p in c.inputs()]
    manifest = _manifest(opts, capture.producer_config, lab_info, statuses, reasons, run.tracer)
    findings, out_path = finish(staging, raw_inputs, meta, spark_holder, warm, out,
                                redact.secret_values(capture.producer_config), manifest,
                                {"probe": probe, "partial": bool(reasons), "probe_error": probe_error,
                                 "delivery_ms": bundle.delivery_ms(capture.raw / "probe")}, log,
                                opts.pseudonymise)
    return TraceResult(findings, out_path, probe, bool(reasons), probe_error, interrupted=run.stopped is not None,
                       tracer=run.tracer["tool"])


def _brokers(opts: TraceOptions, capture: Capture, active: list[Collector], stack: contextlib.ExitStack,
             log) -> tuple[dict | None, Path | None, Callable[[], None]]:
    """The brokers the probe produces to: the user's, or a lab started on
    ``stack``. Sets the capture's producer config (with what the collectors
    need) and where the producer runs; returns the lab's manifest record,
    the cgroup the probe joins and what to call as the producer starts."""
    lab_info, cgroup, lab_start = None, None, (lambda: None)
    if opts.brokers:
        base = {"bootstrap.servers": opts.brokers}
    elif opts.lab is not None:
        target = stack.enter_context(opts.lab(opts.topic, log))
        base, lab_info, cgroup, lab_start = target.config, target.info, target.cgroup, target.start
        capture.exec_prefix = list(target.exec_prefix)
    else:
        raise UsageError("no brokers to trace against: give -b BROKERS or run a lab scenario")
    config = {**PROBE_DEFAULTS, **base, **opts.props}
    for c in active:
        config = c.producer_config(config)
    capture.producer_config = config
    return lab_info, cgroup, lab_start


def _record_start(staging: Path, opts: TraceOptions, config: dict, lab_info: dict | None) -> None:
    # What a kdiag killed mid-run leaves must still say what ran.
    import confluent_kafka

    bundle.start(staging, {"kdiag_version": __version__, "created_us": int(time.time() * 1e6),
                           "argv": redact.argv(opts.argv), "mode": "lab" if lab_info else "brokers",
                           "producer_config": redact.config(config),
                           "versions": {"librdkafka": confluent_kafka.libversion()[0]}})


def _run_producer(opts: TraceOptions, capture: Capture, active: list[Collector], cgroup: Path | None,
                  log, lab_start: Callable[[], None] = lambda: None) -> ProbeRun:
    """kdiag's probe producer under the collectors, from its start to its
    end (or to Ctrl-C, the timeout or the disk budget)."""
    tracer = _ProbeTracer.choose(opts, active, log)
    cmd = [*kdiag.python_m(probe_producer), "--topic", opts.topic,
           "--messages", str(opts.messages), "--size", str(opts.size)]
    for c in active:
        cmd += c.producer_args()
    cmd += ["--rate", str(opts.rate)] if opts.rate else []
    if cgroup is not None:
        cmd += ["--cgroup", str(cgroup)]
    if tracer.tool != tracers.fallback():
        cmd += ["--stopped"]
    for c in active:
        if not c.syscall_tracer or c.name == tracer.tool:
            cmd = c.wrap(cmd)
    config = capture.producer_config
    log(f"probe: {opts.messages} x {opts.size} B to {config['bootstrap.servers']} "
        f"(socket.nagle.disable={config.get('socket.nagle.disable', 'librdkafka default')})")
    stderr_path = next(c.stderr_path() for c in active if c.stderr_path())
    started = int(time.time() * 1e6)
    env = {**os.environ, probe_producer.CONFIG_ENV: json.dumps(config)}

    def start_all(pid: int) -> None:
        for c in active:
            if not c.skipped and not c.syscall_tracer:
                c.start(pid)
        tracer.start(pid)
        # The tracer has released the probe: its producer starts now.
        lab_start()

    with progress.current().stage(f"probe: {opts.messages} messages", total=opts.messages) as stage:
        answered = _Answered(stderr_path)
        stopped, exit_code = probe_producer.run_child(capture.exec_prefix + cmd, stderr_path, opts.timeout_s, log,
                                                       env, on_start=start_all, raw=capture.raw,
                                                       cap_bytes=cap_bytes(opts.max_capture_mb),
                                                       tick=lambda: stage.update(answered.count()))
    ended = int(time.time() * 1e6)
    for c in active:
        c.stop(started, ended, stopped is not None)
    return ProbeRun(stopped, exit_code, tracer.record())


@dataclass
class _ProbeTracer:
    """The probe's syscall tracer. bpfcalls where it can run: it stops no
    thread, so the probe runs at the pace the scenario sets, not what
    strace's stops leave of it; the probe then starts stopped and goes on
    once bpfcalls traces it (from its first call, as under strace). strace
    otherwise, running the probe, or attached to it when bpfcalls did not
    start."""

    tracers: dict[str, Collector]
    tool: str
    setting: str
    why: str
    log: Callable[[str], None]
    failed: dict[str, str | None] = field(default_factory=dict)    # threadless tracer -> why it did not start

    @classmethod
    def choose(cls, opts: TraceOptions, active: list[Collector], log) -> "_ProbeTracer":
        setting = tracers.setting(opts.tracer)
        running = {c.name: c for c in active if c.syscall_tracer}
        serving = [c.name for c in tracers.by_rank() if PROBE in c.modes]
        unusable = {name: (running[name].unmet() if name in running else "not installed") if name in serving
                    else f"kdiag's probe runs under {' or '.join(serving)}" for name in tracers.threadless()}
        tool, why = overhead.choose(setting, None, unusable)
        failed = {name: None for name in tracers.threadless() if name in serving}
        return cls(running, tool, setting, why, log, failed)

    def start(self, pid: int) -> None:
        fallback = tracers.fallback()
        if self.tool == fallback:
            return      # the fallback (strace) runs the probe: wrapped before it started
        try:
            # It stops itself first thing; a SIGCONT before that would be
            # lost. As long as attach waits for its shim to stop.
            if not wait_state(pid, "T"):
                self.log("the probe did not stop to wait for its tracer: its first calls may be missed")
            t = self.tracers[self.tool]
            self.log(f"tracing the probe with {self.tool}: {self.why}")
            t.start(pid)
            if t.child is None:
                self.failed[self.tool] = t.failed_to_start
                self.log(f"{self.tool} did not start ({t.failed_to_start}): {fallback} attaches instead")
                self.tool, self.why = fallback, f"{self.tool} did not start: {t.failed_to_start}"
                self.tracers[fallback].start(pid)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def record(self) -> dict:
        t = self.tracers.get(self.tool)
        ran = t is not None and t.record is not None and getattr(t.record, "state", None) not in ("skipped", "failed")
        bpf = next((s for name in self.failed if (s := getattr(self.tracers.get(name), "child_status", None))), {})
        return {"tool": self.tool if ran else None, "setting": self.setting, "why": self.why,
                **{f"{name}_failed": why for name, why in self.failed.items()}, "lost_events": bpf.get("lost_events"),
                **tracers.hooks_of(getattr(t, "child_status", None) if ran else None,
                                   getattr(t, "hooks_why", None) if ran else None)}


def _probe_error(probe: dict | None, run: ProbeRun) -> str | None:
    """Why the run fails. A probe that failed still leaves its captures:
    they are analysed and bundled (marked partial) for whoever looks next."""
    if probe is None and run.stopped is None:
        return f"the probe producer exited with status {run.exit_code} and no summary"
    if probe is not None and probe["delivered"] == 0:
        return f"no message was delivered: {probe.get('first_error')}"
    if probe is not None and probe["failed"]:
        return (f"{probe['failed']} of {probe['delivered'] + probe['failed']} messages were not delivered"
                + (" and the probe gave up" if probe.get("gave_up") else "") + f": {probe.get('first_error')}")
    return None


def _manifest(opts: TraceOptions, config: dict, lab_info: dict | None, statuses: list[dict],
              reasons: list[str], tracer: dict) -> dict:
    import confluent_kafka

    strace_status = next((st for st in statuses if st.get("name") == "strace"), {})
    return {
        "argv": redact.argv(opts.argv),
        "mode": "lab" if lab_info else "brokers",
        "partial": bool(reasons),
        "partial_reasons": reasons,
        "producer_config": redact.config(config),
        "versions": {
            "librdkafka": confluent_kafka.libversion()[0],
            "confluent_kafka": confluent_kafka.__version__,
            "strace": strace_status.get("version"),
            **({"tansu": lab_info["tansu_version"], "tls_terminator": lab_info["terminator_version"]} if lab_info else {}),
        },
        "lab": lab_info,
        "tracer": tracer,
        "collectors": statuses,
    }


def _tail(path: Path, n: int = 5) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])

