"""kdiag's command line.

``main(argv, env)`` takes its streams from an ``Environment`` so tests drive
it in-process; the console script calls it with the real ones.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from kdiag import __version__
from kdiag.bundle import limits as bundle_limits
from kdiag.errors import InputError, KdiagError, UsageError
from kdiag.status import ExitStatus
from kdiag.visible import VisibleStream, visible, visible_lines

# Set before numpy and pyarrow are first imported (lazily, by the commands).
# numpy's OpenBLAS starts a thread a core that spins after its import;
# kdiag does no linear algebra, and the spinning took 1.7 % of both cores
# from a parse.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Arrow's default pool (mimalloc) keeps what a parsed chunk freed: the
# peak RSS of parsing 10 M strace lines was 464-537 MiB with it, 402-412
# MiB with the C library's malloc, in the same time (2026-11-27).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


class _Results(VisibleStream):
    """stdout: the results, shown as data. The first of them takes the
    progress display off stderr's terminal, which is the same screen: a
    bar redrawn after them glued itself to their first line, and its
    clearing at the end erased the lines above the cursor, theirs."""

    def write(self, text) -> int:
        from kdiag import progress

        progress.current().stop()
        return super().write(text)


@dataclass
class Environment:
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)

    def __post_init__(self) -> None:
        # Whatever a command writes for people shows outside text as data:
        # kdiag itself writes no escape code to stdout, so none may pass.
        # stderr stays raw for the progress display's own codes; notes go
        # through say.
        if not isinstance(self.stdout, _Results):
            self.stdout = _Results(self.stdout)

    def say(self, msg: str) -> None:
        """Notes for people: stderr, so stdout stays the result; above the
        progress display when one is shown."""
        from kdiag import progress

        line = visible_lines(f"kdiag: {msg}")
        if not progress.current().say(line):
            stream = VisibleStream(self.stderr)
            stream.write(line + "\n")
            stream.flush()


TRACE_EXAMPLES = """\
examples:
  kdiag trace
      the embedded default: a local lab broker behind TLS, kdiag's probe
      producer with Nagle on; prints where the time goes and writes a bundle
  kdiag trace -b broker1:9093 -X security.protocol=ssl -X ssl.ca.location=ca.pem \\
      --messages 200 --size 1024
      trace kdiag's probe producer against real brokers (kcat-style -X)
  kdiag trace -b broker1:9092 -F client.properties --topic latency-probe -o ticket-4711.tar.gz
  kdiag trace --json
      the findings as one JSON object (key "verdict": the main cause)
  kdiag trace --pid 4242 --duration 20
      attach to a running producer for 20 s; it keeps running afterwards
  kdiag trace -- python3 my_producer.py --rate 50
      run a producer under kdiag until it exits
  kdiag trace --pid 4242 --tracer strace
      attach with strace, which shows every call (auto takes kdiag's own
      BPF tracer where it was built: it stops no thread)
  kdiag trace -b 10.1.2.3:9093 -X security.protocol=ssl --pseudonymise ~/kdiag-hosts.json
      the bundle names no host: every address and hostname is a pseudonym,
      the same one in every run that uses that map
  kdiag trace --scenario network-latency
      the lab as client -> 15 ms delay line -> router -> broker in network
      namespaces; the findings name network_latency and show the path
"""
REPLAY_EXAMPLES = """\
examples:
  kdiag replay kdiag-20261122-101500.tar.gz
      the findings of a bundle, offline: no Kafka, no root, no strace
  kdiag replay rdkafka.log strace.txt --json
      raw captures made with other tools: a librdkafka debug log (stderr,
      Python logging, Go, .NET or Node format) and strace output (-f or -ff,
      -t/-tt/-ttt/-r, -T, -y/-yy), recognised by content
  kdiag replay out/strace.* rdkafka.log
      strace -ff per-thread files; each file's pid comes from its name
  kdiag replay stats.jsonl rdkafka.log
  kdiag replay --no-verify ticket-4711.tar.gz
      a bundle that fails kdiag bundle verify, analysed anyway; a warning
      names the files that do not match its manifest
  kdiag replay host-a.tar.gz host-b.tar.gz
      each bundle analysed and reported apart, then a line each: INPUT,
      REQUESTS, VERDICT (raw captures given beside them are one more run)
  kdiag replay --merge host-a.tar.gz host-b.tar.gz
      one analysis of all their requests, said so in the report
"""
REPORT_EXAMPLES = """\
examples:
  kdiag report kdiag-20261122-101500.tar.gz -o report.html
      the bundle's findings as one HTML page that opens offline: verdict,
      evidence and fix, a request's waterfall, latency over time and by
      cause, the client socket's state, the path; the captures are read
      again (the page a bundle carries is one a stranger may have written)
  kdiag report rdkafka.log strace.txt -o ticket-4711.html
      the same for raw captures, as kdiag replay reads them
