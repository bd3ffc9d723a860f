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

The kernel here has no netem qdisc, hence the user-space delay line; it
needs GRO/GSO/TSO and TX checksum offload off on the veths that feed it.

Each lab has its own prefix ("kd" + 6 hex digits) for its namespaces and
interfaces, so labs coexist. Its state lives in /tmp/kdiag-netlab/<prefix>/
(state.json, logs, certificate, the delay line's counters). The processes
get SIGTERM from the kernel if the thread that started them dies; namespaces
outlive a killed owner, so every start first removes the labs whose recorded
owner is gone.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import psutil

from kdiag.lab import broker as kl
from kdiag.lab import delayline
import kdiag
from kdiag.errors import KdiagError

STATE_ROOT = Path("/tmp/kdiag-netlab")
ROLES = ("client", "link", "router", "broker")
PREFIX_RE = re.compile(r"kd[0-9a-f]{6}")
NS_RE = re.compile(r"(kd[0-9a-f]{6})-(client|link|router|broker)")

CLIENT_ADDR = "10.201.1.2"
ROUTER_ADDRS = ("10.201.1.1", "10.201.2.1")
BROKER_ADDR = "10.201.2.2"
PREFIX_LEN = 24
TLS_PORT = 9093
BROKER_PORT = 9092

READY_TIMEOUT = 30.0
DELAYLINE_LOG = "delayline.log"
DELAYLINE_STATS = "delayline.json"
STATE_FORMAT = 1

# Offloads that let the kernel hand a packet socket frames larger than the
# MTU (GRO, GSO, TSO) or with the checksum not yet filled in (tx).
_OFFLOADS_OFF = ("gro", "off", "gso", "off", "tso", "off", "tx", "off")


class NetLabError(KdiagError):
    """The network lab could not be built, started or torn down; the message says why."""


@dataclass(frozen=True)
class Scenario:
    name: str
    delay_ms: float  # one way, both directions
    loss_pct: float  # per frame, each direction
    jitter_ms: float = 0.0
    description: str = ""


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("network-latency", 15.0, 0.0, description="15 ms each way (30 ms RTT), no loss"),
        Scenario("packet-loss", 1.0, 4.0, description="1 ms each way, 4% of frames lost in each direction"),
        Scenario("clean", 0.0, 0.0, description="no added delay or loss; the path still crosses a router"),
    )
}


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
    pids: dict[str, int] = dataclasses.field(default_factory=dict)  # tansu, terminator, delayline
    seed: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.broker_addr}:{self.tls_port}"

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
        }


def get_scenario(name: str | Scenario) -> Scenario:
    if isinstance(name, Scenario):
        return name
    try:
        return SCENARIOS[name]
    except KeyError:
        raise NetLabError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


# --- running code inside a namespace ------------------------------------------

_CLONE_NEWNET = 0x40000000
_libc = None


