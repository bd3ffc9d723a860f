"""Tracing overhead: a producer at full speed, untraced and under each tracer.

The producer (``python -m bench.overhead produce``, confluent-kafka) produces
256-byte values asynchronously as fast as it can (produce + poll(0),
linger.ms=5, acks=1, librdkafka's protocol debug lines on stderr, as kdiag
wants them) to the lab broker over TLS (Tansu behind stunnel4 on loopback):
the case that costs a tracer most, one write() per TLS record on the broker
thread. It writes "time delivered" every 100 ms; a run's rate is the
delivered messages a second inside the traced window (from the moment the
tracer traces to the moment it is told to stop).

Each figure is traced/untraced in percent: the median over rounds of each
traced run against the untraced runs just before and after it (``paired``),
and for the in-kernel tracers also windows traced and untraced in turn in
one producer (``Bench.alternate``). Separate untraced runs differ by up to
a third within minutes here; the median of the traced runs against the
median of the untraced ones, the statistic before 2026-11-27, is in each
figure's note. The modes:
  strace -f             plain ``strace -f -o FILE CMD``, the reference the issue names
  kdiag --pid, strace   what ``kdiag trace --pid`` ran before: strace -p, every thread, no seccomp
  kdiag --pid, broker threads   strace -p on the rdk:broker threads only
  kdiag --pid, bpfcalls what ``kdiag trace --pid`` runs now on a busy producer
  kdiag --pid, bpftrace what it runs where bpfcalls cannot (and ran before it)
  kdiag -- CMD, strace / bpfcalls / bpftrace   the same from the command's exec (kdiag's shim)
  bpfcalls on the raw syscall tracepoints   where bpfcalls falls back to when the
                        per-syscall tracepoints cannot be attached (alternating only)
  bpfcalls on uprobes in libc   KDIAG_BPFCALLS_HOOKS=uprobes: no syscall tracepoint
                        (alternating only; its host's tax is in bench/hosttax.py)
  bpftrace, log lines without their text / probes only   kdiag's program cut
                        down, to show where its cost lies (``variant_program``)
The tracers are started exactly as kdiag.capture.attach starts them; kdiag's Spark
analysis and socket sampler are not running (they come after, or are
measured by the manifest's own ``overhead``). The machine has 2 cores shared
with other work: each mode runs ``repeats`` times, interleaved, with the
spread in the note. The topic is emptied after every producer
(``Bench.empty_topic``): Tansu keeps every message in memory.
"""
from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from bench.common import ROOT, Figure, check, environ, loadavg, median_interval, spread

# kdiag's default tracer's goal; strace and bpftrace, and bpfcalls' fallback
# hooks, are measured beside it for reference (``goal_of``).
GOAL = ">= 97"
TOPIC = "kdiag-bench"
VALUE_BYTES = 256
WARM_S = 1.5
# traced windows in one producer of an alternating run (Bench.alternate)
PER_PRODUCER = 2


def produce(argv: list[str]) -> int:
    """The workload: python -m bench.overhead produce BOOTSTRAP CA SECONDS OUT."""
    from confluent_kafka import Producer

    bootstrap, ca, seconds, out = argv[0], argv[1], float(argv[2]), argv[3]
    p = Producer({"bootstrap.servers": bootstrap, "security.protocol": "ssl", "ssl.ca.location": ca,
                  "linger.ms": 5, "acks": 1, "queue.buffering.max.messages": 200_000, "debug": "protocol"})
    done = [0]

    def on_delivery(err, msg):
        if err is None:
            done[0] += 1
    value = b"v" * VALUE_BYTES
    p.produce(TOPIC, value, on_delivery=on_delivery)
    p.flush(15)                 # connected before the clock starts
    with open(out, "w", buffering=1) as f:
        start = time.time()
        nxt = start
        while True:
            try:
                p.produce(TOPIC, value, on_delivery=on_delivery)
            except BufferError:
                p.poll(0.001)
            p.poll(0)
            now = time.time()
            if now >= nxt:
                f.write(f"{now:.6f} {done[0]}\n")
                nxt += 0.1
                if now - start >= seconds:
                    break
    p.flush(15)
    return 0


def rate(progress: Path, t0: float, t1: float) -> float | None:
    """Delivered messages a second between t0 and t1 (epoch seconds)."""
    rows = []
    with contextlib.suppress(OSError):
        for line in progress.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                rows.append((float(parts[0]), int(parts[1])))
    rows = [r for r in rows if t0 <= r[0] <= t1]
    if len(rows) < 2 or rows[-1][0] <= rows[0][0]:
        return None
    return (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])


