"""What user-space probes would cost, measured before the tracer uses them.

bpfcalls hooks the kernel's per-syscall tracepoints. Enabling any of them
moves every task on the host to the kernel's slower syscall path, and a
hooked call of any process runs the program: an unrelated process pays
(``bench/hosttax.py``). A uprobe is a breakpoint in the traced process's own
pages of libc: no other process meets it. What it costs the traced process
depends on where it sits. The kernel runs the instruction a breakpoint
displaced either by emulating it (jumps, calls, pushes, nops) or by
single-stepping a copy of it; in a KVM guest each single step's debug trap
is a VM exit (KVM intercepts #DB), thousands of cycles.

Measured, on a loop of write(2) of 1 byte to /dev/null that times its own
CPU a call (``SELF_C``; the median of each round's ns a call):
  untraced                           the reference
  bpfcalls                           kdiag's tracer as it runs today
  uprobe at write()'s first instruction     (glibc: a compare, single-stepped)
  uprobe at write()'s first conditional jump (emulated: no single step)
  the same with a uretprobe          the call's return, for its duration
and, for the record a producer's calls make, bpfcalls on a send() of 64
bytes on a connected UDP socket (named once, its first bytes kept), untraced
and traced in turn;
and, as bench/hosttax.py measures it, an unrelated write() loop's calls a
CPU second with the jump's uprobe and uretprobe attached to another, busy,
process, against the untraced runs either side. Last, whether a probe
opened on a process's main thread (perf_event_open with its pid) fires in
its other threads: the tracer would need one per thread.

The probes' program (``PROBE_BPF_C``) only counts: what the tracer's
records would add is bpfcalls' own cost, the same on either hook. The
loader (``LOADER_C``) is built here with cc and libbpf, the program with
clang, as setup.py builds bpfcalls'.
"""
from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Figure, environ, loadavg, spread
from kdiag.collectors import _libc_probes

PROBE_BPF_C = r"""
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
char LICENSE[] SEC("license") = "GPL";
const volatile __u32 tgid_cfg = 0;
/* [0] entries in the main thread, [1] in the process's other threads, [2] returns, [3] other processes */
__u64 hits[4] = {};
SEC("uprobe") int on_entry(void *ctx)
{
    __u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != tgid_cfg)
        __sync_fetch_and_add(&hits[3], 1);
    else
        __sync_fetch_and_add(&hits[(__u32)id == tgid_cfg ? 0 : 1], 1);
    return 0;
}
SEC("uretprobe") int on_return(void *ctx)
{
    __sync_fetch_and_add(&hits[2], 1);
    return 0;
}
"""

LOADER_C = r"""
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
/* loader OBJ PID LIB OFFSET RET THREADS: a uprobe (and with RET a uretprobe)
 * at LIB+OFFSET, opened on PID's main thread only (THREADS 0) or on each of
 * its threads; prints "ready", and at SIGINT the program's counts. */
static volatile sig_atomic_t stop;
static void on_signal(int s) { (void)s; stop = 1; }
static struct bpf_map *ending(struct bpf_object *o, const char *suffix)
{
    struct bpf_map *m;
    bpf_object__for_each_map(m, o) {
        const char *n = bpf_map__name(m);
        size_t l = strlen(n), k = strlen(suffix);
        if (l >= k && strcmp(n + l - k, suffix) == 0)
            return m;
    }
    return NULL;
}
static int probe(struct bpf_object *o, int tid, const char *lib, size_t off, int ret)
{
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = ret);
    struct bpf_program *p = bpf_object__find_program_by_name(o, ret ? "on_return" : "on_entry");
    if (!bpf_program__attach_uprobe_opts(p, tid, lib, off, &opts)) {
        fprintf(stderr, "attaching to thread %d: %s\n", tid, strerror(errno));
        return -1;
    }
    return 0;
}
int main(int argc, char **argv)
{
    if (argc != 7)
        return 2;
    int pid = atoi(argv[2]), ret = atoi(argv[5]), threads = atoi(argv[6]);
    size_t off = strtoul(argv[4], NULL, 0);
    struct bpf_object *o = bpf_object__open_file(argv[1], NULL);
    unsigned cfg = (unsigned)pid;
    if (!o || bpf_map__set_initial_value(ending(o, ".rodata"), &cfg, sizeof cfg) || bpf_object__load(o)) {
        fprintf(stderr, "loading the program: %s\n", strerror(errno));
        return 1;
    }
    signal(SIGINT, on_signal);
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", pid);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int tid = atoi(e->d_name);
        if (tid <= 0 || (!threads && tid != pid))
            continue;
        if (probe(o, tid, argv[3], off, 0) || (ret && probe(o, tid, argv[3], off, 1)))
            return 1;
    }
    printf("ready\n");
    fflush(stdout);
    while (!stop)
        pause();
    unsigned long long v[4];
    unsigned zero = 0;
    bpf_map_lookup_elem(bpf_map__fd(ending(o, ".bss")), &zero, v);
    printf("%llu %llu %llu %llu\n", v[0], v[1], v[2], v[3]);
    return 0;
}
"""

