"""bpftrace's records -> the strace text the ``syscalls`` parser reads.

The tracer (``kdiag.collectors.bpftrace``) prints one tab-separated record per
call at its exit; the call table here is the format both sides share.
bpfcalls's records, made into the same lines, also carry a socket write's
first bytes, which become its buffer as strace ``-s`` writes one (``"..."...``).
"""
from __future__ import annotations

import errno as errno_mod
import heapq
import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

# Two chunks of 128 bytes: one printf with both exceeds the BPF stack
# (512 bytes); -s 256 is what the strace collector keeps.
CHUNK = 128
STRSIZE = 256
# The program's first record: every probe is attached.
READY = "R\tready"
# Records are written when a call returns, into one buffer per CPU, and
# bpftrace reads a quiet CPU's buffer late, at the latest when it exits:
# measured here, records came up to the whole run (2 s of a 3 s trace) after
# later ones. So the converter sorts the whole capture, in runs of this many
# records (~40 MB of Python objects) merged from files beside the output.
RUN_RECORDS = 100_000

# code -> (syscall, enter fields for a0..a3, exit record kind)
# Kinds: fd (first argument is an fd, named as -yy does), write (fd; fd <= 2
# also carries the data), poll, connect, sockopt, socket, plain. The calls
# librdkafka makes on its sockets and log, no more: each is two probes, and
# bpftrace takes ~0.1 s of CPU a probe to compile them.
CALLS: dict[int, tuple[str, tuple[str | None, ...], str]] = {
    1: ("write", ("fd", "buf", "count", None), "write"),
    2: ("read", ("fd", "buf", "count", None), "fd"),
    3: ("writev", ("fd", "vec", "vlen", None), "fd"),
    5: ("sendto", ("fd", "buff", "len", "flags"), "fd"),
    6: ("recvfrom", ("fd", "ubuf", "size", "flags"), "fd"),
    7: ("sendmsg", ("fd", "msg", "flags", None), "fd"),
    8: ("recvmsg", ("fd", "msg", "flags", None), "fd"),
    11: ("poll", ("nfds", "ufds", "timeout_msecs", None), "poll"),
    12: ("ppoll", ("nfds", "ufds", "tsp", None), "poll"),
    13: ("epoll_wait", ("epfd", "events", "maxevents", "timeout"), "fd"),
    14: ("epoll_pwait", ("epfd", "events", "maxevents", "timeout"), "fd"),
    15: ("connect", ("fd", "uservaddr", "addrlen", None), "connect"),
    16: ("socket", ("family", "type", "protocol", None), "socket"),
    17: ("setsockopt", ("fd", "level", "optname", "optval"), "sockopt"),
    18: ("getsockopt", ("fd", "level", "optname", "optval"), "sockopt"),
    19: ("close", ("fd", None, None, None), "plain"),
}
CODE_OF = {name: code for code, (name, _, _) in CALLS.items()}
# The writes whose first bytes bpfcalls keeps when the fd is a socket.
SENDS = ("write", "writev", "sendto", "sendmsg")
EXIT_GROUP = 99


@dataclass
class Converted:
    lines: int = 0
    lost_events: int = 0
    # records bpftrace wrote that do not read as one (a line cut at a kill)
    bad_records: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    first_ns: int | None = None
    last_ns: int | None = None


LOST = re.compile(r"^Lost (\d+) events")
_HEX = re.compile(rb"\\x([0-9a-fA-F]{2})")
AF = {1: "AF_UNIX", 2: "AF_INET", 10: "AF_INET6", 16: "AF_NETLINK", 17: "AF_PACKET"}
SOCK_TYPES = {1: "SOCK_STREAM", 2: "SOCK_DGRAM", 3: "SOCK_RAW", 5: "SOCK_SEQPACKET"}
PROTOS = {0: "0", 6: "IPPROTO_TCP", 17: "IPPROTO_UDP"}
LEVELS = {0: "SOL_IP", 1: "SOL_SOCKET", 6: "SOL_TCP", 41: "SOL_IPV6"}
OPTS = {
    1: {2: "SO_REUSEADDR", 3: "SO_TYPE", 4: "SO_ERROR", 7: "SO_SNDBUF", 8: "SO_RCVBUF", 9: "SO_KEEPALIVE",
        13: "SO_LINGER", 15: "SO_REUSEPORT", 20: "SO_RCVTIMEO", 21: "SO_SNDTIMEO"},
    6: {1: "TCP_NODELAY", 2: "TCP_MAXSEG", 3: "TCP_CORK", 4: "TCP_KEEPIDLE", 5: "TCP_KEEPINTVL", 6: "TCP_KEEPCNT",
        11: "TCP_INFO", 18: "TCP_USER_TIMEOUT"},
}
POLL_BITS = [(0x1, "POLLIN"), (0x2, "POLLPRI"), (0x4, "POLLOUT"), (0x8, "POLLERR"), (0x10, "POLLHUP"),
             (0x20, "POLLNVAL"), (0x40, "POLLRDNORM"), (0x100, "POLLWRNORM"), (0x2000, "POLLRDHUP")]
