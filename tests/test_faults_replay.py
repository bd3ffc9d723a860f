"""Faults while reading captures, and captures kept private.

A full or read-only output disk, a FIFO or socket for an input, a signal
during replay, a second trace into the capture of a running one: each ends
with one line and the documented exit status, and leaves nothing behind.
Real faults: a tmpfs of 64 KiB (or mounted read-only) in a mount namespace
of the test's own, a real FIFO, a real replay with its Spark JVM signalled.
"""
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, need

CAPTURE = FIXTURES / "captures" / "nagle_on"
BUNDLE = FIXTURES / "bundles" / "nagle_on.tar.gz"


def kdiag(*args, timeout=60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdiag", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kw)


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("kdiag: ")]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1 and lines[0].startswith("kdiag: error: "), stderr
    return lines[0]


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_parse_into_a_full_or_read_only_disk(tmp_path, how):
    need("unshare", root=True)
    disk = tmp_path / "disk"
    disk.mkdir()
    opts = "size=64k" if how == "full" else "size=1m,ro"
    # The tmpfs exists only in this mount namespace: gone when the shell ends.
    script = (f"mount -t tmpfs -o {opts} tmpfs {disk} && "
              f"{sys.executable} -m kdiag parse {CAPTURE}/strace.txt {CAPTURE}/rdkafka.log -o {disk}/tables; "
              f"echo rc=$?; ls -A {disk}/tables 2>/dev/null")
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    rc_line = next(ln for ln in res.stdout.splitlines() if ln.startswith("rc="))
    left = res.stdout.splitlines()[res.stdout.splitlines().index(rc_line) + 1:]
    assert rc_line == "rc=1", res.stdout + res.stderr
    line = one_error_line(res.stderr)
    assert f"{disk}/tables" in line
    assert ("No space left on device" if how == "full" else "Read-only file system") in line
    assert left == [], f"left behind: {left}"


@pytest.mark.parametrize("command", ["parse", "replay"])
@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_fifo_or_socket_is_refused_without_blocking(tmp_path, command, kind):
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.listen()
    args = [command, path] + (["-o", tmp_path / "out"] if command == "parse" else [])
    try:
        res = kdiag(*args, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kdiag {command} blocked on a {kind}")
    assert res.returncode == 2, res.stderr
    line = one_error_line(res.stderr)
    assert str(path) in line and ("a FIFO" if kind == "fifo" else "a socket") in line
    assert not (tmp_path / "out").exists()


def test_a_fifo_among_the_captures_is_skipped_unopened(tmp_path):
    """One that reaches the parsing (a bundle's or a directory's member) is
    noted and skipped, never opened."""
    import threading

    from kdiag.ingest.tables import parse_paths

    fifo = tmp_path / "strace.txt"
    os.mkfifo(fifo)
    done = {}
    t = threading.Thread(target=lambda: done.update(parsed=parse_paths([fifo], tmp_path / "t")), daemon=True)
    t.start()
    t.join(20)
    if t.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))   # EOF for the blocked reader
        pytest.fail("parsing blocked on a FIFO")
    assert any("a FIFO or socket, not a file; skipped whole" in n for n in done["parsed"].notes)


def test_dev_zero_is_still_read_and_skipped(tmp_path):
    res = kdiag("parse", "/dev/zero", "-o", tmp_path / "out", timeout=60)
    assert res.returncode == 3, res.stderr
    assert "/dev/zero: not recognised" in res.stdout and "(empty)" in res.stdout


def test_parse_tables_are_private_and_complete(tmp_path):
    res = kdiag("parse", CAPTURE / "strace.txt", CAPTURE / "rdkafka.log", "-o", tmp_path / "t")
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in (tmp_path / "t").iterdir())
    assert names == ["log_writes.parquet", "rdkafka_events.parquet", "syscalls.parquet"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in (tmp_path / "t").iterdir())


def _java_descendants(proc) -> list:
    import psutil

    try:
        return [c for c in psutil.Process(proc.pid).children(recursive=True) if c.name() == "java"]
    except psutil.NoSuchProcess:
        return []


