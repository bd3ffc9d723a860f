"""The bpfcalls tracer: its records become the strace text the syscalls
parser reads, and it traces a real process, only that process, in the
kernel."""
import io
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from conftest import need, require
from kdiag.analysis.per_request import FIRST_STRING, request_of_head
from kdiag.collectors import bpfcalls
from kdiag.collectors._bpftrace_records import Converter
from kdiag.parsers.strace import parse_lines
from kdiag.parsers.strace.values import unescape_bytes

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


def _listening() -> tuple[socket.socket, int]:
    """A TCP listener on loopback for a traced child to connect to, once
    root and the tracer are here."""
    need(root=True)
    require(bpfcalls.check())
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    return srv, srv.getsockname()[1]


@pytest.mark.parametrize("hooks", ["per-syscall", "raw", "uprobes"])
def test_it_traces_only_the_process_it_is_given(tmp_path, hooks):
    srv, port = _listening()
    script = f"""
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.connect(("127.0.0.1", {port}))
for i in range(3):
    sys.stderr.write("Sent ProduceRequest (v7, 100 bytes @ 0, CorrId %d)\\n" % i)
    sys.stderr.flush()
    s.send(b"x" * 100)
    s.recv(100)
time.sleep(0.3)
"""

    def peer():
        conn, _ = srv.accept()
        for _ in range(3):      # this process's own socket calls are not the traced one's
            conn.recv(100)
            conn.send(b"y" * 7)
        conn.close()

    try:
        rows, pid = trace(tmp_path, script, peer, every_kind=True, hooks=hooks)
    finally:
        srv.close()
    assert {r["pid"] for r in rows} == {pid}, "only the traced process"
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
    assert rows[-1]["kind"] == "exit"


def test_uprobes_see_what_the_tracepoints_see(tmp_path):
    """libc's functions hooked instead of the syscalls: the same calls with
    the same results, errors read from errno, a thread started after the
    tracer attached, the exit; and the other calls the tracepoints see
    (Python's own reads of its files) are the only difference."""
    srv, port = _listening()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = closed.getsockname()[1]
    closed.close()
    script = f"""
import socket, sys, threading, time
s = socket.socket()
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.connect(("127.0.0.1", {port}))
def later():
    for i in range(3):
        sys.stderr.write("Sent ProduceRequest (v7, 100 bytes @ 0, CorrId %d)\\n" % i)
        sys.stderr.flush()
        s.send(b"x" * 100)
        s.recv(100)
t = threading.Thread(target=later)
t.start()
t.join()
s.setblocking(False)
try:
    s.recv(10)
except BlockingIOError:
    pass
r = socket.socket()
try:
    r.connect(("127.0.0.1", {refused}))
except ConnectionRefusedError:
    pass
time.sleep(0.2)
"""

    open_conns = []

    def peer():     # the connection stays open: the last read finds nothing yet
        conn, _ = srv.accept()
        open_conns.append(conn)
        for _ in range(3):
            conn.recv(100)
            conn.send(b"y" * 7)

    got = {}
    try:
        for hooks in ("per-syscall", "uprobes"):
            rows, pid = trace(tmp_path, script, peer, every_kind=True, hooks=hooks)
            got[hooks] = [(r["kind"], r["syscall"], r["ret"], r["errno"], r["data"], r["pid"] == pid)
                          for r in rows if r["syscall"] not in ("read", "close", "write") or r["fd"] == 2]
    finally:
        srv.close()
        for conn in open_conns:
            conn.close()
    # Each thread's calls in its order. Between threads the order is a race:
    # the later thread's exit can reach the kernel after join() has returned
    # and the main thread has called on.
    for main in (True, False):
        assert [c for c in got["uprobes"] if c[5] is main] == [c for c in got["per-syscall"] if c[5] is main], got
    calls = got["uprobes"]
    assert ("syscall", "recvfrom", -1, "EAGAIN", None, True) in calls
    assert ("syscall", "connect", -1, "ECONNREFUSED", None, True) in calls
    assert [c[5] for c in calls if c[1] == "sendto"] == [False] * 3, "sent from the thread started later"
    assert calls[-1][0] == "exit" and any(c[1] == "exit_group" for c in calls), calls


