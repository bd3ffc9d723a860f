"""bench/overhead.py: the figures come out (their values are the machine's)."""
import pytest

from conftest import need, need_tansu

pytestmark = pytest.mark.e2e


def test_overhead_smoke(tmp_path):
    need("strace", root=True)
    need("stunnel4")
    need("bpftrace")
    need_tansu()
    from bench import overhead

    figures = overhead.run(smoke=True, work=tmp_path)
    names = [f.name for f in figures]
    assert names[0] == "untraced producer msg/s" and figures[0].value, figures[0]
    expected = [m[0] for m in overhead.MODES if m[4]]
    alternating = [a[0] for a in overhead.ALTERNATE]
    assert names[1:] == [f"{m} % of untraced" for m in expected + alternating]
    for f in figures[1:]:
        # the default tracer has the goal; strace, bpftrace and bpfcalls' fallback are references
        goal = overhead.GOAL if "bpfcalls" in f.name and "fallback" not in f.name else None
        assert f.unit == "%" and f.goal == goal and f.command
        assert f.value is not None, f"{f.name}: {f.note}"
        assert f.met is (None if goal is None else f.value >= float(goal.split()[-1]))
    for f in figures[1:1 + len(expected)]:
        assert f.ref_value == figures[0].value and "either side" in f.note
    for f in figures[1 + len(expected):]:
        # its own producer's untraced windows, and what the producer and the tracer spent
        assert f.ref_value and "the producer's CPU per message" in f.note and "the tracer's own CPU" in f.note, f.note


def test_each_traced_run_is_compared_with_the_untraced_runs_either_side():
    from bench.overhead import paired

    assert paired([100.0, 300.0, 200.0], [180.0, 125.0]) == [90.0, 50.0]
    # a missing untraced run: the one on the other side; a missing traced one: no pair
    assert paired([None, 80.0], [40.0]) == [50.0]
    assert paired([100.0, 100.0, 100.0], [None, 95.0]) == [95.0]
    assert paired([None, None], [50.0]) == []


def test_a_median_of_few_noisy_windows_has_a_wide_interval():
    from bench.common import median_interval
    from bench.overhead import Window, _alternated

    # Windows as spread as a loaded machine's: the median's interval is wide.
    noisy = [86.4, 87.7, 89.6, 91.6, 94.7, 95.2, 98.9, 101.0]
    lo, hi = median_interval(noisy)
    assert 86.4 <= lo < 91.6 < 94.7 < hi <= 101.0
    # Tight windows, a tight interval; the same values, the same answer.
    tight = [96.9, 97.0, 97.1, 97.0, 96.95, 97.05]
    lo_t, hi_t = median_interval(tight)
    assert hi_t - lo_t <= 0.2 and median_interval(tight) == (lo_t, hi_t)
    assert median_interval([97.0]) is None
    # The alternating figure names its interval.
    producer = [Window(False, 100.0, 2.0, None), Window(True, 90.0, 2.1, 0.1), Window(False, 100.0, 2.0, None),
                Window(True, 95.0, 2.1, 0.1), Window(False, 100.0, 2.0, None)]
    f = _alternated("x", "bpfcalls", [producer], None, 6.0, {})
    assert f.value == 92.5 and "95 % interval (bootstrap) 90.0-95.0 %" in f.note, f.note


def test_cut_down_programs_load(tmp_path):
    """The programs that show where bpftrace's cost lies are ones bpftrace
    loads: the log text's probe gone, no record written at all, or a run's
    socket writes recorded up to the 4th."""
    import signal
    import subprocess
    import time

    need("bpftrace", root=True)
    from bench import overhead
    from kdiag.collectors import bpftrace

    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        for variant in ("no-log-text", "probes-only", "run-writes-4"):
            src = overhead.variant_program(sleeper.pid, variant)
            full = bpftrace.program(sleeper.pid)
            assert src.count("tracepoint:") == full.count("tracepoint:") - (variant == "no-log-text")
            if variant == "probes-only":
                assert "printf" not in src.split("sys_exit_write ", 1)[1]
            if variant == "run-writes-4":
                # the socket writes' record is behind the run's count; every other exit probe ends a run
                sock = src.split("sys_exit_write /@e[tid].0/", 1)[1].split("\ntracepoint:", 1)[0]
                assert sock.index(f"if (@run[tid] <= {overhead.RUN_WRITES})") < sock.index('printf("F')
                exits = src.count("tracepoint:syscalls:sys_exit_")
                assert src.count("@run[tid] = 0;") == exits - 1, src
            prog, out, err = (tmp_path / f"{variant}.{ext}" for ext in ("bt", "out", "err"))
            prog.write_text(src)
            with open(out, "wb") as f, open(err, "wb") as e:
                bp = subprocess.Popen(["bpftrace", str(prog)], stdout=f, stderr=e)
            end = time.monotonic() + 60
            while not bpftrace._ready(out) and bp.poll() is None and time.monotonic() < end:
                time.sleep(0.1)
            ready = bpftrace._ready(out)
            bp.send_signal(signal.SIGINT)
            bp.wait(20)
            assert ready, err.read_text(errors="replace")[-2000:]
    finally:
        sleeper.kill()
        sleeper.wait()