MSG_BITS = [(0x40, "MSG_DONTWAIT"), (0x4000, "MSG_NOSIGNAL"), (0x8000, "MSG_MORE"), (0x2, "MSG_PEEK")]
S_IFSOCK, S_IFIFO, S_IFREG, S_IFCHR, S_IFDIR = 0xC000, 0x1000, 0x8000, 0x2000, 0x4000


def _bits(v: int, table) -> str:
    names = [n for b, n in table if v & b]
    rest = v & ~sum(b for b, _ in table)
    if rest:
        names.append(hex(rest))
    return "|".join(names) or "0"


def _ip4(v: int) -> str:
    # skc_rcv_saddr/skc_daddr are in network order, read as a little-endian u32
    return str(ipaddress.IPv4Address(v.to_bytes(4, "little")))


def _ip6(words: list[int]) -> str:
    return str(ipaddress.IPv6Address(b"".join(w.to_bytes(4, "little") for w in words)))


def fd_name(mode: int, ino: int, fam: int, typ: int, proto: int, lport: int, rport: int, la: int, ra: int,
            l6: list[int], r6: list[int], name: str) -> str | None:
    """What ``strace -yy`` prints inside ``<...>`` for this fd, or None when
    the fd was not open."""
    if mode == S_IFSOCK:
        if fam in (2, 10):
            kind = {6: "TCP", 17: "UDP"}.get(proto, "socket")
            if kind == "socket":
                return f"socket:[{ino}]"
            if fam == 10:
                kind += "v6"
            if not rport:
                return f"{kind}:[{ino}]"
            if fam == 2:
                return f"{kind}:[{_ip4(la)}:{lport}->{_ip4(ra)}:{rport}]"
            return f"{kind}:[[{_ip6(l6)}]:{lport}->[{_ip6(r6)}]:{rport}]"
        if fam == 1:
            return f"UNIX-{SOCK_TYPES.get(typ, 'SOCK').removeprefix('SOCK_')}:[{ino}]"
        if fam == 16:
            return f"NETLINK:[{ino}]"
        return f"socket:[{ino}]"
    if mode == S_IFIFO:
        return f"pipe:[{ino}]"
    if mode == 0 and ino == 0:
        return None
    if mode == 0 and name.startswith("["):
        return f"anon_inode:{name}"
    return name or None


def _fd(fd: int, info: str | None) -> str:
    return f"{fd}<{info}>" if info else str(fd)


def _ret(ret: int, fd_info: str | None = None) -> str:
    if ret < 0 and -ret in errno_mod.errorcode:
        return f"-1 {errno_mod.errorcode[-ret]} ({os.strerror(-ret)})"
    return _fd(ret, fd_info) if fd_info else str(ret)


def _escape(b: int) -> str:
    c = chr(b)
    if c in '"\\':
        return "\\" + c
    if c == "\n":
        return "\\n"
    if c == "\t":
        return "\\t"
    return c if 0x20 <= b < 0x7F else f"\\x{b:02x}"


_ESCAPES = {b: _escape(b) for b in range(256)}


def _quote(data: bytes, more: bool) -> str:
    """A C string as strace writes it (with -x's \\xNN for the rest)."""
    return '"' + data.decode("latin-1").translate(_ESCAPES) + '"' + ("..." if more else "")


def _unbuf(text: str) -> bytes:
    """bpftrace's %r: printable bytes as they are, the rest as \\xNN. A
    backslash is not escaped, so a literal ``\\x41`` in the data reads as
    ``A``: log lines do not hold that."""
    return _HEX.sub(lambda m: bytes([int(m.group(1), 16)]), text.encode("latin-1", "replace"))


