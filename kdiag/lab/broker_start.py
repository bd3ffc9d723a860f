"""Starting the loopback lab: the tools and their versions, the commands,
the processes in order, the state file, and the wait until the TLS port
serves and the topics exist. ``kdiag.lab.broker.up`` calls ``up_locked``
with the state directory locked and the parts a scenario declared
(``kdiag.lab.variants.Loopback``)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import psutil

import kdiag
from kdiag.lab import loopback as kl
from kdiag.lab import processes, state_file, tls
from kdiag.lab.processes import LabError, log_tail
from kdiag.lab.variants import Loopback


def wait_ready(procs: dict[str, tuple[subprocess.Popen, Path]], lab: kl.Lab, deadline: float) -> None:
    """Wait until Tansu, the proxy (if any), the TLS terminator and the
    relay (if any) all serve.

    procs maps each role ("tansu", "proxy", "terminator", "relay") to its
    process and log."""
    tansu_up = proxy_up = tls_up = relay_up = False
    names = {"tansu": "tansu", "proxy": lab.proxy, "terminator": lab.terminator, "relay": lab.relay}
    while True:
        for role, (proc, log) in procs.items():
            if proc.poll() is not None:
                raise LabError(f"{names.get(role, role)} exited with code {proc.returncode}: {log_tail(log)}")
        tansu_up = tansu_up or tls.accepts_tcp(lab.broker_port)
        proxy_up = lab.proxy_port is None or (tansu_up and (proxy_up or tls.accepts_tcp(lab.proxy_port)))
        # A full handshake, not just a connect: proves the certificate loads
        # and that the terminator reaches Tansu.
        tls_up = tansu_up and proxy_up and (tls_up or tls.accepts_tls(lab.tls_port, lab.ca_path))
        relay_up = lab.relay_port is None or (tls_up and (relay_up or tls.accepts_tls(lab.relay_port, lab.ca_path)))
        if relay_up:
            return
        if time.monotonic() > deadline:
            if not tansu_up:
                raise LabError(
                    f"tansu did not accept on 127.0.0.1:{lab.broker_port} within {kl.READY_TIMEOUT:g}s: "
                    f"{log_tail(procs['tansu'][1])}"
                )
            if not proxy_up:
                raise LabError(
                    f"{lab.proxy} did not accept on 127.0.0.1:{lab.proxy_port} within {kl.READY_TIMEOUT:g}s: "
                    f"{log_tail(procs['proxy'][1])}"
                )
            if not tls_up:
                raise LabError(
                    f"{lab.terminator} did not complete a TLS handshake on 127.0.0.1:{lab.tls_port} "
                    f"within {kl.READY_TIMEOUT:g}s: {log_tail(procs['terminator'][1])}"
                )
            raise LabError(
                f"{lab.relay} did not relay a TLS handshake on 127.0.0.1:{lab.relay_port} "
                f"within {kl.READY_TIMEOUT:g}s: {log_tail(procs['relay'][1])}"
            )
        time.sleep(0.01)


def ensure_topics(lab, topics: Sequence[str], deadline: float) -> None:
    """The topics exist on the lab's broker (any lab with ``client_config``
    and ``bootstrap``), created if they did not."""
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


def _slowproxy_cmd(
    proxy_port: int, broker_port: int, delay_ms: float | None, quota_bytes_per_s: float | None = None
) -> list[str]:
    python = sys.executable or processes.tool("python3", "apt-get install python3")
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


def _relay_cmd(relay_port: int, tls_port: int, parts: Loopback) -> list[str]:
    python = sys.executable or processes.tool("python3", "apt-get install python3")
    from kdiag.lab import relay

    cmd = [python, "-m", relay.__spec__.name, "--listen", f"127.0.0.1:{relay_port}",
           "--connect", f"127.0.0.1:{tls_port}"]
    # repr: a float's shortest exact text, where :g would round.
    if parts.first_flight_delay_ms is not None:
        cmd += ["--first-flight-delay-ms", repr(float(parts.first_flight_delay_ms))]
    if parts.outage_ms is not None:
        cmd += ["--outage-ms", repr(float(parts.outage_ms))]
    return cmd


def _kdiag_env() -> dict[str, str]:
    """The environment for a `python -m kdiag...` child: this kdiag first on
    its path, installed or not."""
    env = dict(os.environ)
    root = str(Path(kdiag.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


@dataclass(frozen=True)
class _Plan:
    """Everything a start needs before the first process runs."""

    lab: kl.Lab                  # as it will be once started (pids still 0)
    cmds: dict[str, list[str]]   # by role, in the order they start
    logs: dict[str, Path]
    envs: dict[str, dict[str, str] | None]


def _declared(lab: kl.Lab | Loopback) -> tuple:
    """What tells one declared lab from another, of a running lab or a
    declaration."""
    return (lab.variant, lab.response_delay_ms, lab.quota_bytes_per_s, lab.first_flight_delay_ms, lab.outage_ms,
            lab.topic_delay_ms, lab.plaintext)


def _reuse(state_dir: Path, topics: Sequence[str], parts: Loopback, deadline: float) -> kl.Lab | None:
    """The lab already running in state_dir if it is the one wanted; what
    is left of a half-dead one is stopped."""
    running_lab = kl.status_locked(state_dir)
    if running_lab is not None:
        if _declared(running_lab) != _declared(parts):
            delay, quota = running_lab.response_delay_ms, running_lab.quota_bytes_per_s
            what = running_lab.variant + (f" ({delay:g} ms)" if delay is not None else "")
            what += f" ({quota:g} bytes/s)" if quota is not None else ""
            raise LabError(f"a {what} lab is already running in {state_dir}; stop it first or use another state dir")
        if parts.topic_delay_ms is None:
            ensure_topics(running_lab, topics, deadline)
        return running_lab
    # A lab with one process dead is useless; stop what is left of it.
    kl.down_locked(state_dir)
    return None


def _terminator_tool(terminator: str) -> tuple[str, str, str]:
    """The terminator's executable, version line and log file name."""
    if terminator == "socat":
        term_tool = processes.tool("socat", "apt-get install socat")
        # The first line of `socat -V` is the authors; the version is on the next.
        return term_tool, processes.version_line([term_tool, "-V"], r"^socat version \d"), kl.SOCAT_LOG
    term_tool = processes.tool(kl.TERMINATOR, "apt-get install stunnel4")
    return term_tool, processes.version_line([term_tool, "-version"], r"^stunnel \d"), kl.STUNNEL_LOG