def test_on_uprobes_a_forked_process_is_said_to_be_untraced(tmp_path):
    """The tracepoints follow what the process forks; a uprobe, hung on the
    process's own memory, does not, and the capture says so."""
    script = """
import os, sys
if os.fork() == 0:
    os.write(2, b"from the child\\n")
    os._exit(0)
os.wait()
os.write(2, b"from the parent\\n")
"""
    st, rows, _ = traced(tmp_path, script, hooks="uprobes")
    assert st["hooks"] == "uprobes in libc" and st["state"] == "partial", st
    assert "1 process(es) it forked were not traced" in st["reason"], st
    assert [r["data"] for r in rows if r["syscall"] == "write"] == ["from the parent\n"]


def request(corr: int, client: bytes = b"kdiag-head-client", body: int = 300) -> bytes:
    """A Produce v9 request as a client writes it: size, api key, version,
    correlation id, client id; then a body of ``body`` bytes."""
    rest = struct.pack(">hhih", 0, 9, corr, len(client)) + client + bytes(range(256)) * (body // 256) + b"\x01" * (
        body % 256)
    return struct.pack(">i", len(rest)) + rest


def first_string(args: str) -> bytes | None:
    m = re.search(FIRST_STRING, args)
    return unescape_bytes(m.group(1)) if m else None


def test_a_socket_writes_first_bytes_become_a_strace_string():
    """Each of the four writes with its first HEAD bytes: escaped as strace
    -x escapes them, "..." where the write was longer, the request's header
    read back from them; a write that kept none stays as before."""
    req = request(7, client=b'id "with" \\ quotes')
    head = req[:bpfcalls.HEAD]
    sock = dict(ino=77, mode=0xC000, fam=2, typ=1, proto=6, lport=41550, rport=9093, la=LO, ra=LO)
    n = len(req)
    buf = b"".join([
        rec(bpfcalls.KIND_F, code=1, ts=10_000, ret=n, a=(7, 0, n, 0), count=n, data=head, **sock),
        rec(bpfcalls.KIND_F, code=5, ts=20_000, ret=n, a=(7, 0, n, 0x4000), count=n, data=head, **sock),
        rec(bpfcalls.KIND_F, code=3, ts=30_000, ret=n + 4, a=(7, 0, 2, 0), count=n, data=head, **sock),
        rec(bpfcalls.KIND_F, code=7, ts=40_000, ret=n, a=(7, 0, 0x4000, 0), count=n, extra=1, data=head, **sock),
        rec(bpfcalls.KIND_F, code=5, ts=50_000, ret=12, a=(7, 0, 12, 0), count=12, data=req[:12], **sock),
        rec(bpfcalls.KIND_F, code=1, ts=60_000, ret=n, a=(7, 0, n, 0), **sock),        # bpftrace's: none kept
    ])
    rows, bad, text = to_rows(buf)
    assert bad == 0 and len(rows) == 6, text
    assert [r["syscall"] for r in rows] == ["write", "sendto", "writev", "sendmsg", "sendto", "write"]
    assert all(r["ret"] > 0 and r["fd_info"] == "TCP:[127.0.0.1:41550->127.0.0.1:9093]" for r in rows), text
    for r in rows[:4]:
        assert first_string(r["args"]) == head and '"...' in r["args"], r["args"]
        assert request_of_head(re.search(FIRST_STRING, r["args"]).group(1)) == (
            "Produce", 7, 'id "with" \\ quotes'), r["args"]
    assert f"iov_len={n}}}, ...], 2" in rows[2]["args"] and "msg_iovlen=1" in rows[3]["args"], text
    # a whole write kept: no "..."; a header cut short still names the api and correlation id
    assert first_string(rows[4]["args"]) == req[:12] and '"..."' not in rows[4]["args"]
    assert request_of_head(re.search(FIRST_STRING, rows[4]["args"]).group(1)) == ("Produce", 7, None)
    assert rows[5]["args"].startswith('7<TCP:[127.0.0.1:41550->127.0.0.1:9093]>, ""...,'), rows[5]["args"]


