"""TCP path probes to the brokers, to raw/tcp_probe/.

What the path to each broker looks like, hop by hop, and how long a TCP
handshake takes on it. SYN probes carry no data, so they never show a Nagle
stall: a fast path beside a 40 ms request wait is itself evidence.

Per target, two measurements:

1. Path probes, ``traceroute -T`` style: TCP SYNs to the broker's port with
   TTL 1, 2, ... ``max_ttl``, ``rounds`` probes per TTL, one every
   ``pace_ms`` (a router's ICMP rate limit would otherwise eat hops). It
   stops after the first TTL the target answers (SYN-ACK or RST) or that
   meets an ICMP unreachable. Two methods:

   ``syn``      with CAP_NET_RAW: SYNs built with scapy, sent on a raw
                socket, answers read from raw TCP and ICMP sockets with
                kernel receive timestamps. One source port per target for all
                its probes, so a load-balanced path hashes every probe the
                same way; the port is held by a bound, never-listening socket,
                so the kernel answers a SYN-ACK with RST, and the prober sends
                its own RST as well: no half-open connection stays on the
                target. Every packet sent and every answer goes to
                ``probes.pcap`` (nanosecond pcap, raw IPv4 link type).
   ``connect``  without CAP_NET_RAW: a non-blocking connect() per probe with
                IP_TTL set and IP_RECVERR on; the ICMP error the router sends
                back is read from the socket's error queue (MSG_ERRQUEUE,
                struct sock_extended_err followed by the offender's address).
                An open port completes a real handshake, closed at once with
                RST (SO_LINGER 0). No packets are captured.

   Either way ``probes.jsonl`` holds the per-probe results as measured live.

2. Handshakes: ``handshakes`` plain blocking connect()s, each timed and then
   closed, to ``handshakes.jsonl``. After a timeout the rest are skipped:
   a dead target costs one timeout, not ``handshakes`` of them.

Time bound per target: about rounds * max_ttl * pace_ms + timeout_s for the
probes (the last probe gets ``timeout_s`` to be answered), plus up to one
``timeout_s`` for handshakes.

Only IPv4 targets are probed; a host name is resolved to its first IPv4
address and the tables name the address.

Command line (the last stdout line is the status as JSON)::

    python -m kdiag.collectors.tcp_probe --out DIR --targets '[["10.0.0.5", 9092, "b:9092/1"]]'
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import kdiag

# The probers and the target they probe.
from kdiag.collectors._path_probers import ConnectProber, SynProber, Target, sweep_ttls  # noqa: F401
from kdiag.collectors.base import PROBE, Collector, CollectorStatus, Requirement, status_from_output
from kdiag.parsers.pcap import PcapHeader, PcapWriter
from kdiag.parsers.tcp_probe import LINKTYPE_RAW

NAME = "tcp_probe"
# Nothing is a hard need: without root the connect() method runs instead.
REQUIRES: tuple[Requirement, ...] = ()
PREFERS = (Requirement(root=True, why="CAP_NET_RAW for SYN probes and their packet capture; "
                                      "without it, connect() probes with IP_TTL"),)
FILES = ("probes.pcap", "probes.jsonl", "handshakes.jsonl")


def _raw_unavailable() -> str | None:
    """Why SYN probes cannot run here, or None."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW).close()
    except OSError as e:
        return f"no raw socket ({e.strerror or e})"
    try:
        import scapy.layers.inet  # noqa: F401
    except Exception as e:  # scapy can fail on import in odd environments
        return f"scapy unusable ({type(e).__name__}: {e})"
    return None


def _resolve(host: str, port: int) -> str:
    infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    return infos[0][4][0]