"""
COMPARE_EXAMPLES = """\
examples:
  kdiag compare nagle-on.tar.gz nagle-off.tar.gz
      p50/p99 latency and msg/s before and after, each with a 95% bootstrap
      interval, the causes' shares, what the BEFORE finding predicted for its
      fix beside what AFTER measured, and whether the change fixed it
  kdiag compare before/ after/ --json
      directories of raw captures (read as kdiag replay reads them); one JSON
      object: "fixed" true/false/null, "sentence", "before", "after", "prediction"
  kdiag compare before.tar.gz after.tar.gz -o compare.html
      also the comparison as one HTML page that opens offline
"""
BUNDLE_EXAMPLES = """\
examples:
  kdiag bundle verify kdiag-20261122-101500.tar.gz
      every file against the manifest's size and SHA-256, none missing or
      unlisted, known format and table schema versions, no unsafe members;
      prints "PATH: ok (N files, M tables)" or "PATH: TAMPERED" and the problems
  kdiag bundle verify ticket-4711/ kdiag-*.tar.gz --json
      an unpacked bundle too; one JSON object, key "bundles"; exit 1 if any
      bundle has a problem
  kdiag bundle seal kdiag-20261122-101500.tar.gz.partial
      the directory a killed kdiag trace left: redacts it, parses, analyses
      and writes kdiag-20261122-101500.tar.gz, marked partial
"""
PARSE_EXAMPLES = """\
examples:
  kdiag parse rdkafka.log strace.txt -o tables/
      writes tables/rdkafka_events.parquet, tables/syscalls.parquet, ...
  python -c "import pyarrow.parquet as pq; print(pq.read_table('tables/syscalls.parquet'))"
"""
LAB_EXAMPLES = """\
examples:
  kdiag lab up        start Tansu behind stunnel4 on free loopback ports
  kdiag lab status    print the running lab (ports, pids, CA file) as JSON
  kdiag lab down      stop it
  kdiag lab matrix    trace every lab scenario once (about a minute on 2
                      cores); one row a cause: expected, found, P50(ms),
                      P99(ms), the tracer; exit 1 if any scenario gave
                      another cause
  kdiag lab matrix client-cpu throttled -o /tmp/matrix
                      only those, bundles kept in /tmp/matrix
  KDIAG_TRACER=strace kdiag lab matrix
                      the same under strace instead of bpfcalls
