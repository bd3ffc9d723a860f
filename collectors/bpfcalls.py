"""bpfcalls tracer: the producer's socket, log and wait syscalls, recorded by
a compiled BPF program (``_bpfcalls.bpf.c``, loaded by libbpf from
``_bpfcalls.c``) and written as the strace text the ``syscalls`` parser
reads, like the bpftrace tracer's, at a fraction of its cost.

Where bpftrace's cost lies (bench/RESULTS.md, "Tracing overhead"): its
predicates, run for every process's calls on its tracepoints, and a text
record per call formatted in bpftrace's own process on a core the producer
needs. Here programs on the per-syscall tracepoints of only the calls the
record carries answer "not the producer" with one comparison, and a record
is a struct the loader copies to a file unformatted. It becomes text when
tracing has stopped, through the same converter as bpftrace's records
(``_bpftrace_records``), so both tracers' captures are one format.
A socket write's record also keeps its first ``HEAD`` bytes, written as
strace ``-s HEAD`` writes them: a producer that logs nothing has its
requests named by their Kafka header (``per_request.request_of_head``).

The kernel here has no kprobes, and BPF trampolines (fentry/fexit) are
refused (EPERM). The per-syscall tracepoints keep the other calls of every
process from running the program; the raw ones, where the loader falls
back to, run it for every call and it exits on the call's number
(bench/hosttax.py measures both). Either moves every task on the host to
the kernel's slower syscall path. Uprobes in the producer's libc
(``HOOKS_ENV``, collectors/_libc_probes.py) touch no other process.
The program reads x86-64 syscall numbers and registers.
"""
from __future__ import annotations

import contextlib
import os
import signal
import struct
import time
from pathlib import Path

import kdiag
from kdiag import settings
from kdiag.collectors import bpftrace as _bt
from kdiag.collectors._bpftrace_records import CODE_OF, SENDS, STRSIZE, Converted, Converter
from kdiag.collectors._c_layout import Header
from kdiag.collectors.base import AUTO_ANY_RATE, MODES, Requirement, Tracing, cpu_s, unmet

NAME = "bpfcalls"
REQUIRES = (
    Requirement(root=True, why="loads BPF programs"),
)
# The loader stops writing records past this many bytes (a full-speed
# producer writes ~3 MB a second): the trace bounds its own disk.
MAX_BYTES = 2 << 30
NICE = 19
# Set (to anything) in the tracer's environment, it hooks the raw syscall
# tracepoints, where it falls back to when the per-syscall ones cannot be
# attached: bench/overhead.py measures one against the other.
RAW_ENV = "KDIAG_BPFCALLS_RAW"
# Set to "uprobes", it hooks libc's functions in the traced process instead
# (collectors/_libc_probes.py), which no other process meets; where they
# cannot be placed it keeps to the tracepoints and says why.
HOOKS_ENV = "KDIAG_BPFCALLS_HOOKS"
# auto takes uprobes for a producer whose calls they would cost less than
# this share of a core, at UPROBE_CALL_US a call: a uprobe and a uretprobe
# on an emulated instruction cost 0.71 us a call here (bench/uprobes.py,
# 2-core KVM guest), the record ~0.3 us more. Above it the tracepoints
# cost the producer less, and every process on the host pays for them
# (bench/hosttax.py).
AUTO_UPROBE_SHARE = 0.01
UPROBE_CALL_US = 1.0


def choose_hooks(calls_per_s: float | None) -> tuple[str, str]:
    """("uprobes" or "tracepoints", why) for a producer that made
    ``calls_per_s`` read and write calls a second before tracing (None:
    not measured, a command kdiag starts or its own probe)."""
    if settings.get(RAW_ENV):
        return "tracepoints", f"{RAW_ENV}=1: the raw syscall tracepoints"
    asked = settings.get(HOOKS_ENV)
    if asked in ("uprobes", "tracepoints"):
        return asked, f"{HOOKS_ENV}={asked}"
    if calls_per_s is None:
        return "tracepoints", ("the producer's call rate was not measured before tracing (a command kdiag "
                               "starts, or its probe), and a command may fork: uprobes follow no fork")
    cost = calls_per_s * UPROBE_CALL_US / 1e6
    if cost < AUTO_UPROBE_SHARE:
        return "uprobes", (f"the producer made {calls_per_s:.0f} calls/s: uprobes in its libc cost it about "
                           f"{100 * cost:.2f}% of a core, and no other process anything")
    return "tracepoints", (f"the producer made {calls_per_s:.0f} calls/s: uprobes would cost it about "
                           f"{100 * cost:.1f}% of a core; the syscall tracepoints cost it less, and every "
                           f"process on the host pays for them")