def _handshakes(target: Target, addr: str, n: int, timeout_s: float, out) -> None:
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(timeout_s)
        ts = time.time_ns()
        t0 = time.perf_counter_ns()
        error, rtt = None, None
        try:
            s.connect((addr, target.port))
            rtt = (time.perf_counter_ns() - t0) / 1e6
        except TimeoutError:
            error = "timeout"
        except OSError as e:
            error = errno.errorcode.get(e.errno, str(e)) if e.errno else str(e)
        finally:
            s.close()
        out.write(json.dumps({
            "target": f"{addr}:{target.port}", "target_host": addr, "target_port": target.port,
            "broker": target.broker, "ts_us": ts // 1000, "rtt_ms": rtt, "error": error,
        }) + "\n")
        if error == "timeout":
            break


def _unique(targets: list[Target]) -> list[Target]:
    seen, uniq = set(), []
    for t in targets:
        if (t.host, t.port) not in seen:
            seen.add((t.host, t.port))
            uniq.append(t)
    return uniq


def _method(method: str, notes: list[str]) -> tuple[str | None, str | None]:
    """(the method to use, None) or (None, why the one asked for cannot run)."""
    if method == "connect":
        return "connect", None
    why = _raw_unavailable()
    if why and method == "syn":
        return None, f"SYN probes asked for, but {why}"
    if why:
        notes.append(f"{why}: used connect() with IP_TTL and IP_RECVERR (method connect, no packets captured)")
        return "connect", None
    return "syn", None


def _probe_target(t: Target, use: str, pcap: PcapWriter | None, pj, hj, notes: list[str], *, rounds: int,
                  max_ttl: int, pace_ms: float, timeout_s: float, handshakes: int) -> bool:
    """Probe one target's path and time its handshakes; False when it could
    not be probed at all (why is in ``notes``)."""
    try:
        addr = _resolve(t.host, t.port)
    except OSError as e:
        notes.append(f"{t.host}:{t.port}: no IPv4 address ({e.strerror or e})")
        return False
    try:
        prober = SynProber(addr, t.port, pcap) if use == "syn" else ConnectProber(addr, t.port)
    except OSError as e:
        notes.append(f"{t.host}:{t.port}: cannot probe ({e.strerror or e})")
        return False
    try:
        probes = sweep_ttls(prober, rounds, max_ttl, pace_ms / 1000.0, timeout_s)
    finally:
        prober.close()
    for p in probes:
        pj.write(json.dumps(p.row(t, addr, use)) + "\n")
    if not any(p.answer in ("open", "closed") for p in probes):
        notes.append(f"{t.host}:{t.port}: not reached within {max_ttl} hops")
    _handshakes(t, addr, handshakes, timeout_s, hj)
    return True