HOOKS = {"per-syscall": ({}, "per-syscall tracepoints"),
         "raw": ({bpfcalls.RAW_ENV: "1"}, "raw syscall tracepoints"),
         "uprobes": ({bpfcalls.HOOKS_ENV: "uprobes"}, "uprobes in libc")}


def trace(tmp_path, script: str, peer=None, every_kind: bool = False, hooks: str = "per-syscall"):
    """``script`` run by a Python child under the bpfcalls tracer, started
    once the tracer is ready (it makes no call before: a tracer slow to
    load its programs on a busy host must not miss the first); ``peer()``
    runs meanwhile. The calls parsed from its strace text; with
    ``every_kind``, (every row, the child's pid). ``hooks``: a key of
    HOOKS (raw: the loader's fallback; uprobes: libc's functions)."""
    st, rows, child = traced(tmp_path, script, peer, hooks)
    assert st["state"] == "ok" and st["hooks"] == HOOKS[hooks][1], st
    if every_kind:
        return rows, child
    return [r for r in rows if r["kind"] == "syscall"]


def traced(tmp_path, script: str, peer=None, hooks: str = "per-syscall",
           prefix: tuple[str, ...] = ()) -> tuple[dict, list[dict], int]:
    """(the tracer's status, every row of its strace text, the child's
    pid) for ``script``, as ``trace`` runs it; the tracer's command after
    ``prefix``."""
    child = subprocess.Popen([sys.executable, "-c", "import sys\nsys.stdin.readline()\n" + script],
                             stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    out = tmp_path / "strace.txt"
    env = {k: v for k, v in os.environ.items() if k not in (bpfcalls.RAW_ENV, bpfcalls.HOOKS_ENV)} | HOOKS[hooks][0]
    tracer = subprocess.Popen([*prefix, sys.executable, "-m", "kdiag.collectors.bpfcalls", "--pid", str(child.pid),
                               "--out", str(out)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert tracer.stdout.readline().strip() == "ready"
        child.stdin.write(b"go\n")
        child.stdin.close()
        if peer:
            peer()
        child.wait(20)
        err = child.stderr.read()
        time.sleep(0.2)
    finally:
        tracer.send_signal(signal.SIGINT)
        status, _ = tracer.communicate(timeout=60)
    assert child.returncode == 0, err
    rows, _ = parse_lines(out.read_text().splitlines())
    return json.loads(status.strip().splitlines()[-1]), rows.to_pylist(), child.pid


# tracefs, where libbpf reads a per-syscall tracepoint's id, hidden in a
# mount namespace of the tracer's own; the raw tracepoints are opened by
# name and need none of it.
HIDDEN_TRACEFS = ("unshare", "--mount", "sh", "-c",
                  "mount -t tmpfs none /sys/kernel/tracing && "
                  "{ ! test -d /sys/kernel/debug/tracing || mount -t tmpfs none /sys/kernel/debug; } && "
                  'exec "$@"', "hidden-tracefs")


def _traced_exchange(tmp_path, prefix: tuple[str, ...] = ()) -> tuple[dict, list[dict]]:
    """``traced`` for a child that sends 50 bytes to a loopback peer and
    reads its 3, the tracer's command after ``prefix``."""
    srv, port = _listening()
    script = f"""
import socket
s = socket.create_connection(("127.0.0.1", {port}))
s.send(b"x" * 50)
s.recv(10)
"""

    def peer():
        conn, _ = srv.accept()
        conn.recv(50)
        conn.send(b"y" * 3)
        conn.close()

    try:
        st, rows, _ = traced(tmp_path, script, peer, prefix=prefix)
    finally:
        srv.close()
    return st, rows


def test_where_the_per_syscall_tracepoints_fail_it_falls_back_and_says_why(tmp_path):
    need("unshare", root=True)
    st, rows = _traced_exchange(tmp_path, HIDDEN_TRACEFS)
    assert st["state"] == "ok" and st["hooks"] == "raw syscall tracepoints", st
    assert st["hooks_fallback"].startswith("attaching enter_"), st
    names = [r["syscall"] for r in rows if r["kind"] == "syscall"]
    assert "sendto" in names and "recvfrom" in names, names
    # Where they attach, nothing is said.
    st, _ = _traced_exchange(tmp_path)
    assert st["hooks"] == "per-syscall tracepoints" and "hooks_fallback" not in st, st


def test_it_keeps_the_first_bytes_of_socket_writes_only(tmp_path):
    """A real process's write, send, writev and sendmsg of a Kafka request
    to a TCP socket: the strace text holds the first HEAD bytes of each (of
    the first iovec), "..." for the rest, and the header names the request.
    The same bytes written to a file and a pipe are not kept."""
    srv, port = _listening()
    reqs = [request(corr) for corr in range(4)]
    total = sum(len(r) + 5 for r in reqs)
    script = f"""
import os, socket
reqs = {reqs!r}
s = socket.create_connection(("127.0.0.1", {port}))
os.write(s.fileno(), reqs[0] + b"tail!")
s.send(reqs[1] + b"tail!")
os.writev(s.fileno(), [reqs[2], b"tail!"])
s.sendmsg([reqs[3], b"tail!"])
r, w = os.pipe()
os.write(w, reqs[0])
with open({str(tmp_path / "file")!r}, "wb", buffering=0) as f:
    f.write(reqs[0])
s.recv(1)
"""

    def peer():
        conn, _ = srv.accept()
        got = b""
        while len(got) < total:
            got += conn.recv(65536)
        conn.send(b"k")
        conn.close()

    try:
        calls = trace(tmp_path, script, peer)
    finally:
        srv.close()
    sent = [r for r in calls if (r["fd_info"] or "").endswith(f"->127.0.0.1:{port}]") and r["ret"]
            and r["syscall"] in ("write", "sendto", "writev", "sendmsg")]
    assert [r["syscall"] for r in sent] == ["write", "sendto", "writev", "sendmsg"], calls
    for corr, (r, req) in enumerate(zip(sent, reqs)):
        assert r["ret"] == len(req) + 5
        assert first_string(r["args"]) == req[:bpfcalls.HEAD] and '"...' in r["args"], r["args"]
        assert request_of_head(re.search(FIRST_STRING, r["args"]).group(1)) == ("Produce", corr, "kdiag-head-client")
    assert f"iov_len={len(reqs[2])}}}, ...], 2" in sent[2]["args"], sent[2]["args"]
    assert f"iov_len={len(reqs[3])}}}, ...], msg_iovlen=2" in sent[3]["args"], sent[3]["args"]
    elsewhere = [r for r in calls if r["syscall"] == "write" and r["ret"] == len(reqs[0])]
    assert sorted((r["fd_info"] or "").split(":")[0] for r in elsewhere) == ["file", "pipe"], elsewhere
    assert all(first_string(r["args"]) == b"" for r in elsewhere), elsewhere


@pytest.mark.parametrize("why", [None, "needs root (loads BPF programs)"])
def test_auto_prefers_it_and_says_why_not(why):
    from kdiag.capture import overhead

    tool, said = overhead.choose("auto", None, {"bpfcalls": why, "bpftrace": None})
    assert tool == ("bpfcalls" if why is None else "bpftrace")
    assert (why or "stops no thread") in said


def test_a_sasl_plain_password_a_socket_write_kept_is_redacted(tmp_path):
    """SaslAuthenticate (PLAIN) requests written to a socket under
    bpfcalls: the bytes it keeps go through the bundle's redaction, which
    takes the password whole, or as much of it as the first HEAD bytes
    show (down to one character after a long client id); the header still
    names the request."""
    from kdiag.bundle import redact

    password = b"Pl4inPw-kept-in-64ab"
    token = b"\0alice\0" + password
    sock = dict(ino=77, mode=0xC000, fam=2, typ=1, proto=6, lport=41550, rport=9093, la=LO, ra=LO)
    records, shown = b"", []
    # client ids that leave all of the password, part, 2 and 1 characters of it in the bytes kept
    for corr, client in enumerate([b"rdkafka", b"kafka-python-producer-1", b"c" * 37, b"c" * 38]):
        rest = struct.pack(">hhih", 36, 1, corr, len(client)) + client + struct.pack(">i", len(token)) + token
        req = struct.pack(">i", len(rest)) + rest
        kept = req[:bpfcalls.HEAD]
        shown.append(kept[kept.index(b"\0alice\0") + 7:])
        records += rec(bpfcalls.KIND_F, code=5, ts=10_000 * (corr + 1), ret=len(req), a=(7, 0, len(req), 0),
                       count=len(req), data=kept, **sock)
    assert [len(s) for s in shown] == [len(password), 16, 2, 1], shown
    (tmp_path / "trace.records").write_bytes(records)
    raw = tmp_path / "raw" / "strace"
    raw.mkdir(parents=True)
    bpfcalls.convert(tmp_path / "trace.records", raw / "strace.txt", 0)
    before = (raw / "strace.txt").read_text()
    assert all(s.decode() in before for s in shown), "the test plants what bpfcalls keeps"
    counts = redact.scrub_tree_patterns(tmp_path / "raw")
    assert counts.get("sasl_plain") == 4, counts
    rows, _ = parse_lines((raw / "strace.txt").read_text().splitlines())
    rows = rows.to_pylist()
    for corr, r in enumerate(rows):
        data = first_string(r["args"])
        assert data.endswith(b"\0alice\0" + redact.REDACTED.encode()), r["args"]
        got = request_of_head(re.search(FIRST_STRING, r["args"]).group(1))
        assert got[:2] == ("SaslAuthenticate", corr), got
    text = (raw / "strace.txt").read_bytes()
    assert b"Pl4" not in text and b"\\x00alice\\x00P" not in text, text


@pytest.mark.parametrize("asked, calls, want", [
    (None, None, "tracepoints"),            # a command, or the probe: not measured
    (None, 500.0, "uprobes"),               # a producer at its usual pace
    (None, 9_000.0, "uprobes"),
    (None, 11_000.0, "tracepoints"),        # uprobes would cost it over 1 % of a core
    (None, 56_000.0, "tracepoints"),        # full speed over TLS (bench/overhead.py)
    ("uprobes", 56_000.0, "uprobes"),
    ("tracepoints", 10.0, "tracepoints"),
    ("auto", 10.0, "uprobes"),
])
def test_auto_takes_uprobes_where_they_cost_the_producer_little(monkeypatch, asked, calls, want):
    monkeypatch.delenv(bpfcalls.RAW_ENV, raising=False)
    if asked is None:
        monkeypatch.delenv(bpfcalls.HOOKS_ENV, raising=False)
    else:
        monkeypatch.setenv(bpfcalls.HOOKS_ENV, asked)
    hooks, why = bpfcalls.choose_hooks(calls)
    assert hooks == want, why
    if calls and asked in (None, "auto"):
        assert f"{calls:.0f} calls/s" in why and "% of a core" in why


def test_the_raw_fallback_asked_for_is_the_tracepoints(monkeypatch):
    monkeypatch.setenv(bpfcalls.RAW_ENV, "1")
    monkeypatch.setenv(bpfcalls.HOOKS_ENV, "auto")
    assert bpfcalls.choose_hooks(10.0)[0] == "tracepoints"
