"""``kdiag trace``: run the probe producer under the collectors, analyse,
write the bundle.

The probe runs as a child process; kdiag stops only that child (it started
it). Ctrl-C or SIGTERM stop the probe early; what was captured until then is
still analysed and bundled, marked partial.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, Protocol

from kdiag import collectors
from kdiag.collectors import bpfcalls as c_bpfcalls
from kdiag.collectors import bpftrace as c_bpf
from kdiag.collectors import probe_output
from kdiag.collectors import strace as c_strace
from kdiag.collectors.base import PROBE, Capture, Collector, gaps, wait_state
import kdiag
from kdiag import __version__, progress
from kdiag.bundle import archive as bundle
from kdiag.capture import disk_budget
from kdiag.bundle import redact
from kdiag.capture import probe_producer
from kdiag.errors import KdiagError, UsageError

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


@dataclass
class TraceResult:
    findings: dict
    bundle: Path
    probe: dict | None
    partial: bool
    error: str | None = None
    # Stopped before its end: Ctrl-C, SIGTERM, the size cap or a full disk.
    interrupted: bool = False
    tracer: str | None = None       # the syscall tracer that ran, if any


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


def _default_bundle_path() -> Path:
    return Path.cwd() / time.strftime("kdiag-%Y%m%d-%H%M%S.tar.gz")


def _warm_spark(holder: dict, small: bool) -> None:
    # Spark takes seconds to start; doing it while the probe runs keeps the
    # time to a verdict down.
    try:
        from kdiag.analysis.spark import session
        holder["spark"] = session(small=small)
    except Exception as e:  # reported when analysis needs it
        holder["error"] = e


def run(opts: TraceOptions, log=lambda msg: None) -> TraceResult:
    out = (opts.out or _default_bundle_path()).resolve()
    with staged(out, opts.argv, log) as staging:
        return _run(opts, staging, out, log)


def staging_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def capture_running(staging: Path) -> bool:
    """Whether a live kdiag holds ``staging`` (see ``_hold``). A kdiag that
    died, even by SIGKILL, holds nothing: the kernel drops its lock."""
    try:
        fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _hold(staging: Path) -> int:
    """An flock on the staging directory itself, held while kdiag writes it:
    nothing to clean up, and no file that could end up in the bundle."""
    fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@contextlib.contextmanager
def staged(out: Path, argv: list[str], log):
    """The capture is written beside the bundle it becomes, as OUT.partial/
    (0700: it holds captured traffic): the disk it fills is the one the disk
    budget watches, and a kdiag killed before it sealed the bundle leaves an
    unsealed bundle there that ``kdiag replay`` and ``kdiag bundle seal``
    read. Removed once the bundle is written, and on failure when nothing
    was captured."""
    staging = staging_path(out)
    try:
        staging.mkdir(parents=True, mode=0o700)
        held = _hold(staging)
    except FileExistsError:
        if capture_running(staging):
            raise UsageError(f"{staging} is being written by a kdiag trace that is still running; "
                             "give this one another -o") from None
        raise UsageError(f"{staging} exists: an earlier kdiag run stopped before sealing it. "
                         f"kdiag bundle seal {staging} makes it a bundle; or remove it") from None
    except OSError as e:
        raise UsageError(f"cannot write beside {out}: {e.strerror or e}") from None
    try:
        yield from _staged(staging, argv, log)
    finally:
        os.close(held)


def _staged(staging: Path, argv: list[str], log):
    bundle.start(staging, {"kdiag_version": __version__, "created_us": int(time.time() * 1e6),
                           "argv": redact.argv(argv)})
    keep = False
    try:
        yield staging
    except BaseException:
        keep = disk_budget.tree_bytes(staging / "raw") > 0
        if keep:
            log(f"the captures so far are kept in {staging} (kdiag bundle seal {staging} makes a bundle of them)")
        raise
    finally:
        # A sealed directory is the bundle itself: the archive did not fit.
        if not keep and not bundle.is_sealed_dir(staging):
            shutil.rmtree(staging, ignore_errors=True)


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
            lab_info, cgroup = _brokers(opts, capture, active, stack, log)
        _record_start(staging, opts, capture.producer_config, lab_info)
        run = _run_producer(opts, capture, active, cgroup, log)
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
             log) -> tuple[dict | None, Path | None]:
    """The brokers the probe produces to: the user's, or a lab started on
    ``stack``. Sets the capture's producer config (with what the collectors
    need) and where the producer runs; returns the lab's manifest record and
    the cgroup the probe joins."""
    lab_info, cgroup = None, None
    if opts.brokers:
        base = {"bootstrap.servers": opts.brokers}
    elif opts.lab is not None:
        target = stack.enter_context(opts.lab(opts.topic, log))
        base, lab_info, cgroup = target.config, target.info, target.cgroup
        capture.exec_prefix = list(target.exec_prefix)
    else:
        raise UsageError("no brokers to trace against: give -b BROKERS or run a lab scenario")
    config = {**PROBE_DEFAULTS, **base, **opts.props}
    for c in active:
        config = c.producer_config(config)
    capture.producer_config = config
    return lab_info, cgroup


def _record_start(staging: Path, opts: TraceOptions, config: dict, lab_info: dict | None) -> None:
    # What a kdiag killed mid-run leaves must still say what ran.
    import confluent_kafka

    bundle.start(staging, {"kdiag_version": __version__, "created_us": int(time.time() * 1e6),
                           "argv": redact.argv(opts.argv), "mode": "lab" if lab_info else "brokers",
                           "producer_config": redact.config(config),
                           "versions": {"librdkafka": confluent_kafka.libversion()[0]}})


def _run_producer(opts: TraceOptions, capture: Capture, active: list[Collector], cgroup: Path | None,
                  log) -> ProbeRun:
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
    if tracer.tool != c_strace.NAME:
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

    with progress.current().stage(f"probe: {opts.messages} messages", total=opts.messages) as stage:
        answered = _Answered(stderr_path)
        stopped, exit_code = probe_producer.run_child(capture.exec_prefix + cmd, stderr_path, opts.timeout_s, log,
                                                       env, on_start=start_all, raw=capture.raw,
                                                       cap_bytes=_cap_bytes(opts.max_capture_mb),
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
    failed: str | None = None       # why bpfcalls did not start

    @classmethod
    def choose(cls, opts: TraceOptions, active: list[Collector], log) -> "_ProbeTracer":
        from kdiag.capture import attach, overhead

        setting = attach.tracer_setting(opts)
        tracers = {c.name: c for c in active if c.syscall_tracer}
        bpf = tracers.get(c_bpfcalls.NAME)
        unusable = {c_bpfcalls.NAME: bpf.unmet() if bpf is not None else "not installed",
                    c_bpf.NAME: "kdiag's probe runs under bpfcalls or strace"}
        tool, why = overhead.choose(setting, None, unusable)
        return cls(tracers, tool, setting, why, log)

    def start(self, pid: int) -> None:
        if self.tool == c_strace.NAME:
            return      # strace runs the probe: wrapped before it started
        try:
            # It stops itself first thing; a SIGCONT before that would be
            # lost. As long as attach waits for its shim to stop.
            if not wait_state(pid, "T"):
                self.log("the probe did not stop to wait for its tracer: its first calls may be missed")
            t = self.tracers[self.tool]
            self.log(f"tracing the probe with {self.tool}: {self.why}")
            t.start(pid)
            if t.child is None:
                self.failed = t.failed_to_start
                self.log(f"{self.tool} did not start ({self.failed}): strace attaches instead")
                self.tool, self.why = c_strace.NAME, f"{self.tool} did not start: {self.failed}"
                self.tracers[c_strace.NAME].start(pid)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def record(self) -> dict:
        t = self.tracers.get(self.tool)
        ran = t is not None and t.record is not None and getattr(t.record, "state", None) not in ("skipped", "failed")
        bpf = getattr(self.tracers.get(c_bpfcalls.NAME), "child_status", {}) or {}
        return {"tool": self.tool if ran else None, "setting": self.setting, "why": self.why,
                "bpfcalls_failed": self.failed, "lost_events": bpf.get("lost_events")}


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


def _cap_bytes(mb: float | None) -> int | None:
    return None if mb is None or mb <= 0 else int(mb * disk_budget.MIB)


def finish(staging: Path, raw_inputs: list[Path], meta: dict, spark_holder: dict, warm: threading.Thread,
           out: Path, secrets: list[str], manifest: dict, extra: dict, log=lambda msg: None,
           pseudonymise: Path | None = None) -> tuple[dict, Path]:
    """Scrub, parse, analyse, report, bundle: the end of every trace.

    A full disk costs the bundle its tables (replay parses the raw captures
    again) and then its compression (the staging directory, sealed, is the
    bundle); it never costs the captures."""
    scrubbed = redact.scrub_tree(staging / "raw", secrets)
    by_pattern = redact.scrub_tree_patterns(staging / "raw")
    host = bundle.host_facts()
    pseudo = None
    if pseudonymise is not None:
        manifest, extra, host, pseudo = _pseudonymise(staging, pseudonymise, manifest, extra, host)
        log(f"hosts and addresses pseudonymised; the map is {pseudonymise} (keep it out of the bundle)")
    warm.join()
    if "error" in spark_holder:
        raise KdiagError(f"Spark did not start: {spark_holder['error']}")
    from kdiag.analysis.pipeline import analyse

    reasons = list(manifest.get("partial_reasons") or [])
    with contextlib.ExitStack() as stack:
        try:
            findings, parsed = analyse(raw_inputs, staging / "tables", meta, spark=spark_holder["spark"],
                                       base=staging)
        except OSError as e:
            if not _disk_full(e):
                raise
            shutil.rmtree(staging / "tables", ignore_errors=True)
            reasons.append("the output disk filled up while writing the tables: the bundle holds the raw "
                           "captures, which replay parses again")
            log(reasons[-1])
            elsewhere = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kdiag-tables-")))
            findings, parsed = analyse(raw_inputs, elsewhere, meta, spark=spark_holder["spark"], base=staging)
            parsed.rows, parsed.paths = {}, {}
    findings.update(extra)
    if reasons:
        findings["partial"] = True
    findings["partial_reasons"] = reasons
    findings["input_notes"] = [f"capture partial: {r}" for r in reasons] + list(findings.get("input_notes") or [])
    versions = bundle.table_versions()
    manifest = {
        "kdiag_version": __version__,
        "created_us": int(time.time() * 1e6),
        **manifest,
        "partial": bool(manifest.get("partial") or reasons),
        "partial_reasons": reasons,
        "redaction": {"secret_values": len(secrets), "replacements": scrubbed, "by_pattern": by_pattern},
        "host": host,
        "pseudonyms": pseudo,
        "parse": parsed.files,
        "input_checks": findings.get("input_checks", []),
        "tables": {name: {"rows": n, "schema_version": versions.get(name, 1)} for name, n in parsed.rows.items()},
    }
    try:
        _write_reports(staging, findings, extra, out.name)
        bundle.write(staging, out, manifest)
        shutil.rmtree(staging, ignore_errors=True)
        return findings, out
    except OSError as e:
        if not _disk_full(e):
            raise
    # No room for the archive: the staging directory becomes the bundle.
    reasons.append(f"no room on the output disk for {out.name}: the bundle is the directory {staging}")
    log(reasons[-1])
    findings["partial"], manifest["partial"] = True, True
    findings["input_notes"].insert(len(reasons) - 1, f"capture partial: {reasons[-1]}")
    try:
        with contextlib.suppress(OSError):
            _write_reports(staging, findings, extra, out.name)
        bundle.seal_dir(staging, manifest)
    except OSError as e:
        raise KdiagError(f"the output disk is full; the captures are in {staging} ({e.strerror or e})") from e
    return findings, staging


def _write_reports(staging: Path, findings: dict, extra: dict, name: str) -> None:
    """findings.json, and the same for people: report.txt for a terminal,
    report.html (its charts read the socket samples in tables/)."""
    from kdiag.report.html import render_html, sockets_of
    from kdiag.report.text import render

    (staging / "findings.json").write_text(json.dumps(findings, indent=2, default=str) + "\n")
    (staging / "report.txt").write_text(render(findings, probe=extra.get("probe")))
    (staging / "report.html").write_text(render_html(findings, sockets_of(staging / "tables"), source=name))


def _pseudonymise(staging: Path, map_path: Path, manifest: dict, extra: dict,
                  host: dict) -> tuple[dict, dict, dict, dict]:
    """Once, on the raw captures: tables and findings come from them and so
    hold pseudonyms already (a second pass would map those again). The
    manifest, extra findings and host facts pseudonymised, and the record of it."""
    from kdiag.bundle.pseudonym import Pseudonyms, pseudonymise_manifest

    with Pseudonyms.load_or_create(map_path, outside=[staging]) as ps:
        ps.hostname(host["hostname"])
        ps.learn_obj(manifest)
        ps.learn_obj(extra)
        pseudo = {"map_id": ps.map_id, "keep_loopback": ps.keep_loopback, **ps.tree(staging / "raw")}
        manifest = pseudonymise_manifest({**manifest, "host": host}, ps)
        host = manifest.pop("host")
        extra = ps.obj(extra)
    return manifest, extra, host, pseudo


def _disk_full(e: OSError) -> bool:
    return e.errno in (errno.ENOSPC, errno.EDQUOT)


def seal(staging: Path, out: Path | None = None, log=lambda msg: None) -> Path:
    """``kdiag bundle seal``: the OUTPUT.partial/ directory a killed kdiag
    left becomes the bundle it would have written, marked partial. Secrets
    are redacted by pattern only: the values kdiag was told died with it."""
    staging = Path(staging).resolve()
    if capture_running(staging):
        raise UsageError(f"{staging} is being written by a kdiag trace that is still running; "
                         "it seals it itself when it stops")
    if not (staging / bundle.MANIFEST).is_file():
        raise UsageError(f"{staging}: not a directory kdiag trace left (no {bundle.MANIFEST})")
    # A link would seal (and redact in place) a file from outside the capture.
    bundle.refuse_links(staging)
    if bundle.is_sealed_dir(staging):
        raise UsageError(f"{staging}: already sealed; kdiag replay reads it")
    name = staging.name
    out = (out or staging.with_name(name[:-len(".partial")] if name.endswith(".partial") else name + ".tar.gz"))
    if out.exists():
        raise UsageError(f"{out} exists; not overwriting it")
    man = bundle.manifest(staging)
    # Tables or findings half-written when kdiag died are not to be trusted.
    shutil.rmtree(staging / "tables", ignore_errors=True)
    for leftover in ("findings.json", "report.txt", "report.html"):
        (staging / leftover).unlink(missing_ok=True)
    raw_inputs = [f for f in bundle.raw_files(staging) if f.parent.name in bundle.ANALYSED_SOURCES]
    reasons = list(man.get("partial_reasons") or [])
    reasons.append("sealed afterwards with kdiag bundle seal: secrets redacted by pattern only")
    manifest = {k: v for k, v in man.items() if k not in ("files", "sealed", "bundle_format")}
    manifest.update({"partial": True, "partial_reasons": reasons})
    holder, warm = start_spark()
    meta = {"librdkafka_version": (man.get("versions") or {}).get("librdkafka")}
    probe = bundle.probe_summary(staging)
    _, out_path = finish(staging, raw_inputs, meta, holder, warm, out.resolve(), [], manifest,
                         {"partial": True, "probe": probe, "delivery_ms": bundle.delivery_ms(staging / "raw" / "probe")},
                         log)
    return out_path


def start_spark(small: bool = False) -> tuple[dict, threading.Thread]:
    """``small``: the capture will be small (kdiag.analysis.spark.session)."""
    holder: dict = {}
    warm = threading.Thread(target=_warm_spark, args=(holder, small), daemon=True)
    warm.start()
    return holder, warm


def _tail(path: Path, n: int = 5) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])

