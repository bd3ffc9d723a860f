"""The lab scenarios: one module each, one ordered list naming them.

A scenario module declares, as module-level data, everything about it:

    NAME             what ``kdiag trace --scenario`` and ``kdiag lab matrix`` call it
    HELP             one line for ``kdiag trace --help``
    CAUSE            the cause ``kdiag lab matrix`` expects kdiag to find
    SETUP            the matrix table's words for what it sets up
    MESSAGES         ``kdiag trace``'s default message count for it
    MATRIX_MESSAGES  the matrix's message count, or None for MESSAGES
    PROPS            producer properties it runs with (``-X`` still wins)
    RATE             messages a second for an asynchronous probe, or None
    LAB              what it needs of the lab, as data (``kdiag.lab.variants``):
                     ``Loopback(...)`` (terminator, proxy delay or quota,
                     nodelay, CPU limit, the relay's first-flight hold or
                     outage, a topic created late) or ``NetworkPath(...)``
                     (the link, a slow resolver, SYNs dropped)

and may declare

    CLIENT           the producer library the run drives instead of kdiag's
                     probe (a name of ``kdiag.lab.clients``): its program is
                     traced as ``kdiag trace -- CMD`` traces a user's
                     (kdiag.capture.lab_client), with no librdkafka log

Adding a scenario is one new module here plus its name in ``ORDER``.
``kdiag trace``, ``kdiag lab matrix``, the command line's help and
docs/lab.md read this registry; ``running`` hands a scenario's ``LAB`` to
the loopback lab (``kdiag.lab.broker``) or the network lab
(``kdiag.lab.network``), which start what it declares and import nothing
from here. Importing the registry stays cheap: the labs are imported only
by ``running``.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

# Re-exported: scenario modules declare their LAB with these.
from kdiag.lab.variants import Loopback, NetworkPath  # noqa: F401

# The order of the matrix table and of the help; module names in this package.
ORDER = (
    "nagle_on",
    "nagle_off",
    "nagle_proxy",
    "proxy_nodelay",
    "slow_broker",
    "throttled",
    "tls_slow",
    "broker_down",
    "metadata_wait",
    "client_queueing",
    "client_cpu",
    "network_latency",
    "packet_loss",
    "dns_slow",
    "connect_slow",
    "clean",
    "kafka_python_plain",
    "kafka_python_tls",
    "aiokafka_plain",
    "aiokafka_tls",
    "kafkajs_plain",
    "kafkajs_tls",
)
# ``kdiag trace`` without --scenario or -b: the embedded default lab.
DEFAULT = "nagle-on"
REQUIRED = ("NAME", "HELP", "CAUSE", "SETUP", "MESSAGES", "MATRIX_MESSAGES", "PROPS", "RATE", "LAB")


class ScenarioError(Exception):
    """A scenario module that does not declare what the registry needs."""


@dataclass(frozen=True)
class Scenario:
    name: str
    help: str
    cause: str
    setup: str
    messages: int
    matrix_messages: int | None
    props: Mapping[str, str]
    rate: float | None
    lab: Loopback | NetworkPath
    module: str
    client: str | None = None


@dataclass
class LabTarget:
    """A started lab, as ``kdiag trace`` uses it."""

    config: dict[str, str]    # producer config for the lab's brokers, with the scenario's own properties
    info: dict                # what the manifest records as "lab"
    exec_prefix: list[str]    # runs the producer and the path probes in the lab's client namespace
    cgroup: Path | None       # the cgroup the probe producer joins, else None
    # Called as the producer starts: begins the faults the lab declares to
    # start with it (a relay's outage, a topic created late).
    start: Callable[[], None] = lambda: None


def from_module(module: types.ModuleType) -> Scenario:
    """The scenario a module declares; ScenarioError names what it lacks."""
    missing = [a for a in REQUIRED if not hasattr(module, a)]
    if missing:
        raise ScenarioError(f"scenario module {module.__name__} does not declare {', '.join(missing)}")
    lab = module.LAB
    if not isinstance(lab, (Loopback, NetworkPath)):
        raise ScenarioError(f"{module.__name__}.LAB is {lab!r}, not a Loopback or a NetworkPath")
    problem = lab.problem() if isinstance(lab, Loopback) else None
    if problem:
        raise ScenarioError(f"{module.__name__}.LAB: {problem}")
    if not (isinstance(module.HELP, str) and module.HELP and "\n" not in module.HELP):
        raise ScenarioError(f"{module.__name__}.HELP must be one non-empty line")
    client = getattr(module, "CLIENT", None)
    if client is not None:
        from kdiag.lab import clients

        if client not in clients.names():
            raise ScenarioError(f"{module.__name__}.CLIENT {client!r} is not one of {', '.join(clients.names())}")
        if module.PROPS or module.RATE is not None or not isinstance(lab, Loopback):
            raise ScenarioError(f"{module.__name__}: a CLIENT runs with its library's defaults, one message at "
                                f"a time, on the loopback lab (no PROPS, no RATE)")
    return Scenario(name=module.NAME, help=module.HELP, cause=module.CAUSE, setup=module.SETUP,
                    messages=int(module.MESSAGES), matrix_messages=module.MATRIX_MESSAGES,
                    props=types.MappingProxyType(dict(module.PROPS)), rate=module.RATE, lab=lab,
                    module=module.__name__, client=client)


@functools.cache
def all_scenarios() -> tuple[Scenario, ...]:
    """Every scenario, in ``ORDER``."""
    found = tuple(from_module(importlib.import_module(f"{__name__}.{m}")) for m in ORDER)
    names = [s.name for s in found]
    if len(set(names)) != len(names):
        raise ScenarioError(f"scenario names repeat: {', '.join(names)}")
    return found


def names() -> list[str]:
    return [s.name for s in all_scenarios()]


def find(name: str) -> Scenario | None:
    return next((s for s in all_scenarios() if s.name == name), None)


def get(name: str | None) -> Scenario:
    """The scenario called name (None: the default); an unknown name is a
    usage error that lists the known ones."""
    found = find(DEFAULT if name is None else name)
    if found is None:
        from kdiag.errors import UsageError

        raise UsageError(f"unknown scenario {name!r}; known: {', '.join(names())}")
    return found


def network_paths() -> dict[str, NetworkPath]:
    """Each network lab scenario's path, by scenario name."""
    return {s.name: s.lab for s in all_scenarios() if isinstance(s.lab, NetworkPath)}