def _alive(procs) -> list[int]:
    import psutil

    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _replay_with_spark_running(tmp_path):
    """A real replay of a real bundle, returned once its Spark JVM runs
    and has started on the tables (the replay's table directory exists)."""
    # A crash of the interpreter itself (a SIGSEGV on SIGINT has been seen,
    # once in many runs) shows its threads' stacks in the assertion's stderr.
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONFAULTHANDLER": "1"}
    kd = subprocess.Popen([sys.executable, "-m", "kdiag", "replay", str(BUNDLE)], env=env, cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        tables = [p for p in tmp_path.glob("kdiag-replay-*/tables/*.parquet")]
        if _java_descendants(kd) and tables:
            return kd
        assert kd.poll() is None, kd.communicate()[1]
        time.sleep(0.05)
    kd.kill()
    pytest.fail("the replay never got to Spark")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["term", "int", "kill"])
def test_signalled_replay_leaves_nothing_behind(tmp_path, sig):
    need("java")
    kd = _replay_with_spark_running(tmp_path)
    jvms = _java_descendants(kd)
    kd.send_signal(sig)
    _, stderr = kd.communicate(timeout=60)
    deadline = time.monotonic() + 15
    while _alive(jvms) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive(jvms) == [], "the Spark JVM outlived kdiag"
    if sig == signal.SIGKILL:
        return
    assert kd.returncode == 130, stderr
    assert "Traceback" not in stderr and "kdiag: interrupted" in stderr
    assert sorted(tmp_path.glob("kdiag-replay-*")) == []


def test_the_jvm_does_not_outlive_a_killed_kdiag(tmp_path):
    """Even when something kdiag started still holds the JVM's stdin (here a
    forked child), so the JVM's own watch of it never sees kdiag go."""
    need("java")
    import psutil

    from kdiag.analysis import spark as spark_module

    grace_s = getattr(spark_module, "JVM_GRACE_S", 10.0)

    code = ("import os, sys, time\nfrom kdiag.analysis.spark import session\nfrom pyspark import SparkContext\n"
            "session('kdiag-test', small=True)\n"
            "if os.fork() == 0:\n    time.sleep(120); os._exit(0)\n"
            "print(SparkContext._gateway.proc.pid, flush=True); time.sleep(600)\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    kd = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                          stderr=subprocess.DEVNULL)
    holders = []
    try:
        jvm = psutil.Process(int(kd.stdout.readline()))
        holders = [c for c in psutil.Process(kd.pid).children() if c.pid != jvm.pid and "python" in c.name()]
        kd.kill()
        kd.wait()
        gone_by = time.monotonic() + grace_s + 10
        while _alive([jvm]) and time.monotonic() < gone_by:
            time.sleep(0.2)
        assert _alive([jvm]) == [], "the Spark JVM outlived kdiag"
    finally:
        kd.kill()
        for h in holders:
            h.kill()


def test_replay_work_files_are_private(tmp_path):
    need("java")
    kd = _replay_with_spark_running(tmp_path)
    try:
        temp_dirs = sorted(tmp_path.glob("kdiag-replay-*"))
        assert temp_dirs and all(stat.S_IMODE(d.stat().st_mode) == 0o700 for d in temp_dirs)
        tables = [p for d in temp_dirs for p in d.glob("tables/*.parquet")]
        assert tables and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in tables)
    finally:
        kd.send_signal(signal.SIGINT)
        kd.communicate(timeout=60)