# The record's layout comes from the header the C code compiles with, so the
# two cannot disagree: struct rec up to its name (RECORD), then the name,
# then the data, each as long as the record says.
HEADER_PATH = Path(__file__).parent / "_bpfcalls.h"
HEADER = Header(HEADER_PATH.read_text())
RECORD = HEADER.layout("rec", up_to="name")
KIND_F, KIND_D, KIND_P, KIND_C, KIND_X, KIND_E, KIND_G = (
    HEADER.constants[k] for k in ("KIND_F", "KIND_D", "KIND_P", "KIND_C", "KIND_X", "KIND_E", "KIND_G"))
POLLS = HEADER.constants["POLLS"]
# The bytes of a socket write kept (strace's -s for them).
HEAD = HEADER.constants["HEAD"]
POLLFD = struct.Struct("<ihh")
SEND_CODES = {CODE_OF[c] for c in SENDS}


def loader():
    """The compiled loader, or None where pip built kdiag without it."""
    try:
        from kdiag.collectors import _bpfcalls
    except ImportError:
        return None
    return _bpfcalls


def check() -> str | None:
    """Why bpfcalls cannot trace here, or None."""
    why = unmet(REQUIRES)
    if why:
        return why
    if os.uname().machine != "x86_64":
        return f"the BPF program reads x86-64 syscalls; this is {os.uname().machine}"
    if loader() is None:
        return ("kdiag was installed without its BPF tracer (building it needs clang and libbpf-dev: "
                "apt-get install clang libbpf-dev, then reinstall kdiag)")
    if not _bt.BTF.exists():
        return f"the kernel has no BTF ({_bt.BTF}): the program cannot find its structures"
    return None


def _escape(data: bytes) -> str:
    # bpftrace's %r, with the backslash escaped too, so the text reads back exactly
    return "".join(chr(b) if 32 <= b < 127 and b != 92 else f"\\x{b:02x}" for b in data)


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _s64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _head(r) -> str:
    return f"{r.tid}\t{r.ts}\t{r.dur}\t{r.code}\t{r.ret}"


def _end_lines(r, name: str, data: bytes) -> list[str]:
    return [f"{'E' if r.kind == KIND_E else 'G'}\t{r.tid}\t{r.ts}\t{r.ret}"]


def _log_lines(r, name: str, data: bytes) -> list[str]:
    # Only the log's bytes are kept: what went to stdout or stderr.
    fd = _s64(r.a[0])
    return [f"D\t{_head(r)}\t{fd}\t{r.count}\t{_escape(data[:STRSIZE]) if fd in (1, 2) else ''}"]


def _poll_lines(r, name: str, data: bytes) -> list[str]:
    nfds, _, timeout, _ = r.a
    timeout = _s32(timeout) if r.code == 11 else _s64(timeout)
    ents = []
    for i in range(POLLS):
        if i < nfds and (i + 1) * POLLFD.size <= len(data):
            ents += POLLFD.unpack_from(data, i * POLLFD.size)
        else:
            ents += (-1, 0, 0)
    return [f"P\t{_head(r)}\t{nfds}\t{timeout}\t" + "\t".join(map(str, ents))]


def _connect_lines(r, name: str, data: bytes) -> list[str]:
    sa = data.ljust(28, b"\0")
    fam_asked, port = struct.unpack_from("<H", sa, 0)[0], struct.unpack_from(">H", sa, 2)[0]
    a4 = struct.unpack_from("<I", sa, 4)[0]
    a6 = struct.unpack_from("<4I", sa, 8)
    return [f"C\t{_head(r)}\t{_s64(r.a[0])}\t{r.extra}\t{r.id_ino}\t{r.id_proto}\t{fam_asked}\t"
            f"{port}\t{a4}\t" + "\t".join(map(str, a6))]


