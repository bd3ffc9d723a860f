"""The bpfcalls tracer: its records become the strace text the syscalls
parser reads, and it traces a real process, only that process, in the
kernel."""
import io
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from conftest import need, require
from kdiag.collectors import bpfcalls
from kdiag.collectors._bpftrace_records import Converter
from kdiag.parsers.strace import parse_lines

LO = struct.unpack("<I", socket.inet_aton("127.0.0.1"))[0]


def rec(kind, code=0, tid=4242, ts=1_000_000_000, dur=5_000, ret=0, a=(0, 0, 0, 0), count=0, ino=0, mode=0,
        fam=0, typ=0, proto=0, lport=0, rport=0, la=0, ra=0, extra=0, name=b"", data=b""):
    head = bpfcalls.RECORD.pack(ts=ts, dur=dur, ret=ret, a=a, tid=tid, code=code, kind=kind, count=count, id_ino=ino,
                                id_mode=mode, id_fam=fam, id_typ=typ, id_proto=proto, id_lport=lport, id_rport=rport,
                                id_la=la, id_ra=ra, extra=extra, name_len=len(name), data_len=len(data))
    return head + name + data


def to_rows(buf: bytes, offset_ns: int = 1_700_000_000_000_000_000):
    out = io.StringIO()
    conv = Converter(out, offset_ns)
    bad = 0
    for line in bpfcalls.record_lines(buf):
        if line is None:
            bad += 1
        else:
            conv.feed(line)
    res = conv.close()
    table, counts = parse_lines(out.getvalue().splitlines())
    return table.to_pylist(), res.bad_records + bad, out.getvalue()


def test_records_become_the_strace_text_of_each_call():
    log = b"%7|1.0|SEND|rdkafka#producer-1| [thrd:x]: Sent ProduceRequest (v7, 2219 bytes @ 0, CorrId 5)\t\\x41\x01\n"
    sock = dict(ino=77, mode=0xC000, fam=2, typ=1, proto=6, lport=41550, rport=9093, la=LO, ra=LO)
    pollfds = struct.pack("<ihh", 7, 1, 1) + struct.pack("<ihh", 9, 4, 0)
    sa = struct.pack("<H", 2) + struct.pack(">H", 9093) + socket.inet_aton("127.0.0.1") + b"\0" * 20
    buf = b"".join([
        rec(bpfcalls.KIND_F, code=17, ts=10_000, ret=0, a=(7, 6, 1, 0), extra=1, **sock),       # setsockopt
        rec(bpfcalls.KIND_C, code=15, ts=20_000, ret=-115, a=(7, 0, 16, 0), extra=16, data=sa, ino=77, proto=6),
        rec(bpfcalls.KIND_P, code=11, ts=30_000, ret=1, a=(2, 0, 1000, 0), count=2, data=pollfds),
        rec(bpfcalls.KIND_F, code=1, ts=40_000, ret=2219, a=(7, 0, 2219, 0), **sock),             # socket write
        rec(bpfcalls.KIND_D, code=1, ts=50_000, ret=len(log), a=(2, 0, len(log), 0), count=len(log), data=log),
        rec(bpfcalls.KIND_F, code=1, ts=60_000, ret=1, a=(6, 0, 1, 0), ino=5, mode=0x8000, name=b"app.log"),
        rec(bpfcalls.KIND_X, code=19, ts=70_000, ret=0, a=(7, 0, 0, 0)),
        rec(bpfcalls.KIND_G, ts=80_000, ret=3),
        rec(bpfcalls.KIND_E, ts=90_000, ret=3),
    ])
    rows, bad, text = to_rows(buf + rec(bpfcalls.KIND_F, code=1)[:40])   # and a record cut by the file's end
    assert bad == 1, text
    calls = [(r["syscall"], r["fd"], r["ret"], r["fd_info"]) for r in rows if r["kind"] == "syscall"]
    tcp = "TCP:[127.0.0.1:41550->127.0.0.1:9093]"
    assert calls == [("setsockopt", 7, 0, tcp), ("connect", 7, -1, "TCP:[77]"), ("poll", None, 1, None),
                     ("write", 7, 2219, tcp), ("write", 2, len(log), None), ("write", 6, 1, "app.log"),
                     ("close", 7, 0, None), ("exit_group", None, None, None)], text
    assert "TCP_NODELAY, [1], 4" in rows[0]["args"] and 'inet_addr("127.0.0.1")' in rows[1]["args"]
    assert rows[1]["errno"] == "EINPROGRESS" and "{fd=7, events=POLLIN}, {fd=9, events=POLLOUT}" in rows[2]["args"]
    assert rows[4]["data"] == log.decode(), "a log line's bytes, tabs and backslashes, read back exactly"
    assert rows[-1]["kind"] == "exit" and rows[-1]["ret"] == 3
    assert [r["ts_us"] for r in rows] == sorted(r["ts_us"] for r in rows)