def _plan(state_dir: Path, parts: Loopback) -> _Plan:
    terminator, proxy = parts.terminator, parts.proxy
    response_delay_ms, quota_bytes_per_s = parts.response_delay_ms, parts.quota_bytes_per_s
    tansu = str(kl.tansu_path())
    openssl = processes.tool("openssl", "apt-get install openssl")
    tansu_version = processes.version_line([tansu, "--version"], r"\d+\.\d+")
    term_tool, terminator_version, term_log = _terminator_tool(terminator)
    cert, key = tls.make_cert(openssl, state_dir)
    relay = parts.relay
    ports = tls.free_ports(2 + (proxy is not None) + (relay is not None))
    broker_port, tls_port = ports[:2]
    proxy_port = ports[2] if proxy is not None else None
    relay_port = ports[-1] if relay is not None else None
    # Tansu advertises the port clients meet first, so that the connections
    # a client makes after metadata cross the relay as the bootstrap did.
    advertised = broker_port if parts.plaintext else relay_port if relay_port is not None else tls_port
    # The terminator forwards to the proxy when there is one, else to Tansu.
    term_target = proxy_port if proxy_port is not None else broker_port
    cmds = {"tansu": [tansu, "broker",
                      "--listener-url", f"tcp://127.0.0.1:{broker_port}",
                      "--advertised-listener-url", f"tcp://127.0.0.1:{advertised}",
                      "--storage-engine", "memory://tansu/"]}
    logs = {"tansu": state_dir / kl.TANSU_LOG}
    envs: dict[str, dict[str, str] | None] = {"tansu": {k: v for k, v in os.environ.items() if k not in kl.TANSU_ENV}}
    if proxy is not None:
        cmds["proxy"] = _slowproxy_cmd(proxy_port, broker_port, response_delay_ms, quota_bytes_per_s)
        logs["proxy"], envs["proxy"] = state_dir / kl.SLOWPROXY_LOG, _kdiag_env()
    if terminator == "socat":
        cmds["terminator"] = tls.socat_cmd(term_tool, tls_port, term_target, cert, key, nodelay=parts.nodelay)
    else:
        cmds["terminator"] = [term_tool, str(tls.stunnel_conf(state_dir, tls_port, term_target, cert, key))]
    logs["terminator"], envs["terminator"] = state_dir / term_log, None
    if relay is not None:
        cmds["relay"] = _relay_cmd(relay_port, tls_port, parts)
        logs["relay"], envs["relay"] = state_dir / kl.RELAY_LOG, _kdiag_env()
    lab = kl.Lab(state_dir=state_dir.resolve(), broker_port=broker_port, tls_port=tls_port, ca_path=cert.resolve(),
                 tansu_pid=0, terminator_pid=0, terminator=terminator, tansu_version=tansu_version,
                 terminator_version=terminator_version, variant=parts.variant, proxy=proxy,
                 proxy_port=proxy_port, proxy_version=f"{proxy} {kdiag.__version__}" if proxy else None,
                 response_delay_ms=response_delay_ms, quota_bytes_per_s=quota_bytes_per_s, relay=relay,
                 relay_port=relay_port, first_flight_delay_ms=parts.first_flight_delay_ms,
                 outage_ms=parts.outage_ms, topic_delay_ms=parts.topic_delay_ms, plaintext=parts.plaintext)
    return _Plan(lab, cmds, logs, envs)


