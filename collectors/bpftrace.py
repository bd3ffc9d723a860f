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
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import kdiag

# The record format and its converter; tests and the overhead bench use them from here.
from kdiag.collectors._bpftrace_records import (  # noqa: F401
    CALLS,
    CHUNK,
    CODE_OF,
    EXIT_GROUP,
    LOST,
    READY,
    RUN_RECORDS,
    STRSIZE,
    Converted,
    Converter,
    convert,
    fd_name,
)
from kdiag.collectors.base import (
    AUTO_BUSY,
    MODES,
    PROBE,
    Collector,
    CollectorStatus,
    Requirement,
    Tracing,
    cpu_s,
    dies_with_parent,
    tool_version,
    unmet,
)
from kdiag.deadline import Deadline

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
# bpftrace compiles its probes before it traces: seconds of CPU on a busy host.
READY_TIMEOUT_S = 60.0
# What kdiag's manifest keeps of the status the child prints; the rest
# (CPU, lost events, tracefs) goes to the manifest's tracer and overhead.
STATUS_FIELDS = ("state", "reason", "files", "bytes", "version", "command", "started_us", "ended_us")


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

def _ready(records: Path) -> bool:
    try:
        with open(records, "rb") as f:
            # after bpftrace's own "Attaching N probes..."
            return (READY + "\n").encode() in f.read(4096)
    except OSError:
        return False


@dataclass
class Runner:
    """A BPF tracer's runner (``python -m MODULE --pid PID --out FILE``):
    what it was asked, and the status it prints last, as JSON (``finish``)."""
    pid: int
    out: Path
    st: CollectorStatus
    extra: dict

    def finish(self) -> int:
        import json

        self.st.ended_us = int(time.time() * 1e6)
        self.st.bytes = self.out.stat().st_size if self.out.exists() else 0
        print(json.dumps({**self.st.to_dict(), **self.extra}), flush=True)
        return 0


# What every BPF tracer's status says beyond CollectorStatus (None until known).
RUNNER_FIELDS = ("lost_events", "bad_records", "lines", "setup_cpu_s", "cpu_s", "ready_us", "stopped_us")


def runner(module: str, name: str, tool_version: str | None, argv: list[str] | None, *more: str) -> Runner:
    import argparse

    ap = argparse.ArgumentParser(prog=f"python -m {module}")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    st = CollectorStatus(name, version=tool_version, files=[str(args.out)], started_us=int(time.time() * 1e6))
    return Runner(args.pid, args.out, st, dict.fromkeys((*more, *RUNNER_FIELDS)))


def main(argv: list[str] | None = None) -> int:
    r = runner("kdiag.collectors.bpftrace", NAME, version(), argv, "tracefs")
    st, extra, finish = r.st, r.extra, r.finish
    stop_now = []

    def on_signal(signum, frame):
        stop_now.append(signum)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    why = check()
    if why is None:
        why, extra["tracefs"] = ensure_tracefs()
    if why:
        st.state, st.reason = "skipped", why
        return finish()
    records = r.out.with_name(r.out.name + ".records")
    src = r.out.with_name(r.out.name + ".bt")
    err_path = r.out.with_name(r.out.name + ".bpftrace-stderr")
    src.write_text(program(r.pid))
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
                setup = [cpu_s(proc.pid), cpu_s(me)]
                extra["setup_cpu_s"] = None if None in setup else round(sum(setup), 3)
                print("ready", flush=True)
            time.sleep(0.02 if extra["ready_us"] is None else 0.1)
        end_cpu = [cpu_s(proc.pid), cpu_s(me)]
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
        res = convert(records, r.out, offset)
        lost_err = 0
        with contextlib.suppress(OSError):
            for ln in err_path.read_text(errors="replace").splitlines():
                m = LOST.match(ln.strip())
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


