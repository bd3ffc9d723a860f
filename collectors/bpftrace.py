"""bpftrace tracer: the producer's socket and log syscalls, written as the
strace text the ``syscalls`` parser reads (``strace -f -ttt -T -yy -s 256``
lines), without stopping the producer.

strace stops a thread twice per syscall (ptrace), and ``--seccomp-bpf``
cannot apply to a process strace attaches to; a producer at full speed over
TLS makes ~13 k write() calls a second on its broker thread (one per TLS
record), so ptrace costs it a large share of its throughput. BPF programs on
the syscall tracepoints run in the kernel and never stop the thread: the cost
is a few microseconds of CPU per call, mostly bpftrace formatting the events
in its own process.

What is traced is what the analysis reads: socket reads and writes, the
poll()/epoll waits, connect/socket/setsockopt/getsockopt/close, and writes to
fd 1/2 (librdkafka's log lines, the first 256 bytes as with ``-s 256``).
Not traced: file I/O, mmap, futex and the rest (strace's %desc prints them).
Each fd is named as ``-yy`` names it, from the kernel's own structures at the
call's exit: ``TCP:[127.0.0.1:41550->127.0.0.1:56821]``, ``pipe:[57434]``;
files by their last path component only (BPF cannot build a whole path).
Only socket payloads are not captured (printed ``""...`` as ``-s 0`` does):
the analysis needs their sizes, and secrets stay out of the capture.

bpftrace writes one tab-separated record per call at its exit (see
``program``); ``convert`` turns them into strace lines, ordered per thread
as the calls ran. A record lost in bpftrace's ring buffer (``Lost N
events``) is counted, never silently absent.
"""
from __future__ import annotations

import contextlib
import errno as errno_mod
import heapq
import ipaddress
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kdiag.collectors.base import CollectorStatus, Requirement, dies_with_parent, tool_version, unmet
import kdiag

NAME = "bpftrace"
REQUIRES = (
    Requirement(executable="bpftrace", why="apt-get install bpftrace"),
    Requirement(root=True, why="loads BPF programs"),
)
TRACEFS = Path("/sys/kernel/tracing")
BTF = Path("/sys/kernel/btf/vmlinux")
# Ring buffer pages per CPU (bpftrace's default is 64): bursts of tens of
# thousands of calls a second must not overflow it while bpftrace formats.
RB_PAGES = 1024
# Two chunks of 128 bytes: one printf with both exceeds the BPF stack
# (512 bytes); -s 256 is what the strace collector keeps.
CHUNK = 128
STRSIZE = 256
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
EXIT_GROUP = 99


def version() -> str | None:
    # "bpftrace v0.17.0"
    return tool_version(["bpftrace", "--version"], r"v?(\d+\.\d+\S*)")


def check() -> str | None:
    """Why bpftrace cannot trace here, or None."""
    why = unmet(REQUIRES)
    if why:
        return why
    if not BTF.exists():
        return f"the kernel has no BTF ({BTF}): bpftrace cannot read its structures"
    return None


