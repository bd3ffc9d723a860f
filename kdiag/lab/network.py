"""The lab broker at the end of a real network path, in network namespaces.

    client ns ──veth── link ns ──veth── router ns ──veth── broker ns
    10.201.1.2         delay line       10.201.1.1          10.201.2.2
                       (L2, no IP)      10.201.2.1          stunnel4 :9093 -> Tansu 127.0.0.1:9092

The link namespace runs `kdiag.lab.delayline`, which forwards Ethernet frames
between its two veths after a delay and drops some of them: a long cable,
invisible at L2. The router forwards in the kernel, so it decrements the TTL
and answers expired probes with ICMP time-exceeded; traceroute sees it as
hop 1 and the broker as hop 2. The broker namespace runs the same Tansu and
stunnel4 pair as `kdiag.lab.broker`, with Tansu advertising the TLS address, so
every client connection crosses the whole path.

A scenario may also stand in the way of a new connection. With a DNS delay,
the router runs `kdiag.lab.resolver` on 10.201.1.1:53 for the name
broker.kdiag.lab, the client namespace gets its own resolv.conf
(/etc/netns/<ns>/resolv.conf, which `ip netns exec` mounts over
/etc/resolv.conf) and the client config bootstraps by that name. With SYN
drops, nftables in the broker namespace drops the first SYNs to the TLS port
once the lab is ready.

The kernel here has no netem qdisc, hence the user-space delay line; it
needs GRO/GSO/TSO and TX checksum offload off on the veths that feed it.

Each lab has its own prefix ("kd" + 6 hex digits) for its namespaces and
interfaces, so labs coexist. Its state lives in /tmp/kdiag-netlab/<prefix>/
(state.json, logs, certificate, the delay line's counters). The processes
get SIGTERM from the kernel if the thread that started them dies; namespaces
outlive a killed owner, so every start first removes the labs whose recorded
owner is gone.

The namespaces and veths themselves are built by kdiag.lab.netns; the link
is what the scenario declares (``kdiag.lab.variants.NetworkPath``), passed
to ``running`` with its name: this module never looks a scenario up.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import psutil

import kdiag
from kdiag.lab import delayline, processes, resolver, state_file, tls
from kdiag.lab import loopback as kl
from kdiag.lab.broker_start import ensure_topics
from kdiag.lab.netns import (  # noqa: F401 (CLIENT_ADDR...: this module's API too)
    BROKER_ADDR,
    CLIENT_ADDR,
    ROLES,
    ROUTER_ADDRS,
    NetLabError,
    build_network,
    call_in_netns,
    delete_netns,
    ifnames,
    list_netns,
    netns_etc,
    netns_pids,
    remove_netns_etc,
    run,
    tls_handshake,
    write_resolv_conf,
)
from kdiag.lab.variants import NetworkPath

STATE_ROOT = Path("/tmp/kdiag-netlab")
PREFIX_RE = re.compile(r"kd[0-9a-f]{6}")
NS_RE = re.compile(r"(kd[0-9a-f]{6})-(client|link|router|broker)")
TLS_PORT = 9093
BROKER_PORT = 9092

READY_TIMEOUT = 30.0
DELAYLINE_LOG = "delayline.log"
DELAYLINE_STATS = "delayline.json"
RESOLVER_LOG = "resolver.log"
RESOLVER_READY = "resolver.ready"
SYN_DROPS_RULES = "syn_drops.nft"
STATE_FORMAT = 1
# The name the client knows the broker by when the scenario has a resolver,
# and where that resolver listens: the router's side facing the client.
BROKER_HOSTNAME = "broker.kdiag.lab"
RESOLVER_ADDR = ROUTER_ADDRS[0]
# The order processes stop in. The terminator first: once it has closed its
# connections to Tansu, Tansu's SIGTERM no longer hangs.
STOP_ORDER = ("terminator", "tansu", "resolver", "delayline")


@dataclass(frozen=True)
class Scenario:
    name: str
    delay_ms: float  # one way, both directions
    loss_pct: float  # per frame, each direction
    jitter_ms: float = 0.0
    description: str = ""
    dns_delay_ms: float | None = None
    syn_drops: int = 0


@dataclass(frozen=True)
class NetLab:
    scenario: Scenario
    prefix: str
    namespaces: dict[str, str]
    client_addr: str
    router_addrs: tuple[str, ...]
    broker_addr: str
    tls_port: int
    broker_port: int
    ca_path: Path
    state_dir: Path
    tansu_version: str
    terminator_version: str
    pids: dict[str, int] = dataclasses.field(default_factory=dict)  # tansu, terminator, delayline, resolver
    seed: int | None = None
    hostname: str | None = None   # the broker's name in the client's bootstrap list, if it has one

    @property
    def bootstrap(self) -> str:
        return f"{self.hostname or self.broker_addr}:{self.tls_port}"

    @property
    def link_stats_path(self) -> Path:
        return self.state_dir / DELAYLINE_STATS

    def client_config(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "ssl",
            "ssl.ca.location": str(self.ca_path),
        }

    def exec_prefix(self, role: str = "client") -> list[str]:
        try:
            return ["ip", "netns", "exec", self.namespaces[role]]
        except KeyError:
            raise NetLabError(f"no namespace for role {role!r}; roles: {', '.join(self.namespaces)}") from None

    def link_stats(self) -> dict:
        """The delay line's counters as it last wrote them (at most half a
        second old while frames flow)."""
        try:
            return json.loads(self.link_stats_path.read_text())
        except (OSError, ValueError) as e:
            raise NetLabError(f"cannot read the delay line's counters: {e}") from None

    def to_dict(self) -> dict:
        return {
            "scenario": dataclasses.asdict(self.scenario),
            "prefix": self.prefix,
            "namespaces": dict(self.namespaces),
            "client_addr": self.client_addr,
            "router_addrs": list(self.router_addrs),
            "broker_addr": self.broker_addr,
            "tls_port": self.tls_port,
            "broker_port": self.broker_port,
            "bootstrap": self.bootstrap,
            "ca_path": str(self.ca_path),
            "state_dir": str(self.state_dir),
            "tansu_version": self.tansu_version,
            "terminator_version": self.terminator_version,
            "terminator": kl.TERMINATOR,
            "pids": dict(self.pids),
            "seed": self.seed,
            "hostname": self.hostname,
        }


def get_scenario(name: str, path: NetworkPath) -> Scenario:
    """The lab's record of a scenario: its name and the link it declares."""
    if not isinstance(path, NetworkPath):
        raise NetLabError(f"scenario {name!r}: the network lab takes a NetworkPath, not {path!r}")
    if path.dns_delay_ms is not None and not 0 <= path.dns_delay_ms < 3_600_000:
        raise NetLabError(f"scenario {name!r}: dns_delay_ms out of range: {path.dns_delay_ms!r}")
    if not (isinstance(path.syn_drops, int) and 0 <= path.syn_drops < 1000):
        raise NetLabError(f"scenario {name!r}: syn_drops out of range: {path.syn_drops!r}")
    return Scenario(name, path.delay_ms, path.loss_pct, path.jitter_ms, path.description,
                    path.dns_delay_ms, path.syn_drops)


