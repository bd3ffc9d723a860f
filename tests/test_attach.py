"""Tracing producers kdiag did not start: attach, wrap, and never harm."""
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, need, require, wait_gone
from kdiag.cli import Environment, main

pytestmark = pytest.mark.e2e
PRODUCER = ROOT / "tests" / "producers" / "sync_producer.py"


def progress(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def wait_for(pred, timeout_s=20.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def the_lab():
    need("strace", root=True)
    need("stunnel4")
    from kdiag.lab import broker as lab

    with lab.running() as L:
        yield L


@pytest.fixture
def producer(the_lab, tmp_path):
    prog = tmp_path / "progress"
    proc = subprocess.Popen([sys.executable, str(PRODUCER), the_lab.bootstrap, str(the_lab.ca_path), "false",
                             "120", str(prog)], stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    assert wait_for(lambda: progress(prog) > 3), "producer did not start producing"
    yield proc, prog
    if proc.poll() is None:   # ours: the test started it
        proc.terminate()
        proc.wait(10)


def not_traced(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    tracer = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("TracerPid:")))
    return tracer == 0


def manifest_of(bundle: Path) -> dict:
    import tarfile

    with tarfile.open(bundle) as tar:
        return json.load(tar.extractfile("manifest.json"))


OVERHEAD_FIELDS = {"tool", "method", "throughput_pct", "untraced_io_calls_per_s", "traced_io_calls_per_s",
                   "untraced_cpu_cores", "traced_cpu_cores", "tracer_cpu_cores", "tracer_setup_cpu_s",
                   "traced_calls_per_s", "cost_per_call_us", "window_s"}


def test_attach_names_the_cause_and_detaches(producer, spark, tmp_path, monkeypatch):
    monkeypatch.delenv("KDIAG_TRACER", raising=False)
    proc, prog = producer
    out, err = io.StringIO(), io.StringIO()
    rc = main(["trace", "--json", "--pid", str(proc.pid), "--duration", "3", "-o", str(tmp_path / "a.tar.gz")],
              Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    f = json.loads(out.getvalue())
    assert f["verdict"] == "nagle_delayed_ack"
    man = manifest_of(tmp_path / "a.tar.gz")
    # kdiag's own BPF tracer where it runs, at any rate; else a producer
    # stalled at ~20 msg/s makes few calls, and auto keeps strace's full view
    from kdiag.collectors import bpfcalls

    want = "bpfcalls" if bpfcalls.check() is None else "strace"
    assert man["tracer"]["tool"] == want and man["tracer"]["setting"] == "auto", man["tracer"]
    ovh = man["overhead"]
    assert set(ovh) == OVERHEAD_FIELDS and ovh["tool"] == want, ovh
    assert ovh["method"].startswith("measured:") and ovh["throughput_pct"] is not None
    assert f["target"]["pid"] == proc.pid and f["target"]["running_at_detach"] is True
    # TCP's counters of its namespace, read at both ends of the window; no exit status while it runs
    t = man["target"]
    assert t["exit_status"] is None and t["tcp_counters_after"]["RetransSegs"] >= t["tcp_counters_before"]["RetransSegs"]
    # attached after connect(): strace cannot know TCP_NODELAY, the sampler read it off the socket
    assert any("as sampled live from the socket" in e for e in f["findings"][0]["evidence"])
    assert not any("TCP_NODELAY unknown" in u for u in f["unknowns"])
    # detached, and still producing
    assert proc.poll() is None and not_traced(proc.pid)
    before = progress(prog)
    assert wait_for(lambda: progress(prog) >= before + 10, 10), "producer stopped after kdiag detached"


@pytest.mark.parametrize("tool", ["bpfcalls", "bpfcalls-tracepoints", "bpftrace"])
def test_attach_in_kernel_names_the_cause_and_detaches(producer, spark, tmp_path, monkeypatch, tool):
    """The tracers auto picks for a busy producer, each asked for here:
    the same verdict and evidence from its capture, and the producer runs
    on. bpfcalls takes uprobes in the producer's libc for a producer this
    slow, and the tracepoints when asked."""
    from kdiag.collectors import bpfcalls

    need("bpftrace" if tool == "bpftrace" else None, root=True)
    require(bpfcalls.check() if tool.startswith("bpfcalls") else None)
    tool, _, hooks = tool.partition("-")
    monkeypatch.setenv(bpfcalls.HOOKS_ENV, hooks or "auto")
    monkeypatch.setenv("KDIAG_TRACER", tool)
    proc, prog = producer
    out, err = io.StringIO(), io.StringIO()
    bundle = tmp_path / "b.tar.gz"
    rc = main(["trace", "--json", "--pid", str(proc.pid), "--duration", "3", "-o", str(bundle)],
              Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    f = json.loads(out.getvalue())
    assert f["verdict"] == "nagle_delayed_ack", json.dumps(f, indent=1)
    assert any("as sampled live from the socket" in e for e in f["findings"][0]["evidence"])
    man = manifest_of(bundle)
    assert man["tracer"]["tool"] == tool and man["tracer"]["lost_events"] == 0, man["tracer"]
    assert man["tracer"].get("hooks") == {"bpfcalls": "uprobes in libc", "bpfcalls-tracepoints": "per-syscall tracepoints",
                                          "bpftrace": None}["-".join(filter(None, (tool, hooks)))], man["tracer"]
    if tool == "bpfcalls" and not hooks:
        assert "calls/s: uprobes in its libc cost it about" in man["tracer"]["hooks_why"], man["tracer"]
    assert [c["name"] for c in man["collectors"]][0] == tool and not man["partial"], man["partial_reasons"]
    ovh = man["overhead"]
    assert set(ovh) == OVERHEAD_FIELDS and ovh["method"].startswith("measured:"), ovh
    assert ovh["tracer_setup_cpu_s"] is not None and ovh["tracer_cpu_cores"] is not None
    assert proc.poll() is None and not_traced(proc.pid)
    before = progress(prog)
    assert wait_for(lambda: progress(prog) >= before + 10, 10), f"producer stopped after {tool} detached"


def test_kill_9_of_kdiag_leaves_the_producer_running(producer, tmp_path):
    proc, prog = producer
    kd = subprocess.Popen([sys.executable, "-m", "kdiag", "trace", "--tracer", "strace", "--pid", str(proc.pid),
                           "--duration", "60",
                           "-o", str(tmp_path / "k.tar.gz")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          cwd=ROOT)
    assert wait_for(lambda: not not_traced(proc.pid), 20), "kdiag never attached"
    stracers = [c for c in psutil.Process(kd.pid).children(recursive=True) if c.name() == "strace"]
    os.kill(kd.pid, signal.SIGKILL)
    kd.wait()
    # the kernel tells strace its parent died; strace detaches
    assert wait_for(lambda: not_traced(proc.pid), 15), "still traced after kdiag was killed"
    assert stracers and wait_gone([s.pid for s in stracers], 10) == [], "strace outlived kdiag"
    assert proc.poll() is None
    before = progress(prog)
    assert wait_for(lambda: progress(prog) >= before + 10, 10), "producer stopped after kdiag was killed"


def test_kill_9_of_kdiag_stops_its_bpf_tracer(producer, tmp_path):
    """kdiag's own BPF tracer dies with kdiag (PR_SET_PDEATHSIG); its
    programs are held only by its open fds (nothing is pinned), so the
    kernel drops them with it: nothing is left tracing."""
    from kdiag.collectors import bpfcalls

    require(bpfcalls.check())
    proc, prog = producer
    kd = subprocess.Popen([sys.executable, "-m", "kdiag", "trace", "--tracer", "bpfcalls", "--pid", str(proc.pid),
                           "--duration", "60", "-o", str(tmp_path / "k.tar.gz")], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, cwd=ROOT)

    def runners():
        found = []
        for c in psutil.Process(kd.pid).children(recursive=True):
            try:
                if "kdiag.collectors.bpfcalls" in " ".join(c.cmdline()):
                    found.append(c)
            except psutil.Error:    # gone, or a zombie, since it was listed
                pass
        return found
    def holds_programs(pid: int) -> bool:
        # The tracer opens and closes fds while it loads: one listed may be
        # gone when it is read.
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if "bpf-prog" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                    return True
            except FileNotFoundError:
                pass
        return False
    # Bounded, not tight: a loaded host takes its time to start Python and
    # load the programs.
    assert wait_for(lambda: runners(), 60), "kdiag never started its tracer"
    tracer = runners()[0]
    assert wait_for(lambda: holds_programs(tracer.pid), 60), "it never loaded its programs"
    os.kill(kd.pid, signal.SIGKILL)
    kd.wait()
    assert wait_gone([tracer.pid], 30) == [], "the BPF tracer outlived kdiag"
    assert proc.poll() is None
    before = progress(prog)
    assert wait_for(lambda: progress(prog) >= before + 10, 10), "producer stopped after kdiag was killed"


def test_sigterm_detaches_and_keeps_a_partial_bundle(producer, tmp_path):
    """SIGTERM (a service manager stopping kdiag) ends the window as Ctrl-C
    does: detach, analyse what was captured, bundle marked partial."""
    proc, prog = producer
    out = tmp_path / "t.tar.gz"
    kd = subprocess.Popen([sys.executable, "-m", "kdiag", "trace", "--json", "--tracer", "strace", "--pid", str(proc.pid),
                           "--duration", "60", "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          cwd=ROOT)
    assert wait_for(lambda: not not_traced(proc.pid), 20), "kdiag never attached"
    time.sleep(2)    # a capture worth analysing
    kd.send_signal(signal.SIGTERM)
    stdout, _ = kd.communicate(timeout=120)
    assert kd.returncode == 130
    assert not_traced(proc.pid) and proc.poll() is None
    f = json.loads(stdout)
    assert f["partial"] is True and f["verdict"] == "nagle_delayed_ack"
    import tarfile

    with tarfile.open(out) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    assert manifest["partial"] is True
    before = progress(prog)
    assert wait_for(lambda: progress(prog) >= before + 10, 10), "producer stopped after kdiag's SIGTERM"


@pytest.mark.parametrize("tracer", ["auto", "auto-uprobes", "strace"])
def test_wrap_runs_the_command_to_its_end(the_lab, spark, tmp_path, monkeypatch, tracer):
    """auto traces a command in the kernel where it can (bpfcalls, else
    bpftrace): from the exec, so the setsockopt() before connect() is seen,
    as strace sees it. On uprobes too: they are hung on the shim's libc
    before the exec, and fire in the command's."""
    from kdiag.collectors import bpfcalls

    tracer, _, hooks = tracer.partition("-")
    if hooks:
        require(bpfcalls.check())
        monkeypatch.setenv(bpfcalls.HOOKS_ENV, hooks)
    monkeypatch.setenv("KDIAG_TRACER", tracer)
    prog = tmp_path / "progress"
    out, err = io.StringIO(), io.StringIO()
    rc = main(["trace", "--json", "-o", str(tmp_path / "w.tar.gz"), "--",
               sys.executable, str(PRODUCER), the_lab.bootstrap, str(the_lab.ca_path), "false", "2", str(prog)],
              Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    f = json.loads(out.getvalue())
    assert f["verdict"] == "nagle_delayed_ack" and progress(prog) > 10
    ev = f["findings"][0]["evidence"]
    assert any("TCP_NODELAY was not set on fd" in e and "no setsockopt(TCP_NODELAY) before its connect()" in e
               for e in ev), ev
    man = manifest_of(tmp_path / "w.tar.gz")
    from kdiag.collectors import bpfcalls, bpftrace

    usable = [t.NAME for t in (bpfcalls, bpftrace) if t.check() is None]
    want = usable[0] if tracer == "auto" and usable else "strace"
    assert man["tracer"]["tool"] == want, man["tracer"]
    if hooks:
        assert man["tracer"]["hooks"] == "uprobes in libc", man["tracer"]
    ovh = man["overhead"]
    assert set(ovh) == OVERHEAD_FIELDS and ovh["tool"] == want and ovh["method"].startswith("estimated:"), ovh
    assert ovh["throughput_pct"] is not None and not man["partial"], man["partial_reasons"]
    # It ended on its own: its status, and TCP's counters read through kdiag's namespace, which is its own
    assert man["target"]["exit_status"] == 0 and man["target"]["tcp_counters_after"] is not None, man["target"]


# One of each kind of secret a producer's host holds, with values planted to
# be searched for in the bundle's bytes.
PLANTED = {
    "sasl.password": "Pl4nted-sasl-pw",
    "ssl.key.password": "Pl4nted-key-pw",
    "ssl.keystore.password": "Pl4nted-keystore-pw",
    "ssl.truststore.password": "Pl4nted-truststore-pw",
    "sasl.oauthbearer.client.secret": "Pl4nted-oidc-secret",
}
JAAS_PW = "Pl4nted jaas pw"
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJQbDRudGVkLWp3dCJ9.Pl4ntedSignatureXyz"
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjPl4ntedPemBodyAoIBAQC7"


def test_secrets_of_a_wrapped_producer_stay_out_of_the_bundle(the_lab, spark, tmp_path):
    """kdiag never saw this producer's config: its secrets go by in strace's
    read()/write() strings and in its stderr, and the patterns catch them."""
    import gzip
    import tarfile

    secrets_file = tmp_path / "client.properties"
    secrets_file.write_text(
        "".join(f"{k}={v}\n" for k, v in PLANTED.items())
        + "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
          f'username="alice" password="{JAAS_PW}";\n'
        + f"Authorization: Bearer {JWT}\n"
        + f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n{PEM_BODY}\n-----END PRIVATE KEY-----\n")
    prog = tmp_path / "progress"
    bundle = tmp_path / "s.tar.gz"
    script = (f"while read -r line; do echo \"$line\" >&2; done < {secrets_file}; exec {sys.executable} {PRODUCER} "
              f"{the_lab.bootstrap} {the_lab.ca_path} false 2 {prog}")
    out, err = io.StringIO(), io.StringIO()
    rc = main(["trace", "--json", "-o", str(bundle), "--", "sh", "-c", script], Environment(stdout=out, stderr=err))
    assert rc == 0, err.getvalue()
    man = None
    blobs = [bundle.read_bytes(), gzip.decompress(bundle.read_bytes())]
    with tarfile.open(bundle) as tar:
        for m in tar.getmembers():
            if m.isfile():
                data = tar.extractfile(m).read()
                blobs.append(data)
                if m.name == "manifest.json":
                    man = json.loads(data)
    values = [*PLANTED.values(), JAAS_PW, JWT, PEM_BODY, "Pl4nted"]
    for v in values:
        assert not any(v.encode() in b for b in blobs), f"{v!r} is in the bundle"
    # the secrets were there to be found: in the stderr log and in strace's strings
    by = man["redaction"]["by_pattern"]
    assert by.get("key_value", 0) + by.get("quoted_value", 0) >= 2 * len(PLANTED), by
    assert by.get("pem_private_key") and by.get("jwt")
    # and the analysis still read the producer's lines
    assert json.loads(out.getvalue())["verdict"] == "nagle_delayed_ack"


def test_wrapped_command_keeps_working_after_the_window(the_lab, spark, tmp_path):
    """Detaching after --duration must not break the command, though strace
    started it under a seccomp filter."""
    prog = tmp_path / "progress"
    out = io.StringIO()
    rc = main(["trace", "--json", "--duration", "2", "-o", str(tmp_path / "d.tar.gz"), "--",
               sys.executable, str(PRODUCER), the_lab.bootstrap, str(the_lab.ca_path), "false", "60", str(prog)],
              Environment(stdout=out, stderr=io.StringIO()))
    assert rc == 0
    pid = json.loads(out.getvalue())["target"]["pid"]
    try:
        assert not_traced(pid)
        before = progress(prog)
        assert wait_for(lambda: progress(prog) >= before + 10, 10), "wrapped producer stopped after detach"
    finally:
        os.kill(pid, signal.SIGTERM)   # started by this test, through kdiag


def test_usage():
    env = Environment(stdout=io.StringIO(), stderr=io.StringIO())
    assert main(["trace", "--pid", "999999999"], env) == 2
    assert main(["trace", "--pid", "1", "-b", "x:1"], env) == 2
    assert main(["trace", "--pid", "1", "--", "true"], env) == 2
