"""The host's tax: what kdiag's tracer costs the processes it does not trace.

An in-kernel tracer's hooks are the host's, not the traced process's: every
process's calls pass them. Here an unrelated process (a C loop, compiled
here with ``cc``: ``LOOP_C``) makes one system call over and over, and its
calls a second of its own CPU time (user + system, from ``wait4``) are
measured with no tracer, then with kdiag's tracer attached to another
process, started and stopped as ``kdiag trace --pid`` does
(``kdiag.capture.attach.start_tracer``), in turn. Two calls:
  write(2) of 1 byte to /dev/null   a call the tracer hooks (its program runs, and says "not traced")
  getppid(2)                        a call it does not hook
The process it traces is idle (a sleep: the hooks' cost alone) or busy (a
loop of socket writes, 2,000 a second, each one traced and recorded: the
tracer's loader is at work too). Each traced run is compared with the untraced
runs just before and after it (``bench.overhead.paired``): the figure is
the median, the spread is in its note. CPU time, not wall time: the machine
is shared, and another process's turn on the core is not the tracer's cost.
The raw syscall tracepoints, where the tracer falls back to when the
per-syscall ones cannot be attached (``KDIAG_BPFCALLS_RAW``), are measured
beside them for reference, and so are uprobes in the traced process's libc
(``KDIAG_BPFCALLS_HOOKS=uprobes``), which no other process meets.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Figure, check, environ, loadavg, spread

GOAL = ">= 99"
LOOP_C = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* loop write|getppid|send N [PER_S]: N calls; send: to a socket pair, PER_S a second */
int main(int argc, char **argv)
{
    long n = atol(argv[2]);
    char c = 0;
    if (strcmp(argv[1], "write") == 0) {
        int fd = open("/dev/null", O_WRONLY);
        for (long i = 0; i < n; i++)
            write(fd, &c, 1);
    } else if (strcmp(argv[1], "getppid") == 0) {
        for (long i = 0; i < n; i++)
            syscall(SYS_getppid);
    } else {
        int sv[2];
        char buf[64] = {0};
        long gap_us = 1000000 / atol(argv[3]);
        if (socketpair(1, 1, 0, sv))    /* AF_UNIX, SOCK_STREAM */
            return 1;
        for (long i = 0; i < n; i++) {
            write(sv[0], buf, sizeof buf);
            read(sv[1], buf, sizeof buf);
            usleep(gap_us);
        }
    }
    return 0;
}
"""
CALLS = ("write", "getppid")
# CPU seconds a run of the loop takes, about: long enough that the clock's
# tick (CPU time is counted in ticks of up to 4 ms) is under 1 % of it.
RUN_S = 0.6
BUSY_PER_S = 2000
# (figure name, tracer environment, process traced)
MODES = [
    # kdiag's default: auto, which takes uprobes for a process this quiet
    ("bpfcalls (auto) on an idle process", {}, "idle"),
    ("bpfcalls (auto) on a busy process", {}, "busy"),
    ("bpfcalls on the per-syscall tracepoints (KDIAG_BPFCALLS_HOOKS=tracepoints) on a busy process",
     {"KDIAG_BPFCALLS_HOOKS": "tracepoints"}, "busy"),
    ("bpfcalls on raw syscall tracepoints (the fallback) on an idle process", {"KDIAG_BPFCALLS_RAW": "1"}, "idle"),
]