# --- state and the stale-lab sweep ----------------------------------------------


def _owner_identity() -> dict[str, Any]:
    return {"pid": os.getpid(), "create_time": psutil.Process().create_time()}


def _owner_alive(owner: dict | None) -> bool:
    if not owner:
        return False
    try:
        p = psutil.Process(int(owner["pid"]))
        if abs(p.create_time() - float(owner["create_time"])) > processes.CREATE_TIME_SLACK:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def _recorded_procs(state: dict) -> list[psutil.Process]:
    procs = state.get("processes") or {}
    found = []
    for role in STOP_ORDER:
        ident = procs.get(role)
        p = processes.verified(ident, str(ident.get("name", ""))) if isinstance(ident, dict) else None
        if p is not None:
            found.append(p)
    return found


def _destroy(state_dir: Path, state: dict) -> None:
    processes.stop(_recorded_procs(state))
    ours = [ns for ns in state.get("namespaces") or ()
            if (m := NS_RE.fullmatch(str(ns))) and m.group(1) == state_dir.name]
    delete_netns(ours)
    remove_netns_etc(ours)
    shutil.rmtree(state_dir, ignore_errors=True)


def sweep_stale(root: Path = STATE_ROOT) -> list[str]:
    """Remove the labs whose recorded owner process is gone: their
    processes (only those the state file names and that are still the same
    process), their namespaces and their state. Returns their prefixes."""
    removed: list[str] = []
    with state_file.locked(root):
        for d in sorted(root.iterdir()):
            if not (d.is_dir() and PREFIX_RE.fullmatch(d.name)):
                continue
            state = state_file.read_state(d)
            if state is None:
                state = {}
            if _owner_alive(state.get("owner")):
                continue
            if not state.get("namespaces"):
                state["namespaces"] = [f"{d.name}-{role}" for role in ROLES]
            _destroy(d, state)
            removed.append(d.name)
        # A lab namespace with no state directory at all (its /tmp was
        # cleaned) goes too, but only while no process is inside it.
        for ns in list_netns():
            m = NS_RE.fullmatch(ns)
            if m and not (root / m.group(1)).exists() and not netns_pids(ns):
                with contextlib.suppress(NetLabError):
                    run(["ip", "netns", "del", ns])
                remove_netns_etc([ns])
                if m.group(1) not in removed:
                    removed.append(m.group(1))
        # A resolv.conf whose lab has neither namespaces nor state left.
        present = set(list_netns())
        with contextlib.suppress(OSError):
            for d in netns_etc("").iterdir():
                m = NS_RE.fullmatch(d.name)
                if m and d.name not in present and not (root / m.group(1)).exists():
                    remove_netns_etc([d.name])
    return removed