@dataclass
class _Rec:
    tid: int
    ts: int
    end: int
    body: str               # the line after "PID TIME "
    data: bytes | None = None
    count: int = 0
    head: str = ""          # for D records: the line up to the data
    tail: str = ""


def _line(r: _Rec, offset_ns: int) -> str:
    t = r.ts + offset_ns
    body = r.body
    if r.data is not None:
        body = r.head + _quote(r.data[:r.count], r.count > STRSIZE) + r.tail
    return f"{r.tid:<5} {t // 1_000_000_000}.{(t % 1_000_000_000) // 1000:06d} {body}\n"


def _dur(ns: int) -> str:
    return f"<{ns / 1e9:.6f}>"


# The fields of an fd -> its -yy name: a producer uses a few fds, millions of times.
_FD_NAMES: dict[tuple, str] = {}


def _record(parts: list[str], name_of: dict[int, str]) -> _Rec | None:
    tag = parts[0]
    if tag in ("E", "G"):
        tid, ts, code = int(parts[1]), int(parts[2]), int(parts[3])
        body = f"+++ exited with {code} +++" if tag == "E" else f"exit_group({code}) = ?"
        return _Rec(tid, ts, ts, body)
    tid, ts, dur, code, ret = (int(x) for x in parts[1:6])
    name = CALLS[code][0]
    end = ts + dur
    if tag == "D":
        fd, count = int(parts[6]), int(parts[7])
        data = _unbuf(parts[8]) if len(parts) > 8 else b""
        return _Rec(tid, ts, end, "", data, min(count, STRSIZE), f"{name}({fd}, ", f", {count}) = {_ret(ret)} {_dur(dur)}")
    if tag == "X":
        a0 = int(parts[6])
        args = str(a0) if name == "close" else f"{a0}, ..."
        return _Rec(tid, ts, end, f"{name}({args}) = {_ret(ret)} {_dur(dur)}")
    if tag == "P":
        nfds, timeout = int(parts[6]), int(parts[7])
        ents = [(int(parts[8 + 3 * i]), int(parts[9 + 3 * i]), int(parts[10 + 3 * i])) for i in range(4)]
        ents = [e for e in ents[:nfds] if e[0] >= 0 or nfds]
        shown = ", ".join(f"{{fd={fd}, events={_bits(ev, POLL_BITS)}}}" for fd, ev, _ in ents)
        if nfds > len(ents):
            shown += ", ..."
        tmo = str(timeout) if name == "poll" else ("NULL" if timeout < 0 else
                                                   f"{{tv_sec={timeout // 1000}, tv_nsec={(timeout % 1000) * 1000000}}}")
        out = f"{name}([{shown}], {nfds}, {tmo}{', NULL, 8' if name == 'ppoll' else ''}) = {_ret(ret)}"
        if ret > 0:
            got = ", ".join(f"{{fd={fd}, revents={_bits(rev, POLL_BITS)}}}" for fd, _, rev in ents if rev)
            out += f" ([{got}])"
        elif ret == 0:
            out += " (Timeout)"
        return _Rec(tid, ts, end, f"{out} {_dur(dur)}")
    if tag == "C":
        fd, alen, ino, proto = int(parts[6]), int(parts[7]), int(parts[8]), int(parts[9])
        fam, port, a4 = int(parts[10]), int(parts[11]), int(parts[12])
        kind = {6: "TCP", 17: "UDP"}.get(proto, "socket") if fam in (2, 10) else None
        info = None if kind is None else f"{kind}{'v6' if fam == 10 and kind != 'socket' else ''}:[{ino}]"
        if fam == 2:
            sa = f"{{sa_family=AF_INET, sin_port=htons({port}), sin_addr=inet_addr(\"{_ip4(a4)}\")}}"
        elif fam == 10:
            a6 = _ip6([int(x) for x in parts[13:17]])
            sa = (f"{{sa_family=AF_INET6, sin6_port=htons({port}), sin6_flowinfo=htonl(0), "
                  f"inet_pton(AF_INET6, \"{a6}\", &sin6_addr), sin6_scope_id=0}}")
        else:
            sa = f"{{sa_family={AF.get(fam, fam)}}}"
        return _Rec(tid, ts, end, f"connect({_fd(fd, info)}, {sa}, {alen}) = {_ret(ret)} {_dur(dur)}")
    return _fd_call(parts, name_of, tid, ts, end, dur, name, ret)


