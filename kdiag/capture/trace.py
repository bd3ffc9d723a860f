"""``kdiag trace``: run the probe producer under the collectors, analyse,
write the bundle.

The probe runs as a child process; kdiag stops only that child (it started
it). Ctrl-C or SIGTERM stop the probe early; what was captured until then is
still analysed and bundled, marked partial.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kdiag.collectors import rdkafka_log as c_log
from kdiag.collectors import strace as c_strace
from kdiag.collectors.base import status_from_output
from kdiag.collectors import tcp_probe as c_tcp_probe
import kdiag
from kdiag import __version__
from kdiag.bundle import archive as bundle
from kdiag.capture import disk_budget as guard
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
# librdkafka >= 2.10 disables Nagle by default; the lab reproduces the
# producers that still have it on, so it sets the old default explicitly.
LAB_DEFAULTS = {"socket.nagle.disable": "false"}
# Scenarios run on the loopback lab, by its variant; the others are network
# lab scenarios. The producer keeps librdkafka's defaults in both.
LAB_VARIANTS = {"nagle-proxy": "nagle-proxy", "slow-broker": "slow-broker", "throttled": "throttled",
                "client-cpu": "tls"}
# client-cpu: the probe and a busy neighbour (the application's own work) in
# a cgroup allowed this share of one core per 100 ms period, a Kubernetes-
# style CPU limit below what the two use.
CLIENT_CPU_CORES = 0.2
DEFAULT_MESSAGES = 100
# A request stalls only when the quota runs out while it is in flight, about
# one period in ten here; 100 messages take 5 periods, 600 take 30.
SCENARIO_MESSAGES = {"client-cpu": 600}


@dataclass
class TraceOptions:
    brokers: str | None = None
    props: dict[str, str] = field(default_factory=dict)
    topic: str = PROBE_TOPIC
    messages: int = 100
    size: int = 2048
    out: Path | None = None
    timeout_s: float = 300.0
    scenario: str | None = None     # a network lab scenario instead of the loopback lab
    rate: float | None = None       # asynchronous probe at this many messages a second
    path_probe: bool = True
    argv: list[str] = field(default_factory=list)
    max_capture_mb: float | None = guard.DEFAULT_CAP_MB
    pseudonymise: Path | None = None    # the map file, kept outside the bundle


@dataclass
class TraceResult:
    findings: dict
    bundle: Path
    probe: dict | None
    partial: bool
    error: str | None = None
    # Stopped before its end: Ctrl-C, SIGTERM, the size cap or a full disk.
    interrupted: bool = False


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


@contextlib.contextmanager
def staged(out: Path, argv: list[str], log):
    """The capture is written beside the bundle it becomes, as OUT.partial/:
    the disk it fills is the one the guard watches, and a kdiag killed before
    it sealed the bundle leaves an unsealed bundle there that ``kdiag replay``
    and ``kdiag bundle seal`` read. Removed once the bundle is written, and on
    failure when nothing was captured."""
    staging = staging_path(out)
    try:
        staging.mkdir(parents=True)
    except FileExistsError:
        raise UsageError(f"{staging} exists: an earlier kdiag run stopped before sealing it. "
                         f"kdiag bundle seal {staging} makes it a bundle; or remove it") from None
    except OSError as e:
        raise UsageError(f"cannot write beside {out}: {e.strerror or e}") from None
    bundle.start(staging, {"kdiag_version": __version__, "created_us": int(time.time() * 1e6),
                           "argv": redact.argv(argv)})
    keep = False
    try:
        yield staging
    except BaseException:
        keep = guard.tree_bytes(staging / "raw") > 0
        if keep:
            log(f"the captures so far are kept in {staging} (kdiag bundle seal {staging} makes a bundle of them)")
        raise
    finally:
        # A sealed directory is the bundle itself: the archive did not fit.
        if not keep and not bundle.is_sealed_dir(staging):
            shutil.rmtree(staging, ignore_errors=True)


def _run(opts: TraceOptions, staging: Path, out: Path, log) -> TraceResult:
    raw = staging / "raw"
    for d in ("rdkafka_log", "strace", "stats", "probe", "tcp_probe", "sockets"):
        (raw / d).mkdir(parents=True)
    # The probe's own capture: tens of kilobytes a hundred messages.
    spark_holder, warm = start_spark(small=opts.messages <= SMALL_PROBE_MESSAGES)

    with contextlib.ExitStack() as stack:
        lab_info = None
        cgroup = None
        prefix: list[str] = []   # runs the producer and the probes in the lab's client namespace
        user = dict(opts.props)
        if opts.brokers:
            base = {"bootstrap.servers": opts.brokers}
        elif opts.scenario in LAB_VARIANTS:
            from kdiag.lab import broker as lab

            variant = LAB_VARIANTS[opts.scenario]
            log(f"starting the lab, scenario {opts.scenario}: Tansu behind {variant}")
            the_lab = stack.enter_context(lab.running(topics=(opts.topic,), variant=variant))
            lab_info = the_lab.to_dict()
            base = the_lab.client_config()
            if opts.scenario == "client-cpu":
                from kdiag.lab import cpulimit

                cgroup = stack.enter_context(cpulimit.limited(CLIENT_CPU_CORES))
                stack.enter_context(cpulimit.busy(cgroup))
                log(f"the probe and a busy neighbour run in {cgroup}, limited to {CLIENT_CPU_CORES:g} of a "
                    f"core per {cpulimit.DEFAULT_PERIOD_US // 1000} ms")
                lab_info = {**lab_info, "cpu_limit_cores": CLIENT_CPU_CORES, "cgroup": str(cgroup)}
        elif opts.scenario:
            from kdiag.lab import network as netlab

            log(f"starting the network lab, scenario {opts.scenario}: client, delay line, router, "
                f"Tansu behind TLS, each in its own network namespace")
            nl = stack.enter_context(netlab.running(opts.scenario, topics=(opts.topic,)))
            lab_info, prefix = nl.to_dict(), nl.exec_prefix("client")
            base = nl.client_config()
        else:
            from kdiag.lab import broker as lab

            log("starting the lab: Tansu behind a TLS terminator on loopback")
            the_lab = stack.enter_context(lab.running(topics=(opts.topic,)))
            lab_info = the_lab.to_dict()
            base = {**the_lab.client_config(), **LAB_DEFAULTS}
        config = c_log.producer_config({**PROBE_DEFAULTS, **base, **user})
        # What a kdiag killed mid-run leaves must still say what ran.
        import confluent_kafka

        bundle.start(staging, {"kdiag_version": __version__, "created_us": int(time.time() * 1e6),
                               "argv": redact.argv(opts.argv), "mode": "lab" if lab_info else "brokers",
                               "producer_config": redact.config(config),
                               "versions": {"librdkafka": confluent_kafka.libversion()[0]}})

        paths = {
            "log": raw / "rdkafka_log" / "rdkafka.log",
            "strace": raw / "strace" / "strace.txt",
            "stats": raw / "stats" / "stats.jsonl",
            "results": raw / "probe" / "messages.jsonl",
            "summary": raw / "probe" / "summary.json",
        }
        cmd = [*kdiag.python_m(probe_producer), "--topic", opts.topic,
               "--messages", str(opts.messages), "--size", str(opts.size),
               "--stats", str(paths["stats"]), "--results", str(paths["results"]),
               "--summary", str(paths["summary"])] + (["--rate", str(opts.rate)] if opts.rate else [])
        if cgroup is not None:
            cmd += ["--cgroup", str(cgroup)]
        full_cmd, st_strace = c_strace.wrap(cmd, str(paths["strace"]))
        if st_strace.state == "skipped":
            paths["strace"].parent.rmdir()
            log(f"strace skipped: {st_strace.reason}")
        st_log = c_log.status(str(paths["log"]), str(paths["stats"]))
        log(f"probe: {opts.messages} x {opts.size} B to {config['bootstrap.servers']} "
            f"(socket.nagle.disable={config.get('socket.nagle.disable', 'librdkafka default')})")
        started = int(time.time() * 1e6)
        env = {**os.environ, probe_producer.CONFIG_ENV: json.dumps(config)}
        from kdiag.collectors import sockets

        sampler: list = []
        stopped, probe_rc = _run_probe(
            prefix + full_cmd, paths["log"], opts.timeout_s, log, env,
            on_start=lambda pid: sampler.append(sockets.spawn(pid, raw / "sockets" / "samples.jsonl")),
            raw=raw, cap_bytes=_cap_bytes(opts.max_capture_mb))
        sockets_status = sockets.collect(sampler[0]) if sampler else None
        ended = int(time.time() * 1e6)
        partial = stopped is not None
        path_status = None
        if opts.path_probe and not partial and paths["summary"].exists():
            path_status = _probe_path(json.loads(paths["summary"].read_text()), config, raw / "tcp_probe", prefix, log)
        for st in (st_strace, st_log):
            st.started_us, st.ended_us = started, ended
            if st.state != "skipped":
                st.state = "partial" if partial else "ok"
                st.bytes = sum(Path(f).stat().st_size for f in st.files if Path(f).exists())
    # The lab is down here: analysis needs no broker.

    probe = json.loads(paths["summary"].read_text()) if paths["summary"].exists() else None
    # A probe that failed still leaves its captures: they are analysed and
    # bundled (marked partial) for whoever looks next, and the run fails.
    probe_error = None
    if probe is None and not partial:
        probe_error = f"the probe producer exited with status {probe_rc} and no summary"
    elif probe is not None and probe["delivered"] == 0:
        probe_error = f"no message was delivered: {probe.get('first_error')}"
    elif probe is not None and probe["failed"]:
        probe_error = (f"{probe['failed']} of {probe['delivered'] + probe['failed']} messages were not delivered"
                       + (" and the probe gave up" if probe.get("gave_up") else "") + f": {probe.get('first_error')}")
    reasons = [stopped] if stopped else []
    if probe_error:
        reasons.append(probe_error)
        probe_error += "; librdkafka's last lines:\n" + _tail(paths["log"])
        log(probe_error)
    reasons += collector_gaps([st_strace, st_log])

    meta = {"librdkafka_version": confluent_kafka.libversion()[0], "tcp_retrans": probe_producer.retransmits(probe)}
    raw_inputs = [p for k, p in paths.items() if k in ("log", "strace", "stats") and p.exists()]
    raw_inputs += sorted(p for d in ("tcp_probe", "sockets") for p in (raw / d).glob("*") if p.is_file())
    manifest = {
        "argv": redact.argv(opts.argv),
        "mode": "lab" if lab_info else "brokers",
        "partial": bool(reasons),
        "partial_reasons": reasons,
        "producer_config": redact.config(config),
        "versions": {
            "librdkafka": confluent_kafka.libversion()[0],
            "confluent_kafka": confluent_kafka.__version__,
            "strace": st_strace.version,
            **({"tansu": lab_info["tansu_version"], "tls_terminator": lab_info["terminator_version"]} if lab_info else {}),
        },
        "lab": lab_info,
        # Child collectors report their status as dicts already.
        "collectors": [st_log.to_dict(), st_strace.to_dict()]
                      + [d for d in (path_status, sockets_status) if d is not None],
    }
    findings, out_path = finish(staging, raw_inputs, meta, spark_holder, warm, out,
                                redact.secret_values(config), manifest,
                                {"probe": probe, "partial": bool(reasons), "probe_error": probe_error}, log,
                                opts.pseudonymise)
    return TraceResult(findings, out_path, probe, bool(reasons), probe_error, interrupted=partial)


def _cap_bytes(mb: float | None) -> int | None:
    return None if mb is None or mb <= 0 else int(mb * guard.MIB)


def collector_gaps(statuses) -> list[str]:
    """A collector that could not run leaves the capture partial: in words."""
    return [f"{st.name} {st.state}: {st.reason}" for st in statuses
            if st is not None and st.state in ("skipped", "failed")]


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
        # Once, on the raw captures: tables and findings come from them and
        # so hold pseudonyms already (a second pass would map those again).
        from kdiag.bundle.pseudonym import Pseudonyms, pseudonymise_manifest

        with Pseudonyms.load_or_create(pseudonymise, outside=[staging]) as ps:
            ps.hostname(host["hostname"])
            ps.learn_obj(manifest)
            ps.learn_obj(extra)
            pseudo = {"map_id": ps.map_id, "keep_loopback": ps.keep_loopback, **ps.tree(staging / "raw")}
            manifest = pseudonymise_manifest({**manifest, "host": host}, ps)
            host = manifest.pop("host")
            extra = ps.obj(extra)
        log(f"hosts and addresses pseudonymised; the map is {pseudonymise} (keep it out of the bundle)")
    warm.join()
    if "error" in spark_holder:
        raise KdiagError(f"Spark did not start: {spark_holder['error']}")
    from kdiag.analysis.pipeline import analyse
    from kdiag.report.text import render

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
        "tables": {name: {"rows": n, "schema_version": bundle.TABLE_SCHEMA_VERSION} for name, n in parsed.rows.items()},
    }
    try:
        (staging / "findings.json").write_text(json.dumps(findings, indent=2, default=str) + "\n")
        (staging / "report.txt").write_text(render(findings, probe=extra.get("probe")))
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
            (staging / "findings.json").write_text(json.dumps(findings, indent=2, default=str) + "\n")
            (staging / "report.txt").write_text(render(findings, probe=extra.get("probe")))
        bundle.seal_dir(staging, manifest)
    except OSError as e:
        raise KdiagError(f"the output disk is full; the captures are in {staging} ({e.strerror or e})") from e
    return findings, staging


def _disk_full(e: OSError) -> bool:
    return e.errno in (errno.ENOSPC, errno.EDQUOT)


def seal(staging: Path, out: Path | None = None, log=lambda msg: None) -> Path:
    """``kdiag bundle seal``: the OUTPUT.partial/ directory a killed kdiag
    left becomes the bundle it would have written, marked partial. Secrets
    are redacted by pattern only: the values kdiag was told died with it."""
    staging = Path(staging).resolve()
    if not (staging / bundle.MANIFEST).is_file():
        raise UsageError(f"{staging}: not a directory kdiag trace left (no {bundle.MANIFEST})")
    if bundle.is_sealed_dir(staging):
        raise UsageError(f"{staging}: already sealed; kdiag replay reads it")
    name = staging.name
    out = (out or staging.with_name(name[:-len(".partial")] if name.endswith(".partial") else name + ".tar.gz"))
    if out.exists():
        raise UsageError(f"{out} exists; not overwriting it")
    man = bundle.manifest(staging)
    # Tables or findings half-written when kdiag died are not to be trusted.
    shutil.rmtree(staging / "tables", ignore_errors=True)
    for leftover in ("findings.json", "report.txt"):
        (staging / leftover).unlink(missing_ok=True)
    raw_inputs = [f for f in bundle.raw_files(staging) if f.parent.name in bundle.ANALYSED_SOURCES]
    reasons = list(man.get("partial_reasons") or [])
    reasons.append("sealed afterwards with kdiag bundle seal: secrets redacted by pattern only")
    manifest = {k: v for k, v in man.items() if k not in ("files", "sealed", "bundle_format")}
    manifest.update({"partial": True, "partial_reasons": reasons})
    holder, warm = start_spark()
    meta = {"librdkafka_version": (man.get("versions") or {}).get("librdkafka")}
    summary = staging / "raw" / "probe" / "summary.json"
    probe = None
    with contextlib.suppress(OSError, ValueError):
        probe = json.loads(summary.read_text())
    _, out_path = finish(staging, raw_inputs, meta, holder, warm, out.resolve(), [], manifest,
                         {"partial": True, "probe": probe}, log)
    return out_path


def start_spark(small: bool = False) -> tuple[dict, threading.Thread]:
    """``small``: the capture will be small (kdiag.analysis.spark.session)."""
    holder: dict = {}
    warm = threading.Thread(target=_warm_spark, args=(holder, small), daemon=True)
    warm.start()
    return holder, warm


def probe_targets(summary: dict, config: dict) -> list[tuple[str, int, str | None]]:
    """Every broker in the cluster metadata; the bootstrap list only when
    the metadata could not be had."""
    found = [(b["host"], int(b["port"]), f"{b['host']}:{b['port']}/{b['id']}")
             for b in summary.get("brokers") or [] if "host" in b]
    if found:
        return found
    out = []
    for hp in config.get("bootstrap.servers", "").split(","):
        host, _, port = hp.strip().rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port), None))
    return out


def _probe_path(summary: dict, config: dict, out_dir: Path, prefix: list[str], log):
    """The TCP path probe, run where the producer ran (its namespace)."""
    targets = probe_targets(summary, config)
    if not targets:
        return None
    log(f"probing the path to {len(targets)} broker(s): " + ", ".join(f"{h}:{p}" for h, p, _ in targets))
    spec = json.dumps([list(t) for t in targets])
    cmd = prefix + [*kdiag.python_m(c_tcp_probe), "--out", str(out_dir), "--targets", spec]
    res = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    status = status_from_output("tcp_probe", res.stdout, (res.stderr.strip().splitlines() or ["no output"])[-1])
    if status.get("state") not in ("ok",):
        log(f"path probe: {status.get('state')}: {status.get('reason')}")
    return status


def _probe_pid(proc: subprocess.Popen, timeout_s: float = 10.0) -> int | None:
    """The probe's own pid, below strace and ``ip netns exec``."""
    import psutil

    end = time.monotonic() + timeout_s
    while time.monotonic() < end and proc.poll() is None:
        try:
            for p in psutil.Process(proc.pid).children(recursive=True):
                cmd = p.cmdline()
                # strace's and ip's own command lines name the probe too: match
                # only the process that runs it ("python -m kdiag.capture.probe_producer").
                if cmd[1:3] == kdiag.python_m(probe_producer)[1:]:
                    return p.pid
        except psutil.Error:
            pass
        time.sleep(0.02)
    return None


