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

What runs between the client and Tansu is what a scenario declares
(``kdiag.lab.variants.Loopback``), passed to ``up()`` or ``running()``:
- the terminator: stunnel4, or socat, which writes each decrypted TLS
  record to Tansu on its own; without TCP_NODELAY (no ``,nodelay``) Nagle
  holds the later parts of a request until Tansu's delayed ACK: ~40 ms per
  request although the client socket has TCP_NODELAY (the `nagle_in_path`
  cause). A plain TCP socat in front of stunnel4 does not do this reliably:
  it forwards whatever one read() returns, often a whole request, and stalls
  only some of them.
- a proxy (kdiag.lab.slowproxy) between the terminator and Tansu, when the
  declaration sets a response delay (every byte Tansu sends is that late: a
  fast path with a late broker, the `broker_slow` cause) or a produce quota
  (enforced as a Kafka 2.0+ broker does: ThrottleTimeMs in the Produce
  response, then nothing read from that connection for as long).
- a relay (kdiag.lab.relay) in front of the terminator, when the
  declaration sets a first-flight delay (the server's first TLS flight on
  each connection held that long: a slow handshake, the
  `tls_handshake_slow` cause) or an outage (nothing listens on the client's
  port for that long: a broker that is down, then up, `broker_down`).
And a declaration may have the run's topic created late (a topic missing,
then created: `metadata_wait`). These connection faults begin when the run's
producer starts (`faults()`), not while the lab starts.
Tansu advertises the client-facing port in every variant. This module
never looks at a scenario's name.

`up()` starts a lab whose state (ports, pids, process start times, versions)
lives in `state_dir/state.json`, with logs beside it; `status()` and
`down()` find it again from there, from any process. `running()` is a
private lab for one run that dies with its caller.

Here: up and running. The Lab record and status/down are in
kdiag.lab.loopback; starting (commands, order, readiness) is in
kdiag.lab.broker_start; the processes
(spawn, identity, stop) in kdiag.lab.processes; the state file in
kdiag.lab.state_file; certificates and terminators in kdiag.lab.tls.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

import psutil

from kdiag.lab import state_file
from kdiag.lab.broker_start import ensure_topics, up_locked

# Re-exported: callers and tests know them as kdiag.lab.broker's.
from kdiag.lab.loopback import (  # noqa: F401
    DEFAULT_TOPICS,
    READY_TIMEOUT,
    RELAY_LOG,
    SLOWPROXY_LOG,
    SOCAT_LOG,
    STATE_FORMAT,
    STUNNEL_LOG,
    TANSU_ENV,
    TANSU_LOG,
    TERMINATOR,
    Lab,
    default_state_dir,
    down,
    status,
    tansu_path,
)
from kdiag.lab.processes import STOP_GRACE, LabError, sigterm_exits  # noqa: F401
from kdiag.lab.variants import SLOWPROXY, Loopback  # noqa: F401

# The default lab: Tansu behind stunnel4, nothing between them.
DEFAULT = Loopback()

def _parts(lab: Loopback, response_delay_ms: float | None, quota_bytes_per_s: float | None) -> Loopback:
    """The lab to start: the declaration, with the proxy's delay or quota
    overridden where the declaration has them; LabError for a request that
    makes no sense."""
    if not isinstance(lab, Loopback):
        raise LabError(f"a loopback lab is declared by a Loopback, not {lab!r}")
    if response_delay_ms is not None:
        if lab.response_delay_ms is None:
            raise LabError(f"response_delay_ms applies to a lab whose proxy delays responses, not {lab.variant!r}")
        lab = dataclasses.replace(lab, response_delay_ms=float(response_delay_ms))
    if quota_bytes_per_s is not None:
        if lab.quota_bytes_per_s is None:
            raise LabError(f"quota_bytes_per_s applies to a lab whose proxy enforces a quota, not {lab.variant!r}")
        lab = dataclasses.replace(lab, quota_bytes_per_s=float(quota_bytes_per_s))
    problem = lab.problem()
    if problem:
        raise LabError(problem)
    return lab


