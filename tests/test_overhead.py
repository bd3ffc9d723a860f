"""kdiag.capture.overhead (pure functions on planted /proc text and captures) and the
bpftrace tracer: its records become strace text the parser reads, and a real
bpftrace run on a real process gives the rows the analysis needs."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kdiag.collectors import bpftrace as bt
from conftest import need
from kdiag.capture import overhead

IO = "rchar: 100\nwchar: 200\nsyscr: 1500\nsyscw: 2500\nread_bytes: 0\n"
# /proc/PID/stat of a process whose comm holds spaces and a ")"
STAT = "4242 (rdk:broker 1) x) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 9 0 100 0 0\n"
TASK_STATUS = "Name:\trdk:broker1\nvoluntary_ctxt_switches:\t70\nnonvoluntary_ctxt_switches:\t5\n"


def test_parse_proc_text():
    assert overhead.parse_io(IO) == 4000
    assert overhead.parse_io("syscr: 1\n") is None and overhead.parse_io(None) is None
    assert overhead.parse_stat_cpu(STAT, 100) == 3.0
    assert overhead.parse_stat_cpu("garbage", 100) is None
    assert overhead.parse_ctx(TASK_STATUS) == 75


def test_rates_and_measured():
    a = overhead.Counters(10.0, 1000, 1.0, 50)
    b = overhead.Counters(12.0, 21000, 2.5, 250)
    r = overhead.rates(a, b)
    assert r == overhead.Rates(2.0, 10000.0, 0.75, 100.0)
    assert overhead.rates(b, a) is None and overhead.rates(None, b) is None
    before = overhead.Rates(1.0, 20000.0, 1.0, 900.0)
    o = overhead.measured("bpftrace", before, r, tracer_cpu_s=0.5, setup_cpu_s=3.0, calls_per_s=9000.0,
                          cost_us=6.6)
    assert o.method.startswith("measured:") and o.throughput_pct == 50.0
    assert o.untraced_io_calls_per_s == 20000.0 and o.traced_io_calls_per_s == 10000.0
    assert o.tracer_cpu_cores == 0.25 and o.tracer_setup_cpu_s == 3.0 and o.window_s == 2.0
    # every field present, whatever is known
    assert set(o.to_dict()) == set(overhead.unknown(None, "x").to_dict())


def test_measured_without_a_baseline_falls_back_to_the_estimate():
    during = overhead.Rates(2.0, None, None, None)
    o = overhead.measured("strace", None, during, calls_per_s=1000.0, cost_us=23.0)
    assert o.method.startswith("estimated:") and "could not be read" in o.method
    assert o.throughput_pct == pytest.approx(100 / 1.023, abs=0.1)


def test_estimated():
    o = overhead.estimated("strace", 13000.0, 10.0, 23.0, lower_bound=True)
    assert o.throughput_pct == pytest.approx(100 / (1 + 13000 * 23e-6), abs=0.1)
    assert "every call" in o.method and o.untraced_io_calls_per_s is None
    assert overhead.estimated("strace", None, 10.0, 23.0).throughput_pct is None


def test_busiest_thread_and_probe_estimate(tmp_path):
    cap = tmp_path / "strace.txt"
    lines = ["101   1795315014.000001 poll([{fd=5, events=POLLIN}], 1, 1000) = 1 <0.000010>"] * 3
    lines += ["102   1795315014.000002 write(5<TCP:[1.2.3.4:1->5.6.7.8:2]>, \"\"..., 10) = 10 <0.000003>"] * 7
    lines += ["[pid   103] 1795315014.000003 read(6, \"\", 5) = 0 <0.000001>"]
    cap.write_text("\n".join(lines) + "\n")
    assert overhead.busiest_thread_lines(cap) == (11, 7)
    d = overhead.for_probe(cap, 0, 2_000_000)
    assert d["tool"] == "strace --seccomp-bpf" and d["traced_calls_per_s"] == 3.5
    assert d["method"].startswith("estimated:")
    assert overhead.for_probe(tmp_path / "absent.txt", 0, 1)["method"].startswith("unknown:")


def test_choose():
    busy = overhead.Rates(1.0, 13000.0, 1.0, 500.0)
    idle = overhead.Rates(1.0, 150.0, 0.05, 300.0)
    both = {"bpfcalls": None, "bpftrace": None}
    only_bt = {"bpfcalls": "no loader", "bpftrace": None}
    neither = {"bpfcalls": "no loader", "bpftrace": "bpftrace not found on PATH"}
    # kdiag's own tracer at any rate; bpftrace only where strace would cost more
    assert overhead.choose("auto", busy, both)[0] == "bpfcalls"
    assert overhead.choose("auto", idle, both)[0] == "bpfcalls"
    assert overhead.choose("auto", None, both)[0] == "bpfcalls"
    tool, why = overhead.choose("auto", busy, only_bt)
    assert tool == "bpftrace" and "bpfcalls cannot run here: no loader" in why
    assert overhead.choose("auto", idle, only_bt)[0] == "strace"
    assert overhead.choose("auto", None, only_bt)[0] == "bpftrace"
    tool, why = overhead.choose("auto", busy, neither)
    assert tool == "strace" and "bpftrace not found" in why and "no loader" in why
    assert overhead.choose("strace", busy, both)[0] == "strace"
    assert overhead.choose("bpftrace", idle, both)[0] == "bpftrace"
    assert overhead.choose("bpftrace", idle, {"bpfcalls": None, "bpftrace": "no BTF"})[0] == "strace"
    assert overhead.choose("bpfcalls", idle, only_bt) == ("strace", "bpfcalls asked for but cannot run: no loader")


class _FakeTracer:
    """A syscall tracer collector that starts, or not, without a process."""
    syscall_tracer = True

    def __init__(self, name, unmet=None, starts=True):
        self.name, self._unmet, self._starts = name, unmet, starts
        self.child = self.proc = None
        self.failed_to_start = None
        self.started = False

    def unmet(self):
        return self._unmet

    def start(self, pid):
        self.started = True
        if self.name == "strace":
            self.proc = object()
        elif self._starts:
            self.child = object()
        else:
            self.failed_to_start = "planted failure"


@pytest.mark.parametrize("setting, rate, want", [
    ("auto", 13000.0, "bpftrace"),     # busy: strace would cost more, bpftrace is next
    ("auto", 150.0, "strace"),         # idle: bpftrace is not worth it, as choose says
    ("bpfcalls", 13000.0, "strace"),   # asked for, failed: strace, not another BPF tracer
])
def test_a_tracer_that_does_not_start_is_chosen_past(monkeypatch, setting, rate, want):
    from kdiag.capture import attach

    monkeypatch.setattr(attach, "may_trace", lambda pid: None)
    fakes = [_FakeTracer("bpfcalls", starts=False), _FakeTracer("bpftrace"), _FakeTracer("strace")]
    target = attach.Target(os.getpid(), attach.PID, 1.0, untraced=overhead.Rates(1.0, rate, 1.0, 500.0))
    logged = []
    choice = attach._start_tracer(setting, target, fakes, logged.append)
    assert choice.tool == want and choice.tracer is next(f for f in fakes if f.name == want), choice
    assert choice.failed == {"bpfcalls": "planted failure"}
    assert "bpfcalls" in choice.why and "planted failure" in choice.why, choice.why
    assert [f.name for f in fakes if f.started] == ["bpfcalls", want]


# --- bpftrace records -> strace text ---------------------------------------------

def _fd_fields(mode="c000", ino=777, fam=2, typ=1, proto=6, lport=41550, rport=9093, la=0x0100007F,
               ra=0x0100007F):
    return [mode, str(ino), str(fam), str(typ), str(proto), str(lport), str(rport), str(la), str(ra)] + ["0"] * 8


def parse_strace(text: str):
    import pyarrow as pa

    from kdiag.parsers.strace import StraceParser

    p = StraceParser()
    t = pa.concat_tables([p.feed(pa.array(text.splitlines(), pa.string()), 1), p.finish()])
    return t.to_pylist(), p.counts


def _rec(tag, tid, ts, dur, code, ret, *rest):
    return "\t".join([tag, str(tid), str(ts), str(dur), str(code), str(ret), *map(str, rest)])


def test_records_become_strace_lines_the_parser_reads(tmp_path):
    write, poll, connect, setsockopt, read = (bt.CODE_OF[n] for n in ("write", "poll", "connect", "setsockopt",
                                                                         "read"))
    log = "%7|1795315014.001|SEND|rdkafka#producer-1| [thrd:ssl://127.0.0.1:9093/1]: ssl://127.0.0.1:9093/1: " \
          "Sent ProduceRequest (v10, 2161 bytes @ 0, CorrId 30)\\x0a"
    raw = bytes(log.replace("\\x0a", "\n"), "ascii")
    recs = [
        "Attaching 37 probes...",
        bt.READY,
        _rec("F", 7, 1_000_000, 20_000, setsockopt, 0, 5, 6, 1, 0, *_fd_fields(rport=0), 1),
        # returned later than the poll below, started earlier: written in order of return
        _rec("C", 7, 2_000_000, 900_000, connect, -115, 5, 16, 777, 6, 2, 9093, 0x0100007F, 0, 0, 0, 0),
        _rec("P", 8, 2_500_000, 40_000, poll, 1, 2, 1000, 5, 5, 4, 9, 1, 0, -1, 0, 0, -1, 0, 0),
        _rec("D", 7, 3_000_000, 5_000, write, len(raw), 2, len(raw), log[:bt.CHUNK]),
        "+\t7\t" + log[bt.CHUNK:],
        "N\t7\tstderr.log",
        _rec("F", 7, 3_500_000, 3_000, write, 3, 6, 0, 3, 0, *_fd_fields(mode="8000", fam=0, typ=0, proto=0,
                                                                        lport=0, rport=0, la=0, ra=0)),
        _rec("F", 7, 4_000_000, 3_000, write, 2161, 5, 0, 2161, 0, *_fd_fields()),
        _rec("F", 7, 5_000_000, 1_000, read, -11, 5, 0, 5, 0, *_fd_fields()),
        "Lost 3 events",
        "garbage",
    ]
    src = tmp_path / "records"
    src.write_text("\n".join(recs) + "\n", encoding="latin-1")
    out = tmp_path / "strace.txt"
    res = bt.convert(src, out, epoch_offset_ns=1_795_315_014_000_000_000)
    assert res.lines == 7 and res.lost_events == 3 and res.bad_records == 1
    text = out.read_text()
    assert "setsockopt(5<TCP:[777]>, SOL_TCP, TCP_NODELAY, [1], 4) = 0 <0.000020>" in text
    assert 'connect(5<TCP:[777]>, {sa_family=AF_INET, sin_port=htons(9093), sin_addr=inet_addr("127.0.0.1")}, 16)' \
           ' = -1 EINPROGRESS (Operation now in progress)' in text
    assert "poll([{fd=5, events=POLLIN|POLLOUT}, {fd=9, events=POLLIN}], 2, 1000) = 1 ([{fd=5, revents=POLLOUT}])" \
           in text
    assert "write(6<stderr.log>, \"\"..., 3) = 3" in text
    assert "read(5<TCP:[127.0.0.1:41550->127.0.0.1:9093]>, \"\"..., 5) = -1 EAGAIN" in text
    order = [ln.split()[2].split("(")[0] for ln in text.splitlines()]
    assert order == ["setsockopt", "poll", "connect", "write", "write", "write", "read"]

    t, counts = parse_strace(text)
    assert len(t) == 7 and counts.skipped == {}
    by = {r["syscall"] + str(r["fd"]): r for r in t}
    w = by["write5"]
    assert (w["pid"], w["ts_us"], w["dur_us"], w["ret"]) == (7, 1795315014004000, 3, 2161)
    assert w["fd_info"] == "TCP:[127.0.0.1:41550->127.0.0.1:9093]"
    assert by["write2"]["data"] == raw.decode()
    assert by["connect5"]["errno"] == "EINPROGRESS" and by["read5"]["errno"] == "EAGAIN"


def test_late_records_are_sorted_across_spilled_runs(tmp_path):
    """bpftrace reads a quiet CPU's buffer late (up to the whole run): a
    record is written in order of return wherever it came in the file, with
    only a few records in memory at once."""
    write, read = bt.CODE_OF["write"], bt.CODE_OF["read"]
    log = "%7|1795315014.001|SEND|rdkafka#producer-1| " + "x" * 150 + "\\x0a"
    n = len(log.replace("\\x0a", "\n"))
    fd = _fd_fields()
    recs = [_rec("F", 7, t, 1_000, read, 5, 5, 0, 5, 0, *fd) for t in range(10 * 10**9, 20 * 10**9, 10**9)]
    # one CPU's buffer, drained at the end: the earliest calls come in last,
    # a log line's second half right behind its first
    recs += [_rec("D", 8, 1 * 10**9, 5_000, write, n, 2, n, log[:bt.CHUNK]), "+\t8\t" + log[bt.CHUNK:],
             _rec("F", 8, 2 * 10**9, 1_000, read, 5, 5, 0, 5, 0, *fd)]
    src = tmp_path / "records"
    src.write_text("\n".join(recs) + "\n", encoding="latin-1")
    texts = []
    for run in (3, 1000):
        out = tmp_path / f"strace-{run}.txt"
        res = bt.convert(src, out, epoch_offset_ns=1_795_315_014_000_000_000, run_records=run)
        assert res.lines == 12 and res.bad_records == 0
        texts.append(out.read_text())
    assert texts[0] == texts[1]
    lines = texts[0].splitlines()
    assert [int(ln.split()[0]) for ln in lines[:2]] == [8, 8] and "x" * 150 + '\\n", ' in lines[0]
    stamps = [float(ln.split()[1]) for ln in lines]
    assert stamps == sorted(stamps)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records", "strace-1000.txt", "strace-3.txt"]


def test_fd_names():
    assert bt.fd_name(0x1000, 57434, 0, 0, 0, 0, 0, 0, 0, [0] * 4, [0] * 4, "") == "pipe:[57434]"
    assert bt.fd_name(0, 12, 0, 0, 0, 0, 0, 0, 0, [0] * 4, [0] * 4, "[eventfd]") == "anon_inode:[eventfd]"
    assert bt.fd_name(0, 0, 0, 0, 0, 0, 0, 0, 0, [0] * 4, [0] * 4, "") is None
    assert bt.fd_name(0xC000, 9, 1, 1, 0, 0, 0, 0, 0, [0] * 4, [0] * 4, "") == "UNIX-STREAM:[9]"
    one = [0, 0, 0, 0x01000000]         # ::1, as the kernel's u32 words read little-endian
    assert bt.fd_name(0xC000, 9, 10, 1, 6, 5000, 9092, 0, 0, one, one, "") == "TCPv6:[[::1]:5000->[::1]:9092]"


def test_program_names_every_call():
    src = bt.program(4242)
    for name in bt.CODE_OF:
        assert f"tracepoint:syscalls:sys_enter_{name} /(pid == 4242 || @t[pid])/" in src
        assert f"tracepoint:syscalls:sys_exit_{name} " in src


# --- a real bpftrace on a real process -----------------------------------------------

CHILD = r"""
import os, socket, sys, time
go = sys.argv[1]
while go != "-" and not os.path.exists(go):
    time.sleep(0.01)
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
c = socket.socket(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
c.connect(srv.getsockname()); a, _ = srv.accept()
for i in range(50):
    c.send(b"x" * 100); a.recv(1000)
os.write(2, b"%7|1795315014.001|SEND|rdkafka#producer-1| [thrd:x]: x: Sent ProduceRequest (v10, 2161 bytes @ 0, CorrId 30)\n")
"""


def _rows(path: Path):
    rows, counts = parse_strace(path.read_text())
    assert counts.skipped.get("unrecognised", 0) == 0 and counts.skipped.get("truncated", 0) == 0, counts
    return rows


def test_real_bpftrace_attaches_and_detaches(tmp_path):
    """As kdiag trace --pid: bpftrace on a running process, which keeps
    running after; its socket calls are in the capture, named by -yy."""
    need("bpftrace", root=True)
    go = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-c", CHILD + "time.sleep(600)\n", str(go)], stderr=subprocess.DEVNULL)
    try:
        out = tmp_path / "strace.txt"
        child = bt.spawn(proc.pid, out)
        assert bt.wait_ready(child, 120), bt.collect(child)
        go.touch()
        time.sleep(1.0)
        st = bt.collect(child)
        assert proc.poll() is None, "the traced process did not survive the detach"
    finally:
        proc.kill()     # started by this test
        proc.wait()
    assert st["state"] == "ok" and st["lost_events"] == 0, st
    assert st["ready_us"] and st["cpu_s"] is not None and st["setup_cpu_s"] is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go", "strace.txt"], "records left behind"
    rows = _rows(out)
    sends = [r for r in rows if r["syscall"] == "sendto" and r["ret"] == 100 and r["pid"] == proc.pid]
    assert len(sends) == 50 and all(r["fd_info"].startswith("TCP:[127.0.0.1:") for r in sends)
    assert all(r["ts_us"] and r["dur_us"] is not None for r in sends)


def test_real_bpftrace_from_exec_sees_setsockopt_and_the_log(tmp_path):
    """As kdiag trace -- CMD: the command is stopped before exec until the
    tracer is attached, then every call it makes is in the capture."""
    need("bpftrace", root=True)
    from kdiag.capture import attach

    shim = subprocess.Popen([sys.executable, "-c", attach._SHIM, sys.executable, "-c", CHILD, "-"],
                            stderr=subprocess.DEVNULL)
    try:
        assert attach.wait_state(shim.pid, "T")
        out = tmp_path / "strace.txt"
        tracer, why = attach.start_tracer("bpftrace", shim.pid, out, [], None, print)
        assert tracer is not None, why
        os.kill(shim.pid, __import__("signal").SIGCONT)
        shim.wait(60)
        st = bt.collect(tracer.bpf)
    finally:
        if shim.poll() is None:
            shim.kill()
            shim.wait()
    assert st["state"] == "ok", st
    rows = _rows(out)
    calls = [r for r in rows if r["kind"] == "syscall" and r["pid"] == shim.pid]
    nodelay = [r for r in calls if r["syscall"] == "setsockopt" and "TCP_NODELAY, [1]" in r["args"]]
    conn = [r for r in calls if r["syscall"] == "connect"]
    assert nodelay and conn and nodelay[0]["ts_us"] < conn[0]["ts_us"]
    sends = [r for r in calls if r["syscall"] == "sendto" and r["ret"] == 100]
    assert len(sends) == 50 and all(r["fd_info"].startswith("TCP:[127.0.0.1:") for r in sends)
    assert any("CorrId 30" in (r["data"] or "") for r in calls)
    assert any(r["kind"] == "exit" for r in rows)