SELF_C = r"""
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
/* self N ROUNDS [udp]: says "ready", waits for a line on stdin, then ROUNDS rounds of N write()s
 * of 1 byte to /dev/null (with udp: send()s of 64 bytes on a UDP socket connected over
 * loopback, a socket's write as a producer's are recorded); prints each round's CPU ns a call */
static double cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
int main(int argc, char **argv)
{
    long n = atol(argv[1]);
    int rounds = atoi(argv[2]), udp = argc > 3, fd = open("/dev/null", O_WRONLY);
    char c[64] = {0}, line[8];
    if (udp) {
        /* the receiver's buffer fills and later datagrams are dropped: each send() still succeeds */
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof a;
        int r = socket(AF_INET, SOCK_DGRAM, 0);
        fd = socket(AF_INET, SOCK_DGRAM, 0);
        if (bind(r, (void *)&a, sizeof a) || getsockname(r, (void *)&a, &len) || connect(fd, (void *)&a, sizeof a))
            return 1;
    }
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 1;
    for (int r = 0; r < rounds; r++) {
        double t = cpu_ns();
        for (long i = 0; i < n; i++)
            if (udp) send(fd, c, sizeof c, 0); else write(fd, c, 1);
        printf("%.1f\n", (cpu_ns() - t) / n);
    }
    return 0;
}
"""

# A Python process whose main thread and two others write to /dev/null.
THREADS_PY = r"""
import os, threading, time
fd = os.open("/dev/null", os.O_WRONLY)
def w():
    while True:
        os.write(fd, b"x"); time.sleep(0.001)
for _ in range(2):
    threading.Thread(target=w, daemon=True).start()
print("ready", flush=True)
w()
"""