def spawn(pid: int, out: Path, module=None, env: dict | None = None) -> Child:
    """The tracer (``module``'s runner, this one's by default) as a child
    process of the caller, dying with it, in its own session (a Ctrl-C at
    the terminal reaches kdiag only); ``env`` beside this process's."""
    import os
    import sys

    cmd = [*kdiag.python_m(module or sys.modules[__name__]), "--pid", str(pid), "--out", str(out)]
    return Child(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                  preexec_fn=dies_with_parent, start_new_session=True, text=True,
                                  env={**os.environ, **env} if env else None))


def wait_ready(child: Child, timeout_s: float = 60.0) -> bool:
    """True once the tracer said "ready" (every probe attached); False when
    it ended first (its status then says why) or the time ran out."""
    import select

    deadline = Deadline(timeout_s)
    while (left := deadline.remaining_s()) > 0:
        r, _, _ = select.select([child.proc.stdout], [], [], min(0.5, left))
        if r:
            line = child.proc.stdout.readline()
            if line.strip() == "ready":
                return True
            if not line:
                return False
            child.said += line
    return False


def collect(child: Child, grace_s: float = 120.0, name: str = NAME) -> dict:
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
    return status_from_output(name, child.said + (out or ""), f"exit {proc.returncode}, no status")


def start(pid: int, out: Path, ready_s: float = READY_TIMEOUT_S, module=None,
          name: str = NAME, env: dict | None = None) -> tuple[Child | None, str | None]:
    """The tracer once it traces ``pid``; or None and why it could not
    (its status's reason, when it gave up)."""
    child = spawn(pid, out, module, env)
    if wait_ready(child, ready_s):
        return child, None
    st = collect(child, name=name)
    out.unlink(missing_ok=True)
    return None, st.get("reason") or f"{name} did not start ({st.get('state')})"


class Bpftrace(Collector):
    """In place of strace for a producer kdiag attaches to or starts: it
    writes the same text to the same folder and stops no thread. Which of
    the two runs is ``kdiag.capture.overhead.choose``'s call."""

    name = NAME
    raw_dir = "strace"
    requirements = REQUIRES
    modes = MODES - {PROBE}
    partial_without = MODES - {PROBE}
    tracing = Tracing(
        # A loop of write() to /dev/null: 7.0 us a call against 0.40 untraced
        # (bpftrace 0.17, kernel 6.18, 2-core VM).
        rank=20, auto_when=AUTO_BUSY, stops_threads=False, call_us=6.6,
        captures="the calls the analysis reads, as text records, no socket payloads",
        cost="a TLS producer at full speed kept 47-49 % of its throughput",
    )

    def __init__(self, capture) -> None:
        super().__init__(capture)
        self.out_path = self.out_dir / "strace.txt"
        self.child: Child | None = None
        self.failed_to_start: str | None = None
        self.child_status: dict = {}      # all the child said, for overhead and the manifest's tracer

    @classmethod
    def unmet(cls) -> str | None:
        return check()

    @classmethod
    def tool_version(cls) -> str | None:
        return version()

    @classmethod
    def start_alone(cls, pid: int, out: Path, calls_per_s: float | None = None) -> tuple[Child | None, str | None]:
        """The tracer on its own, outside a trace (the overhead bench)."""
        return start(pid, out, READY_TIMEOUT_S)

    # Set before start() by whoever measured it: the producer's read and
    # write calls a second before tracing (bpfcalls chooses its hooks by it).
    calls_per_s: float | None = None

    def start(self, pid: int) -> None:
        self.child, self.failed_to_start = start(pid, self.out_path)

    def inputs(self) -> list[Path]:
        return [self.out_path] if self.record is not None and self.out_path.exists() else []

    def stop(self, started_us: int, ended_us: int, interrupted: bool) -> None:
        if self.child is None:
            return
        self.child_status = collect(self.child, name=self.name)
        self.record = CollectorStatus(self.name, **{k: self.child_status.get(k) for k in STATUS_FIELDS})
        if self.record.state == "ok" and interrupted:
            self.record.state = "partial"


if __name__ == "__main__":
    raise SystemExit(main())