"""


class _Parser(argparse.ArgumentParser):
    """argparse writes its errors to the real stderr itself, quoting the
    argument it refuses (a file name, anyone's): shown as data too."""

    def _print_message(self, message: str, file=None) -> None:
        if message:
            try:
                VisibleStream(file or sys.stderr).write(message)
            except (AttributeError, OSError):   # as argparse's own: no stream, nothing to say
                pass


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    ap = _Parser(prog="kdiag", description="Where a Kafka producer's latency goes.",
                 epilog=TRACE_EXAMPLES + "\n" + REPLAY_EXAMPLES + "\n" + REPORT_EXAMPLES + "\n" + COMPARE_EXAMPLES,
                 formatter_class=fmt)
    ap.add_argument("--version", action="version", version=f"kdiag {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")

    t = sub.add_parser("trace", help="trace a producer and name the cause of its latency",
                       epilog=_scenario_list() + "\n" + TRACE_EXAMPLES, formatter_class=fmt)
    t.add_argument("-b", "--brokers", help="bootstrap brokers HOST:PORT[,...]; default: a local lab")
    t.add_argument("-X", dest="props", action="append", default=[], metavar="PROP=VALUE",
                   help="librdkafka property for the probe producer (repeatable)")
    t.add_argument("-F", dest="prop_file", metavar="FILE", help="librdkafka properties file (key=value)")
    t.add_argument("--topic", default="kdiag-probe", help="topic the probe writes to (default %(default)s)")
    t.add_argument("--messages", type=int, help=f"messages to produce (default {_messages_defaults()})")
    t.add_argument("--size", type=int, default=2048, help="value size in bytes (default %(default)s)")
    t.add_argument("--rate", type=float, metavar="N",
                   help="produce asynchronously at N messages a second (default: one at a time, waiting for each)")
    t.add_argument("--timeout", type=float, default=300.0, help="stop the probe after this many seconds")
    t.add_argument("-p", "--pid", type=int, help="attach to this running producer (it keeps running)")
    t.add_argument("--duration", type=float, metavar="S",
                   help="trace --pid or -- CMD for S seconds (default: 30 for --pid, until CMD exits)")
    t.add_argument("--tracer", choices=("auto", "strace", "bpfcalls", "bpftrace"),
                   help="syscall tracer (default: $KDIAG_TRACER, else auto: bpfcalls, kdiag's own BPF "
                        "tracer, where it was built and can load; else, for --pid and -- CMD, bpftrace when "
                        "strace would cost a busy producer a noticeable share of its throughput, or for a "
                        "command; strace otherwise and whenever neither can run; kdiag's probe runs under "
                        "bpfcalls or strace)")
    t.add_argument("--scenario", metavar="NAME",
                   help="a lab scenario instead of the default (scenarios: below); it does not go with -b")
    t.add_argument("--no-path-probe", action="store_true", help="skip the TCP path probe of the brokers")
    t.add_argument("-o", "--output", type=Path, help="bundle path (default ./kdiag-YYYYmmdd-HHMMSS.tar.gz); "
                   "the capture is written beside it, in OUTPUT.partial/, until the bundle is sealed")
    t.add_argument("--max-capture-mb", type=float, default=1024, metavar="MB",
                   help="stop capturing (keeping what was captured, bundle marked partial) once the raw "
                        "captures reach MB megabytes (default %(default)g; 0: no cap). Capture also stops "
                        "when the output disk is nearly full (under 5%% free, at most 64 MiB)")
    t.add_argument("--json", action="store_true", help="print the findings as one JSON object")
    t.add_argument("--pseudonymise", type=Path, metavar="MAP",
                   help="replace every IP address and hostname in the bundle with a consistent pseudonym; "
                        "MAP (created if absent, kept outside the bundle, mode 0600) holds the key and the "
                        "real -> pseudonym pairs, so the same host gets the same pseudonym in every run using it")

    r = sub.add_parser("replay", help="analyse a bundle or raw captures offline",
                       epilog=REPLAY_EXAMPLES, formatter_class=fmt)
    r.add_argument("paths", nargs="+", type=input_path, metavar="PATH",
                   help="a bundle (.tar.gz or unpacked), a raw capture, or a directory of raw captures")
    r.add_argument("--json", action="store_true",
                   help="print the findings as one JSON object; of several bundles reported apart, "
                        "one object whose 'apart' list holds each one's findings")

    rp = sub.add_parser("report", help="write the findings of a bundle or raw captures as an HTML page",
                        epilog=REPORT_EXAMPLES, formatter_class=fmt)
    rp.add_argument("paths", nargs="+", type=input_path, metavar="PATH", help="as for kdiag replay")
    rp.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    for reader in (r, rp):
        reader.add_argument("--merge", action="store_true",
                            help="several bundles: one analysis of all their requests, which the findings say, "
                                 "instead of " + ("one each" if reader is r else "refusing them"))

    cp = sub.add_parser("compare", help="whether a change fixed the latency: two runs side by side",
                        epilog=COMPARE_EXAMPLES, formatter_class=fmt)
    cp.add_argument("before", type=input_path, metavar="BEFORE", help="a bundle, a raw capture or a directory of them")
    cp.add_argument("after", type=input_path, metavar="AFTER", help="the same, after the change")
    cp.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    cp.add_argument("-o", "--output", type=Path, help="also write the comparison as an HTML page")
    # What replay reads, report and compare read the same way.
    for reader in (r, rp, cp):
        reader.add_argument("--no-verify", action="store_true",
                            help="analyse a bundle that fails verification (a warning names the files)")
        reader.add_argument("--no-warm", action="store_true",
                            help="analyse in this process (start Spark here) instead of in the warm analysis "
                                 "server that a small replay starts on first use and reuses; also KDIAG_WARM=0")
        bundle_limits.add_options(reader)

    b = sub.add_parser("bundle", help="check bundles against their manifests",
                       epilog=BUNDLE_EXAMPLES, formatter_class=fmt)
    b.add_argument("action", choices=["verify", "seal"],
                   help="verify: check each bundle against its manifest; seal: make the directory a killed "
                        "kdiag trace left (OUTPUT.partial/) into the bundle it would have written")
    b.add_argument("paths", nargs="+", type=input_path, metavar="PATH", help="a .tar.gz bundle or an unpacked one")
    b.add_argument("--json", action="store_true", help="the results as one JSON object")
    bundle_limits.add_options(b)

    p = sub.add_parser("parse", help="turn raw captures into Arrow tables (Parquet)",
                       epilog=PARSE_EXAMPLES, formatter_class=fmt)
    p.add_argument("paths", nargs="+", type=input_path, metavar="FILE", help="a raw capture")
    p.add_argument("-o", "--output", type=Path, required=True, help="directory for <table>.parquet")

    for spark_user in (t, r, rp, cp):
        spark_user.add_argument("-v", "--verbose", action="store_true",
                                help="let Spark's and the JVM's own output through (default: into "
                                     "~/.cache/kdiag/logs/); also KDIAG_VERBOSE=1")
    from kdiag.fleet import command as fleet

    fleet.add_parser(sub, fmt)
    lab = sub.add_parser("lab", help="start/stop the local lab broker", epilog=LAB_EXAMPLES, formatter_class=fmt)
    lab.add_argument("action", choices=["up", "down", "status", "matrix"],
                     help="up: start the lab; down: stop it; status: show it; matrix: trace every scenario")
    lab.add_argument("cases", nargs="*", metavar="CASE",
                     help="matrix: only these scenarios (default: all; kdiag trace --help lists them)")
    lab.add_argument("--messages", type=int, help="matrix: messages per case (default: each case's own)")
    lab.add_argument("-o", "--output", type=Path, help="matrix: directory for the bundles (default: a temporary one)")
    lab.add_argument("--json", action="store_true", help="matrix: the rows as one JSON object")
    return ap


def _scenario_list() -> str:
    """The --scenario names and their help lines, from the registry."""
    from kdiag.lab import scenarios

    width = max(len(n) for n in scenarios.names())
    return "scenarios (--scenario NAME):\n" + "".join(
        f"  {sc.name.ljust(width)}  {sc.help}\n" for sc in scenarios.all_scenarios())


def _messages_defaults() -> str:
    from kdiag.lab import scenarios

    default = scenarios.get(None).messages
    own = [f"{sc.messages} for --scenario {sc.name}" for sc in scenarios.all_scenarios() if sc.messages != default]
    return "; ".join([str(default), *own])


def _props(args) -> dict[str, str]:
    from kdiag.capture.trace import read_properties

    props = read_properties(args.prop_file) if args.prop_file else {}
    for p in args.props:
        if "=" not in p:
            raise UsageError(f"-X {visible(p)}: expected PROP=VALUE")
        k, _, v = p.partition("=")
        props[k.strip()] = v
    return props


def input_path(text: str) -> Path:
    """An input on this machine: a path, or a file:// URI of one. Another
    URI is refused whole; as a Path, "s3a://b/x" would be "s3a:/b/x", a
    file that is not there. So is a URI that names no file for certain:
    a query or fragment (a "?" or "#" in a name is %3F or %23), a "%" that
    starts no escape, a NUL byte (no path holds one)."""
    import urllib.parse

    def refused(why: str) -> argparse.ArgumentTypeError:
        return argparse.ArgumentTypeError(f"{visible(text)}: {why}")

    if "\0" in text:
        raise refused("a NUL byte; no path holds one")
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]+)://", text)
    if not m:
        return Path(text)
    elsewhere = "this command reads files here (a path, or file:///path): copy it here first"
    if m.group(1).lower() != "file":
        raise refused(f"not on this machine ({visible(m.group(1))}://); {elsewhere}")
    try:
        u = urllib.parse.urlsplit(text)
    except ValueError as e:   # "Invalid IPv6 URL": a "[" in the host
        raise refused(f"not a URI kdiag can read ({e})") from None
    if u.netloc not in ("", "localhost"):
        raise refused(f"not on this machine (host {visible(u.netloc)}); {elsewhere}")
    if u.query or u.fragment or text.endswith(("?", "#")):
        raise refused("a file URI names a file only, with no query or fragment (write ? and # in a name "
                      "as %3F and %23)")
    if re.search(r"%(?![0-9A-Fa-f]{2})", u.path):
        raise refused("a % that starts no %XX escape (write % in a name as %25)")
    raw = urllib.parse.unquote_to_bytes(u.path)
    if b"\0" in raw:
        raise refused("a NUL byte (%00); no path holds one")
    # The bytes the escapes give, as this system names files (a name that
    # is not UTF-8 keeps its bytes, as a name given as a path does).
    return Path(os.fsdecode(raw))


