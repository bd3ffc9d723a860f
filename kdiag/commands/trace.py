"""``kdiag trace``: trace a producer (kdiag's probe, a running one, or a
command) and name the cause of its latency; write a bundle."""
from __future__ import annotations

import functools
from pathlib import Path

from kdiag.commands.options import add_verbose
from kdiag.errors import UsageError
from kdiag.interrupts import sigterm_interrupts
from kdiag.replay import emit
from kdiag.status import ExitStatus
from kdiag.visible import visible

NAME = "trace"
HELP = "trace a producer and name the cause of its latency"
PROGRESS = True
GUARDED = False   # SIGTERM is set up around the trace itself; its umask is the bundle's own


def add_arguments(parser) -> None:
    from kdiag.capture.attach import TRACERS

    parser.epilog = _scenario_list() + "\n" + parser.epilog
    probe = parser.add_argument_group("kdiag's probe producer")
    probe.add_argument("-b", "--brokers", help="bootstrap brokers HOST:PORT[,...]; default: a local lab")
    probe.add_argument("-X", dest="props", action="append", default=[], metavar="PROP=VALUE",
                       help="librdkafka property for the probe producer (repeatable)")
    probe.add_argument("-F", dest="prop_file", metavar="FILE", help="librdkafka properties file (key=value)")
    probe.add_argument("--topic", default="kdiag-probe", help="topic the probe writes to (default %(default)s)")
    probe.add_argument("--messages", type=int, help=f"messages to produce (default {_messages_defaults()})")
    probe.add_argument("--size", type=int, default=2048, help="value size in bytes (default %(default)s)")
    probe.add_argument("--rate", type=float, metavar="N",
                       help="produce asynchronously at N messages a second (default: one at a time, waiting "
                            "for each)")
    probe.add_argument("--timeout", type=float, default=300.0, help="stop the probe after this many seconds")
    probe.add_argument("--scenario", metavar="NAME",
                       help="a lab scenario instead of the default (scenarios: below); it does not go with -b")
    probe.add_argument("--no-path-probe", action="store_true", help="skip the TCP path probe of the brokers")
    yours = parser.add_argument_group("a producer of yours (--pid PID, or -- CMD ARGS after the options)")
    yours.add_argument("-p", "--pid", type=int, help="attach to this running producer (it keeps running)")
    yours.add_argument("--duration", type=float, metavar="S",
                       help="trace --pid or -- CMD for S seconds (default: 30 for --pid, until CMD exits)")
    out = parser.add_argument_group("tracing and output")
    out.add_argument("--tracer", choices=TRACERS,
                     help="syscall tracer (default: $KDIAG_TRACER, else auto: bpfcalls, kdiag's own BPF "
                          "tracer, where it was built and can load; else, for --pid and -- CMD, bpftrace when "
                          "strace would cost a busy producer a noticeable share of its throughput, or for a "
                          "command; strace otherwise and whenever neither can run; kdiag's probe runs under "
                          "bpfcalls or strace)")
    out.add_argument("-o", "--output", type=Path, help="bundle path (default ./kdiag-YYYYmmdd-HHMMSS.tar.gz); "
                     "the capture is written beside it, in OUTPUT.partial/, until the bundle is sealed")
    out.add_argument("--max-capture-mb", type=float, default=1024, metavar="MB",
                     help="stop capturing (keeping what was captured, bundle marked partial) once the raw "
                          "captures reach MB megabytes (default %(default)g; 0: no cap). Capture also stops "
                          "when the output disk is nearly full (under 5%% free, at most 64 MiB)")
    out.add_argument("--json", action="store_true", help="print the findings as one JSON object")
    out.add_argument("--pseudonymise", type=Path, metavar="MAP",
                     help="replace every IP address and hostname in the bundle with a consistent pseudonym; "
                          "MAP (created if absent, kept outside the bundle, mode 0600) holds the key and the "
                          "real -> pseudonym pairs, so the same host gets the same pseudonym in every run "
                          "using it")
    add_verbose(out)


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


def run(args, env) -> ExitStatus:
    """``args.argv``: kdiag's own arguments, for the manifest;
    ``args.producer``: the producer's command line after "--", if any."""
    from kdiag.capture import trace

    if args.pid is not None or args.producer:
        return _run_target(args, env)
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
    if scenario is not None and scenario.client is not None:
        return _run_client(args, env, scenario)
    # The scenario's own producer properties come with its lab's config; -X wins.
    lab = None if args.brokers else functools.partial(scenarios.running, args.scenario)
    opts = trace.TraceOptions(brokers=args.brokers, props=_props(args), topic=args.topic,
                              messages=args.messages, size=args.size, out=args.output,
                              timeout_s=args.timeout, lab=lab, rate=args.rate,
                              path_probe=not args.no_path_probe, argv=["kdiag", *args.argv],
                              max_capture_mb=args.max_capture_mb, pseudonymise=args.pseudonymise,
                              tracer=args.tracer)
    with sigterm_interrupts():
        res = trace.run(opts, log=env.say)
    return _status(env, res, args.json)


def _run_target(args, env) -> ExitStatus:
    from kdiag.capture import attach

    if args.pid is not None and args.producer:
        raise UsageError("give --pid PID or -- CMD ARGS, not both")
    if args.brokers or args.props or args.prop_file or args.scenario:
        raise UsageError("-b/-X/-F/--scenario set up kdiag's probe producer; they do not go with --pid or -- CMD")
    opts = attach.TargetOptions(pid=args.pid, command=args.producer, duration_s=args.duration, out=args.output,
                                argv=["kdiag", *args.argv], max_capture_mb=args.max_capture_mb,
                                pseudonymise=args.pseudonymise, tracer=args.tracer)
    with sigterm_interrupts():
        res = attach.run(opts, log=env.say)
    return _status(env, res, args.json)


def _run_client(args, env, scenario) -> ExitStatus:
    """A scenario whose producer is another library: its program under
    the tracer as -- CMD, against the scenario's lab."""
    from kdiag.capture import lab_client

    if args.props or args.prop_file or args.rate is not None:
        raise UsageError(f"--scenario {scenario.name} runs {scenario.client} with its defaults, one message at a "
                         f"time: -X/-F/--rate do not go with it")
    with sigterm_interrupts():
        res = lab_client.run(scenario, args.output, args.messages, ["kdiag", *args.argv], log=env.say,
                             tracer=args.tracer)
    return _status(env, res, args.json)


def _status(env, res, as_json: bool) -> ExitStatus:
    status = emit(env, res.findings, as_json, str(res.bundle))
    if as_json:
        env.say(f"bundle: {res.bundle}")
    if res.error:
        env.say(f"error: {res.error.splitlines()[0]}")
        return ExitStatus.ERROR
    return ExitStatus.INTERRUPTED if res.interrupted and status == ExitStatus.OK else status