def ensure_tracefs() -> tuple[str | None, str | None]:
    """bpftrace finds the syscall tracepoints in tracefs. Returns (error,
    note): a note when kdiag mounted it (it is left mounted: another tool
    may be using it by then)."""
    if (TRACEFS / "events" / "syscalls").is_dir():
        return None, None
    try:
        res = subprocess.run(["mount", "-t", "tracefs", "tracefs", str(TRACEFS)], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot mount tracefs at {TRACEFS}: {e}", None
    if res.returncode != 0 or not (TRACEFS / "events" / "syscalls").is_dir():
        return (f"cannot mount tracefs at {TRACEFS}: {res.stderr.strip() or 'no syscall tracepoints'}"), None
    return None, f"mounted tracefs at {TRACEFS} (left mounted)"


# --- the BPF program ---------------------------------------------------------

def _fd_fields(fd: str) -> tuple[str, str, list[str]]:
    """Statements, printf format and arguments naming fd ``fd`` as -yy does:
    inode mode and number, and for sockets family, type, protocol, ports and
    addresses (v4 and v6). Reads that fail (no such fd) give zeros."""
    setup = (f"  $fd = (int64)({fd}); $fdt = curtask->files->fdt; $f = (struct file *)0;\n"
             f"  if ($fd >= 0 && $fd < $fdt->max_fds) {{ $f = *($fdt->fd + $fd); }}\n"
             f"  $in = $f->f_inode; $sk = ((struct socket *)$f->private_data)->sk;\n")
    c = "$sk->__sk_common"
    args = ["$in->i_mode & 0xf000", "$in->i_ino", f"{c}.skc_family", "$sk->sk_type", "$sk->sk_protocol",
            f"{c}.skc_num", f"bswap({c}.skc_dport)", f"{c}.skc_rcv_saddr", f"{c}.skc_daddr"]
    args += [f"{c}.skc_v6_rcv_saddr.in6_u.u6_addr32[{i}]" for i in range(4)]
    args += [f"{c}.skc_v6_daddr.in6_u.u6_addr32[{i}]" for i in range(4)]
    fmt = "\\t".join(["%x", "%llu"] + ["%d"] * 5 + ["%u"] * 10)
    # A file's name (its last component) in a record of its own, before the
    # call's: a string in the call's record would not fit the BPF stack.
    setup += ("  if (($in->i_mode & 0xf000) != 0xc000 && ($in->i_mode & 0xf000) != 0x1000 && $in != 0) {\n"
              "    printf(\"N\\t%d\\t%s\\n\", tid, str($f->f_path.dentry->d_name.name, 64)); }\n")
    return setup, fmt, args


ENTRY_FMT = "\\t%d\\t%d\\t%d"


def program(pid: int) -> str:
    """bpftrace source tracing ``pid``, its threads and the processes it
    forks (strace -f follows them too)."""
    who = f"(pid == {pid} || @t[pid])"
    out = [f"BEGIN {{ printf(\"{READY}\\n\"); }}",
           f"tracepoint:sched:sched_process_fork /{who}/ {{ @t[args->child_pid] = 1; }}",
           f"tracepoint:sched:sched_process_exit /{who}/ {{ printf(\"E\\t%d\\t%llu\\t%d\\n\", tid, nsecs, "
           f"curtask->exit_code >> 8); }}",
           f"tracepoint:syscalls:sys_enter_exit_group /{who}/ {{ printf(\"G\\t%d\\t%llu\\t%d\\n\", tid, nsecs, "
           f"args->error_code); }}"]
    head = "%d\\t%llu\\t%llu\\t%d\\t%lld"
    head_args = "tid, $e.0, nsecs - $e.0, $e.1, args->ret"
    for code, (name, fields, kind) in CALLS.items():
        vals = []
        for i, fld in enumerate(fields):
            if fld is None:
                vals.append("(uint64)0")
            elif name == "ppoll" and fld == "tsp":
                # the timeout in ms, -1 for none, as poll() takes it
                vals.append("(uint64)(args->tsp == 0 ? -1 : "
                            "((struct __kernel_timespec *)args->tsp)->tv_sec * 1000 + "
                            "((struct __kernel_timespec *)args->tsp)->tv_nsec / 1000000)")
            else:
                vals.append(f"(int64)args->{fld}" if i == 0 else f"(uint64)args->{fld}")
        out.append(f"tracepoint:syscalls:sys_enter_{name} /{who}/ {{ @e[tid] = (nsecs, {code}, {', '.join(vals)}); }}")
        probe = f"tracepoint:syscalls:sys_exit_{name}"
        take = "  $e = @e[tid]; delete(@e[tid]);\n"
        if kind == "write":
            # Log lines: fd 1 and 2, up to STRSIZE bytes in two records.
            out.append(
                f"{probe} /@e[tid].0 && @e[tid].2 <= 2/ {{\n{take}"
                f"  $n = $e.4;\n"
                f"  printf(\"D\\t{head}\\t%lld\\t%llu\\t%r\\n\", {head_args}, $e.2, $n, "
                f"buf($e.3, $n < {CHUNK} ? $n : {CHUNK}));\n"
                f"  if ($n > {CHUNK}) {{ $m = $n - {CHUNK}; printf(\"+\\t%d\\t%r\\n\", tid, "
                f"buf($e.3 + {CHUNK}, $m < {CHUNK} ? $m : {CHUNK})); }}\n}}")
        if kind in ("fd", "write", "sockopt", "socket"):
            setup, fmt, args = _fd_fields("args->ret" if kind == "socket" else "$e.2")
            extra_fmt, extra = "", []
            if kind == "sockopt":
                # the int the option holds: set before the call, got after it
                extra_fmt, extra = "\\t%d", ["*(int32 *)$e.5"]
            out.append(
                f"{probe} /@e[tid].0/ {{\n{take}{setup}"
                f"  printf(\"F\\t{head}\\t%lld\\t%llu\\t%llu\\t%llu\\t{fmt}{extra_fmt}\\n\", {head_args}, "
                f"$e.2, $e.3, $e.4, $e.5, {', '.join(args + extra)});\n}}")
        elif kind == "connect":
            # The socket as -yy names it at entry (unconnected: its inode),
            # and the address asked for.
            sa = "$e.3"
            addr = [f"*(uint16 *){sa}", f"bswap(*(uint16 *)({sa} + 2))", f"*(uint32 *)({sa} + 4)"]
            addr += [f"*(uint32 *)({sa} + {8 + 4 * i})" for i in range(4)]
            out.append(
                f"{probe} /@e[tid].0/ {{\n{take}"
                f"  $fd = (int64)($e.2); $fdt = curtask->files->fdt; $f = (struct file *)0;\n"
                f"  if ($fd >= 0 && $fd < $fdt->max_fds) {{ $f = *($fdt->fd + $fd); }}\n"
                f"  $sk = ((struct socket *)$f->private_data)->sk;\n"
                f"  printf(\"C\\t{head}\\t%lld\\t%llu\\t%llu\\t%d\\t%u\\t%u\\t%u\\t%u\\t%u\\t%u\\t%u\\n\", "
                f"{head_args}, $e.2, $e.4, $f->f_inode->i_ino, $sk->sk_protocol, {', '.join(addr)});\n}}")
        elif kind == "poll":
            ents = []
            for i in range(4):
                p = f"((struct pollfd *)$e.3 + {i})"
                ents += [f"$e.2 > {i} ? {p}->fd : -1", f"$e.2 > {i} ? {p}->events : 0",
                         f"$e.2 > {i} ? {p}->revents : 0"]
            out.append(
                f"{probe} /@e[tid].0/ {{\n{take}"
                f"  printf(\"P\\t{head}\\t%lld\\t%lld{ENTRY_FMT * 4}\\n\", {head_args}, $e.2, (int64)$e.4, "
                f"{', '.join(ents)});\n}}")
        elif kind == "plain":
            out.append(f"{probe} /@e[tid].0/ {{\n{take}"
                       f"  printf(\"X\\t{head}\\t%lld\\t%llu\\n\", {head_args}, $e.2, $e.3);\n}}")
    return "\n".join(out) + "\n"


# --- records -> strace text ---------------------------------------------------

@dataclass
class Converted:
    lines: int = 0
    lost_events: int = 0
    # records bpftrace wrote that do not read as one (a line cut at a kill)
    bad_records: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    first_ns: int | None = None
    last_ns: int | None = None


_LOST = re.compile(r"^Lost (\d+) events")
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
    if name in ("write", "read", "sendto", "recvfrom"):
        args = f'{fd}, ""..., {a2}' + (f", {_bits(a3, MSG_BITS)}, NULL, 0" if name in ("sendto", "recvfrom") else "")
    elif name in ("writev", "readv"):
        args = f"{fd}, [...], {a2}"
    elif name in ("sendmsg", "recvmsg"):
        args = f"{fd}, {{...}}, {_bits(a2, MSG_BITS)}"
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
            m = _LOST.match(line)
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


# --- running it ----------------------------------------------------------------
#
# ``python -m kdiag.collectors.bpftrace --pid PID --out FILE`` runs bpftrace as its
# child, prints "ready" once the probes are attached, and its status (JSON)
# last. bpftrace writes its records to FILE.records beside FILE; they become
# strace text in FILE once tracing stops, not while it runs: formatting costs
# ~15 us of CPU a record, which the producer's host would pay while traced.
# SIGINT, or SIGTERM (its parent died: PR_SET_PDEATHSIG), stops bpftrace,
# and what it wrote is converted before the collector exits, so a kdiag
# killed mid-run still leaves a capture the parser reads.

def _cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _ready(records: Path) -> bool:
    try:
        with open(records, "rb") as f:
            # after bpftrace's own "Attaching N probes..."
            return (READY + "\n").encode() in f.read(4096)
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m kdiag.collectors.bpftrace")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    st = CollectorStatus(NAME, version=version(), files=[str(args.out)], started_us=int(time.time() * 1e6))
    extra: dict = {"tracefs": None, "lost_events": None, "bad_records": None, "lines": None, "setup_cpu_s": None,
                   "cpu_s": None, "ready_us": None, "stopped_us": None}
    stop_now = []

    def on_signal(signum, frame):
        stop_now.append(signum)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    def finish() -> int:
        st.ended_us = int(time.time() * 1e6)
        st.bytes = args.out.stat().st_size if args.out.exists() else 0
        print(json.dumps({**st.to_dict(), **extra}), flush=True)
        return 0

    why = check()
    if why is None:
        why, extra["tracefs"] = ensure_tracefs()
    if why:
        st.state, st.reason = "skipped", why
        return finish()
    records = args.out.with_name(args.out.name + ".records")
    src = args.out.with_name(args.out.name + ".bt")
    err_path = args.out.with_name(args.out.name + ".bpftrace-stderr")
    src.write_text(program(args.pid))
    st.command = ["bpftrace", src.name]
    env = {**os.environ, "BPFTRACE_STRLEN": str(CHUNK), "BPFTRACE_PERF_RB_PAGES": str(RB_PAGES)}
    offset = time.time_ns() - time.monotonic_ns()
    with open(records, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(["bpftrace", str(src)], stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                preexec_fn=dies_with_parent)
    me = os.getpid()
    try:
        while proc.poll() is None and not stop_now:
            if extra["ready_us"] is None and _ready(records):
                extra["ready_us"] = int(time.time() * 1e6)
                setup = [_cpu_s(proc.pid), _cpu_s(me)]
                extra["setup_cpu_s"] = None if None in setup else round(sum(setup), 3)
                print("ready", flush=True)
            time.sleep(0.02 if extra["ready_us"] is None else 0.1)
        end_cpu = [_cpu_s(proc.pid), _cpu_s(me)]
        extra["stopped_us"] = int(time.time() * 1e6)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if extra["setup_cpu_s"] is not None and None not in end_cpu:
            extra["cpu_s"] = round(sum(end_cpu) - extra["setup_cpu_s"], 3)
        res = convert(records, args.out, offset)
        lost_err = 0
        with contextlib.suppress(OSError):
            for ln in err_path.read_text(errors="replace").splitlines():
                m = _LOST.match(ln.strip())
                lost_err += int(m.group(1)) if m else 0
        extra.update(lost_events=res.lost_events + lost_err, bad_records=res.bad_records, lines=res.lines)
        if extra["ready_us"] is None:
            st.state, st.reason = "failed", _failure(err_path, proc.returncode)
        elif extra["lost_events"]:
            st.state = "partial"
            st.reason = f"bpftrace lost {extra['lost_events']} events (its ring buffer overflowed)"
        else:
            st.state = "ok"
    finally:
        for p in (records, src, err_path):
            p.unlink(missing_ok=True)
    return finish()


def _failure(err_path: Path, rc: int | None) -> str:
    """bpftrace's own last error line."""
    try:
        lines = [ln.strip() for ln in err_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    # "couldn't set RLIMIT_MEMLOCK" is a warning on kernels that account BPF
    # memory to the cgroup (5.11+), not a failure.
    lines = [ln for ln in lines if "RLIMIT_MEMLOCK" not in ln and not ln.startswith("WARNING")]
    errs = [ln for ln in lines if "ERROR" in ln or "error" in ln]
    return (errs or lines or [f"bpftrace exited with status {rc} before attaching"])[-1]


@dataclass
class Child:
    """The tracer as kdiag's child process (``spawn``)."""
    proc: subprocess.Popen
    said: str = ""          # what it printed before "ready": its status, when it gave up


def spawn(pid: int, out: Path) -> Child:
    """The tracer as a child process of the caller, dying with it, in its
    own session (a Ctrl-C at the terminal reaches kdiag only)."""
    import sys

    cmd = [*kdiag.python_m(sys.modules[__name__]), "--pid", str(pid), "--out", str(out)]
    return Child(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                  preexec_fn=dies_with_parent, start_new_session=True, text=True))


def wait_ready(child: Child, timeout_s: float = 60.0) -> bool:
    """True once the tracer said "ready" (every probe attached); False when
    it ended first (its status then says why) or the time ran out."""
    import select

    end = time.monotonic() + timeout_s
    while (left := end - time.monotonic()) > 0:
        r, _, _ = select.select([child.proc.stdout], [], [], min(0.5, left))
        if r:
            line = child.proc.stdout.readline()
            if line.strip() == "ready":
                return True
            if not line:
                return False
            child.said += line
    return False


def collect(child: Child, grace_s: float = 120.0) -> dict:
    """Stops the tracer (SIGINT: bpftrace detaches; the traced process is
    never signalled) and returns its status. The grace covers converting
    the records (~15 us each)."""
    from kdiag.collectors.base import status_from_output

    proc = child.proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return status_from_output(NAME, child.said + (out or ""), f"exit {proc.returncode}, no status")


if __name__ == "__main__":
    raise SystemExit(main())