def _emit(env: Environment, findings: dict, as_json: bool, bundle: str | None = None) -> ExitStatus:
    if as_json:
        env.stdout.write(json.dumps(findings, default=str) + "\n")
    else:
        from kdiag.report.text import render

        env.stdout.write(render(findings, bundle=bundle, probe=findings.get("probe")))
    return ExitStatus.NO_DATA if findings.get("no_data") else ExitStatus.OK


def cmd_trace(args, env: Environment, argv: list[str], command: list[str]) -> ExitStatus:
    from kdiag.capture import trace

    if args.pid is not None or command:
        return cmd_trace_target(args, env, argv, command)
    if args.scenario and args.brokers:
        raise UsageError("--scenario runs its own lab; it does not go with -b")
    from kdiag.lab import scenarios

    # An unknown name is a usage error that lists the known ones.
    scenario = None if args.brokers else scenarios.get(args.scenario)
    if args.messages is None:
        args.messages = scenario.messages if scenario else scenarios.get(None).messages
    if args.rate is None and scenario is not None:
        args.rate = scenario.rate
    if args.messages < 1 or args.size < 0:
        raise UsageError("--messages must be >= 1 and --size >= 0")
    # The scenario's own producer properties come with its lab's config; -X wins.
    lab = None if args.brokers else functools.partial(scenarios.running, args.scenario)
    opts = trace.TraceOptions(brokers=args.brokers, props=_props(args), topic=args.topic,
                              messages=args.messages, size=args.size, out=args.output,
                              timeout_s=args.timeout, lab=lab, rate=args.rate,
                              path_probe=not args.no_path_probe, argv=["kdiag", *argv],
                              max_capture_mb=args.max_capture_mb, pseudonymise=args.pseudonymise,
                              tracer=args.tracer)
    with _sigterm_interrupts():
        res = trace.run(opts, log=env.say)
    return _trace_status(env, res, args.json)


