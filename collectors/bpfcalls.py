"""bpfcalls tracer: the producer's socket, log and wait syscalls, recorded by
a compiled BPF program (``_bpfcalls.bpf.c``, loaded by libbpf from
``_bpfcalls.c``) and written as the strace text the ``syscalls`` parser
reads, like the bpftrace tracer's, at a fraction of its cost.

Where bpftrace's cost lies (bench/RESULTS.md, "Tracing overhead"): its
probes on the per-syscall tracepoints, whose argument buffers are filled
and whose predicates run for every process's calls, and a text record per
call formatted in bpftrace's own process on a core the producer needs.
Here one program on the raw ``sys_enter``/``sys_exit`` tracepoints (BTF,
no argument buffer) answers "not the producer" with one comparison, and a
record is a struct the loader copies to a file unformatted. It becomes
text when tracing has stopped, through the same converter as bpftrace's
records (``_bpftrace_records``), so both tracers' captures are one format.

The kernel here has no kprobes, and BPF trampolines (fentry/fexit) with
helper calls are refused (EPERM), so the raw tracepoints are the cheapest
hook it offers; the program reads x86-64 syscall numbers.
"""
from __future__ import annotations

import contextlib
import os
import signal
import struct
import time
from pathlib import Path

from kdiag.collectors import bpftrace as _bt
from kdiag.collectors._bpftrace_records import STRSIZE, Converted, Converter
from kdiag.collectors.base import AUTO_ANY_RATE, MODES, Requirement, Tracing, cpu_s, unmet

import kdiag

NAME = "bpfcalls"
REQUIRES = (
    Requirement(root=True, why="loads BPF programs"),
)
# The loader stops writing records past this many bytes (a full-speed
# producer writes ~3 MB a second): the trace bounds its own disk.
MAX_BYTES = 2 << 30
NICE = 19

# struct rec up to its name (_bpfcalls.h): ts, dur, ret, a[4], tid, code, kind,
# count, (padding), ino, mode, fam, typ, proto, lport, rport, la, ra, la6[4],
# ra6[4], extra, name_len, data_len; then the name, then the data.
RECORD = struct.Struct("<QQq4QIHHI4xQI5i2I4I4IiHH")
KIND_F, KIND_D, KIND_P, KIND_C, KIND_X, KIND_E, KIND_G = range(1, 8)
POLLFD = struct.Struct("<ihh")
POLLS = 4


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


def record_lines(buf: bytes):
    """The records of a capture as bpftrace's record lines (what
    ``_bpftrace_records.Converter`` reads); a record cut short by the end
    of the file is counted, not guessed (yields None)."""
    pos, end, size = 0, len(buf), RECORD.size
    while pos < end:
        if pos + size > end:
            yield None
            return
        (ts, dur, ret, a0, a1, a2, a3, tid, code, kind, count, ino, mode, fam, typ, proto, lport, rport, la, ra,
         l0, l1, l2, l3, r0, r1, r2, r3, extra, name_len, data_len) = RECORD.unpack_from(buf, pos)
        pos += size
        if pos + name_len + data_len > end:
            yield None
            return
        name = buf[pos:pos + name_len].decode("utf-8", "replace")
        pos += name_len
        data = buf[pos:pos + data_len]
        pos += data_len
        head = f"{tid}\t{ts}\t{dur}\t{code}\t{ret}"
        if kind in (KIND_E, KIND_G):
            yield f"{'E' if kind == KIND_E else 'G'}\t{tid}\t{ts}\t{ret}"
        elif kind == KIND_D:
            # Only the log's bytes are kept: what went to stdout or stderr.
            fd = _s64(a0)
            yield f"D\t{head}\t{fd}\t{count}\t{_escape(data[:STRSIZE]) if fd in (1, 2) else ''}"
        elif kind == KIND_P:
            timeout = _s32(a2) if code == 11 else _s64(a2)
            ents = []
            for i in range(POLLS):
                if i < a0 and (i + 1) * POLLFD.size <= len(data):
                    ents += POLLFD.unpack_from(data, i * POLLFD.size)
                else:
                    ents += (-1, 0, 0)
            yield f"P\t{head}\t{a0}\t{timeout}\t" + "\t".join(map(str, ents))
        elif kind == KIND_C:
            sa = data.ljust(28, b"\0")
            fam_asked, port = struct.unpack_from("<H", sa, 0)[0], struct.unpack_from(">H", sa, 2)[0]
            a4 = struct.unpack_from("<I", sa, 4)[0]
            a6 = struct.unpack_from("<4I", sa, 8)
            yield (f"C\t{head}\t{_s64(a0)}\t{extra}\t{ino}\t{proto}\t{fam_asked}\t{port}\t{a4}\t"
                   + "\t".join(map(str, a6)))
        elif kind == KIND_X:
            yield f"X\t{head}\t{_s64(a0)}\t{a1}"
        else:
            if name_len:
                yield f"N\t{tid}\t{name}"
            fields = [f"{mode:x}", ino, fam, typ, proto, lport, rport, la, ra, l0, l1, l2, l3, r0, r1, r2, r3]
            line = f"F\t{head}\t{_s64(a0)}\t{a1}\t{a2}\t{a3}\t" + "\t".join(map(str, fields))
            yield line + (f"\t{extra}" if code in (17, 18) else "")


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

    offset = time.time_ns() - time.monotonic_ns()
    try:
        got = loader().trace(r.pid, str(records), ready, MAX_BYTES)
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
                 over_budget=got["over_budget"])
    if got["lost_events"] or got["over_budget"]:
        st.state = "partial"
        st.reason = "; ".join(
            ([f"the ring buffer had no room for {got['lost_events']} records"] if got["lost_events"] else [])
            + ([f"{got['over_budget']} records past the {MAX_BYTES >> 20} MiB disk budget"]
               if got["over_budget"] else []))
    else:
        st.state = "ok"
    return finish()


def start(pid: int, out: Path, ready_s: float = 30.0):
    """The tracer once it traces ``pid``; or None and why it could not."""
    import sys

    return _bt.start(pid, out, ready_s, module=sys.modules[__name__], name=NAME)


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
                 "process, no socket payloads",
        cost="a TLS producer at full speed kept 93 % of its throughput; 100 % at 22.7 msg/s",
    )

    @classmethod
    def unmet(cls) -> str | None:
        return check()

    @classmethod
    def tool_version(cls) -> str | None:
        return None     # kdiag's own, built with it

    @classmethod
    def start_alone(cls, pid: int, out: Path):
        return start(pid, out, _bt.READY_TIMEOUT_S)

    def start(self, pid: int) -> None:
        self.child, self.failed_to_start = start(pid, self.out_path)


if __name__ == "__main__":
    raise SystemExit(main())