def _hold_capture(out: Path) -> subprocess.Popen:
    """A process that holds OUT.partial/ as a running kdiag trace does."""
    code = ("import sys, time\nfrom pathlib import Path\nfrom kdiag.capture.trace import staged\n"
            "with staged(Path(sys.argv[1]), ['kdiag', 'trace'], print) as s:\n"
            "    (s / 'raw').mkdir(); (s / 'raw' / 'x').write_text('x')\n"
            "    print('holding', flush=True); time.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdout.readline().strip() == "holding"
    return holder


def test_a_running_capture_is_recognised(tmp_path):
    out = tmp_path / "x.tar.gz"
    staging = tmp_path / "x.tar.gz.partial"
    holder = _hold_capture(out)
    try:
        res = kdiag("trace", "-o", out, "--no-path-probe")
        assert res.returncode == 2, res.stderr
        line = one_error_line(res.stderr)
        assert "still running" in line and "stopped before sealing" not in line
        res = kdiag("bundle", "seal", staging)
        assert res.returncode == 2, res.stderr
        assert "still running" in one_error_line(res.stderr)
    finally:
        holder.kill()
        holder.wait()
    # Its holder dead (SIGKILL), the capture is an earlier run's.
    res = kdiag("trace", "-o", out, "--no-path-probe")
    assert res.returncode == 2
    assert "an earlier kdiag run stopped before sealing it" in one_error_line(res.stderr)


def test_bundles_are_private(tmp_path):
    import tarfile

    from kdiag.bundle import archive

    holder = _hold_capture(tmp_path / "x.tar.gz")
    try:
        staging = tmp_path / "x.tar.gz.partial"
        assert stat.S_IMODE(staging.stat().st_mode) == 0o700
        assert stat.S_IMODE((staging / "manifest.json").stat().st_mode) == 0o600
    finally:
        holder.kill()
        holder.wait()
    old = os.umask(0o022)   # the usual one, under which files came out 0644
    staging = tmp_path / "b.tar.gz.partial"
    staging.mkdir()
    archive.start(staging, {"kdiag_version": "test"})
    assert stat.S_IMODE((staging / "manifest.json").stat().st_mode) == 0o600
    (staging / "raw").mkdir()
    (staging / "raw" / "a.txt").write_text("captured traffic")
    out = archive.write(staging, tmp_path / "b.tar.gz", {"kdiag_version": "test"})
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert stat.S_IMODE((staging / "manifest.json").stat().st_mode) == 0o600
    with tarfile.open(out) as tar:
        assert {m.name: m.mode for m in tar} == {"manifest.json": 0o600, "raw/a.txt": 0o600}
    assert archive.verify(out).ok
    assert json.loads((staging / "manifest.json").read_text())["sealed"] is True
    os.umask(old)


@pytest.mark.parametrize("handler", ["python", "before", "after"])
def test_an_interrupt_that_surfaces_as_another_error_still_ends_as_interrupted(monkeypatch, handler):
    """Ctrl-C inside PySpark's collect does not reach kdiag as a
    KeyboardInterrupt: the collect's cleanup raises a Py4JJavaError over
    it. A real SIGINT, to this process, in the middle of a replay whose
    interrupted call raises something else: the one line and 130 all the
    same, no traceback. The SIGINT handler in place is Python's own, or one
    of another library's (PySpark's SparkContext cancels its jobs and raises
    KeyboardInterrupt) installed before kdiag's, which still runs, or after
    it, as a session started in the main thread during the command does."""
    import io

    from kdiag import cli
    from kdiag.commands import replay
    from kdiag.status import ExitStatus

    ran = []

    def library_handler(signum, frame):
        ran.append(signum)
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, library_handler if handler == "before" else signal.default_int_handler)

    def replay_interrupted_in_a_collect(args, env):
        if handler == "after":
            signal.signal(signal.SIGINT, library_handler)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)   # the handler raises here
        except KeyboardInterrupt:
            raise RuntimeError("An error occurred while calling o1301.getResult") from None
        pytest.fail("no interrupt")

    monkeypatch.setattr(replay, "run", replay_interrupted_in_a_collect)
    err = io.StringIO()
    try:
        rc = cli.main(["replay", str(BUNDLE)], cli.Environment(stdout=io.StringIO(), stderr=err))
        after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert rc == ExitStatus.INTERRUPTED, err.getvalue()
    assert err.getvalue().splitlines() == ["kdiag: interrupted"]
    assert ran == ([] if handler == "python" else [signal.SIGINT])
    # Nothing of kdiag's handler is left for what runs next in this process.
    assert after is (library_handler if handler == "before" else signal.default_int_handler)
    import logging
    assert logging.root.manager.disable == logging.NOTSET


def test_an_error_without_a_signal_is_still_an_error(monkeypatch):
    import io

    from kdiag import cli
    from kdiag.commands import replay
    from kdiag.errors import KdiagError
    from kdiag.status import ExitStatus

    def replay_fails(args, env):
        raise KdiagError("the tables are gone")

    monkeypatch.setattr(replay, "run", replay_fails)
    err = io.StringIO()
    assert cli.main(["replay", str(BUNDLE)], cli.Environment(stdout=io.StringIO(), stderr=err)) == ExitStatus.ERROR
    assert err.getvalue().splitlines() == ["kdiag: error: the tables are gone"]