def _trace_status(env: Environment, res, as_json: bool) -> ExitStatus:
    status = _emit(env, res.findings, as_json, str(res.bundle))
    if as_json:
        env.say(f"bundle: {res.bundle}")
    if res.error:
        env.say(f"error: {res.error.splitlines()[0]}")
        return ExitStatus.ERROR
    return ExitStatus.INTERRUPTED if res.interrupted and status == ExitStatus.OK else status


# Set by a Ctrl-C or SIGTERM. The KeyboardInterrupt it raises does not
# always reach _run as one: raised inside PySpark's collect, its cleanup
# (``getResult`` on a socket the interrupted reader left) raises a
# Py4JJavaError over it; the run still ends as interrupted.
_SIGNALLED = threading.Event()


def _interrupted(e: BaseException) -> bool:
    """A signal came, or ``e`` was raised while a KeyboardInterrupt was
    handled (a handler installed after ours, such as the one PySpark's
    SparkContext puts in the main thread, does not set the flag)."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return _SIGNALLED.is_set()


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM ends a trace as Ctrl-C does: detach, keep what was captured,
    write the bundle marked partial. Main thread only (tests may call main()
    from elsewhere, where signals cannot be handled)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old_int = signal.getsignal(signal.SIGINT)

    def on_signal(signum, frame):
        _SIGNALLED.set()
        # py4j logs the interrupt it is handed, traceback and all, on the
        # root logger; "kdiag: interrupted" is the one line to show.
        if "logging" in sys.modules:
            sys.modules["logging"].disable(sys.modules["logging"].CRITICAL)
        # Ctrl-C still does what the handler before ours did (PySpark's
        # cancels the running jobs), then interrupts.
        if signum == signal.SIGINT and callable(old_int) and old_int is not signal.default_int_handler:
            old_int(signum, frame)
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, on_signal)
    # A SIGINT the caller ignores (nohup, a shell's background job) stays ignored.
    ours = callable(old_int)
    if ours:
        signal.signal(signal.SIGINT, on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if ours:
            signal.signal(signal.SIGINT, old_int)
        if _SIGNALLED.is_set() and "logging" in sys.modules:
            sys.modules["logging"].disable(sys.modules["logging"].NOTSET)


@contextlib.contextmanager
def _private_files():
    """What kdiag (and its Spark JVM) writes while reading captures is
    readable by its owner only: tables and temporary files hold traffic."""
    import os

    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def cmd_trace_target(args, env: Environment, argv: list[str], command: list[str]) -> ExitStatus:
    from kdiag.capture import attach

    if args.pid is not None and command:
        raise UsageError("give --pid PID or -- CMD ARGS, not both")
    if args.brokers or args.props or args.prop_file or args.scenario:
        raise UsageError("-b/-X/-F/--scenario set up kdiag's probe producer; they do not go with --pid or -- CMD")
    opts = attach.TargetOptions(pid=args.pid, command=command, duration_s=args.duration, out=args.output,
                                argv=["kdiag", *argv], max_capture_mb=args.max_capture_mb,
                                pseudonymise=args.pseudonymise, tracer=args.tracer)
    with _sigterm_interrupts():
        res = attach.run(opts, log=env.say)
    return _trace_status(env, res, args.json)


def cmd_replay(args, env: Environment) -> ExitStatus:
    inputs = _checked_inputs(args, env)
    runs = [inputs.paths] if args.merge else inputs.apart()
    if len(runs) == 1:
        findings = _analysed(inputs, runs[0], env, args.no_warm, lambda findings, tables: findings)
        if args.merge:
            _say_merged(findings, inputs)
        return _emit(env, findings, args.json)
    # Each bundle is its own run (its own producer, host and probe): one
    # analysis of them all would give one verdict to requests that have
    # none in common. They share the warm server or this process's Spark.
    apart = []
    for run in runs:
        findings = _analysed(inputs, run, env, args.no_warm, lambda findings, tables: findings)
        findings["source"] = [str(p) for p in run]
        apart.append(findings)
    if args.json:
        env.stdout.write(json.dumps({"apart": apart}, default=str) + "\n")
    else:
        from kdiag.report.text import render, render_apart

        for i, findings in enumerate(apart, 1):
            env.stdout.write(f"=== {i} of {len(apart)}: {', '.join(map(visible, findings['source']))}\n")
            env.stdout.write(render(findings, probe=findings.get("probe")) + "\n")
        env.stdout.write(render_apart(apart))
    # A script reading the status learns that one of them held nothing.
    return ExitStatus.NO_DATA if any(f.get("no_data") for f in apart) else ExitStatus.OK


def _say_merged(findings: dict, inputs: "_Inputs") -> None:
    """--merge of several bundles: the findings say they are one analysis
    of several runs, and drop what belongs to one run only."""
    if len(inputs.apart()) < 2:
        return
    findings["merged"] = [str(p) for p in inputs.paths]
    said = [f"one analysis of the requests of {len(findings['merged'])} inputs together (--merge): "
            + ", ".join(findings["merged"]) + "; the verdict and percentiles are over all of them"]
    if inputs.probes > 1:
        said.append(f"{inputs.probes} of the bundles carry a probe of their own: no one probe line stands "
                    "for them all (replay them without --merge to see each)")
    if len(set(inputs.versions.values())) > 1:
        findings["librdkafka_version"] = None
        said.append("their librdkafka versions differ (" + ", ".join(
            f"{b}: {v or '?'}" for b, v in inputs.versions.items()) + "): no version-aware fix applies to all")
    findings["unknowns"] = said + list(findings.get("unknowns") or [])


def cmd_report(args, env: Environment) -> ExitStatus:
    from kdiag.report.html import render_html, sockets_of

    _page_path(args.output)
    source = ", ".join(p.name for p in args.paths)
    inputs = _checked_inputs(args, env)
    runs = inputs.apart()
    if len(runs) > 1 and not args.merge:
        raise UsageError(f"{len(runs)} runs given ({', '.join(visible(r[0]) for r in runs)}): a page is one run's; "
                         "write one page each, or --merge for one analysis of all their requests")

    def page(findings, tables):
        if args.merge:
            _say_merged(findings, inputs)
        return render_html(findings, sockets_of(tables), source=source)

    _write_page(args.output, _analysed(inputs, inputs.paths, env, args.no_warm, page))
    env.stdout.write(f"{visible(args.output)}\n")
    return ExitStatus.OK


def _page_path(out: Path | None) -> None:
    """Refused before any work: -o naming a directory."""
    if out is not None and out.is_dir():
        raise UsageError(f"-o {visible(out)}: a directory; give the HTML file to write")


def _write_page(out: Path, page: str) -> None:
    """The page whole, or none: written beside ``out`` and renamed over it,
    so a failure leaves no empty or half-written page. UTF-8, as the page
    declares, whatever the locale; a name that is not UTF-8 (a lone
    surrogate from surrogateescape) is written as the escape ``visible``
    shows for it, never raising UnicodeEncodeError."""
    import tempfile

    data = re.sub("[\ud800-\udfff]", lambda m: visible(m.group()), page).encode("utf-8")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, out)
    except OSError as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise KdiagError(f"cannot write {visible(out)}: {e.strerror or e}") from None


def cmd_compare(args, env: Environment) -> ExitStatus:
    import argparse

    from kdiag.report.compare import compare, render_text

    _page_path(args.output)
    sides = []
    for path in (args.before, args.after):
        one = argparse.Namespace(**{**vars(args), "paths": [path]})
        sides.append(_replayed(one, env, lambda findings, tables: findings))
    result = compare(*sides, names=(args.before.name, args.after.name))
    if args.output is not None:
        from kdiag.report.compare_page import render_compare_html

        _write_page(args.output, render_compare_html(result))
        env.say(f"wrote {visible(args.output)}")
    env.stdout.write(json.dumps(result, default=str) + "\n" if args.json else render_text(result))
    return ExitStatus.OK


def _replayed(args, env: Environment, then):
    """``then(findings, tables_dir)`` of the inputs that ``kdiag replay``
    takes, analysed as it analyses them, together; the tables are gone
    afterwards."""
    inputs = _checked_inputs(args, env)
    return _analysed(inputs, inputs.paths, env, args.no_warm, then)


@dataclass
class _Inputs:
    """What replay was given, readable and verified: the bundles among the
    paths, unpacked only when analysed."""
    paths: list[Path]
    bundles: list[Path]
    limits: object
    probes: int = 0                                       # bundles with a probe, once analysed
    versions: dict = field(default_factory=dict)          # bundle -> librdkafka version, once analysed

    def apart(self) -> list[list[Path]]:
        """The runs to analyse apart: each bundle alone, and the raw
        captures together (a log and an strace given side by side are one
        producer's), in the order given."""
        runs: list[list[Path]] = []
        raw: list[Path] = []
        for p in self.paths:
            if p in self.bundles:
                runs.append([p])
            else:
                if not raw:
                    runs.append(raw)
                raw.append(p)
        return runs


def _checked_inputs(args, env: Environment) -> _Inputs:
    """Every path readable and every bundle verified, before any is
    analysed: a bad one refuses the command, not its last part."""
    from kdiag.ingest.detect import readable_inputs

    from kdiag.bundle import archive as bundle

    paths = list(args.paths)
    readable_inputs(paths)
    # Any tar archive is taken for a bundle: none is a raw capture, and one
    # whose manifest is missing or not first is what verification reports.
    bundles = [p for p in paths if bundle.is_bundle(p) or bundle.is_archive(p)]
    limits = bundle.Limits.resolve(args)
    from kdiag import progress

    with progress.current().stage(f"verifying {len(bundles)} bundle(s)" if bundles else "reading"):
        checked = [bundle.verify(p, limits) for p in bundles]
    for v in checked:
        if v.unsealed:
            env.say(f"warning: {visible(v.path)} is unsealed (kdiag was stopped before it finished); its captures are "
                    "read as they are, unchecked")
    failed = [v for v in checked if not v.ok and not v.unsealed]
    if failed and not args.no_verify:
        raise InputError("\n".join(
            f"{visible(v.path)}: failed verification, not replaying it (--no-verify replays it anyway):\n"
            + "\n".join(f"  {pr}" for pr in v.problems) for v in failed))
    for v in failed:
        env.say(f"warning: {visible(v.path)} failed verification, replaying it anyway: "
                + "; ".join(map(str, v.problems)))
    return _Inputs(paths, bundles, limits)


def _analysed(inputs: _Inputs, paths: list[Path], env: Environment, no_warm: bool, then):
    """``then(findings, tables_dir)`` of ``paths`` (some of ``inputs``),
    analysed as one run."""
    import tempfile

    from kdiag.bundle import archive as bundle
    from kdiag.analysis.pipeline import analyse

    limits = inputs.limits
    meta: dict = {}
    raw: list[Path] = []
    probe = delivery = None
    probes = 0
    with contextlib.ExitStack() as cleanup:
        for p in paths:
            if p in inputs.bundles:
                from kdiag.capture.probe_producer import retransmits

                d = bundle.unpack(p, limits)
                if d != p:
                    cleanup.callback(shutil.rmtree, d, ignore_errors=True)
                man = bundle.manifest(d, limits)
                inputs.versions[str(p)] = man.get("versions", {}).get("librdkafka")
                raw += [f for f in bundle.raw_files(d) if f.parent.name in bundle.ANALYSED_SOURCES]
                summary = bundle.probe_summary(d, limits)
                if summary is not None:
                    probes += 1
                    probe = summary
                    meta["tcp_retrans"] = retransmits(probe)
                    delivery = bundle.delivery_ms(d / "raw" / "probe", limits)
            elif p.is_dir():
                raw += sorted(f for f in p.rglob("*") if f.is_file())
            else:
                raw.append(p)
        inputs.probes = probes
        if probes > 1:   # merged: each probe is its own run's (see _say_merged)
            probe = delivery = None
            meta.pop("tcp_retrans")
        # Bundles that disagree on the version leave it to librdkafka's own
        # init lines (merged, they are said to differ: see _say_merged).
        stated = {inputs.versions[str(p)] for p in paths if str(p) in inputs.versions}
        if len(stated) == 1:
            meta["librdkafka_version"] = stated.pop()
        tmp = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="kdiag-replay-"))
        try:
            from kdiag.analysis.warm import wanted

            warm = {"warm": True, "say": env.say} if wanted(no_warm) else {}
            findings, _ = analyse(raw, Path(tmp) / "tables", meta, **warm)
        except Exception as e:
            from kdiag.analysis.spark import failure
            from kdiag.ingest.parquet_sink import reason

            why = None if _interrupted(e) else failure(e)
            if why is not None:
                raise KdiagError(why) from None
            if not isinstance(e, OSError):
                raise
            raise KdiagError(f"cannot write the tables to {tmp}: {reason(e)} "
                             "(set TMPDIR to a directory with room)") from None
        findings["probe"] = probe
        findings["delivery_ms"] = delivery
        return then(findings, Path(tmp) / "tables")