def _new_prefix(root: Path) -> str:
    taken = {m.group(1) for ns in list_netns() if (m := NS_RE.fullmatch(ns))}
    while True:
        prefix = "kd" + secrets.token_hex(3)
        if prefix not in taken and not (root / prefix).exists():
            return prefix


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in kl.TANSU_ENV}
    root = str(Path(kdiag.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def _spawn_in(ns: str, cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    # `ip netns exec` execs the command in place (no fork), so the pid and
    # the parent-death signal set before it carry over to the real program.
    try:
        return processes.spawn(["ip", "netns", "exec", ns, *cmd], log, detach=False, env=env)
    except processes.LabError as e:
        raise NetLabError(str(e)) from None


def _wait_ready(lab: NetLab, procs: dict[str, subprocess.Popen], logs: dict[str, Path], deadline: float) -> None:
    ns = lab.namespaces
    link_up = tansu_up = False
    while True:
        for role, proc in procs.items():
            if proc.poll() is not None:
                raise NetLabError(f"{role} exited with code {proc.returncode}: {processes.log_tail(logs[role])}")
        # The resolver is not asked: each answer would cost the whole delay.
        link_up = link_up or (lab.link_stats_path.exists()
                              and ("resolver" not in procs or (lab.state_dir / RESOLVER_READY).exists()))
        tansu_up = tansu_up or call_in_netns(ns["broker"], tls.accepts_tcp, lab.broker_port)
        if link_up and tansu_up:
            left = max(0.5, deadline - time.monotonic())
            # From the client, through delay line and router: proves the
            # whole path, the certificate and stunnel's reach to Tansu.
            if call_in_netns(ns["client"], tls_handshake, lab.broker_addr, lab.tls_port, lab.ca_path, min(5.0, left)):
                return
        if time.monotonic() > deadline:
            if not link_up:
                what = (f"the delay line or the resolver did not start: {processes.log_tail(logs['delayline'])} "
                        f"{processes.log_tail(logs['resolver']) if 'resolver' in logs else ''}")
            elif not tansu_up:
                what = f"tansu did not accept on 127.0.0.1:{lab.broker_port}: {processes.log_tail(logs['tansu'])}"
            else:
                what = (f"no TLS handshake from {ns['client']} with {lab.bootstrap}: "
                        f"{processes.log_tail(logs['terminator'])}")
            raise NetLabError(f"network lab not ready within {READY_TIMEOUT:g}s: {what}")
        time.sleep(0.02)


@dataclass
class _Build:
    """What one start has created so far, for the teardown."""

    prefix: str
    state_dir: Path
    namespaces: dict[str, str]
    state: dict[str, Any]
    procs: dict[str, subprocess.Popen] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class _Tools:
    tansu: str
    stunnel: str
    openssl: str
    tansu_version: str
    terminator_version: str
    nft: str | None


def _tools(sc: Scenario) -> _Tools:
    if os.geteuid() != 0:
        raise NetLabError("the network lab needs root (network namespaces, raw sockets)")
    try:
        for tool, pkg in (("ip", "iproute2"), ("ethtool", "ethtool")):
            processes.tool(tool, f"apt-get install {pkg}")
        tansu = str(kl.tansu_path())
        stunnel = processes.tool(kl.TERMINATOR, "apt-get install stunnel4")
        return _Tools(
            tansu=tansu,
            stunnel=stunnel,
            openssl=processes.tool("openssl", "apt-get install openssl"),
            tansu_version=processes.version_line([tansu, "--version"], r"\d+\.\d+"),
            terminator_version=processes.version_line([stunnel, "-version"], r"^stunnel \d"),
            nft=processes.tool("nft", "apt-get install nftables") if sc.syn_drops else None,
        )
    except processes.LabError as e:
        raise NetLabError(str(e)) from None


def _reserve(root: Path) -> _Build:
    sweep_stale(root)
    with state_file.locked(root):
        prefix = _new_prefix(root)
        state_dir = root / prefix
        state_dir.mkdir(mode=0o700)
        namespaces = {role: f"{prefix}-{role}" for role in ROLES}
        state: dict[str, Any] = {
            "format": STATE_FORMAT,
            "prefix": prefix,
            "owner": _owner_identity(),
            "namespaces": list(namespaces.values()),
            "processes": {},
            "started_at": time.time(),
        }
        # Recorded before anything exists, so that a sweep finds all of it.
        state_file.write_state(state_dir, state)
    return _Build(prefix, state_dir.resolve(), namespaces, state)


def _bring_up(b: _Build, sc: Scenario, topics: Sequence[str], seed: int | None, tools: _Tools) -> NetLab:
    deadline = time.monotonic() + READY_TIMEOUT
    ifs = ifnames(b.prefix)
    build_network(b.namespaces, ifs)
    try:
        cert, key = tls.make_cert(tools.openssl, b.state_dir, ips=(BROKER_ADDR, "127.0.0.1"),
                                  names=(BROKER_HOSTNAME,))
    except processes.LabError as e:
        raise NetLabError(str(e)) from None
    conf = tls.stunnel_conf(b.state_dir, TLS_PORT, BROKER_PORT, cert, key, accept_host=BROKER_ADDR)
    logs = {"delayline": b.state_dir / DELAYLINE_LOG, "tansu": b.state_dir / kl.TANSU_LOG,
            "terminator": b.state_dir / kl.STUNNEL_LOG}
    env = _child_env()
    if seed is None:
        seed = secrets.randbelow(2**31)
    lab = NetLab(
        scenario=sc,
        prefix=b.prefix,
        namespaces=dict(b.namespaces),
        client_addr=CLIENT_ADDR,
        router_addrs=ROUTER_ADDRS,
        broker_addr=BROKER_ADDR,
        tls_port=TLS_PORT,
        broker_port=BROKER_PORT,
        ca_path=cert,
        state_dir=b.state_dir,
        tansu_version=tools.tansu_version,
        terminator_version=tools.terminator_version,
        seed=seed,
        hostname=BROKER_HOSTNAME if sc.dns_delay_ms is not None else None,
    )

    ns = b.namespaces
    b.procs["delayline"] = _spawn_in(
        ns["link"],
        [*kdiag.python_m(delayline), "--a", ifs["link_a"], "--b", ifs["link_b"],
         "--delay-ms", f"{sc.delay_ms:g}", "--jitter-ms", f"{sc.jitter_ms:g}",
         "--loss", f"{sc.loss_pct:g}", "--seed", str(seed), "--stats", str(lab.link_stats_path)],
        logs["delayline"], env,
    )
    b.procs["tansu"] = _spawn_in(
        ns["broker"],
        [tools.tansu, "broker",
         "--listener-url", f"tcp://127.0.0.1:{BROKER_PORT}",
         "--advertised-listener-url", f"tcp://{BROKER_ADDR}:{TLS_PORT}",
         "--storage-engine", "memory://tansu/"],
        logs["tansu"], env,
    )
    b.procs["terminator"] = _spawn_in(ns["broker"], [tools.stunnel, str(conf)], logs["terminator"], env)
    if sc.dns_delay_ms is not None:
        logs["resolver"] = b.state_dir / RESOLVER_LOG
        b.procs["resolver"] = _start_resolver(b, sc.dns_delay_ms, logs["resolver"], env)
    _wait_ready(lab, b.procs, logs, deadline)

    # Only now are the identities the programs' own rather than those of
    # the `ip` they replaced.
    with contextlib.suppress(psutil.Error):
        b.state["processes"] = {role: processes.identity(p.pid) for role, p in b.procs.items()}
    lab = dataclasses.replace(lab, pids={role: p.pid for role, p in b.procs.items()})
    b.state["netlab"] = lab.to_dict()
    state_file.write_state(b.state_dir, b.state)

    try:
        # By address: this process reads the host's resolv.conf, not the
        # client namespace's (only `ip netns exec` mounts that one), and the
        # lab's own start should not wait for the slow resolver anyway.
        # Tansu advertises the address too, so after the bootstrap
        # connection no client resolves the name again.
        call_in_netns(ns["client"], ensure_topics, dataclasses.replace(lab, hostname=None), topics, deadline)
    except processes.LabError as e:
        raise NetLabError(str(e)) from None
    if sc.syn_drops:
        # Armed last, so that the lab's own connections (the readiness
        # handshake, the topics) are not the ones that lose their SYNs.
        _arm_syn_drops(b, sc.syn_drops, tools)
    return lab


def _start_resolver(b: _Build, delay_ms: float, log: Path, env: dict[str, str]) -> subprocess.Popen:
    """The slow resolver in the router namespace, and the client
    namespace's resolv.conf pointing at it."""
    # glibc gives up on a server after `timeout` seconds (30 at most): above
    # the delay, so the lookup measures the delay and not a retry.
    write_resolv_conf(b.namespaces["client"], RESOLVER_ADDR, min(30, max(5, math.ceil(delay_ms / 1000) + 2)))
    return _spawn_in(
        b.namespaces["router"],
        [*kdiag.python_m(resolver), "--listen", RESOLVER_ADDR, "--name", BROKER_HOSTNAME,
         "--address", BROKER_ADDR, "--delay-ms", f"{delay_ms:g}", "--ready", str(b.state_dir / RESOLVER_READY)],
        log, env,
    )


def _arm_syn_drops(b: _Build, n: int, tools: _Tools) -> None:
    """nftables in the broker namespace drops the next n SYNs to the TLS
    port, then none: ``numgen inc`` numbers the SYNs that reach the rule
    0, 1, 2... in the kernel, so exactly the first n match, whatever their
    timing or size (a byte quota would depend on the SYN's options)."""
    rules = b.state_dir / SYN_DROPS_RULES
    rules.write_text(
        "table inet kdiag_syn_drops {\n"
        "\tchain input {\n"
        "\t\ttype filter hook input priority filter; policy accept;\n"
        f"\t\ttcp dport {TLS_PORT} tcp flags & (syn | ack) == syn numgen inc mod 1000000000 < {n} counter drop\n"
        "\t}\n"
        "}\n")
    run(["ip", "netns", "exec", b.namespaces["broker"], tools.nft or "nft", "-f", str(rules)],
        what="loading the SYN-dropping nftables rule")
    # Linux 6.5+ retransmits the first SYNs after 1 s each
    # (tcp_syn_linear_timeouts, default 4); the client namespace gets the
    # exponential backoff of older kernels and most clients' hosts
    # (1 s, then 2 s more), which the connect phase is judged against.
    with contextlib.suppress(NetLabError):
        run(["ip", "netns", "exec", b.namespaces["client"], "sysctl", "-q", "-w",
             "net.ipv4.tcp_syn_linear_timeouts=0"])


def _teardown(b: _Build) -> None:
    procs = []
    for role in STOP_ORDER:
        p = b.procs.get(role)
        if p is not None and p.poll() is None:
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(p.pid))
    processes.stop(procs)
    for p in b.procs.values():
        processes.reap(p.pid)
    delete_netns(list(b.namespaces.values()))
    remove_netns_etc(list(b.namespaces.values()))
    shutil.rmtree(b.state_dir, ignore_errors=True)


@contextlib.contextmanager
def running(
    name: str,
    path: NetworkPath,
    topics: Sequence[str] = kl.DEFAULT_TOPICS,
    *,
    seed: int | None = None,
) -> Iterator[NetLab]:
    """A network lab for one run: built, started and checked end to end from
    the client namespace, then torn down on exit, on an exception, on
    KeyboardInterrupt and on SIGTERM (main thread; the old handler comes
    back afterwards). If the caller is SIGKILLed, the kernel stops the
    processes and the next start removes the namespaces.

    The processes are tied to the calling thread, which must outlive the
    block. name is the scenario's, path the link it declares. seed fixes
    the delay line's loss and jitter sequence."""
    sc = get_scenario(name, path)
    tools = _tools(sc)
    with processes.sigterm_exits() as hold_sigterm:
        build: _Build | None = None
        try:
            build = _reserve(STATE_ROOT)
            yield _bring_up(build, sc, topics, seed, tools)
        finally:
            hold_sigterm()
            if build is not None:
                _teardown(build)