def markdown_table() -> str:
    """docs/lab.md's scenario table: every scenario in ``ORDER``, its help
    line and the cause the matrix expects."""
    rows = ["| scenario | what it runs | expected cause |", "|---|---|---|"]
    rows += [f"| `{s.name}` | {s.help} | `{s.cause}` |" for s in all_scenarios()]
    return "\n".join(rows) + "\n"


def running(name: str | None, topic: str, log: Callable[[str], None]) -> contextlib.AbstractContextManager[LabTarget]:
    """The lab scenario ``name`` (None: the embedded default) for one run,
    with ``topic`` created; stopped on leaving the block."""
    sc = get(name)
    if isinstance(sc.lab, NetworkPath):
        return _network(sc, topic, log)
    return _loopback(sc, topic, log, default=name is None or sc.name == DEFAULT)


@contextlib.contextmanager
def _loopback(sc: Scenario, topic: str, log, default: bool) -> Iterator[LabTarget]:
    from kdiag.lab import broker

    if default:
        log("starting the lab: Tansu behind a TLS terminator on loopback")
    else:
        log(f"starting the lab, scenario {sc.name}: Tansu behind {sc.lab.variant}")
    with contextlib.ExitStack() as stack:
        the_lab = stack.enter_context(broker.running(topics=(topic,), lab=sc.lab))
        info, cgroup = the_lab.to_dict(), None
        cores = sc.lab.cpu_limit_cores
        if cores is not None:
            from kdiag.lab import cpulimit

            cgroup = stack.enter_context(cpulimit.limited(cores))
            stack.enter_context(cpulimit.busy(cgroup))
            log(f"the probe and a busy neighbour run in {cgroup}, limited to {cores:g} of a "
                f"core per {cpulimit.DEFAULT_PERIOD_US // 1000} ms")
            info = {**info, "cpu_limit_cores": cores, "cgroup": str(cgroup)}
        start = stack.enter_context(broker.faults(the_lab, (topic,), log))
        yield LabTarget({**the_lab.client_config(), **sc.props}, info, [], cgroup, start)


@contextlib.contextmanager
def _network(sc: Scenario, topic: str, log) -> Iterator[LabTarget]:
    from kdiag.lab import network

    log(f"starting the network lab, scenario {sc.name}: client, delay line, router, "
        f"Tansu behind TLS, each in its own network namespace")
    with network.running(sc.name, sc.lab, topics=(topic,)) as nl:
        yield LabTarget({**nl.client_config(), **sc.props}, nl.to_dict(), nl.exec_prefix("client"), None)