def cmd_bundle(args, env: Environment) -> ExitStatus:
    from kdiag.bundle import archive as bundle

    for p in args.paths:
        if not p.exists():
            raise UsageError(f"{visible(p)}: no such file or directory")
    limits = bundle.Limits.resolve(args)
    if args.action == "seal":
        from kdiag.capture.trace import seal

        for p in args.paths:
            if p.is_dir():
                # what seal reads and rewrites must be the directory's own
                # files, never one a link points at
                bundle.refuse_links(p, limits)
                bundle.manifest(p, limits)
            out = seal(p, log=env.say)
            env.stdout.write(f"{visible(out)}\n")
        return ExitStatus.OK
    results = [bundle.verify(p, limits) for p in args.paths]
    if args.json:
        env.stdout.write(json.dumps({"bundles": [r.to_dict() for r in results]}) + "\n")
    else:
        for r in results:
            env.stdout.write(r.headline() + "\n" + "".join(f"  {pr}\n" for pr in r.problems))
    return ExitStatus.OK if all(r.ok for r in results) else ExitStatus.ERROR


def cmd_parse(args, env: Environment) -> ExitStatus:
    from kdiag.ingest.detect import readable_inputs
    from kdiag.ingest.parquet_sink import reason
    from kdiag.ingest.tables import parse_paths

    readable_inputs(list(args.paths))
    try:
        parsed = parse_paths(list(args.paths), args.output)
    except OSError as e:
        raise KdiagError(f"cannot write the tables to {visible(args.output)}: {reason(e)} "
                         "(give -o a directory with room that kdiag may write)") from None
    for f in parsed.files:
        c = f.get("counts") or {}
        env.stdout.write(f"{visible(f['path'])}: {f['kind'] or 'not recognised'}; lines {c.get('lines', 0)}, "
                         f"parsed {c.get('parsed', 0)}, skipped {c.get('skipped_total', 0)}"
                         + (f" ({f['error']})" if f.get("error") else "") + "\n")
    for name, path in sorted(parsed.paths.items()):
        env.stdout.write(f"{visible(path)}: {parsed.rows[name]} rows\n")
    written = parsed.paths
    return ExitStatus.OK if written else ExitStatus.NO_DATA