def call_in_netns(ns: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) on a fresh thread that has joined network
    namespace ns; sockets it opens, and threads it starts, live there.

    Only the calling thread's namespace changes with setns(), so the
    process as a whole stays where it is."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    libc = _libc
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            try:
                fd = os.open(f"/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                raise NetLabError(f"no network namespace {ns}: {e.strerror}") from None
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    raise NetLabError(f"cannot enter network namespace {ns}: {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
            out["value"] = fn(*args, **kwargs)
        except BaseException as e:
            out["error"] = e

    t = threading.Thread(target=target, name=f"netns:{ns}", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out.get("value")


def _tls_handshake(host: str, port: int, ca: Path, timeout: float) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with ctx.wrap_socket(raw, server_hostname=host):
                return True
    except (OSError, ssl.SSLError):
        return False


# --- commands ---------------------------------------------------------------


def _run(cmd: Sequence[str], what: str | None = None) -> str:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetLabError(f"{what or ' '.join(cmd)} failed: {e}") from None
    if out.returncode != 0:
        detail = kl._one_line(out.stderr or out.stdout) or f"exit {out.returncode}"
        raise NetLabError(f"{what or ' '.join(cmd)} failed: {detail}")
    return out.stdout


def list_netns() -> list[str]:
    out = _run(["ip", "netns", "list"])
    # Lines read "name" or "name (id: N)".
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _delete_netns(names: Sequence[str]) -> None:
    present = set(list_netns())
    for ns in names:
        if ns in present:
            with contextlib.suppress(NetLabError):
                _run(["ip", "netns", "del", ns])


def _netns_pids(ns: str) -> list[int]:
    try:
        out = _run(["ip", "netns", "pids", ns])
    except NetLabError:
        return []
    return [int(x) for x in out.split() if x.isdigit()]


# --- state and the stale-lab sweep ----------------------------------------------


def _owner_identity() -> dict[str, Any]:
    return {"pid": os.getpid(), "create_time": psutil.Process().create_time()}


def _owner_alive(owner: dict | None) -> bool:
    if not owner:
        return False
    try:
        p = psutil.Process(int(owner["pid"]))
        if abs(p.create_time() - float(owner["create_time"])) > kl._CREATE_TIME_SLACK:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def _recorded_procs(state: dict) -> list[psutil.Process]:
    procs = state.get("processes") or {}
    found = []
    # The terminator first: once it has closed its connections to Tansu,
    # Tansu's SIGTERM no longer hangs.
    for role in ("terminator", "tansu", "delayline"):
        ident = procs.get(role)
        p = kl._verified(ident, str(ident.get("name", ""))) if isinstance(ident, dict) else None
        if p is not None:
            found.append(p)
    return found


def _destroy(state_dir: Path, state: dict) -> None:
    kl._stop(_recorded_procs(state))
    ours = [ns for ns in state.get("namespaces") or ()
            if (m := NS_RE.fullmatch(str(ns))) and m.group(1) == state_dir.name]
    _delete_netns(ours)
    shutil.rmtree(state_dir, ignore_errors=True)


def sweep_stale(root: Path = STATE_ROOT) -> list[str]:
    """Remove the labs whose recorded owner process is gone: their
    processes (only those the state file names and that are still the same
    process), their namespaces and their state. Returns their prefixes."""
    removed: list[str] = []
    with kl._locked(root):
        for d in sorted(root.iterdir()):
            if not (d.is_dir() and PREFIX_RE.fullmatch(d.name)):
                continue
            state = kl._read_state(d)
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
            if m and not (root / m.group(1)).exists() and not _netns_pids(ns):
                with contextlib.suppress(NetLabError):
                    _run(["ip", "netns", "del", ns])
                if m.group(1) not in removed:
                    removed.append(m.group(1))
    return removed


def _new_prefix(root: Path) -> str:
    taken = {m.group(1) for ns in list_netns() if (m := NS_RE.fullmatch(ns))}
    while True:
        prefix = "kd" + secrets.token_hex(3)
        if prefix not in taken and not (root / prefix).exists():
            return prefix


# --- building the network ------------------------------------------------------


def _ifnames(prefix: str) -> dict[str, str]:
    # At most 11 characters, inside IFNAMSIZ's 15.
    return {
        "client": f"{prefix}-c",
        "link_a": f"{prefix}-la",
        "link_b": f"{prefix}-lb",
        "router_a": f"{prefix}-ra",
        "router_b": f"{prefix}-rb",
        "broker": f"{prefix}-b",
    }


def _build_network(ns: dict[str, str], ifs: dict[str, str]) -> None:
    def nsexec(role: str, *cmd: str) -> str:
        return _run(["ip", "netns", "exec", ns[role], *cmd])

    for role in ROLES:
        _run(["ip", "netns", "add", ns[role]])
    for role in ROLES:
        # IPv6 off before the veths exist, so that no router solicitation or
        # DAD frame crosses the delay line or shows in its counters.
        nsexec(role, "sysctl", "-q", "-w",
               "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        _run(["ip", "-n", ns[role], "link", "set", "lo", "up"])
    nsexec("router", "sysctl", "-q", "-w",
           "net.ipv4.ip_forward=1",
           # Without these, traceroute's parallel probes lose hops to ICMP
           # rate limiting.
           "net.ipv4.icmp_ratelimit=0", "net.ipv4.icmp_msgs_burst=10000")

    for left, lrole, right, rrole in (
        (ifs["client"], "client", ifs["link_a"], "link"),
        (ifs["link_b"], "link", ifs["router_a"], "router"),
        (ifs["router_b"], "router", ifs["broker"], "broker"),
    ):
        _run(["ip", "link", "add", left, "netns", ns[lrole], "type", "veth",
              "peer", "name", right, "netns", ns[rrole]])

    for role, dev in (("client", ifs["client"]), ("link", ifs["link_a"]),
                      ("link", ifs["link_b"]), ("router", ifs["router_a"])):
        _run(["ip", "netns", "exec", ns[role], "ethtool", "-K", dev, *_OFFLOADS_OFF],
             what=f"turning offloads off on {dev} in {ns[role]}")

    for role, dev, addr in (
        ("client", ifs["client"], CLIENT_ADDR),
        ("router", ifs["router_a"], ROUTER_ADDRS[0]),
        ("router", ifs["router_b"], ROUTER_ADDRS[1]),
        ("broker", ifs["broker"], BROKER_ADDR),
    ):
        _run(["ip", "-n", ns[role], "addr", "add", f"{addr}/{PREFIX_LEN}", "dev", dev])
    for role, dev in (("client", ifs["client"]), ("link", ifs["link_a"]), ("link", ifs["link_b"]),
                      ("router", ifs["router_a"]), ("router", ifs["router_b"]), ("broker", ifs["broker"])):
        _run(["ip", "-n", ns[role], "link", "set", dev, "up"])
    _run(["ip", "-n", ns["client"], "route", "add", "default", "via", ROUTER_ADDRS[0]])
    _run(["ip", "-n", ns["broker"], "route", "add", "default", "via", ROUTER_ADDRS[1]])


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in kl._TANSU_ENV}
    root = str(Path(kdiag.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def _spawn_in(ns: str, cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    # `ip netns exec` execs the command in place (no fork), so the pid and
    # the parent-death signal set before it carry over to the real program.
    try:
        return kl._spawn(["ip", "netns", "exec", ns, *cmd], log, detach=False, env=env)
    except kl.LabError as e:
        raise NetLabError(str(e)) from None


def _wait_ready(lab: NetLab, procs: dict[str, subprocess.Popen], logs: dict[str, Path], deadline: float) -> None:
    ns = lab.namespaces
    link_up = tansu_up = False
    while True:
        for role, proc in procs.items():
            if proc.poll() is not None:
                raise NetLabError(f"{role} exited with code {proc.returncode}: {kl._log_tail(logs[role])}")
        link_up = link_up or lab.link_stats_path.exists()
        tansu_up = tansu_up or call_in_netns(ns["broker"], kl._accepts_tcp, lab.broker_port)
        if link_up and tansu_up:
            left = max(0.5, deadline - time.monotonic())
            # From the client, through delay line and router: proves the
            # whole path, the certificate and stunnel's reach to Tansu.
            if call_in_netns(ns["client"], _tls_handshake, lab.broker_addr, lab.tls_port, lab.ca_path, min(5.0, left)):
                return
        if time.monotonic() > deadline:
            if not link_up:
                what = f"the delay line did not start: {kl._log_tail(logs['delayline'])}"
            elif not tansu_up:
                what = f"tansu did not accept on 127.0.0.1:{lab.broker_port}: {kl._log_tail(logs['tansu'])}"
            else:
                what = (f"no TLS handshake from {ns['client']} with {lab.bootstrap}: "
                        f"{kl._log_tail(logs['terminator'])}")
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


def _tools() -> _Tools:
    if os.geteuid() != 0:
        raise NetLabError("the network lab needs root (network namespaces, raw sockets)")
    try:
        for tool, pkg in (("ip", "iproute2"), ("ethtool", "ethtool")):
            kl._tool(tool, f"apt-get install {pkg}")
        tansu = str(kl.tansu_path())
        stunnel = kl._tool(kl.TERMINATOR, "apt-get install stunnel4")
        return _Tools(
            tansu=tansu,
            stunnel=stunnel,
            openssl=kl._tool("openssl", "apt-get install openssl"),
            tansu_version=kl._version_line([tansu, "--version"], r"\d+\.\d+"),
            terminator_version=kl._version_line([stunnel, "-version"], r"^stunnel \d"),
        )
    except kl.LabError as e:
        raise NetLabError(str(e)) from None


def _reserve(root: Path) -> _Build:
    sweep_stale(root)
    with kl._locked(root):
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
        kl._write_state(state_dir, state)
    return _Build(prefix, state_dir.resolve(), namespaces, state)


def _bring_up(b: _Build, sc: Scenario, topics: Sequence[str], seed: int | None, tools: _Tools) -> NetLab:
    deadline = time.monotonic() + READY_TIMEOUT
    ifs = _ifnames(b.prefix)
    _build_network(b.namespaces, ifs)
    try:
        cert, key = kl._make_cert(tools.openssl, b.state_dir, ips=(BROKER_ADDR, "127.0.0.1"))
    except kl.LabError as e:
        raise NetLabError(str(e)) from None
    conf = kl._stunnel_conf(b.state_dir, TLS_PORT, BROKER_PORT, cert, key, accept_host=BROKER_ADDR)
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
    _wait_ready(lab, b.procs, logs, deadline)

    # Only now are the identities the programs' own rather than those of
    # the `ip` they replaced.
    with contextlib.suppress(psutil.Error):
        b.state["processes"] = {role: kl._identity(p.pid) for role, p in b.procs.items()}
    lab = dataclasses.replace(lab, pids={role: p.pid for role, p in b.procs.items()})
    b.state["netlab"] = lab.to_dict()
    kl._write_state(b.state_dir, b.state)

    try:
        call_in_netns(ns["client"], kl._ensure_topics, lab, topics, deadline)
    except kl.LabError as e:
        raise NetLabError(str(e)) from None
    return lab


def _teardown(b: _Build) -> None:
    procs = []
    # The terminator first: once it has closed its connections to Tansu,
    # Tansu's SIGTERM no longer hangs.
    for role in ("terminator", "tansu", "delayline"):
        p = b.procs.get(role)
        if p is not None and p.poll() is None:
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(p.pid))
    kl._stop(procs)
    for p in b.procs.values():
        kl._reap(p.pid)
    _delete_netns(list(b.namespaces.values()))
    shutil.rmtree(b.state_dir, ignore_errors=True)


@contextlib.contextmanager
def running(
    scenario: str | Scenario = "network-latency",
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
    block. seed fixes the delay line's loss and jitter sequence."""
    sc = get_scenario(scenario)
    tools = _tools()
    with kl.sigterm_exits() as hold_sigterm:
        build: _Build | None = None
        try:
            build = _reserve(STATE_ROOT)
            yield _bring_up(build, sc, topics, seed, tools)
        finally:
            hold_sigterm()
            if build is not None:
                _teardown(build)