def libc_of(pid: int) -> Path | None:
    """The libc ``pid`` mapped, once the dynamic loader has mapped it."""
    deadline = time.monotonic() + 5.0
    while (found := _libc_probes.libc_of(pid)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return found[0] if found else None


class Probes:
    """The program and its loader, built in ``work``."""

    def __init__(self, work: Path):
        cc, clang = shutil.which("cc") or shutil.which("gcc"), shutil.which("clang")
        if not cc or not clang:
            raise RuntimeError("needs cc and clang")
        work.mkdir(parents=True, exist_ok=True)
        self.obj, self.loader, self.self_exe = work / "probe.bpf.o", work / "loader", work / "self"
        for name, text in (("probe.bpf.c", PROBE_BPF_C), ("loader.c", LOADER_C), ("self.c", SELF_C)):
            (work / name).write_text(text)
        arch = os.uname().machine + "-linux-gnu"
        for cmd in ([clang, "-O2", "-g", "-target", "bpf", f"-I/usr/include/{arch}", "-c", str(work / "probe.bpf.c"),
                     "-o", str(self.obj)],
                    [cc, "-O2", "-o", str(self.loader), str(work / "loader.c"), "-lbpf"],
                    [cc, "-O2", "-o", str(self.self_exe), str(work / "self.c")]):
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode:
                raise RuntimeError(f"{Path(cmd[0]).name} failed: {res.stderr.strip()[-500:]}")

    def attach(self, pid: int, lib: Path, offset: int, ret: bool, threads: bool = True) -> subprocess.Popen:
        p = subprocess.Popen([str(self.loader), str(self.obj), str(pid), str(lib), hex(offset), str(int(ret)),
                              str(int(threads))], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
        if p.stdout.readline().strip() != "ready":
            p.wait(timeout=10)
            raise RuntimeError(f"the probe did not attach: {p.stderr.read().strip()[-300:]}")
        return p

    @staticmethod
    def detach(p: subprocess.Popen) -> list[int]:
        """The program's counts: main thread, other threads, returns, other processes."""
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
        if p.returncode:
            raise RuntimeError(f"the loader failed: {err.strip()[-300:]}")
        return [int(x) for x in out.split()]

    def self_ns(self, n: int, rounds: int, hook, udp: bool = False) -> tuple[list[float], list[int] | None]:
        """The traced loop's ns a call, each round; ``hook(pid)`` attaches and
        returns what ends it (its result is returned too). ``udp``: the loop
        sends on a connected UDP socket instead of writing to /dev/null."""
        loop = subprocess.Popen([str(self.self_exe), str(n), str(rounds), *(["udp"] if udp else [])],
                                stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        end = None
        try:
            loop.stdout.readline()
            end = hook(loop.pid) if hook else None
            out, _ = loop.communicate("go\n", timeout=600)
        finally:
            if loop.poll() is None:
                loop.kill()
                loop.wait()
            got = end() if end else None
        return [float(x) for x in out.split()], got


def _tracepoints(pid: int, work: Path):
    """kdiag's bpfcalls on ``pid``, started as ``kdiag trace --pid`` starts
    it, on the per-syscall tracepoints whatever this process's environment
    asks (the figure names them)."""
    from kdiag.capture import attach
    from kdiag.collectors import bpfcalls, bpftrace, strace

    with environ({bpfcalls.HOOKS_ENV: "tracepoints", bpfcalls.RAW_ENV: ""}), tempfile.TemporaryFile() as err:
        tracer, why = attach.start_tracer("bpfcalls", pid, work / "trace", strace.ATTACH_FLAGS, err, lambda *a: None)
    if tracer is None:
        raise RuntimeError(why)

    def end():
        st = bpftrace.collect(tracer.bpf, name=tracer.tool)
        (work / "trace").unlink(missing_ok=True)
        return st
    return end


def run(smoke: bool, work: Path) -> list[Figure]:
    from bench import hosttax
    from bench.overhead import paired
    from kdiag.collectors import bpfcalls

    n, rounds, repeats, tax_rounds = (100_000, 3, 1, 2) if smoke else (400_000, 5, 3, 8)
    figures: list[Figure] = []
    why, lib, start, jump = None, None, 0, None
    try:
        probes = Probes(work)
        loop = subprocess.Popen([str(probes.self_exe), "1", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            loop.stdout.readline()
            lib = libc_of(loop.pid)
        finally:
            loop.communicate(b"go\n", timeout=30)
        found = _libc_probes.function_code(lib, "write") if lib else None
        if not found:
            raise RuntimeError(f"no write() in the loop's libc ({lib})")
        start, code = found
        # (glibc: its first conditional jump, after the single-thread test)
        jump = _libc_probes.probe_point(code)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        why, probes = str(e), None

    # (name, what attaches, fewer calls: a single-stepped probe costs ~100x)
    modes = [("untraced", None, 1)]
    if probes is not None:
        if not bpfcalls.check():
            modes.append(("bpfcalls (per-syscall tracepoints)", lambda pid: _tracepoints(pid, work), 1))
        modes.append(("uprobe at write()'s first instruction",
                      lambda pid: _probe_end(probes, probes.attach(pid, lib, start, False)), 20))
        if jump is not None:
            modes.append(("uprobe at write()'s first conditional jump",
                          lambda pid: _probe_end(probes, probes.attach(pid, lib, start + jump, False)), 1))
            modes.append(("uprobe and uretprobe at that jump",
                          lambda pid: _probe_end(probes, probes.attach(pid, lib, start + jump, True)), 1))
    per_mode: dict[str, list[float]] = {name: [] for name, _, _ in modes}
    hits: dict[str, list] = {}
    load0 = loadavg()
    for _ in range(repeats if probes is not None else 0):
        for name, hook, fewer in modes:
            got, counts = probes.self_ns(n // fewer, rounds, hook)
            per_mode[name].append(statistics.median(got))
            hits[name] = counts
    base = statistics.median(per_mode["untraced"]) if per_mode["untraced"] else None
    for name, _, fewer in modes:
        vals = per_mode[name]
        val = statistics.median(vals) if vals else None
        note = (f"median of {len(vals)} run(s), each the median of {rounds} rounds of {n // fewer:,} write()s "
                f"({spread(vals, 0)} ns); load average {load0} .. {loadavg()}"
                if vals else f"not measured: {why}")
        if name in hits and isinstance(hits[name], list):
            note += f"; the program counted {hits[name][0]:,} entries, {hits[name][2]:,} returns"
        if jump is None and probes is not None and name == modes[-1][0]:
            note += "; write()'s start is not a shape collectors/_libc_probes.py knows: no jump to probe"
        figures.append(Figure("uprobes", f"write() of the traced process under {name} ns a call",
                              None if val is None else round(val, 1), "ns", reference="untraced ns a call",
                              ref_value=None if base is None else round(base, 1),
                              command="python -m bench.uprobes", note=note))
    if probes is not None and not bpfcalls.check():
        figures.append(_socket_send(probes, work, n // 4, rounds, repeats))
    if probes is not None and jump is not None:
        figures.append(_tax(probes, lib, start + jump, work, tax_rounds, hosttax, paired))
        figures.append(_threads(probes, start + jump))
    return figures


def _socket_send(probes: Probes, work: Path, n: int, rounds: int, repeats: int) -> Figure:
    """bpfcalls' cost on a socket's write, the record a producer's calls
    make: the socket is named once and then known (the /dev/null loop names
    its file at every call), and the call's first bytes are kept. Untraced
    and traced in turn."""
    load0 = loadavg()
    runs: dict[str, list[float]] = {"untraced": [], "traced": []}
    for _ in range(repeats):
        for name, hook in (("untraced", None), ("traced", lambda pid: _tracepoints(pid, work))):
            got, _ = probes.self_ns(n, rounds, hook, udp=True)
            runs[name].append(statistics.median(got))
    base, val = statistics.median(runs["untraced"]), statistics.median(runs["traced"])
    return Figure("uprobes", "send() on a connected UDP socket under bpfcalls (per-syscall tracepoints) ns a call",
                  round(val, 1), "ns", reference="untraced ns a call", ref_value=round(base, 1),
                  command="python -m bench.uprobes",
                  note=f"median of {repeats} run(s) each, taken in turn, each the median of {rounds} rounds of "
                       f"{n:,} send()s of 64 bytes (traced {spread(runs['traced'], 0)}, "
                       f"untraced {spread(runs['untraced'], 0)} ns); the tracer adds "
                       f"{val - base:.0f} ns a call; load average {load0} .. {loadavg()}")


def _probe_end(probes: Probes, p: subprocess.Popen):
    return lambda: probes.detach(p)


def _tax(probes: Probes, lib: Path, offset: int, work: Path, rounds: int, hosttax, paired) -> Figure:
    exe = hosttax.build(work)
    n = int(hosttax.RUN_S * max(hosttax.loop_rate(exe, "write", 200_000) for _ in range(3)))
    busy = subprocess.Popen([str(exe), "send", str(1 << 40), str(hosttax.BUSY_PER_S)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL)
    untraced, traced, counted = [], [], 0
    load0 = loadavg()
    try:
        busy_lib = libc_of(busy.pid)
        untraced.append(hosttax.loop_rate(exe, "write", n))
        for _ in range(rounds):
            p = probes.attach(busy.pid, busy_lib, offset, True)
            time.sleep(0.2)
            traced.append(hosttax.loop_rate(exe, "write", n))
            counted += probes.detach(p)[0]
            untraced.append(hosttax.loop_rate(exe, "write", n))
    finally:
        busy.kill()
        busy.wait()
    ratios = paired(untraced, traced)
    pct = statistics.median(ratios) if ratios else None
    return Figure("uprobes", "write() of an unrelated process, a uprobe and uretprobe on another % of untraced",
                  None if pct is None else round(pct, 2), "%", reference="untraced write() calls a CPU second",
                  ref_value=round(statistics.median(untraced)), command="python -m bench.uprobes",
                  note=f"median of {len(ratios)} traced run(s) of {n:,} calls, each against the untraced runs either "
                       f"side ({spread(ratios, 2)} %); the probes on a process writing "
                       f"{hosttax.BUSY_PER_S:,} times a second, which they counted {counted:,} times; load average "
                       f"{load0} .. {loadavg()}")


def _threads(probes: Probes, offset: int) -> Figure:
    target = subprocess.Popen([sys.executable, "-c", THREADS_PY], stdout=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
    try:
        target.stdout.readline()
        lib = libc_of(target.pid)
        p = probes.attach(target.pid, lib, offset, False, threads=False)
        time.sleep(1.0)
        main_only = probes.detach(p)
        p = probes.attach(target.pid, lib, offset, False, threads=True)
        time.sleep(1.0)
        each = probes.detach(p)
    finally:
        target.kill()
        target.wait()
    return Figure("uprobes", "write()s of a process's other threads seen by a probe opened on its main thread",
                  main_only[1], "calls", reference="its main thread's write()s seen", ref_value=main_only[0],
                  command="python -m bench.uprobes",
                  note=f"1 s, three threads writing 1,000 times a second: the probe's filter is the process's memory, "
                       f"not the thread. Opened on each thread instead, a call runs the program once for each probe: "
                       f"{each[0]:,} calls of the main thread and {each[1]:,} of the others counted in 1 s")


if __name__ == "__main__":
    from bench.__main__ import _line

    with tempfile.TemporaryDirectory(prefix="kdiag-bench-") as tmp:
        for f in run(smoke="--smoke" in sys.argv, work=Path(tmp)):
            print(_line(f), flush=True)
            print("    " + f.note, flush=True)