def _close_lines(r, name: str, data: bytes) -> list[str]:
    return [f"X\t{_head(r)}\t{_s64(r.a[0])}\t{r.a[1]}"]


def _fd_lines(r, name: str, data: bytes) -> list[str]:
    a0, a1, a2, a3 = r.a
    fields = [f"{r.id_mode:x}", r.id_ino, r.id_fam, r.id_typ, r.id_proto, r.id_lport, r.id_rport, r.id_la, r.id_ra,
              *r.id_la6, *r.id_ra6]
    line = f"F\t{_head(r)}\t{_s64(a0)}\t{a1}\t{a2}\t{a3}\t" + "\t".join(map(str, fields))
    if r.code in (17, 18):
        line += f"\t{r.extra}"
    elif data and r.code in SEND_CODES:
        # a socket write's first bytes: its length (writev, sendmsg: the
        # first iovec's), the bytes, and sendmsg's msg_iovlen
        line += f"\t{r.count}\t{_escape(data)}\t{r.extra}"
    return ([f"N\t{r.tid}\t{name}"] if name else []) + [line]


_LINES_OF_KIND = {KIND_E: _end_lines, KIND_G: _end_lines, KIND_D: _log_lines, KIND_P: _poll_lines,
                  KIND_C: _connect_lines, KIND_X: _close_lines}


def record_lines(buf: bytes):
    """The records of a capture as bpftrace's record lines (what
    ``_bpftrace_records.Converter`` reads); a record cut short by the end
    of the file is counted, not guessed (yields None)."""
    pos, end, size = 0, len(buf), RECORD.size
    while pos < end:
        if pos + size > end:
            yield None
            return
        r = RECORD.unpack_from(buf, pos)
        pos += size
        name_len, data_len = r.name_len, r.data_len
        if pos + name_len + data_len > end:
            yield None
            return
        name = buf[pos:pos + name_len].decode("utf-8", "replace")
        pos += name_len
        data = buf[pos:pos + data_len]
        pos += data_len
        yield from _LINES_OF_KIND.get(r.kind, _fd_lines)(r, name, data)


def convert(records: Path, out_path: Path, epoch_offset_ns: int) -> Converted:
    """A capture's records to strace text."""
    buf = records.read_bytes()
    with open(out_path, "w") as out:
        conv = Converter(out, epoch_offset_ns, out_path.parent)
        for line in record_lines(buf):
            if line is None:
                conv.result.bad_records += 1
            else:
                conv.feed(line)
        return conv.close()


# ``python -m kdiag.collectors.bpfcalls --pid PID --out FILE``: as the bpftrace
# collector's runner (it prints "ready", then its status as JSON), with the
# loader in this process instead of a bpftrace child.

