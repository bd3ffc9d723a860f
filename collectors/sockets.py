"""Live samples of a producer's Kafka sockets and threads, to raw/sockets/.

strace sees TCP_NODELAY only if it was attached before the socket's
connect(); a sampler reads it from the live socket at any time, together with
what the kernel knows about the connection (TCP_INFO: RTT, unacked and
not-yet-sent data, retransmits, the delayed-ACK timeout) and what each of
the producer's threads is doing (CPU, context switches, run-queue wait).

Every ``interval_ms`` one sample is written as JSON lines, all with the same
``ts_us`` (epoch microseconds at the start of the sample), ``pid`` and
``sample`` (0, 1, ...):

``{"kind": "socket", ...}``  one per TCP socket of the target: ``fd``,
    ``inode``, ``local`` and ``remote`` (``ip:port``, ``[ip6]:port``),
    ``state`` (ESTABLISHED, SYN_SENT, ...), ``nodelay`` (the socket's own
    TCP_NODELAY) and ``tcp_info`` (struct tcp_info decoded, kernel units
    named in the keys: ``rtt_us``, ``last_data_sent_ms``, ...; only the fields
    the running kernel filled in) with ``tcp_info_bytes``. When the socket
    could not be read, ``nodelay`` and ``tcp_info`` are null and ``error``
    says why; ``local``/``remote``/``state`` then come from the last listing.
``{"kind": "thread", ...}`` one per thread: ``tid``, ``name`` (the thread's
    comm, e.g. rdk:broker1), ``state`` (R, S, D, ...), ``utime_ticks``,
    ``stime_ticks``, ``clk_tck``, ``run_ns`` and ``runq_wait_ns`` (from
    schedstat: exact CPU time and time spent runnable but waiting for a
    core), ``timeslices``, ``voluntary_ctxt``, ``nonvoluntary_ctxt``,
    ``last_cpu``.
``{"kind": "host", ...}``   one per sample, written last: ``cpu_pct`` (busy
    percent per core since the previous sample; null in the first),
    ``ncpu``, ``load1/5/15``,
    ``collector_cpu_ms`` (this sampler's CPU time so far),
    ``sample_cpu_ms`` (what this sample cost) and ``cgroup`` (the CPU limit
    of the target's own cgroup and how often it bit: ``path``,
    ``quota_us``/``period_us`` (quota null when unlimited), ``nr_periods``,
    ``nr_throttled``, ``throttled_us``; counters from the cgroup's
    ``cpu.stat``, v1 or v2; null when the cgroup cannot be read).

How a socket is read: ``pidfd_open(pid)`` once, then per socket and sample
``pidfd_getfd(pidfd, fd)`` duplicates the producer's descriptor into this
process; ``getsockopt`` reads TCP_NODELAY and TCP_INFO from the duplicate,
which is closed at once. The producer is never stopped or signalled and its
socket is not changed. This needs root or ptrace rights over the target.

Which sockets: psutil's ``net_connections`` (TCP, not LISTEN), optionally
only those whose remote port is in ``ports``. That listing costs ~8 ms, so it
runs at most once a second and the fd list is reused in between; a socket
opened since is seen at the next listing. psutil reads the connection table
of the sampler's network namespace, so for a target in another namespace
the target's socket descriptors are probed directly instead.

Cost, measured on 2 cores against a librdkafka producer (1 broker socket,
5 threads): ~1 ms CPU per sample, ~11 ms per listing, 2.4 % of one core at
the default 100 ms; the status reports it for every run.

Stops when the target exits, at ``duration_s``, when ``stop`` is set, or
(command line) on SIGTERM/SIGINT. The last stdout line of the command is the
status as JSON, with the sampler's own cost.

Command line::

    python -m kdiag.collectors.sockets --pid PID --out FILE.jsonl [--interval-ms 100]
        [--duration S] [--ports 9092,9093]
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import platform
import select
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from kdiag.collectors.base import CollectorStatus, Requirement, dies_with_parent, status_from_output, unmet
import kdiag

NAME = "sockets"
# Not a hard need: without it the sockets are still listed, without
# TCP_NODELAY and TCP_INFO.
PREFERS = (Requirement(root=True, why="pidfd_getfd of the producer's sockets (or ptrace rights over it)"),)

SYS_PIDFD_OPEN = 434
SYS_PIDFD_GETFD = 438
LISTING_EVERY_S = 1.0
TCP_INFO_BUF = 512

TCP_STATES = {
    1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
    6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
    11: "CLOSING", 12: "NEW_SYN_RECV",
}

# struct tcp_info (include/uapi/linux/tcp.h): (key, offset, struct format).
# The kernel copies min(its size, the buffer) and reports the length, so a
# field is decoded only when it lies wholly inside what was returned: older
# kernels return a shorter struct, newer ones append fields.
# Keys carry the kernel's unit; fields without a unit suffix count segments
# or events.
_U8, _U16, _U32, _U64 = "B", "H", "I", "Q"
TCP_INFO_LAYOUT: tuple[tuple[str, int, str], ...] = (
    ("state", 0, _U8),
    ("ca_state", 1, _U8),
    ("retransmits", 2, _U8),
    ("probes", 3, _U8),
    ("backoff", 4, _U8),
    ("options", 5, _U8),
    # byte 6: snd_wscale:4, rcv_wscale:4; byte 7: delivery_rate_app_limited:1,
    # fastopen_client_fail:2 (decoded below)
    ("rto_us", 8, _U32),
    ("ato_us", 12, _U32),
    ("snd_mss_bytes", 16, _U32),
    ("rcv_mss_bytes", 20, _U32),
    ("unacked", 24, _U32),
    ("sacked", 28, _U32),
    ("lost", 32, _U32),
    ("retrans", 36, _U32),
    ("fackets", 40, _U32),
    ("last_data_sent_ms", 44, _U32),
    # 48 last_ack_sent: never filled in by Linux
    ("last_data_recv_ms", 52, _U32),
    ("last_ack_recv_ms", 56, _U32),
    ("pmtu_bytes", 60, _U32),
    ("rcv_ssthresh_bytes", 64, _U32),
    ("rtt_us", 68, _U32),
    ("rttvar_us", 72, _U32),
    ("snd_ssthresh", 76, _U32),
    ("snd_cwnd", 80, _U32),
    ("advmss_bytes", 84, _U32),
    ("reordering", 88, _U32),
    ("rcv_rtt_us", 92, _U32),
    ("rcv_space_bytes", 96, _U32),
    ("total_retrans", 100, _U32),
    ("pacing_rate_bytes_s", 104, _U64),
    ("max_pacing_rate_bytes_s", 112, _U64),
    ("bytes_acked", 120, _U64),
    ("bytes_received", 128, _U64),
    ("segs_out", 136, _U32),
    ("segs_in", 140, _U32),
    ("notsent_bytes", 144, _U32),
    ("min_rtt_us", 148, _U32),
    ("data_segs_in", 152, _U32),
    ("data_segs_out", 156, _U32),
    ("delivery_rate_bytes_s", 160, _U64),
    ("busy_time_us", 168, _U64),
    ("rwnd_limited_us", 176, _U64),
    ("sndbuf_limited_us", 184, _U64),
    ("delivered", 192, _U32),
    ("delivered_ce", 196, _U32),
    ("bytes_sent", 200, _U64),
    ("bytes_retrans", 208, _U64),
    ("dsack_dups", 216, _U32),
    ("reord_seen", 220, _U32),
    ("rcv_ooopack", 224, _U32),
    ("snd_wnd_bytes", 228, _U32),
    ("rcv_wnd_bytes", 232, _U32),
    ("rehash", 236, _U32),
    ("total_rto", 240, _U16),
    ("total_rto_recoveries", 242, _U16),
    ("total_rto_time_ms", 244, _U32),
)
_LAYOUT = tuple((k, off, struct.Struct("=" + f)) for k, off, f in TCP_INFO_LAYOUT)


def decode_tcp_info(buf: bytes) -> dict[str, int]:
    """The fields of struct tcp_info that ``buf`` holds whole."""
    n = len(buf)
    out: dict[str, int] = {}
    for key, off, st in _LAYOUT:
        if off + st.size > n:
            break
        out[key] = st.unpack_from(buf, off)[0]
        if off == 5 and n >= 8:
            out["snd_wscale"] = buf[6] & 0x0F
            out["rcv_wscale"] = buf[6] >> 4
            out["delivery_rate_app_limited"] = buf[7] & 0x01
            out["fastopen_client_fail"] = (buf[7] >> 1) & 0x03
    return out


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(nr: int, *args: int) -> int:
    r = _libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def pidfd_open(pid: int) -> int:
    return _syscall(SYS_PIDFD_OPEN, pid, 0)


def pidfd_getfd(pidfd: int, fd: int) -> int:
    return _syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)


def _addr(a) -> str | None:
    if not a:
        return None
    host, port = a[0], a[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _port(a) -> int | None:
    return a[1] if a else None


def _errtext(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0, str(e.errno))
    text = f"{name} {e.strerror or e}"
    if e.errno in (errno.EPERM, errno.EACCES):
        text += " (needs root or ptrace rights over the target)"
    elif e.errno == errno.ENOSYS:
        text += " (kernel before 5.6 has no pidfd_getfd)"
    return text


@dataclass
class _Known:
    """A socket as the last listing saw it."""

    fd: int
    local: str | None
    remote: str | None
    remote_port: int | None
    state: str | None


@dataclass
class SocketsStatus(CollectorStatus):
    """The collector status plus what sampling cost."""

    samples: int = 0
    stopped_by: str | None = None       # target_exit, duration, stop, signal, error
    interval_ms: float | None = None
    cpu_ms: float | None = None         # the sampler's CPU time, all samples
    cpu_ms_per_sample: float | None = None
    cpu_ms_max_sample: float | None = None
    cpu_pct: float | None = None        # of one core, over the sampling wall time


class Sampler:
    """One target process; ``sample()`` returns one sample's JSON objects."""

    def __init__(self, pid: int, ports: set[int] | None = None) -> None:
        self.pid = pid
        self.ports = ports
        self.proc = psutil.Process(pid)
        self.pidfd: int | None = None
        self.pidfd_error: str | None = None
        try:
            self.pidfd = pidfd_open(pid)
        except OSError as e:
            self.pidfd_error = f"pidfd_open: {_errtext(e)}"
        else:
            self.exit_poll = select.poll()
            self.exit_poll.register(self.pidfd, select.POLLIN)
            if not self.proc.is_running():
                # The pid was reused between the two look-ups.
                self.close()
                raise psutil.NoSuchProcess(pid)
        self.clk_tck = os.sysconf("SC_CLK_TCK")
        self.known: list[_Known] = []
        self.listed_at: float | None = None
        self.relist = True
        self.problems: dict[str, str] = {}     # what limited the data, once each
        self.other_netns = self._other_netns()
        # The first sample has no earlier one to take CPU deltas from; a
        # baseline taken here would cover a few ms, below the 10 ms tick.
        self.prev_cpu = None
        self.seq = 0
        self.cgroup_mounts = cgroup_mounts()

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def _other_netns(self) -> bool:
        try:
            return os.stat(f"/proc/{self.pid}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino
        except OSError:
            return False

    def target_exited(self) -> bool:
        if self.pidfd is not None:
            # A pidfd turns readable when the process exits, zombie or not,
            # and never points at a reused pid.
            return bool(self.exit_poll.poll(0))
        try:
            return not self.proc.is_running() or self.proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    # --- sockets ---------------------------------------------------------

    def _list(self) -> None:
        if self.other_netns and self.pidfd is not None:
            self.known = self._list_fds()
        else:
            try:
                conns = self.proc.net_connections(kind="tcp")
            except psutil.AccessDenied:
                if not self.target_exited():
                    self.problems["listing"] = ("cannot list the target's sockets: access denied "
                                                "(needs root or ptrace rights)")
                conns = []
            except psutil.NoSuchProcess:
                conns = []
            except psutil.Error as e:
                self.problems["listing"] = f"cannot list the target's sockets: {e}"
                conns = []
            self.known = [
                _Known(c.fd, _addr(c.laddr), _addr(c.raddr), _port(c.raddr), c.status)
                for c in conns
                if c.fd is not None and c.fd >= 0 and c.status != psutil.CONN_LISTEN
            ]
        if self.ports is not None:
            self.known = [k for k in self.known if k.remote_port in self.ports]
        self.known.sort(key=lambda k: k.fd)

    def _list_fds(self) -> list[_Known]:
        found = []
        base = f"/proc/{self.pid}/fd"
        try:
            names = os.listdir(base)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ESRCH) and not self.target_exited():
                self.problems["listing"] = f"cannot list the target's descriptors: {_errtext(e)}"
            return found
        for name in names:
            try:
                if not os.readlink(f"{base}/{name}").startswith("socket:"):
                    continue
            except OSError:
                continue
            try:
                rec = self._read_socket(int(name))
            except OSError as e:
                if e.errno not in (errno.EBADF, errno.ESRCH):
                    self.problems["listing"] = (f"target in another network namespace, its sockets not "
                                                f"listed: pidfd_getfd: {_errtext(e)}")
                continue
            if rec is not None and rec.get("state") != "LISTEN":
                found.append(_Known(int(name), rec["local"], rec["remote"], rec.pop("_remote_port"), rec["state"]))
        return found

    def _read_socket(self, fd: int) -> dict | None:
        """The socket's fields from a duplicate of its descriptor; None when
        the fd is gone or is no longer a TCP socket."""
        dup = pidfd_getfd(self.pidfd, fd)
        try:
            s = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            return None
        try:
            if s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM \
                    or s.proto not in (0, socket.IPPROTO_TCP):
                return None
            nodelay = bool(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BUF)
            info = decode_tcp_info(raw)
            local = s.getsockname()
            try:
                peer = s.getpeername()
            except OSError:
                peer = None
            return {
                "inode": os.fstat(dup).st_ino,
                "local": _addr(local),
                "remote": _addr(peer),
                "_remote_port": _port(peer),
                "state": TCP_STATES.get(info.get("state", -1)),
                "nodelay": nodelay,
                "tcp_info_bytes": len(raw),
                "tcp_info": info,
                "error": None,
            }
        finally:
            s.close()

    def _sockets(self, base: dict) -> list[dict]:
        now = time.monotonic()
        if self.relist or self.listed_at is None or now - self.listed_at >= LISTING_EVERY_S:
            self._list()
            self.listed_at, self.relist = now, False
        out = []
        for k in self.known:
            rec = None
            if self.pidfd is None:
                err = self.pidfd_error
            else:
                try:
                    rec = self._read_socket(k.fd)
                    err = None
                except OSError as e:
                    if e.errno == errno.EBADF:
                        self.relist = True
                        continue
                    if e.errno == errno.ESRCH:
                        continue    # the target is exiting; the loop sees it next
                    err = f"pidfd_getfd: {_errtext(e)}"
                if rec is None and err is None:
                    # The fd now holds something else: list again next time.
                    self.relist = True
                    continue
            if rec is None:
                self.problems.setdefault("nodelay", f"TCP_NODELAY and TCP_INFO not read: {err}")
                rec = {"inode": None, "local": k.local, "remote": k.remote, "state": k.state,
                       "nodelay": None, "tcp_info_bytes": None, "tcp_info": None, "error": err}
            else:
                port = rec.pop("_remote_port")
                if self.ports is not None and port not in self.ports:
                    self.relist = True
                    continue
                if rec["remote"] != k.remote:
                    self.relist = True
            out.append({"kind": "socket", **base, "fd": k.fd, **rec})
        return out

    # --- threads -----------------------------------------------------------

    def _threads(self, base: dict) -> list[dict]:
        task = f"/proc/{self.pid}/task"
        try:
            tids = os.listdir(task)
        except OSError:
            return []
        out = []
        for tid in tids:
            d = f"{task}/{tid}"
            try:
                stat = _read(f"{d}/stat")
                status = _read(f"{d}/status")
            except OSError:
                continue    # the thread ended between listing and reading
            try:
                sched = _read(f"{d}/schedstat").split()
            except OSError:
                sched = []
            # comm sits in parentheses and may itself hold spaces or ')'.
            lp, rp = stat.find("("), stat.rfind(")")
            rest = stat[rp + 2:].split()
            vol = nonvol = None
            for line in status.splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    vol = int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    nonvol = int(line.split()[1])
            out.append({
                "kind": "thread", **base, "tid": int(tid),
                # stat's second field is the same kernel string as
                # task/TID/comm; reading it here saves a file per thread.
                "name": stat[lp + 1:rp],
                "state": rest[0] if rest else None,
                "utime_ticks": int(rest[11]) if len(rest) > 12 else None,
                "stime_ticks": int(rest[12]) if len(rest) > 12 else None,
                "clk_tck": self.clk_tck,
                "last_cpu": int(rest[36]) if len(rest) > 36 else None,
                "run_ns": int(sched[0]) if len(sched) >= 3 else None,
                "runq_wait_ns": int(sched[1]) if len(sched) >= 3 else None,
                "timeslices": int(sched[2]) if len(sched) >= 3 else None,
                "voluntary_ctxt": vol,
                "nonvoluntary_ctxt": nonvol,
            })
        out.sort(key=lambda r: r["tid"])
        return out

    # --- host --------------------------------------------------------------

    def _host(self, base: dict) -> dict:
        cur = psutil.cpu_times(percpu=True)
        pct = None
        if self.prev_cpu is not None:
            pct = []
            for a, b in zip(self.prev_cpu, cur):
                # Linux counts guest time inside user time as well.
                total = _total(b) - _total(a)
                idle = (b.idle - a.idle) + (getattr(b, "iowait", 0.0) - getattr(a, "iowait", 0.0))
                pct.append(round(100.0 * (total - idle) / total, 1) if total > 0 else None)
        self.prev_cpu = cur
        l1, l5, l15 = os.getloadavg()
        return {"kind": "host", **base, "ncpu": len(cur), "cpu_pct": pct,
                "load1": l1, "load5": l5, "load15": l15,
                # Looked up every sample: a process can move (kdiag's own
                # probe joins its limited cgroup only after it started).
                "cgroup": cgroup_cpu(cpu_cgroup_dir(self.pid, self.cgroup_mounts))}

    def sample(self) -> list[dict]:
        base = {"ts_us": time.time_ns() // 1000, "pid": self.pid, "sample": self.seq}
        self.seq += 1
        return [*self._sockets(base), *self._threads(base), self._host(base)]


def cgroup_mounts() -> tuple[str | None, str | None]:
    """Mount points of the v1 cgroup hierarchy holding the cpu controller and
    of the v2 hierarchy, from /proc/self/mountinfo."""
    v1 = v2 = None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None, None
    for line in text.splitlines():
        # "36 25 0:31 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu"
        pre, sep, post = line.partition(" - ")
        if not sep:
            continue
        fields, after = pre.split(), post.split()
        if len(fields) < 5 or len(after) < 3:
            continue
        if after[0] == "cgroup" and "cpu" in after[2].split(",") and v1 is None:
            v1 = fields[4]
        elif after[0] == "cgroup2" and v2 is None:
            v2 = fields[4]
    return v1, v2


def cpu_cgroup_dir(pid: int, mounts: tuple[str | None, str | None] | None = None) -> tuple[str, int] | None:
    """(directory, cgroup version) of the cgroup that limits ``pid``'s CPU:
    the v1 hierarchy with the cpu controller when there is one, else v2."""
    try:
        lines = _read(f"/proc/{pid}/cgroup").splitlines()
    except OSError:
        return None
    v1_mount, v2_mount = mounts or cgroup_mounts()
    v2_path = None
    for line in lines:
        # "4:cpu,cpuacct:/kubepods/pod1/c2" (v1) or "0::/user.slice" (v2)
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and not controllers:
            v2_path = path
        elif "cpu" in controllers.split(",") and v1_mount:
            return os.path.join(v1_mount, path.lstrip("/")), 1
    if v2_path is not None and v2_mount:
        return os.path.join(v2_mount, v2_path.lstrip("/")), 2
    return None


def cgroup_cpu(where: tuple[str, int] | None) -> dict | None:
    """The cgroup's CPU limit and throttling counters (cumulative)."""
    if where is None:
        return None
    d, version = where
    out: dict = {"path": d, "version": version, "quota_us": None, "period_us": None,
                 "nr_periods": None, "nr_throttled": None, "throttled_us": None}
    try:
        if version == 1:
            quota = int(_read(f"{d}/cpu.cfs_quota_us"))
            out["quota_us"] = quota if quota > 0 else None
            out["period_us"] = int(_read(f"{d}/cpu.cfs_period_us"))
        else:
            # cpu.max: "max 100000" or "50000 100000"
            q, _, per = _read(f"{d}/cpu.max").partition(" ")
            out["quota_us"] = int(q) if q.isdigit() else None
            out["period_us"] = int(per) if per.strip().isdigit() else None
    except (OSError, ValueError):
        pass
    try:
        stat = dict(line.split(None, 1) for line in _read(f"{d}/cpu.stat").splitlines() if " " in line)
    except (OSError, ValueError):
        return out
    num = lambda k: int(stat[k]) if k in stat and stat[k].strip().isdigit() else None  # noqa: E731
    out["nr_periods"], out["nr_throttled"] = num("nr_periods"), num("nr_throttled")
    if version == 1:
        ns = num("throttled_time")
        out["throttled_us"] = None if ns is None else ns // 1000
    else:
        out["throttled_us"] = num("throttled_usec")
    return out


def _total(t) -> float:
    return sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _read(path: str) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 8192).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _dumps(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


def sample_loop(pid: int, out_path, interval_ms: float = 100, duration_s: float | None = None,
                ports=None, stop: threading.Event | None = None) -> SocketsStatus:
    """Sample ``pid`` every ``interval_ms`` into ``out_path`` (JSON lines)
    until it exits, ``duration_s`` passes or ``stop`` is set."""
    out_path = Path(out_path)
    st = SocketsStatus(NAME, files=[str(out_path)], version=platform.release(), interval_ms=float(interval_ms))
    st.started_us = time.time_ns() // 1000
    stop = stop or threading.Event()
    interval = max(float(interval_ms), 1.0) / 1000.0
    try:
        sampler = Sampler(pid, set(ports) if ports else None)
    except psutil.NoSuchProcess:
        st.state, st.reason, st.stopped_by = "failed", f"no process {pid}", "error"
        st.ended_us = time.time_ns() // 1000
        return st
    except psutil.Error as e:
        st.state, st.reason, st.stopped_by = "failed", f"process {pid}: {e}", "error"
        st.ended_us = time.time_ns() // 1000
        return st
    if sampler.pidfd_error:
        sampler.problems["pidfd"] = sampler.pidfd_error
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        f = open(out_path, "w", encoding="utf-8")
    except OSError as e:
        sampler.close()
        st.state, st.reason, st.stopped_by = "failed", f"cannot write {out_path}: {e.strerror or e}", "error"
        st.ended_us = time.time_ns() // 1000
        return st

    cpu0 = time.thread_time()
    wall0 = time.monotonic()
    deadline = None if duration_s is None else wall0 + float(duration_s)
    costs: list[float] = []
    next_at = wall0
    try:
        while True:
            if stop.is_set():
                st.stopped_by = "stop"
                break
            if sampler.target_exited():
                st.stopped_by = "target_exit"
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                st.stopped_by = "duration"
                break
            if now < next_at:
                wait = next_at - now if deadline is None else min(next_at, deadline) - now
                stop.wait(max(wait, 0.0))
                continue
            c0 = time.thread_time()
            lines = sampler.sample()
            host = lines[-1]
            cost = (time.thread_time() - c0) * 1000.0
            # Writing a sample happens after its host line is built, so its
            # cost shows in the next line's collector_cpu_ms (and in the status).
            host["sample_cpu_ms"] = round(cost, 3)
            host["collector_cpu_ms"] = round((time.thread_time() - cpu0) * 1000.0, 3)
            f.write("\n".join(_dumps(o) for o in lines) + "\n")
            f.flush()
            costs.append((time.thread_time() - c0) * 1000.0)
            # Fixed rate: a slow sample delays the next slot, it does not
            # pile up catch-up samples.
            next_at += interval
            if next_at < time.monotonic():
                next_at = time.monotonic() + interval
    except KeyboardInterrupt:
        st.stopped_by = "signal"
    except OSError as e:
        st.stopped_by = "error"
        sampler.problems["write"] = f"sampling stopped: {e.strerror or e}"
    finally:
        f.close()
        sampler.close()

    wall = time.monotonic() - wall0
    cpu_ms = (time.thread_time() - cpu0) * 1000.0
    st.samples = len(costs)
    st.cpu_ms = round(cpu_ms, 3)
    st.cpu_ms_per_sample = round(sum(costs) / len(costs), 3) if costs else None
    st.cpu_ms_max_sample = round(max(costs), 3) if costs else None
    st.cpu_pct = round(100.0 * cpu_ms / 1000.0 / wall, 2) if wall > 0 else None
    st.ended_us = time.time_ns() // 1000
    try:
        st.bytes = out_path.stat().st_size
    except OSError:
        st.bytes = None
    problems = list(sampler.problems.values())
    if not costs:
        st.state = "failed"
        problems.insert(0, "no sample taken" + (" (the target had already exited)"
                                                  if st.stopped_by == "target_exit" else ""))
    elif problems:
        st.state = "partial"
    else:
        st.state = "ok"
    st.reason = "; ".join(problems) or None
    return st


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdiag.collectors.sockets", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pid", required=True, type=int)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--interval-ms", type=float, default=100.0)
    ap.add_argument("--duration", type=float, default=None, help="seconds; default: until the target exits")
    ap.add_argument("--ports", default=None, help="only sockets whose remote port is one of these, e.g. 9092,9093")
    a = ap.parse_args(argv)
    ports = None
    if a.ports:
        try:
            ports = {int(p) for p in a.ports.split(",") if p.strip()}
        except ValueError:
            ap.error(f"--ports: not a list of port numbers: {a.ports!r}")
    if a.interval_ms <= 0:
        ap.error("--interval-ms must be positive")

    stop = threading.Event()
    got: list[int] = []

    def on_signal(signum, frame):
        got.append(signum)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        st = sample_loop(a.pid, a.out, interval_ms=a.interval_ms, duration_s=a.duration, ports=ports, stop=stop)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if got and st.stopped_by == "stop":
        st.stopped_by = "signal"
    st.command = [*kdiag.python_m(sys.modules[__name__]), *(sys.argv[1:] if argv is None else argv)]
    print(json.dumps(st.to_dict()))
    return 0 if st.state in ("ok", "partial") else 1


def check() -> str | None:
    """Why sockets will be listed without TCP_NODELAY/TCP_INFO, if so."""
    return unmet(PREFERS)


if __name__ == "__main__":
    sys.exit(main())


def spawn(pid: int, out, duration_s: float | None = None):
    """The sampler as a child process of the caller, dying with it."""
    import subprocess

    cmd = [*kdiag.python_m(sys.modules[__name__]), "--pid", str(pid), "--out", str(out)]
    if duration_s:
        cmd += ["--duration", str(duration_s)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            preexec_fn=dies_with_parent, start_new_session=True, text=True)


def collect(proc) -> dict:
    """Stop a spawned sampler (if still running) and return its status."""
    import subprocess

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return status_from_output(NAME, out, f"exit {proc.returncode}, no status")