def test_it_traces_only_the_process_it_is_given(tmp_path):
    need(root=True)
    require(bpfcalls.check())
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c", f"""
import socket, sys, time
sys.stdin.readline()
s = socket.socket()
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.connect(("127.0.0.1", {port}))
for i in range(3):
    sys.stderr.write("Sent ProduceRequest (v7, 100 bytes @ 0, CorrId %d)\\n" % i)
    sys.stderr.flush()
    s.send(b"x" * 100)
    s.recv(100)
time.sleep(0.3)
"""], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = tmp_path / "strace.txt"
    tracer = subprocess.Popen([sys.executable, "-m", "kdiag.collectors.bpfcalls", "--pid", str(child.pid),
                               "--out", str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert tracer.stdout.readline().strip() == "ready"
        # The child starts its calls only now: a tracer slow to load its
        # programs on a busy host must not miss the first of them.
        child.stdin.write(b"go\n")
        child.stdin.close()
        conn, _ = srv.accept()
        for _ in range(3):      # this process's own socket calls are not the traced one's
            conn.recv(100)
            conn.send(b"y" * 7)
        child.wait(20)
        time.sleep(0.2)
    finally:
        tracer.send_signal(signal.SIGINT)
        status, _ = tracer.communicate(timeout=60)
        conn.close()
        srv.close()
    assert '"state": "ok"' in status, status
    rows, _ = parse_lines(out.read_text().splitlines())
    rows = rows.to_pylist()
    assert {r["pid"] for r in rows} == {child.pid}, "only the traced process"
    calls = [r for r in rows if r["kind"] == "syscall"]
    names = [r["syscall"] for r in calls]
    assert names.count("sendto") == 3 and names.count("recvfrom") == 3, names
    logs = [r["data"] for r in calls if r["syscall"] == "write" and r["fd"] == 2]
    assert logs == [f"Sent ProduceRequest (v7, 100 bytes @ 0, CorrId {i})\n" for i in range(3)]
    sent = [r for r in calls if r["syscall"] == "sendto"]
    assert all(r["ret"] == 100 and r["fd_info"].endswith(f"->127.0.0.1:{port}]") for r in sent), sent
    assert [r["ret"] for r in calls if r["syscall"] == "recvfrom"] == [7, 7, 7]
    nodelay = [r for r in calls if r["syscall"] == "setsockopt"]
    assert nodelay and "TCP_NODELAY, [1]" in nodelay[0]["args"], "seen before connect(), as strace sees it"
    assert any(r["syscall"] == "connect" and f"htons({port})" in r["args"] for r in calls)
    assert child.returncode == 0 and rows[-1]["kind"] == "exit"


@pytest.mark.parametrize("why", [None, "needs root (loads BPF programs)"])
def test_auto_prefers_it_and_says_why_not(why):
    from kdiag.capture import overhead

    tool, said = overhead.choose("auto", None, {"bpfcalls": why, "bpftrace": None})
    assert tool == ("bpfcalls" if why is None else "bpftrace")
    assert (why or "stops no thread") in said