def up(
    state_dir: Path | None = None,
    *,
    detach: bool = True,
    topics: Sequence[str] = DEFAULT_TOPICS,
    lab: Loopback = DEFAULT,
    response_delay_ms: float | None = None,
    quota_bytes_per_s: float | None = None,
) -> Lab:
    """Start a lab in state_dir, or return the one already running there.

    detach=True puts the processes in their own session so they outlive the
    caller. detach=False ties them to the calling thread: they get SIGTERM
    when it exits (PR_SET_PDEATHSIG follows the forking thread, not the
    process), so call it from a thread that lives as long as the lab.

    lab is what runs between the client and Tansu, as a scenario declares
    it (default: stunnel4 alone). response_delay_ms and quota_bytes_per_s
    override the proxy's, for a lab that declares them. A lab of another
    variant, or with other parameters, already running in state_dir is
    refused.
    """
    parts = _parts(lab, response_delay_ms, quota_bytes_per_s)
    d = Path(state_dir) if state_dir is not None else default_state_dir()
    with state_file.locked(d):
        return up_locked(d, detach, topics, parts)


@contextlib.contextmanager
def running(
    state_dir: Path | None = None,
    topics: Sequence[str] = DEFAULT_TOPICS,
    *,
    lab: Loopback = DEFAULT,
    response_delay_ms: float | None = None,
    quota_bytes_per_s: float | None = None,
) -> Iterator[Lab]:
    """A private lab for one run, stopped on exit, on KeyboardInterrupt, on
    SIGTERM (main thread only), and by the kernel if the caller is killed.

    Without state_dir it lives in a fresh temporary directory that is removed
    afterwards. A state_dir that already holds a running lab is refused, so
    that leaving the block never stops a lab someone else started. lab,
    response_delay_ms and quota_bytes_per_s are as for up().
    """
    _parts(lab, response_delay_ms, quota_bytes_per_s)
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
                lab=lab,
                response_delay_ms=response_delay_ms,
                quota_bytes_per_s=quota_bytes_per_s,
            )
        finally:
            hold_sigterm()
            down(d)
            if private:
                shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def faults(lab: Lab, topics: Sequence[str], log: Callable[[str], None]) -> Iterator[Callable[[], None]]:
    """The lab's connection faults, as a callable that begins them: the run
    calls it as its producer starts, so that the producer meets them from
    its first connection (a tracer that takes seconds to load does not use
    them up). It arms the relay (its first-flight hold and its outage start
    then), and a lab that creates the run's topics late creates them
    ``topic_delay_ms`` later. Leaving the block stops a creation still to
    come; calling it again does nothing."""
    stop = threading.Event()
    threads: list[threading.Thread] = []
    begun = threading.Lock()

    def begin() -> None:
        if not begun.acquire(blocking=False):
            return
        if lab.relay_pid is not None:
            _arm_relay(lab)
            if lab.first_flight_delay_ms is not None:
                log(f"the relay holds the server's first TLS flight {lab.first_flight_delay_ms:g} ms "
                    "on each connection")
            if lab.outage_ms is not None:
                log(f"the broker is down (nothing listens on {lab.bootstrap}) for {lab.outage_ms:g} ms from now")
        if lab.topic_delay_ms is not None and topics:
            log(f"topic {', '.join(topics)} does not exist yet; the lab creates it {lab.topic_delay_ms:g} ms "
                "from now")
            t = threading.Thread(target=_create_late, args=(lab, tuple(topics), stop, log),
                                 name="kdiag-lab-topics", daemon=True)
            threads.append(t)
            t.start()

    try:
        yield begin
    finally:
        stop.set()
        for t in threads:
            t.join(READY_TIMEOUT + 5)


def _arm_relay(lab: Lab) -> None:
    try:
        proc = psutil.Process(lab.relay_pid)
        # A recorded pid is signalled only while it is still the relay.
        if proc.name() != lab.relay:
            raise LabError(f"pid {lab.relay_pid} is no longer the lab's {lab.relay}")
        os.kill(proc.pid, signal.SIGUSR1)
    except psutil.Error as e:
        raise LabError(f"the lab's {lab.relay} is gone: {e}") from None


def _create_late(lab: Lab, topics: tuple[str, ...], stop: threading.Event, log: Callable[[str], None]) -> None:
    if stop.wait(lab.topic_delay_ms / 1000.0):
        return
    try:
        ensure_topics(lab, topics, time.monotonic() + READY_TIMEOUT)
    except LabError as e:
        # The run goes on; its messages then wait out their own timeout,
        # which is what the run reports.
        log(f"the lab could not create topic {', '.join(topics)}: {e}")
        return
    log(f"the lab created topic {', '.join(topics)}, {lab.topic_delay_ms:g} ms after the run started")