class Window(NamedTuple):
    """One window of an alternating run (``Bench.alternate``)."""
    traced: bool
    msg_s: float | None
    cpu_us_per_msg: float | None    # the producer's CPU (all its threads) per delivered message
    tracer_cpu_s: float | None      # the tracer's own CPU in the window, by its status; None untraced


def paired(untraced: list[float | None], traced: list[float | None]) -> list[float]:
    """Each traced rate in percent of the untraced rates either side of it:
    ``untraced[i]`` ran just before ``traced[i]`` and ``untraced[i + 1]``
    just after (either may be missing); a pair with nothing to compare is
    left out. Two separate runs' rates differ by up to a third on this
    machine, traced or not; the runs either side of a traced one share its
    minute."""
    out = []
    for i, t in enumerate(traced):
        around = [u for u in untraced[i:i + 2] if u]
        if t and around:
            out.append(100.0 * t / statistics.mean(around))
    return out


class Bench:
    def __init__(self, lab, work: Path, window_s: float):
        self.lab, self.work, self.window = lab, work, window_s
        self.n = 0

    def cmd(self, seconds: float, progress: Path) -> list[str]:
        return [sys.executable, "-m", "bench.overhead", "produce", self.lab.bootstrap, str(self.lab.ca_path),
                f"{seconds:g}", str(progress)]

    def _files(self, name: str) -> tuple[Path, Path]:
        self.n += 1
        return self.work / f"{self.n:02d}-{name}.progress", self.work / f"{self.n:02d}-{name}.trace"

    def _spawn(self, cmd, progress: Path) -> subprocess.Popen:
        return subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def _wait_progress(self, progress: Path, timeout_s: float = 30.0) -> float:
        """Epoch time of the first progress line (connected, producing)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with contextlib.suppress(OSError, ValueError, IndexError):
                return float(progress.read_text().split()[0])
            time.sleep(0.05)
        raise RuntimeError(f"the producer never started ({progress})")

    def _end(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:      # started by this benchmark
            proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.empty_topic()

    def empty_topic(self) -> None:
        """Deletes and re-creates the topic. Tansu keeps every message in
        memory and frees a topic's only when it is deleted: a producer at
        full speed adds 1.2 GB every 7.5 s, and the runs of one benchmark
        would fill this machine's 24 GB (the kernel reclaiming pages slowed
        and stalled the later runs)."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient

        from kdiag.lab.broker_start import ensure_topics

        admin = AdminClient(self.lab.client_config())
        for fut in admin.delete_topics([TOPIC], operation_timeout=10).values():
            try:
                fut.result(timeout=15)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
        ensure_topics(self.lab, [TOPIC], time.monotonic() + 15)

    def untraced(self) -> float | None:
        progress, _ = self._files("untraced")
        proc = self._spawn(self.cmd(WARM_S + self.window, progress), progress)
        proc.wait(120)
        self._end(proc)
        t0 = self._wait_progress(progress, 1)
        return rate(progress, t0 + WARM_S, t0 + WARM_S + self.window)

    def plain_strace(self) -> float | None:
        progress, trace = self._files("strace-f")
        proc = self._spawn(["strace", "-f", "-o", str(trace), *self.cmd(WARM_S + self.window, progress)], progress)
        proc.wait(300)
        self._end(proc)
        t0 = self._wait_progress(progress, 1)
        return rate(progress, t0 + WARM_S, t0 + WARM_S + self.window)

    def attach(self, tool: str, threads: bool = False) -> float | None:
        """Like kdiag trace --pid: the producer runs untraced, then is traced
        for the window, then detached."""
        progress, trace = self._files(f"pid-{tool}{'-threads' if threads else ''}")
        proc = self._spawn(self.cmd(600, progress), progress)
        try:
            self._wait_progress(progress)
            time.sleep(WARM_S)
            tracer = self._trace(tool, proc.pid, trace, threads)
            try:
                t0 = time.time()
                time.sleep(self.window)
                t1 = time.time()
            finally:
                self._untrace(tracer)
            return rate(progress, t0 + 0.2, t1)
        finally:
            self._end(proc)

    def alternate(self, tool: str, rounds: int, env: dict[str, str] | None = None) -> list[list[Window]]:
        """Producers whose windows run untraced and traced in turn (``tool``
        attached and detached as ``kdiag trace --pid`` does), starting and
        ending untraced: each traced window is compared with the untraced
        ones either side of it, seconds apart in the same process, so a
        producer's or the machine's slow minute falls on both sides. Each
        producer runs ``PER_PRODUCER`` traced windows (the broker's memory,
        see ``empty_topic``); one list of windows per producer. ``env``:
        the tracer's environment beside this process's."""
        out = []
        for first in range(0, rounds, PER_PRODUCER):
            progress, trace = self._files(f"alternate-{tool}")
            proc = self._spawn(self.cmd(3600, progress), progress)
            try:
                self._wait_progress(progress)
                time.sleep(WARM_S)
                windows = [self._window(proc.pid, progress, None)]
                for _ in range(min(PER_PRODUCER, rounds - first)):
                    with environ(env or {}):
                        tracer = self._trace(tool, proc.pid, trace)
                    try:
                        w = self._window(proc.pid, progress, tracer)
                    finally:
                        st = self._untrace(tracer)
                    windows.append(w._replace(tracer_cpu_s=st.get("cpu_s")))
                    trace.unlink(missing_ok=True)
                    windows.append(self._window(proc.pid, progress, None))
                out.append(windows)
            finally:
                self._end(proc)
        return out

    def _window(self, pid: int, progress: Path, tracer) -> Window:
        from kdiag.capture.overhead import cpu_s

        c0, t0 = cpu_s([pid]), time.time()
        time.sleep(self.window)
        c1, t1 = cpu_s([pid]), time.time()
        r = rate(progress, t0 + 0.2, t1)
        per_msg = None if None in (r, c0, c1) or not r else 1e6 * (c1 - c0) / (t1 - t0) / r
        return Window(tracer is not None, r, per_msg, None)

    def _trace(self, tool: str, pid: int, trace: Path, threads: bool = False):
        """``tool`` tracing ``pid`` as kdiag.capture.attach starts it, once it traces."""
        from kdiag.capture import attach, overhead
        from kdiag.collectors import strace as c_strace

        with tempfile.TemporaryFile() as err:
            if threads:
                tids = broker_threads(pid)
                flags = [f for f in _attach_flags() if f != "-f"]
                cmd = ["strace", *flags, "-o", str(trace)] + [a for t in tids for a in ("-p", str(t))]
                tracer = attach.Tracer("strace", strace=subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                    start_new_session=True))
                time.sleep(0.3)
                return tracer
            # the producer's calls a second, measured as kdiag trace --pid measures them
            tracer, why = attach.start_tracer(tool, pid, trace, _attach_flags(), err, print,
                                              overhead.baseline(pid).calls_per_s())
        if tracer is None:
            raise RuntimeError(why)
        if tracer.strace is not None:
            c_strace.wait_traced(pid, tracer.strace)
        return tracer

    @staticmethod
    def _untrace(tracer) -> dict:
        """Detaches ``tracer``; the in-kernel tracers' status (their CPU), else {}."""
        from kdiag.collectors import bpftrace
        from kdiag.collectors import strace as c_strace

        if tracer.strace is not None:
            c_strace.detach(tracer.strace)
            return {}
        return bpftrace.collect(tracer.bpf, name=tracer.tool)

    def bpftrace_variant(self, variant: str) -> float | None:
        """bpftrace itself on a cut-down program (``variant_program``),
        attached to a producer running at full speed, like ``attach``."""
        from kdiag.collectors import bpftrace

        progress, trace = self._files(f"bpf-{variant}")
        proc = self._spawn(self.cmd(600, progress), progress)
        try:
            self._wait_progress(progress)
            time.sleep(WARM_S)
            src = trace.with_suffix(".bt")
            src.write_text(variant_program(proc.pid, variant))
            env = {**os.environ, "BPFTRACE_STRLEN": str(bpftrace.CHUNK),
                   "BPFTRACE_PERF_RB_PAGES": str(bpftrace.RB_PAGES)}
            with open(trace, "wb") as out:
                bp = subprocess.Popen(["bpftrace", str(src)], stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.DEVNULL, env=env, start_new_session=True)
            try:
                end = time.monotonic() + 60
                while not bpftrace._ready(trace):
                    if bp.poll() is not None or time.monotonic() > end:
                        raise RuntimeError(f"bpftrace did not attach ({variant})")
                    time.sleep(0.05)
                t0 = time.time()
                time.sleep(self.window)
                t1 = time.time()
            finally:
                if bp.poll() is None:
                    bp.send_signal(signal.SIGINT)
                try:
                    bp.wait(20)
                except subprocess.TimeoutExpired:
                    bp.kill()
                    bp.wait()
            return rate(progress, t0 + 0.2, t1)
        finally:
            self._end(proc)

    def wrap(self, tool: str) -> float | None:
        """Like kdiag trace -- CMD: kdiag's shim stops itself before exec,
        the tracer attaches, the command runs traced from its first call."""
        from kdiag.capture import attach

        progress, trace = self._files(f"wrap-{tool}")
        shim = subprocess.Popen([sys.executable, "-c", attach._SHIM, *self.cmd(WARM_S + self.window, progress)],
                                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            if not attach.wait_state(shim.pid, "T"):
                raise RuntimeError("the shim did not stop")
            tracer = self._trace(tool, shim.pid, trace)
            try:
                os.kill(shim.pid, signal.SIGCONT)
                shim.wait(300)
            finally:
                self._untrace(tracer)
            t0 = self._wait_progress(progress, 1)
            return rate(progress, t0 + WARM_S, t0 + WARM_S + self.window)
        finally:
            self._end(shim)


def _attach_flags() -> list[str]:
    from kdiag.collectors import strace

    return strace.ATTACH_FLAGS


def broker_threads(pid: int) -> list[int]:
    """librdkafka's broker threads (comm ``rdk:broker<id>``), which do the
    socket I/O; ``rdk:broker-1`` is the internal one, with no socket."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            if comm.startswith("rdk:broker") and comm != "rdk:broker-1":
                out.append(int(tid))
    return out


MODES = [
    # (name, method, args, command shown, in smoke: one mode of each method)
    ("strace -f", "plain_strace", (), "strace -f -o FILE python -m bench.overhead produce ...", True),
    ("kdiag --pid, strace (before)", "attach", ("strace",),
     "strace -f -ttt -T -yy -s 256 -e trace=%desc,%network,exit_group -o FILE -p PID", False),
    ("kdiag --pid, strace broker threads", "attach", ("strace", True),
     "strace -ttt -T -yy -s 256 -e trace=%desc,%network,exit_group -o FILE -p TID... (rdk:broker threads)", False),
    ("kdiag --pid, bpfcalls (auto)", "attach", ("bpfcalls",), "python -m kdiag.collectors.bpfcalls --pid PID --out FILE",
     True),
    ("kdiag --pid, bpftrace", "attach", ("bpftrace",), "python -m kdiag.collectors.bpftrace --pid PID --out FILE",
     True),
    ("kdiag -- CMD, strace (before)", "wrap", ("strace",),
     "kdiag shim + strace -f -ttt -T -yy -s 256 -e trace=%desc,%network,exit_group -o FILE -p SHIM", False),
    ("kdiag -- CMD, bpfcalls (auto)", "wrap", ("bpfcalls",),
     "kdiag shim + python -m kdiag.collectors.bpfcalls --pid SHIM --out FILE", True),
    ("kdiag -- CMD, bpftrace", "wrap", ("bpftrace",),
     "kdiag shim + python -m kdiag.collectors.bpftrace --pid SHIM --out FILE", True),
    # Where bpftrace's cost lies: kdiag's program cut down (bpftrace_variant)
    ("bpftrace, log lines without their text", "bpftrace_variant", ("no-log-text",),
     "bpftrace PROGRAM without the probe copying log lines' text (they are traced as other writes)", False),
    ("bpftrace, probes only (no records)", "bpftrace_variant", ("probes-only",),
     "bpftrace PROGRAM whose exit probes only free the entry's map slot: no records", False),
    ("bpftrace, a run's writes past the 4th unrecorded", "bpftrace_variant", ("run-writes-4",),
     "bpftrace PROGRAM whose socket write() records stop at the 4th of a run (calls between other calls)", False),
]

# run-writes-4: a batch over TLS is one write() per record, up to 127 in a
# run; the first few tell the analysis what it needs (several writes).
RUN_WRITES = 4


def variant_program(pid: int, variant: str) -> str:
    """kdiag's bpftrace program for ``pid``, cut down to show where the
    cost lies; not a tracer kdiag uses (the records are incomplete)."""
    from kdiag.collectors import bpftrace

    blocks = bpftrace.program(pid).rstrip("\n").split("\ntracepoint:")
    out = [blocks[0]]
    for b in blocks[1:]:
        head = b.split("{", 1)[0]
        if variant == "no-log-text" and "@e[tid].2 <= 2/" in head:
            continue
        if variant == "probes-only" and head.startswith("syscalls:sys_exit_"):
            b = head + "{ delete(@e[tid]); }"
        if variant == "run-writes-4" and head.startswith("syscalls:sys_exit_"):
            body = b.split("{", 1)[1]
            if head.startswith("syscalls:sys_exit_write /@e[tid].0/"):
                # the socket writes' probe (log lines, fd <= 2, have their own)
                if "\n  $fd = " not in body:
                    raise RuntimeError("run-writes-4: the socket write probe no longer names its fd as expected")
                body = body.replace("\n  $fd = ", f"\n  @run[tid] = @run[tid] + 1;\n  if (@run[tid] <= {RUN_WRITES}) {{"
                                    f"\n  $fd = ", 1).rstrip().removesuffix("}") + "}\n}"
            else:
                body = "\n  @run[tid] = 0;" + body
            b = head + "{" + body
        out.append(b)
    return "\ntracepoint:".join(out) + "\n"


# Alternating runs (Bench.alternate): the tracers kdiag attaches with --pid
# where the kernel allows, each in one producer, traced and untraced in turn.
ALTERNATE = [
    # (name, tool, rounds, the tracer's environment)
    ("kdiag --pid, bpfcalls (auto), alternating in one producer", "bpfcalls", 8, {}),
    # where the per-syscall tracepoints cannot be attached
    ("kdiag --pid, bpfcalls on the raw syscall tracepoints (its fallback), alternating in one producer",
     "bpfcalls", 4, {"KDIAG_BPFCALLS_RAW": "1"}),
    ("kdiag --pid, bpftrace, alternating in one producer", "bpftrace", 4, {}),
    # no syscall tracepoint: what the host's tax asks for (bench/hosttax.py)
    ("kdiag --pid, bpfcalls on uprobes in libc (KDIAG_BPFCALLS_HOOKS=uprobes), alternating in one producer",
     "bpfcalls", 8, {"KDIAG_BPFCALLS_HOOKS": "uprobes"}),
]


def goal_of(name: str) -> str | None:
    """The goal of a mode's figure: kdiag's default tracer, bpfcalls on its
    own hooks, has one; the others are references."""
    return GOAL if "bpfcalls" in name and "fallback" not in name else None


def run(smoke: bool, work: Path) -> list[Figure]:
    from kdiag.collectors import bpfcalls, bpftrace
    from kdiag.lab import broker as lab_mod

    work.mkdir(parents=True, exist_ok=True)
    window = 1.5 if smoke else 6.0
    repeats = 1 if smoke else 5
    modes = [m for m in MODES if m[4] or not smoke]
    untraced: list[float | None] = []
    got: dict[str, list[float | None]] = {}
    alternated: dict[str, list[list[Window]]] = {}
    errors: dict[str, str] = {}
    loads: dict[str, str] = {}      # the load averages before and after each alternating run
    missing = {"bpftrace": bpftrace.check(), "bpfcalls": bpfcalls.check()}

    def unmet(args, method="") -> str | None:
        return next((missing[t] for t in missing if t in args and missing[t]), None) or (
            missing["bpftrace"] if method == "bpftrace_variant" else None)

    with lab_mod.running(topics=(TOPIC,)) as lab:
        b = Bench(lab, work, window)
        # Every round's modes run between two untraced runs (``paired``).
        for _ in range(repeats):
            untraced.append(b.untraced())
            for name, method, args, _, _ in modes:
                why = unmet(args, method)
                if why:
                    errors[name] = why
                    continue
                try:
                    got.setdefault(name, []).append(getattr(b, method)(*args))
                except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                    errors[name] = str(e)
                    got.setdefault(name, []).append(None)
        untraced.append(b.untraced())
        for name, tool, rounds, env in ALTERNATE:
            why = unmet((tool,))
            if why:
                errors[name] = why
                continue
            try:
                load = loadavg()
                alternated[name] = b.alternate(tool, 1 if smoke else rounds, env)
                loads[name] = f"{load} .. {loadavg()}"
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                errors[name] = str(e)
    seen = [u for u in untraced if u]
    base = statistics.median(seen) if seen else None
    note = (f"median of {len(untraced)} run(s) of {window:g} s, one before each round of the modes and one after "
            f"the last; the producer, Tansu and stunnel fill the 2 cores, so runs vary (untraced: "
            f"{spread(seen, 0)}); TLS lab on loopback, {VALUE_BYTES} B values")
    figures = [Figure("overhead", "untraced producer msg/s", _round(base), "msg/s", command=(
        "python -m bench.overhead produce BOOTSTRAP CA SECONDS PROGRESS (lab: kdiag lab up)"), note=note)]
    for name, _, _, command, _ in modes:
        vals = got.get(name) or []
        ratios = paired(untraced, vals)
        pct = statistics.median(ratios) if ratios else None
        rated = [v for v in vals if v]
        if ratios:
            of_medians = 100.0 * statistics.median(rated) / base
            note = (f"median of {len(ratios)} round(s), each run against the untraced runs either side of it "
                    f"({spread(ratios, 1)} %); msg/s {spread(rated, 0)}, their median {of_medians:.1f} % of "
                    f"the untraced median")
        else:
            note = f"not measured: {errors.get(name, 'no rate')}"
        figures.append(Figure(
            "overhead", f"{name} % of untraced", _round(pct, 1), "%", goal=goal_of(name), met=_met(pct, name),
            reference="untraced msg/s", ref_value=_round(base), command=command, note=note))
    for name, tool, _, env in ALTERNATE:
        figures.append(_alternated(name, tool, alternated.get(name), errors.get(name), window, env,
                                   loads.get(name)))
    return figures


def _met(pct: float | None, name: str) -> bool | None:
    goal = goal_of(name)
    return None if goal is None else check(pct, goal)


def _alternated(name: str, tool: str, producers: list[list[Window]] | None, error: str | None,
                window: float, env: dict[str, str], load: str | None = None) -> Figure:
    windows = [w for ws in producers or [] for w in ws]
    untraced = [w for w in windows if not w.traced]
    traced = [w for w in windows if w.traced]
    ratios = [r for ws in producers or [] for r in paired([w.msg_s for w in ws if not w.traced],
                                                            [w.msg_s for w in ws if w.traced])]
    rates = [w.msg_s for w in untraced if w.msg_s]
    pct = statistics.median(ratios) if ratios else None
    base = statistics.median(rates) if rates else None
    if ratios:
        def cpu(ws):
            vals = [w.cpu_us_per_msg for w in ws if w.cpu_us_per_msg]
            return f"{statistics.median(vals):.2f}" if vals else "?"
        tracer = [w.tracer_cpu_s / window for w in traced if w.tracer_cpu_s is not None]
        ci = median_interval(ratios)
        note = (f"median of {len(ratios)} traced window(s) of {window:g} s, each against the untraced windows "
                f"either side of it in the same producer ({len(producers)} producers, {spread(ratios, 1)} %); "
                + (f"the median's 95 % interval (bootstrap) {ci[0]:.1f}-{ci[1]:.1f} %; " if ci else "")
                + f"msg/s untraced {spread(rates, 0)}, traced {spread([w.msg_s for w in traced if w.msg_s], 0)}; "
                f"the producer's CPU per message {cpu(untraced)} us untraced, {cpu(traced)} us traced"
                + (f"; the tracer's own CPU {spread([100 * t for t in tracer], 1)} % of a core" if tracer else "")
                + (f"; load average {load}" if load else ""))
    else:
        note = f"not measured: {error or 'no rate'}"
    setting = "".join(f"{k}={v} " for k, v in env.items())
    return Figure("overhead", f"{name} % of untraced", _round(pct, 1), "%", goal=goal_of(name), met=_met(pct, name),
                  reference="untraced windows' msg/s", ref_value=_round(base),
                  command=f"bench.overhead.Bench.alternate({tool!r}, rounds): {setting}python -m kdiag.collectors.{tool} "
                          f"--pid PID --out FILE, started and stopped in turn", note=note)


def _round(x: float | None, nd: int = 0) -> float | None:
    return None if x is None else round(x, nd)


if __name__ == "__main__":
    if sys.argv[1:2] == ["produce"]:
        sys.exit(produce(sys.argv[2:]))
    sys.exit("usage: python -m bench.overhead produce BOOTSTRAP CA SECONDS PROGRESS")
