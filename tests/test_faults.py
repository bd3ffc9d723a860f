"""Faults while tracing: each leaves a bundle marked partial that replays,
and a producer that keeps running.

Real faults, not simulated ones: a broker process killed, a disk that is
really full (a small tmpfs), capabilities really dropped (setpriv), strace
really absent from PATH, kdiag really killed. The one exception is the
archive that does not fit after the capture did, whose timing no real disk
can be made to hit on demand.
"""
import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, need, require, wait_gone
from kdiag.cli import Environment, main
from test_attach import PRODUCER, not_traced, producer, progress, the_lab, wait_for  # noqa: F401 (fixtures)

pytestmark = pytest.mark.e2e


def run(argv, **kw):
    out, err = io.StringIO(), io.StringIO()
    rc = main(argv, Environment(stdout=out, stderr=err))
    return rc, out.getvalue(), err.getvalue()


def manifest_of(bundle: Path) -> dict:
    if bundle.is_dir():
        return json.loads((bundle / "manifest.json").read_text())
    with tarfile.open(bundle) as tar:
        return json.load(tar.extractfile("manifest.json"))


def replays(bundle: Path) -> dict:
    rc, out, err = run(["replay", "--json", str(bundle)])
    assert rc == 0, err
    return json.loads(out)


def verifies(bundle: Path) -> None:
    rc, out, err = run(["bundle", "verify", str(bundle)])
    assert rc == 0, out + err


def still_producing(proc, prog) -> bool:
    before = progress(prog)
    return proc.poll() is None and not_traced(proc.pid) and wait_for(lambda: progress(prog) >= before + 5, 10)


def kdiag_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "kdiag", *args]


def test_size_cap_stops_the_capture(producer, spark, tmp_path):
    proc, prog = producer
    out = tmp_path / "cap.tar.gz"
    rc, stdout, err = run(["trace", "--json", "--pid", str(proc.pid), "--duration", "60",
                           "--max-capture-mb", "0.25", "-o", str(out)])
    assert rc == 130, err
    f = json.loads(stdout)
    man = manifest_of(out)
    assert man["partial"] is True and any("size cap (0.25 MiB" in r for r in man["partial_reasons"]), man
    raw = sum(v["bytes"] for k, v in man["files"].items() if k.startswith("raw/"))
    # checked four times a second: the overshoot is what strace writes in that time
    assert 0.25 * 2**20 <= raw < 4 * 2**20, raw
    assert f["partial"] is True and f["verdict"] == "nagle_delayed_ack"
    assert any("capture partial" in n for n in f["input_notes"])
    verifies(out)
    assert replays(out)["verdict"] == "nagle_delayed_ack"
    assert still_producing(proc, prog)
    assert not out.with_name(out.name + ".partial").exists()


@pytest.fixture
def small_disk(tmp_path):
    need("mount", root=True)
    d = tmp_path / "small"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(d)], check=True)
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


def fill(disk: Path, leave_bytes: int) -> None:
    st = os.statvfs(disk)
    n = st.f_bavail * st.f_frsize - leave_bytes
    with open(disk / "filler", "wb") as f:
        f.write(b"\0" * n)


def test_output_disk_full_stops_the_capture(producer, spark, small_disk):
    proc, prog = producer
    out = small_disk / "full.tar.gz"
    res = {}
    t = threading.Thread(target=lambda: res.update(zip(("rc", "out", "err"), run(
        ["trace", "--json", "--tracer", "strace", "--pid", str(proc.pid), "--duration", "60", "-o", str(out)]))))
    t.start()
    # strace, whose text grows while it traces (a BPF tracer's is written when it stops)
    assert wait_for(lambda: not not_traced(proc.pid), 20), "kdiag never attached"
    time.sleep(1)
    # 64 MiB disk: kdiag keeps 5 % (3.2 MiB) free; another writer takes all but 2 MiB
    fill(small_disk, 2 << 20)
    t.join(120)
    assert res.get("rc") == 130, res.get("err")
    man = manifest_of(out)
    assert any("output disk is nearly full" in r for r in man["partial_reasons"]), man["partial_reasons"]
    verifies(out)
    assert replays(out)["verdict"] == "nagle_delayed_ack"
    assert still_producing(proc, prog)


def test_archive_that_does_not_fit_leaves_a_sealed_directory(producer, spark, tmp_path, monkeypatch):
    from kdiag.bundle import archive as bundle

    proc, _ = producer
    out = tmp_path / "nofit.tar.gz"
    real_write = bundle.write

    def no_room(staging, out_path, manifest):
        real_write(staging, out_path, manifest)     # the work is done, then the disk says no
        out_path.unlink()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(bundle, "write", no_room)
    rc, stdout, err = run(["trace", "--json", "--pid", str(proc.pid), "--duration", "2", "-o", str(out)])
    assert rc == 0, err
    d = out.with_name(out.name + ".partial")
    assert not out.exists() and d.is_dir()
    man = manifest_of(d)
    assert man["sealed"] is True and man["partial"] is True
    assert any("no room on the output disk" in r for r in man["partial_reasons"])
    assert "bundle: " + str(d) in err
    verifies(d)
    assert replays(d)["verdict"] == "nagle_delayed_ack"