def _sent(name: str, a2: int, extra: list[str]) -> tuple[str, str | None, int]:
    """A socket write's first bytes where the tracer kept them (bpfcalls:
    its length, writev's and sendmsg's first iovec's, the bytes, sendmsg's
    msg_iovlen), as strace -s writes a buffer, "..." after one cut short:
    (the buffer, the iovec array, msg_iovlen); else none kept."""
    if name not in SENDS or len(extra) < 2:
        return '""...', None, 0
    length, data = int(extra[0]), _unbuf(extra[1])
    buf = _quote(data, length > len(data))
    iovlen = int(extra[2]) if len(extra) > 2 else 1
    more = (a2 if name == "writev" else iovlen) > 1
    return buf, f"[{{iov_base={buf}, iov_len={length}}}{', ...' if more else ''}]", iovlen


def _fd_call(parts: list[str], name_of: dict[int, str], tid: int, ts: int, end: int, dur: int, name: str,
             ret: int) -> _Rec:
    # F: a0..a3, then the fd's fields, then the kind's own
    a0, a1, a2, a3 = int(parts[6]), int(parts[7]), int(parts[8]), int(parts[9])
    key = (*parts[10:27], name_of.pop(tid, ""))
    info = _FD_NAMES.get(key)
    if info is None:
        f = key
        info = fd_name(int(f[0], 16), int(f[1]), int(f[2]), int(f[3]), int(f[4]), int(f[5]), int(f[6]),
                       int(f[7]), int(f[8]), [int(x) for x in f[9:13]], [int(x) for x in f[13:17]], f[17]) or ""
        if len(_FD_NAMES) > 4096:
            _FD_NAMES.clear()
        _FD_NAMES[key] = info
    extra = parts[27:]
    r = _ret(ret)
    if name == "socket":
        args = (f"{AF.get(a0, a0)}, {SOCK_TYPES.get(a1 & 0xF, a1 & 0xF)}"
                + ("|SOCK_NONBLOCK" if a1 & 0o4000 else "") + ("|SOCK_CLOEXEC" if a1 & 0o2000000 else "")
                + f", {PROTOS.get(a2, a2)}")
        return _Rec(tid, ts, end, f"socket({args}) = {_ret(ret, info if ret >= 0 else None)} {_dur(dur)}")
    fd = _fd(a0, info)
    if name in ("setsockopt", "getsockopt"):
        val = int(extra[0]) if extra else 0
        opt = OPTS.get(a1, {}).get(a2, str(a2))
        lvl = LEVELS.get(a1, str(a1))
        tail = f"[{val}], 4" if name == "setsockopt" else f"[{val}], [4]"
        return _Rec(tid, ts, end, f"{name}({fd}, {lvl}, {opt}, {tail}) = {r} {_dur(dur)}")
    buf, iov, iovlen = _sent(name, a2, extra)
    if name in ("write", "read", "sendto", "recvfrom"):
        args = f"{fd}, {buf}, {a2}" + (f", {_bits(a3, MSG_BITS)}, NULL, 0" if name in ("sendto", "recvfrom") else "")
    elif name in ("writev", "readv"):
        args = f"{fd}, {iov or '[...]'}, {a2}"
    elif name in ("sendmsg", "recvmsg"):
        msg = f"{{msg_iov={iov}, msg_iovlen={iovlen}, ...}}" if iov else "{...}"
        args = f"{fd}, {msg}, {_bits(a2, MSG_BITS)}"
    elif name in ("sendmmsg", "recvmmsg"):
        args = f"{fd}, [...], {a2}, {_bits(a3, MSG_BITS)}"
    elif name in ("epoll_wait", "epoll_pwait"):
        args = f"{fd}, [...], {a2}, {a3 if a3 < 2**31 else a3 - 2**32}"
    elif name == "shutdown":
        args = f"{fd}, {['SHUT_RD', 'SHUT_WR', 'SHUT_RDWR'][a1] if a1 < 3 else a1}"
    else:
        args = fd
    return _Rec(tid, ts, end, f"{name}({args}) = {r} {_dur(dur)}")