def cmd_lab(args, env: Environment) -> ExitStatus:
    from kdiag.lab import broker as lab

    if args.action == "matrix":
        return cmd_matrix(args, env)
    if args.cases or args.messages or args.output or args.json:
        raise UsageError("CASE, --messages, -o and --json go with kdiag lab matrix only")
    if args.action == "up":
        the_lab = lab.up()
        env.stdout.write(json.dumps(the_lab.to_dict(), indent=2) + "\n")
    elif args.action == "down":
        env.stdout.write("stopped\n" if lab.down() else "no lab running\n")
    else:
        the_lab = lab.status()
        if the_lab is None:
            env.stdout.write("no lab running\n")
            return ExitStatus.NO_DATA
        env.stdout.write(json.dumps(the_lab.to_dict(), indent=2) + "\n")
    return ExitStatus.OK


def cmd_matrix(args, env: Environment) -> ExitStatus:
    import tempfile

    from kdiag.lab import matrix

    cases = matrix.select(args.cases)
    if args.messages is not None and args.messages < 1:
        raise UsageError("--messages must be >= 1")
    with contextlib.ExitStack() as stack:
        out = args.output or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kdiag-matrix-")))
        out.mkdir(parents=True, exist_ok=True)
        rows = []
        with _sigterm_interrupts():
            for case in cases:
                env.say(f"case {case.name}: expecting {case.expected}")
                rows.append(matrix.run_case(case, out, args.messages, env.say))
    if args.json:
        env.stdout.write(json.dumps({"rows": [r.to_dict() for r in rows]}) + "\n")
    else:
        env.stdout.write(matrix.table(rows))
    return ExitStatus.OK if all(r.ok for r in rows) else ExitStatus.ERROR