def test_kill_9_leaves_an_unsealed_bundle_that_replays_and_seals(producer, spark, tmp_path):
    proc, prog = producer
    out = tmp_path / "k.tar.gz"
    kd = subprocess.Popen(kdiag_cmd("trace", "--tracer", "strace", "--pid", str(proc.pid), "--duration", "60",
                                    "-o", str(out)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    staging = out.with_name(out.name + ".partial")
    assert wait_for(lambda: not not_traced(proc.pid), 20), "kdiag never attached"
    strace_txt = staging / "raw" / "strace" / "strace.txt"
    assert wait_for(lambda: strace_txt.exists() and strace_txt.stat().st_size > 50_000, 20)
    os.kill(kd.pid, signal.SIGKILL)
    kd.wait()
    assert wait_for(lambda: not_traced(proc.pid), 15) and still_producing(proc, prog)

    rc, text, _ = run(["bundle", "verify", str(staging)])
    assert rc == 1 and "UNSEALED" in text and "kdiag bundle seal" in text
    rc, stdout, err = run(["replay", "--json", str(staging)])
    assert rc == 0 and "unsealed" in err
    assert json.loads(stdout)["verdict"] == "nagle_delayed_ack"

    rc, stdout, err = run(["bundle", "seal", str(staging)])
    assert rc == 0, err
    assert stdout.strip() == str(out) and not staging.exists()
    verifies(out)
    man = manifest_of(out)
    assert man["partial"] is True and man["partial_reasons"][0].startswith("kdiag stopped before it sealed")
    assert replays(out)["verdict"] == "nagle_delayed_ack"


def test_strace_missing(the_lab, spark, tmp_path, monkeypatch):
    """Without strace (nor bpftrace, on this PATH, nor kdiag's own BPF
    tracer, as where kdiag was installed without clang), the wrapped
    producer's own log and its sockets' samples are still captured; the
    bundle says what is missing."""
    from kdiag.collectors import bpfcalls

    monkeypatch.setattr(bpfcalls, "loader", lambda: None)
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(sys.executable, bare / "python3")
    monkeypatch.setenv("PATH", str(bare))
    assert shutil.which("strace") is None
    out = tmp_path / "nostrace.tar.gz"
    rc, stdout, err = run(["trace", "--json", "-o", str(out), "--", "python3", str(PRODUCER), the_lab.bootstrap,
                           str(the_lab.ca_path), "false", "3", str(tmp_path / "prog")])
    assert rc == 0, err
    man = manifest_of(out)
    assert man["partial"] is True and man["partial_reasons"] == ["strace skipped: strace not found on PATH "
                                                                 "(apt-get install strace)"]
    f = json.loads(stdout)
    assert f["summary"]["requests"] > 20
    # Without syscalls nothing splits the 43 ms: the log's rtt over TLS is
    # the delayed-ACK band, named below high confidence, the held send
    # itself unseen.
    assert f["verdict"] == "nagle_delayed_ack", f["findings"]
    assert not f["confidence"].startswith("high")
    assert any("the held send itself is not seen" in e for e in f["findings"][0]["evidence"])
    assert replays(out)["verdict"] == f["verdict"]



def test_without_strace_kdiags_own_tracer_traces(the_lab, spark, tmp_path, monkeypatch):
    """No strace on PATH is no loss where kdiag's own BPF tracer was built:
    the capture is whole and the held send is seen."""
    from kdiag.collectors import bpfcalls

    require(bpfcalls.check())
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(sys.executable, bare / "python3")
    monkeypatch.setenv("PATH", str(bare))
    out = tmp_path / "bpfcalls.tar.gz"
    rc, stdout, err = run(["trace", "--json", "-o", str(out), "--", "python3", str(PRODUCER), the_lab.bootstrap,
                           str(the_lab.ca_path), "false", "3", str(tmp_path / "prog")])
    assert rc == 0, err
    man = manifest_of(out)
    assert man["tracer"]["tool"] == "bpfcalls" and not man["partial"], (man["tracer"], man["partial_reasons"])
    f = json.loads(stdout)
    assert f["verdict"] == "nagle_delayed_ack" and f["confidence"].startswith("high"), f["findings"]

def test_ptrace_refused(producer, spark, tmp_path):
    """kdiag without CAP_SYS_PTRACE: the kernel refuses to let it trace a
    process holding capabilities it lacks. The producer runs on; the bundle
    says why it has no syscalls."""
    need("setpriv", root=True)
    proc, prog = producer
    out = tmp_path / "noptrace.tar.gz"
    res = subprocess.run(["setpriv", "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace",
                          *kdiag_cmd("trace", "--json", "--pid", str(proc.pid), "--duration", "3", "-o", str(out))],
                         capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert res.returncode in (0, 3), res.stderr
    man = manifest_of(out)
    strace_st = next(c for c in man["collectors"] if c["name"] == "strace")
    assert strace_st["state"] == "failed" and "Operation not permitted" in strace_st["reason"], strace_st
    assert man["partial"] is True and any(r.startswith("strace failed") for r in man["partial_reasons"])
    verifies(out)
    rc, _, err = run(["replay", "--json", str(out)])
    assert rc in (0, 3), err
    assert still_producing(proc, prog)


@pytest.fixture
def own_lab():
    need("strace", root=True)
    need("stunnel4")
    from kdiag.lab import broker as lab

    with lab.running() as L:
        yield L


def test_broker_killed_mid_run(own_lab, spark, tmp_path):
    """The probe against a broker that dies: what was captured before is
    analysed; the run fails (exit 1) with a bundle marked partial."""
    the_lab = own_lab
    out = tmp_path / "dead.tar.gz"
    log = out.with_name(out.name + ".partial") / "raw" / "rdkafka_log" / "rdkafka.log"
    res = {}
    argv = ["trace", "--json", "-b", the_lab.bootstrap, "-X", "security.protocol=ssl",
            "-X", f"ssl.ca.location={the_lab.ca_path}", "-X", "socket.nagle.disable=false",
            "-X", "message.timeout.ms=2000", "--messages", "1000", "--no-path-probe", "-o", str(out)]
    t = threading.Thread(target=lambda: res.update(zip(("rc", "out", "err"), run(argv))))
    t.start()

    def responses():
        try:
            return log.read_text(errors="replace").count("Received ProduceResponse")
        except OSError:
            return 0

    assert wait_for(lambda: responses() >= 30, 60), "the probe never got going"
    os.kill(the_lab.tansu_pid, signal.SIGKILL)     # the test's own lab
    t.join(120)
    assert res.get("rc") == 1, res.get("err")
    f = json.loads(res["out"])
    assert f["partial"] is True and "not delivered" in f["probe_error"]
    assert f["verdict"] == "nagle_delayed_ack" and f["summary"]["requests"] >= 30
    man = manifest_of(out)
    assert man["partial"] is True and any("not delivered" in r for r in man["partial_reasons"])
    verifies(out)
    assert replays(out)["verdict"] == "nagle_delayed_ack"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_stopping_the_default_trace(tmp_path, sig):
    """The embedded default, stopped by Ctrl-C (the terminal signals kdiag
    alone: the probe runs in its own session) or SIGTERM: lab down, bundle
    partial."""
    need("strace", root=True)
    need("stunnel4")
    out = tmp_path / "term.tar.gz"
    log = out.with_name(out.name + ".partial") / "raw" / "rdkafka_log" / "rdkafka.log"
    kd = subprocess.Popen(kdiag_cmd("trace", "--json", "--messages", "2000", "--no-path-probe", "-o", str(out)),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert wait_for(lambda: log.exists() and log.read_text(errors="replace").count("Received ProduceResponse") > 20,
                    60), "the probe never got going"
    import psutil

    lab_pids = [c.pid for c in psutil.Process(kd.pid).children(recursive=True)
                if c.name() in ("tansu", "stunnel4")]
    kd.send_signal(sig)
    stdout, stderr = kd.communicate(timeout=120)
    assert kd.returncode == 130, stderr
    f = json.loads(stdout)
    assert f["partial"] is True and f["verdict"] == "nagle_delayed_ack"
    assert f["partial_reasons"] == ["interrupted (Ctrl-C or SIGTERM)"]
    assert lab_pids and wait_gone(lab_pids, 10) == []
    verifies(out)


def test_no_raw_socket_permission(tmp_path):
    """Without CAP_NET_RAW the path probe falls back to connect() with a TTL;
    the trace is complete."""
    need("setpriv", root=True)
    need("stunnel4")
    out = tmp_path / "noraw.tar.gz"
    res = subprocess.run(["setpriv", "--bounding-set=-net_raw", "--inh-caps=-net_raw",
                          *kdiag_cmd("trace", "--json", "--messages", "30", "-o", str(out))],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    man = manifest_of(out)
    probe_st = next(c for c in man["collectors"] if c["name"] == "tcp_probe")
    assert probe_st["state"] == "ok" and probe_st["reason"].startswith("no raw socket"), probe_st
    assert man["partial"] is False
    assert json.loads(res.stdout)["verdict"] == "nagle_delayed_ack"
