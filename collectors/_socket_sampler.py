"""One sample of a producer's sockets, threads, host and CPU cgroup, as
the sockets collector (``kdiag.collectors.sockets``) writes it."""
from __future__ import annotations

import errno
import json
import os
import select
import socket
import time
from dataclasses import dataclass

import psutil

from kdiag.collectors._tcp_info import TCP_INFO_BUF, TCP_STATES, decode_tcp_info, errno_text, pidfd_getfd, pidfd_open

LISTING_EVERY_S = 1.0


def _addr(a) -> str | None:
    if not a:
        return None
    host, port = a[0], a[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _port(a) -> int | None:
    return a[1] if a else None


@dataclass
class _Known:
    """A socket as the last listing saw it."""

    fd: int
    local: str | None
    remote: str | None
    remote_port: int | None
    state: str | None



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
            self.pidfd_error = f"pidfd_open: {errno_text(e)}"
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
                self.problems["listing"] = f"cannot list the target's descriptors: {errno_text(e)}"
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
                                                f"listed: pidfd_getfd: {errno_text(e)}")
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
                    err = f"pidfd_getfd: {errno_text(e)}"
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


def compact_json(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))