def build(work: Path) -> Path:
    """The loop, compiled."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) to build the loop")
    src, exe = work / "loop.c", work / "loop"
    src.write_text(LOOP_C)
    subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True, capture_output=True)
    return exe


def loop_rate(exe: Path, call: str, n: int) -> float:
    """Calls a CPU second of one run of ``n`` calls."""
    proc = subprocess.Popen([str(exe), call, str(n)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"the {call} loop failed ({proc.returncode})")
    return n / max(ru.ru_utime + ru.ru_stime, 1e-6)


class Tax:
    def __init__(self, exe: Path, work: Path, smoke: bool):
        self.exe, self.work = exe, work
        self.n = {c: int(RUN_S * max(loop_rate(exe, c, 200_000) for _ in range(3))) for c in CALLS}
        if smoke:
            self.n = {c: n // 4 for c, n in self.n.items()}

    def rates(self) -> dict[str, float]:
        return {c: loop_rate(self.exe, c, self.n[c]) for c in CALLS}

    @contextlib.contextmanager
    def traced(self, env: dict, pid: int):
        """kdiag's tracer on ``pid``, started as ``kdiag trace --pid`` starts it."""
        from kdiag.capture import attach, overhead
        from kdiag.collectors import bpftrace, strace

        with environ(env), tempfile.TemporaryFile() as err:
            # the process's calls a second, measured as kdiag trace --pid measures them
            tracer, why = attach.start_tracer("bpfcalls", pid, self.work / "trace", strace.ATTACH_FLAGS, err,
                                              lambda *a: None, overhead.baseline(pid).calls_per_s())
        if tracer is None:
            raise RuntimeError(why)
        try:
            yield
        finally:
            st = bpftrace.collect(tracer.bpf, name=tracer.tool)
            (self.work / "trace").unlink(missing_ok=True)
            self.hooks = st.get("hooks")

    def alternate(self, env: dict, target: str, rounds: int) -> dict[str, tuple[list, list]]:
        """``rounds`` traced runs of each call, each between untraced ones:
        per call, the untraced rates and the traced ones (``paired``)."""
        cmd = (["sleep", "3600"] if target == "idle"
               else [str(self.exe), "send", str(1 << 40), str(BUSY_PER_S)])
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        out = {c: ([], []) for c in CALLS}
        try:
            for c, r in self.rates().items():
                out[c][0].append(r)
            for _ in range(rounds):
                with self.traced(env, proc.pid):
                    time.sleep(0.3)     # the loader settled at its nice level
                    for c, r in self.rates().items():
                        out[c][1].append(r)
                for c, r in self.rates().items():
                    out[c][0].append(r)
        finally:
            proc.kill()
            proc.wait()
        return out


def run(smoke: bool, work: Path) -> list[Figure]:
    from bench.overhead import paired
    from kdiag.collectors import bpfcalls

    work.mkdir(parents=True, exist_ok=True)
    rounds = 2 if smoke else 12
    why = bpfcalls.check()
    figures = []
    tax = None
    if not why:
        try:
            tax = Tax(build(work), work, smoke)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            why = str(e)
    for name, env, target in MODES if not smoke else MODES[:1]:
        got, hooks, load = None, None, None
        if tax is not None:
            try:
                load0 = loadavg()
                got = tax.alternate(env, target, rounds)
                hooks, load = tax.hooks, f"{load0} .. {loadavg()}"
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                why = str(e)
        reference = bool(env)    # the hooks auto would not take here
        for call in CALLS:
            untraced, traced = got[call] if got else ([], [])
            ratios = paired(untraced, traced)
            pct = statistics.median(ratios) if ratios else None
            base = statistics.median(untraced) if untraced else None
            if ratios:
                note = (f"median of {len(ratios)} traced run(s) of {tax.n[call]:,} calls, each against the untraced "
                        f"runs either side of it ({spread(ratios, 2)} %); calls a CPU second untraced "
                        f"{spread(untraced, 0)}, traced {spread(traced, 0)}; the tracer hooked {hooks}; "
                        f"load average {load}")
            else:
                note = f"not measured: {why or 'no rate'}"
            figures.append(Figure(
                "hosttax", f"{call}() of an unrelated process under {name} % of untraced", _round(pct), "%",
                goal=None if reference else GOAL, met=None if reference else check(pct, GOAL),
                reference=f"untraced {call}() calls a CPU second", ref_value=_round(base, 0),
                command=f"python -m bench --only hosttax ({''.join(f'{k}={v}: ' for k, v in env.items())}"
                        f"python -m kdiag.collectors.bpfcalls --pid PID attached and detached in turn; "
                        f"{{loop {call} N}} timed by its CPU)", note=note))
    return figures


def _round(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


if __name__ == "__main__":
    sys.exit("run it as python -m bench --only hosttax")