def main(argv: list[str] | None = None, env: Environment | None = None) -> int:
    env = env or Environment()
    argv = list(sys.argv[1:] if argv is None else argv)
    # "kdiag trace [options] -- CMD ARGS": what follows "--" is the producer's
    # own command line, never kdiag's options.
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    ap = _parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) and ExitStatus.USAGE
    if args.command is None:
        ap.print_help(env.stdout)
        return ExitStatus.USAGE
    if getattr(args, "verbose", False):
        os.environ["KDIAG_VERBOSE"] = "1"   # read where the JVM starts (analysis/jvm.py)
    from kdiag import progress

    # The JVM's own output (--verbose) would tear a redrawn line.
    shown = progress.wanted(env.stderr, getattr(args, "json", False)) and not getattr(args, "verbose", False)
    with progress.shown(env.stderr, shown and args.command in ("trace", "replay", "report", "compare", "parse")):
        return _run(args, env, argv, command)


def _run(args, env: Environment, argv: list[str], command: list[str]) -> int:
    _SIGNALLED.clear()
    try:
        if command and args.command != "trace":
            raise UsageError("'-- CMD' goes with kdiag trace only")
        if args.command == "trace":
            return cmd_trace(args, env, argv, command)
        if args.command == "replay":
            # SIGTERM as Ctrl-C: the temporary directories go, and the exit
            # status is the documented 130.
            with _sigterm_interrupts(), _private_files():
                return cmd_replay(args, env)
        if args.command == "report":
            with _sigterm_interrupts(), _private_files():
                return cmd_report(args, env)
        if args.command == "compare":
            with _sigterm_interrupts(), _private_files():
                return cmd_compare(args, env)
        if args.command == "parse":
            with _sigterm_interrupts(), _private_files():
                return cmd_parse(args, env)
        if args.command == "bundle":
            return cmd_bundle(args, env)
        if args.command == "fleet":
            from kdiag.fleet import command as fleet

            with _sigterm_interrupts(), _private_files():
                return fleet.run(args, env)
        return cmd_lab(args, env)
    except KeyboardInterrupt:
        env.say("interrupted")
        return ExitStatus.INTERRUPTED
    except Exception as e:
        if _interrupted(e):   # what the interrupted call raised instead
            env.say("interrupted")
            return ExitStatus.INTERRUPTED
        if isinstance(e, UsageError):
            env.say(f"error: {e}")
            return ExitStatus.USAGE
        if isinstance(e, KdiagError):
            env.say(f"error: {e}")
            return ExitStatus.ERROR
        raise


if __name__ == "__main__":
    sys.exit(main())
