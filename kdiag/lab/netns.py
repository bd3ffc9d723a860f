"""Network namespaces and the path between them: building the four
namespaces and their veths, running a command or a function inside one, and
listing or deleting them. ``kdiag.lab.network`` starts the lab on top."""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from kdiag.errors import KdiagError
from kdiag.lab.processes import one_line

ROLES = ("client", "link", "router", "broker")
CLIENT_ADDR = "10.201.1.2"
ROUTER_ADDRS = ("10.201.1.1", "10.201.2.1")
BROKER_ADDR = "10.201.2.2"
PREFIX_LEN = 24

# Offloads that let the kernel hand a packet socket frames larger than the
# MTU (GRO, GSO, TSO) or with the checksum not yet filled in (tx).
OFFLOADS_OFF = ("gro", "off", "gso", "off", "tso", "off", "tx", "off")


class NetLabError(KdiagError):
    """The network lab could not be built, started or torn down; the message says why."""


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


def tls_handshake(host: str, port: int, ca: Path, timeout: float) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with ctx.wrap_socket(raw, server_hostname=host):
                return True
    except (OSError, ssl.SSLError):
        return False


# --- commands ---------------------------------------------------------------


def run(cmd: Sequence[str], what: str | None = None) -> str:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetLabError(f"{what or ' '.join(cmd)} failed: {e}") from None
    if out.returncode != 0:
        detail = one_line(out.stderr or out.stdout) or f"exit {out.returncode}"
        raise NetLabError(f"{what or ' '.join(cmd)} failed: {detail}")
    return out.stdout


def list_netns() -> list[str]:
    out = run(["ip", "netns", "list"])
    # Lines read "name" or "name (id: N)".
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def delete_netns(names: Sequence[str]) -> None:
    present = set(list_netns())
    for ns in names:
        if ns in present:
            with contextlib.suppress(NetLabError):
                run(["ip", "netns", "del", ns])


# `ip netns exec NS` bind-mounts each file of /etc/netns/NS/ over its
# namesake in /etc for the command it runs: a namespace's own resolv.conf.
NETNS_ETC = Path("/etc/netns")


def netns_etc(ns: str) -> Path:
    return NETNS_ETC / ns


def write_resolv_conf(ns: str, nameserver: str, timeout_s: int) -> Path:
    """The resolv.conf that commands under `ip netns exec ns` read."""
    d = netns_etc(ns)
    path = d / "resolv.conf"
    # One server, no search list: every lookup is one query per address
    # family to the lab's resolver, and a late answer is waited for
    # (timeout) rather than asked again.
    text = f"nameserver {nameserver}\noptions timeout:{timeout_s} attempts:1\n"
    for _ in range(3):
        try:
            d.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return path
        except FileNotFoundError:
            # Another lab's teardown removed an empty /etc/netns between
            # the two mkdirs: make it again.
            continue
        except OSError as e:
            raise NetLabError(f"cannot write {path}: {e.strerror}") from None
    raise NetLabError(f"cannot write {path}: {NETNS_ETC} keeps disappearing")


def remove_netns_etc(names: Sequence[str]) -> None:
    """Remove the /etc/netns directories of these namespaces, and
    /etc/netns itself once nothing is left in it."""
    for ns in names:
        if ns and "/" not in ns and ns not in (".", ".."):
            shutil.rmtree(netns_etc(ns), ignore_errors=True)
    with contextlib.suppress(OSError):
        NETNS_ETC.rmdir()


def netns_pids(ns: str) -> list[int]:
    try:
        out = run(["ip", "netns", "pids", ns])
    except NetLabError:
        return []
    return [int(x) for x in out.split() if x.isdigit()]


# --- building the network ------------------------------------------------------


def ifnames(prefix: str) -> dict[str, str]:
    # At most 11 characters, inside IFNAMSIZ's 15.
    return {
        "client": f"{prefix}-c",
        "link_a": f"{prefix}-la",
        "link_b": f"{prefix}-lb",
        "router_a": f"{prefix}-ra",
        "router_b": f"{prefix}-rb",
        "broker": f"{prefix}-b",
    }


def build_network(ns: dict[str, str], ifs: dict[str, str]) -> None:
    def nsexec(role: str, *cmd: str) -> str:
        return run(["ip", "netns", "exec", ns[role], *cmd])

    for role in ROLES:
        run(["ip", "netns", "add", ns[role]])
    for role in ROLES:
        # IPv6 off before the veths exist, so that no router solicitation or
        # DAD frame crosses the delay line or shows in its counters.
        nsexec(role, "sysctl", "-q", "-w",
               "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        run(["ip", "-n", ns[role], "link", "set", "lo", "up"])
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
        run(["ip", "link", "add", left, "netns", ns[lrole], "type", "veth",
              "peer", "name", right, "netns", ns[rrole]])

    for role, dev in (("client", ifs["client"]), ("link", ifs["link_a"]),
                      ("link", ifs["link_b"]), ("router", ifs["router_a"])):
        run(["ip", "netns", "exec", ns[role], "ethtool", "-K", dev, *OFFLOADS_OFF],
             what=f"turning offloads off on {dev} in {ns[role]}")

    for role, dev, addr in (
        ("client", ifs["client"], CLIENT_ADDR),
        ("router", ifs["router_a"], ROUTER_ADDRS[0]),
        ("router", ifs["router_b"], ROUTER_ADDRS[1]),
        ("broker", ifs["broker"], BROKER_ADDR),
    ):
        run(["ip", "-n", ns[role], "addr", "add", f"{addr}/{PREFIX_LEN}", "dev", dev])
    for role, dev in (("client", ifs["client"]), ("link", ifs["link_a"]), ("link", ifs["link_b"]),
                      ("router", ifs["router_a"]), ("router", ifs["router_b"]), ("broker", ifs["broker"])):
        run(["ip", "-n", ns[role], "link", "set", dev, "up"])
    run(["ip", "-n", ns["client"], "route", "add", "default", "via", ROUTER_ADDRS[0]])
    run(["ip", "-n", ns["broker"], "route", "add", "default", "via", ROUTER_ADDRS[1]])