class Converter:
    """bpftrace's records -> strace ``-f -ttt -T -yy`` lines, in the order
    the calls returned (so each thread's calls in the order they ran; lines
    of different threads may step back in time, as strace's ``<... resumed>``
    lines do). Memory is bounded: sorted runs of ``run_records`` go to
    files in ``spill_dir`` and are merged at ``close``."""

    def __init__(self, out, epoch_offset_ns: int, spill_dir: Path | None = None, run_records: int = RUN_RECORDS):
        self.out = out
        self.offset = epoch_offset_ns
        self.spill_dir = spill_dir
        self.run_records = run_records
        self.result = Converted()
        self.ready = False
        self._run: list[tuple[int, int, _Rec]] = []
        self._spilled: list[Path] = []
        self._want_more: dict[int, _Rec] = {}
        self._name_of: dict[int, str] = {}
        self._seq = 0

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        if not line:
            return
        parts = line.split("\t")
        tag = parts[0]
        res = self.result
        if tag == "+":
            r = self._want_more.pop(int(parts[1]), None) if len(parts) > 1 and parts[1].isdigit() else None
            if r is not None:
                r.data += _unbuf("\t".join(parts[2:]))
            return
        if tag == "N" and len(parts) >= 3 and parts[1].isdigit():
            self._name_of[int(parts[1])] = "\t".join(parts[2:])
            return
        if tag not in ("F", "C", "D", "P", "X", "E", "G"):
            m = LOST.match(line)
            if m:
                res.lost_events += int(m.group(1))
            elif line == READY:
                self.ready = True
            elif not line.startswith("Attaching "):
                res.bad_records += 1
            return
        if tag == "D" and len(parts) > 9:
            parts = parts[:8] + ["\t".join(parts[8:])]   # the data may hold tabs
        try:
            r = _record(parts, self._name_of)
        except (ValueError, IndexError, KeyError):
            r = None
        if r is None:
            res.bad_records += 1
            return
        # The second half follows in the same CPU's buffer, before any other record of the thread.
        self._want_more.pop(r.tid, None)
        if r.data is not None and r.count > CHUNK:
            self._want_more[r.tid] = r
        name = (r.head or r.body).split("(", 1)[0]
        res.calls[name] = res.calls.get(name, 0) + 1
        res.first_ns = r.ts if res.first_ns is None else min(res.first_ns, r.ts)
        res.last_ns = r.end if res.last_ns is None else max(res.last_ns, r.end)
        self._run.append((r.end, self._seq, r))
        self._seq += 1
        if len(self._run) >= self.run_records:
            self._spill()

    def _spill(self) -> None:
        import tempfile

        # A record whose data's second half is still to come stays for the next run.
        waiting = {id(r) for r in self._want_more.values()}
        run = [e for e in self._run if id(e[2]) not in waiting]
        self._run = [e for e in self._run if id(e[2]) in waiting]
        run.sort(key=lambda e: (e[0], e[1]))
        fd, name = tempfile.mkstemp(prefix="records-run-", dir=self.spill_dir)
        self._spilled.append(Path(name))
        # the sort key first, fixed width: the merge compares lines as strings
        with open(fd, "w") as f:
            f.writelines(f"{end:020d}{seq:012d}{_line(r, self.offset)}" for end, seq, r in run)

    def close(self) -> Converted:
        if not self._spilled:
            self._run.sort(key=lambda e: (e[0], e[1]))
            self.out.writelines(_line(r, self.offset) for _, _, r in self._run)
            self.result.lines += len(self._run)
            self._run = []
        else:
            if self._run:
                self._spill()
            files = [open(p) for p in self._spilled]
            try:
                for ln in heapq.merge(*files):
                    self.out.write(ln[32:])
                    self.result.lines += 1
            finally:
                for f in files:
                    f.close()
                for p in self._spilled:
                    p.unlink(missing_ok=True)
                self._spilled = []
        self.out.flush()
        return self.result


def convert(records: Path, out_path: Path, epoch_offset_ns: int, run_records: int = RUN_RECORDS) -> Converted:
    """A whole file of records (as bpftrace printed them) to strace text."""
    with open(records, encoding="latin-1", newline="\n") as src, open(out_path, "w") as out:
        conv = Converter(out, epoch_offset_ns, out_path.parent, run_records)
        for line in src:
            conv.feed(line)
        return conv.close()