def _run_probe(cmd: list[str], log_path: Path, timeout_s: float, log, env: dict, on_start=lambda pid: None,
               raw: Path | None = None, cap_bytes: int | None = None) -> tuple[str | None, int | None]:
    """Run the probe with its stderr (librdkafka's log) streaming to disk;
    ``on_start`` gets the probe's pid. A guard on ``raw`` stops it at
    ``cap_bytes`` or a nearly full disk. Returns (why it was stopped early
    or None, exit code)."""
    stopped = None
    with open(log_path, "wb") as err, contextlib.ExitStack() as stack:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
        g = None
        if raw is not None:
            g = stack.enter_context(guard.CaptureGuard(
                raw, cap_bytes, lambda why: (log(f"stopping the probe: {why}"), _interrupt(proc))))
        pid = _probe_pid(proc)
        if pid is not None:
            on_start(pid)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log(f"probe still running after {timeout_s:.0f}s: stopping it")
            stopped = f"the probe was stopped after --timeout {timeout_s:g}s"
            _stop(proc)
        except KeyboardInterrupt:
            log("interrupted: stopping the probe and keeping what was captured")
            stopped = "interrupted (Ctrl-C or SIGTERM)"
            _stop(proc)
        if g is not None and g.tripped:
            _stop(proc)
            stopped = g.reason
    return stopped, proc.returncode


def _interrupt(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)


def _stop(proc: subprocess.Popen) -> None:
    # Our own child (and its strace): SIGINT lets strace detach and flush.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _tail(path: Path, n: int = 5) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])