def main(argv: list[str] | None = None) -> int:
    r = _bt.runner("kdiag.collectors.bpfcalls", NAME, kdiag.__version__, argv, "over_budget")
    st, extra, finish = r.st, r.extra, r.finish
    st.command = ["bpfcalls", "--pid", str(r.pid)]

    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    why = check()
    if why:
        st.state, st.reason = "skipped", why
        return finish()
    records = r.out.with_name(r.out.name + ".records")
    me = os.getpid()
    # The traced host's CPU is the producer's first: the loader only copies
    # records out of a 16 MiB ring, which holds bursts while it waits its
    # turn (records it had no room for are counted, and the capture marked
    # partial).
    os.nice(NICE)

    def ready():
        extra["ready_us"] = int(time.time() * 1e6)
        extra["setup_cpu_s"] = cpu_s(me)
        print("ready", flush=True)

    uprobes = None
    if settings.get(HOOKS_ENV) == "uprobes":
        from kdiag.collectors import _libc_probes

        plan, why_not = _libc_probes.plan(r.pid)
        if plan is None:
            extra["uprobes_not_used"] = why_not
        else:
            bits, exit_code = HEADER.constants["COOKIE_CODE_BITS"], HEADER.constants["CODE_EXIT_GROUP"]
            uprobes = (str(plan.path), plan.errno_slot,
                       [(p.offset, p.vaddr << bits | (exit_code if p.code is None else p.code)) for p in plan.probes])
            extra["uprobes"] = {"libc": str(plan.path), "errno_known": bool(plan.errno_slot),
                                "single_stepped": [p.function for p in plan.probes if not p.emulated],
                                "missing": plan.missing}
    offset = time.time_ns() - time.monotonic_ns()
    try:
        got = loader().trace(r.pid, str(records), ready, MAX_BYTES, bool(settings.get(RAW_ENV)), uprobes)
    except (OSError, RuntimeError) as e:
        st.state, st.reason = "failed", f"bpfcalls: {e}"
        records.unlink(missing_ok=True)
        return finish()
    except KeyboardInterrupt:     # stopped before it was ready
        st.state, st.reason = "failed", "stopped before the probes were attached"
        records.unlink(missing_ok=True)
        return finish()
    extra["stopped_us"] = int(time.time() * 1e6)
    end_cpu = cpu_s(me)
    if extra["setup_cpu_s"] is not None and end_cpu is not None:
        extra["cpu_s"] = round(end_cpu - extra["setup_cpu_s"], 3)
        extra["setup_cpu_s"] = round(extra["setup_cpu_s"], 3)
    # Converting is not part of the trace: a second signal must not cut it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        res = convert(records, r.out, offset)
    finally:
        with contextlib.suppress(OSError):
            records.unlink()
    extra.update(lost_events=got["lost_events"], bad_records=res.bad_records, lines=res.lines,
                 over_budget=got["over_budget"], hooks=got["hooks"])
    if got.get("hooks_fallback"):   # why not the per-syscall tracepoints
        extra["hooks_fallback"] = got["hooks_fallback"]
    # A uprobe fires only in the file it was hung on: a command that runs
    # another libc after its exec makes no record at all.
    unseen = uprobes is not None and not got["records"]
    # Nor is a process it forked traced: its memory is its own.
    untraced_forks = got.get("forked", 0) if uprobes is not None else 0
    if got["lost_events"] or got["over_budget"] or unseen or untraced_forks:
        st.state = "partial"
        st.reason = "; ".join(
            ([f"the ring buffer had no room for {got['lost_events']} records"] if got["lost_events"] else [])
            + ([f"{got['over_budget']} records past the {MAX_BYTES >> 20} MiB disk budget"]
               if got["over_budget"] else [])
            + ([f"no call was seen at the uprobes in {uprobes[0]}: the process may run another libc"]
               if unseen else [])
            + ([f"{untraced_forks} process(es) it forked were not traced (uprobes follow no fork)"]
               if untraced_forks else []))
    else:
        st.state = "ok"
    return finish()


def start(pid: int, out: Path, ready_s: float = 30.0, hooks: str = "tracepoints"):
    """The tracer once it traces ``pid`` on ``hooks`` (choose_hooks); or
    None and why it could not."""
    import sys

    return _bt.start(pid, out, ready_s, module=sys.modules[__name__], name=NAME, env={HOOKS_ENV: hooks})


class Bpfcalls(_bt.Bpftrace):
    """In place of strace or bpftrace, where the kernel and the install
    allow it: the same text to the same folder, at the least cost. kdiag's
    own probe too: it starts stopped, and runs once this traces it."""

    name = NAME
    raw_dir = "strace"
    requirements = REQUIRES
    modes = MODES
    partial_without = MODES
    tracing = Tracing(
        # The write() loop: 1.05 us a call against 0.25 untraced (its
        # loader's copy of each record runs on another core).
        rank=10, auto_when=AUTO_ANY_RATE, stops_threads=False, call_us=0.8,
        captures="the producer's socket, log and wait calls, as binary records, nothing of any other "
                 f"process, the first {HEAD} bytes of each socket write",
        cost="a TLS producer at full speed kept 93 % of its throughput; 100 % at 22.7 msg/s",
    )

    @classmethod
    def unmet(cls) -> str | None:
        return check()

    @classmethod
    def tool_version(cls) -> str | None:
        return None     # kdiag's own, built with it

    @classmethod
    def start_alone(cls, pid: int, out: Path, calls_per_s: float | None = None):
        hooks, _ = choose_hooks(calls_per_s)
        return start(pid, out, _bt.READY_TIMEOUT_S, hooks=hooks)

    def start(self, pid: int) -> None:
        self.hooks, self.hooks_why = choose_hooks(self.calls_per_s)
        self.child, self.failed_to_start = start(pid, self.out_path, hooks=self.hooks)


if __name__ == "__main__":
    raise SystemExit(main())