def probe(targets: list[Target], out_dir: Path, *, rounds: int = 3, max_ttl: int = 16, pace_ms: float = 50.0,
          timeout_s: float = 1.0, handshakes: int = 5, method: str = "auto") -> CollectorStatus:
    """Probe every target's path and time its handshakes into ``out_dir``.
    ``method``: ``auto`` (SYN probes when a raw socket opens, else
    connect()), ``syn`` or ``connect`` to force one."""
    if not 1 <= rounds <= 255 or not 1 <= max_ttl <= 255:
        raise ValueError("rounds and max_ttl must be within 1..255")
    if method not in ("auto", "syn", "connect"):
        raise ValueError(f"method {method!r}: auto, syn or connect")
    status = CollectorStatus(NAME, started_us=time.time_ns() // 1000)
    status.command = [*kdiag.python_m(sys.modules[__name__]), "--out", str(out_dir),
                      "--rounds", str(rounds), "--max-ttl", str(max_ttl), "--pace-ms", str(pace_ms),
                      "--timeout", str(timeout_s), "--handshakes", str(handshakes), "--method", method]
    uniq = _unique(targets)
    notes: list[str] = []
    use, refused = _method(method, notes) if uniq else (None, None)
    if use is None:
        status.state, status.reason = ("failed", refused) if refused else ("skipped", "no targets")
        status.ended_us = time.time_ns() // 1000
        return status
    if use == "syn":
        import scapy

        status.version = f"scapy {scapy.VERSION}"

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if use != "syn":
        # A capture left by an earlier run would be read instead of this one's results.
        (out_dir / "probes.pcap").unlink(missing_ok=True)
    with contextlib.ExitStack() as files:
        pcap = None
        if use == "syn":
            pcap = PcapWriter(files.enter_context(open(out_dir / "probes.pcap", "wb")),
                              PcapHeader(LINKTYPE_RAW, tick_ns=1))
        pj = files.enter_context(open(out_dir / "probes.jsonl", "w"))
        hj = files.enter_context(open(out_dir / "handshakes.jsonl", "w"))
        failed = sum(not _probe_target(t, use, pcap, pj, hj, notes, rounds=rounds, max_ttl=max_ttl, pace_ms=pace_ms,
                                       timeout_s=timeout_s, handshakes=handshakes) for t in uniq)

    status.files = [str(out_dir / f) for f in FILES if (out_dir / f).exists()]
    status.bytes = sum(Path(f).stat().st_size for f in status.files)
    status.state = "ok" if not failed else ("failed" if failed == len(uniq) else "partial")
    status.reason = "; ".join(notes) or None
    status.ended_us = time.time_ns() // 1000
    return status


def _targets_arg(text: str) -> list[Target]:
    out = []
    for t in json.loads(text):
        if isinstance(t, dict):
            out.append(Target(str(t["host"]), int(t["port"]), t.get("broker")))
        else:
            out.append(Target(str(t[0]), int(t[1]), t[2] if len(t) > 2 else None))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdiag.collectors.tcp_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--targets", required=True, help='JSON: [["host", port, "broker" or null], ...]')
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-ttl", type=int, default=16)
    ap.add_argument("--pace-ms", type=float, default=50.0)
    ap.add_argument("--timeout", type=float, default=1.0)
    ap.add_argument("--handshakes", type=int, default=5)
    ap.add_argument("--method", choices=("auto", "syn", "connect"), default="auto")
    a = ap.parse_args(argv)
    try:
        targets = _targets_arg(a.targets)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        ap.error(f"--targets: {e}")
    st = probe(targets, a.out, rounds=a.rounds, max_ttl=a.max_ttl, pace_ms=a.pace_ms,
               timeout_s=a.timeout, handshakes=a.handshakes, method=a.method)
    print(json.dumps(st.to_dict()))
    return 0


def targets_of(summary: dict, config: dict) -> list[tuple[str, int, str | None]]:
    """Every broker in the cluster metadata; the bootstrap list only when
    the metadata could not be had."""
    found = [(b["host"], int(b["port"]), f"{b['host']}:{b['port']}/{b['id']}")
             for b in summary.get("brokers") or [] if "host" in b]
    if found:
        return found
    out = []
    for hp in config.get("bootstrap.servers", "").split(","):
        host, _, port = hp.strip().rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port), None))
    return out


class TcpProbe(Collector):
    """After kdiag's probe producer has run: the path to each broker it
    used, probed from where it ran (the lab's client namespace)."""

    name = NAME
    raw_dir = "tcp_probe"
    requirements = REQUIRES
    preferences = PREFERS
    modes = frozenset({PROBE})

    def after(self, producer_summary: dict | None) -> None:
        if producer_summary is None:
            return
        targets = targets_of(producer_summary, self.capture.producer_config)
        if not targets:
            return
        log = self.capture.log
        log(f"probing the path to {len(targets)} broker(s): " + ", ".join(f"{h}:{p}" for h, p, _ in targets))
        spec = json.dumps([list(t) for t in targets])
        cmd = [*self.capture.exec_prefix, *kdiag.python_m(sys.modules[__name__]), "--out", str(self.out_dir),
               "--targets", spec]
        res = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        self.record = status_from_output(NAME, res.stdout, (res.stderr.strip().splitlines() or ["no output"])[-1])
        if self.record.get("state") not in ("ok",):
            log(f"path probe: {self.record.get('state')}: {self.record.get('reason')}")


if __name__ == "__main__":
    sys.exit(main())