def _record(state_dir: Path, plan: _Plan, started: dict[str, subprocess.Popen], detach: bool) -> kl.Lab:
    """The started lab, written to the state file before the wait so that
    an interrupted up() leaves something down() can act on."""
    lab = kl.Lab(**{**vars(plan.lab), "tansu_pid": started["tansu"].pid,
                    "terminator_pid": started["terminator"].pid,
                    "proxy_pid": started["proxy"].pid if "proxy" in started else None,
                    "relay_pid": started["relay"].pid if "relay" in started else None})
    try:
        idents: dict[str, dict[str, Any]] | None = {
            role: processes.identity(proc.pid) for role, proc in started.items()
        }
    except psutil.Error:
        return lab
    # The proxy and the relay rename themselves as they start; record the
    # name each will have when down() looks for it.
    if "proxy" in idents:
        idents["proxy"]["name"] = lab.proxy
    if "relay" in idents:
        idents["relay"]["name"] = lab.relay
    state_file.write_state(state_dir, {"format": kl.STATE_FORMAT, "lab": lab.to_dict(), "terminator": lab.terminator,
                                       "processes": idents, "detached": detach, "started_at": time.time()})
    return lab


def _stop_spawned(state_dir: Path, spawned: list[subprocess.Popen]) -> None:
    survivors = []
    for p in reversed(spawned):
        with contextlib.suppress(psutil.Error):
            if p.poll() is None:
                proc = psutil.Process(p.pid)
                survivors += [proc, *processes.forks(proc)]
    processes.stop(survivors)
    for p in spawned:
        processes.reap(p.pid)
    state_file.remove_state(state_dir)


def up_locked(state_dir: Path, detach: bool, topics: Sequence[str], parts: Loopback) -> kl.Lab:
    deadline = time.monotonic() + kl.READY_TIMEOUT
    found = _reuse(state_dir, topics, parts, deadline)
    if found is not None:
        return found
    plan = _plan(state_dir, parts)
    for log in plan.logs.values():
        log.write_bytes(b"")
    spawned: list[subprocess.Popen] = []
    try:
        for role, cmd in plan.cmds.items():
            # The proxy's and the relay's working directory is the state dir so that `-m`
            # cannot pick up another kdiag from the caller's.
            cwd = state_dir if role in ("proxy", "relay") else None
            spawned.append(processes.spawn(cmd, plan.logs[role], detach, plan.envs[role], cwd=cwd))
        started = dict(zip(plan.cmds, spawned))
        lab = _record(state_dir, plan, started, detach)
        wait_ready({role: (proc, plan.logs[role]) for role, proc in started.items()}, lab, deadline)
        # A lab that creates the run's topics late creates none now
        # (kdiag.lab.broker.handed_over does, when the run starts).
        if parts.topic_delay_ms is None:
            ensure_topics(lab, topics, deadline)
    except BaseException:
        _stop_spawned(state_dir, spawned)
        raise
    return lab
