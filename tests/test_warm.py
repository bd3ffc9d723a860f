"""The warm analysis server: the same findings as in-process analysis, a
fallback to in-process analysis whenever it cannot answer, an idle stop,
and only a private socket used. Each server here lives in a directory of
this module's own and is stopped before the module ends."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import psutil
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conftest import CAPTURES, need, wait_gone
from kdiag.analysis import pipeline
from kdiag.analysis.warm import LOCK_NAME, MAX_CONNECTIONS, MAX_REQUEST_BYTES, SOCKET_NAME, Server, WarmUnavailable

NAGLE = [CAPTURES / "nagle_on" / n for n in ("rdkafka.log", "strace.txt", "stats.jsonl")]
NOBODY = 65534
KEY = "test-warm"
# The module's server reads a request for this long (KDIAG_WARM_READ_S):
# longer than a warm analysis takes, short for a test to wait out.
READ_S = 8.0


def _private(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    return d


def _server_pid(d: Path) -> int:
    return int((d / LOCK_NAME).read_text().split()[0])


def _start(d: Path, monkeypatch, idle_s: float) -> Server:
    monkeypatch.setenv("KDIAG_WARM_KEY", KEY)
    monkeypatch.setenv("KDIAG_WARM_DIR", str(d))
    monkeypatch.setenv("KDIAG_WARM_IDLE_S", str(idle_s))
    server = Server()
    server.start()
    assert server.call({"op": "ping", "key": server.key}, 120)["ok"]
    return server


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    need("java")
    mp = pytest.MonkeyPatch()
    # Others may edit kdiag's files while this runs: the server must stay
    # the one this module started.
    mp.setenv("KDIAG_WARM_KEY", KEY)
    mp.setenv("KDIAG_WARM_READ_S", str(READ_S))
    d = _private(tmp_path_factory.mktemp("warm") / "srv")
    server = _start(d, mp, 600)
    pid = _server_pid(d)
    yield server
    server.stop()
    mp.undo()
    assert wait_gone([pid], 15) == []


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    from kdiag.ingest.tables import parse_paths

    out = tmp_path_factory.mktemp("tables") / "t"
    parse_paths(NAGLE, out)
    return out


def _same(a: dict, b: dict) -> None:
    a, b = json.loads(json.dumps(a, default=str)), json.loads(json.dumps(b, default=str))
    assert a["verdict"] == b["verdict"] == "nagle_delayed_ack"
    assert [f["cause"] for f in a["findings"]] == [f["cause"] for f in b["findings"]]
    assert a["summary"] == b["summary"]
    assert a == b


def test_warm_findings_are_the_in_process_findings(warm, tables, spark):
    from kdiag.analysis.job import analyze

    meta = {"kdiag_version": "t", "librdkafka_version": "2.16.0"}
    _same(warm.analyze(tables, meta), analyze(spark, tables, meta))


def test_the_server_reads_the_captures_as_this_process_would(warm, tables, spark, tmp_path):
    """A warm replay hands the server the captures: it parses them into the
    client's tables directory, then analyses; what it reports of the
    parse is what the client's own parse would have said."""
    from kdiag.analysis.job import analyze
    from kdiag.ingest.tables import parse_paths

    meta = {"kdiag_version": "t", "librdkafka_version": "2.16.0"}
    findings, parsed = warm.read_and_analyze(NAGLE, tmp_path / "t", meta)
    here = parse_paths(NAGLE, tmp_path / "here")
    assert (parsed.files, parsed.notes, parsed.rows) == (here.files, here.notes, here.rows)
    assert {k: p.name for k, p in parsed.paths.items()} == {k: p.name for k, p in here.paths.items()}
    assert all(p.parent == (tmp_path / "t").resolve() and p.is_file() for p in parsed.paths.values())
    _same(findings, analyze(spark, tables, meta))


def test_replay_reuses_the_running_server(warm, tmp_path):
    env = {**os.environ, "KDIAG_WARM": "1", "KDIAG_WARM_DIR": str(warm.dir), "KDIAG_WARM_START_S": "5"}
    pid = _server_pid(warm.dir)
    run = subprocess.run([sys.executable, "-m", "kdiag", "replay", "--json", *map(str, NAGLE)], env=env,
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["verdict"] == "nagle_delayed_ack"
    # Spark's start-up lines are the server's: a warm replay prints nothing.
    assert "note:" not in run.stderr and "log level" not in run.stderr
    assert _server_pid(warm.dir) == pid


# Runs a warm replay in a child and lists the heavy modules it imported.
_CLIENT = r"""
import sys
from kdiag.cli import main
rc = main(["replay", "--json", *sys.argv[1:]])
print("HEAVY " + ",".join(sorted(m for m in ("pyarrow", "numpy", "pandas", "pyspark") if m in sys.modules)),
      file=sys.stderr)
sys.exit(rc)
"""


def test_a_warm_replays_client_imports_neither_arrow_nor_numpy(warm, tmp_path):
    # The server reads the captures and analyses them: the client that only
    # sends their paths and prints the answer would otherwise spend 0.3 s of
    # a 20-line excerpt's warm replay importing pyarrow, numpy and pandas.
    env = {**os.environ, "KDIAG_WARM": "1", "KDIAG_WARM_DIR": str(warm.dir), "KDIAG_WARM_START_S": "5"}
    run = subprocess.run([sys.executable, "-c", _CLIENT, *map(str, NAGLE)], env=env, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["verdict"] == "nagle_delayed_ack"
    assert "note:" not in run.stderr
    heavy = [ln for ln in run.stderr.splitlines() if ln.startswith("HEAVY ")]
    assert heavy == ["HEAVY "], run.stderr[-2000:]


BUNDLE = Path(__file__).parent.parent / "fixtures" / "bundles" / "nagle_on.tar.gz"


def _tampered(tmp_path: Path) -> Path:
    """The fixture bundle with one byte of its log changed after sealing."""
    import io
    import tarfile

    out = tmp_path / "tampered.tar.gz"
    with tarfile.open(BUNDLE) as src, tarfile.open(out, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name == "raw/rdkafka_log/rdkafka.log":
                data = b"X" + data[1:]
            dst.addfile(m, None if data is None else io.BytesIO(data))
    return out


def test_the_server_verifies_a_bundle_as_this_process_would(warm, tmp_path):
    """The same Verification, problem by problem, for a sealed bundle, a
    tampered one and a file that is none; and the raw/ folders the
    analysis reads, as this process's registry has them."""
    import dataclasses

    from kdiag.bundle import archive as bundle
    from kdiag.parsers.registry import bundle_dirs

    (tmp_path / "none.txt").write_text("not a bundle\n")
    limits = bundle.Limits.resolve()
    for path in (BUNDLE, _tampered(tmp_path), tmp_path / "none.txt"):
        here, there = bundle.verify(path, limits), warm.verify(path, limits)
        assert there.path == path and there.to_dict() == here.to_dict(), path
        assert (there.ok, there.state) == (here.ok, here.state)
    assert not warm.verify(_tampered(tmp_path), limits).ok
    assert warm.sources == bundle_dirs()
    # Caps are the client's: one the fixture passes is refused there too.
    small = dataclasses.replace(limits, members=3)
    assert warm.verify(BUNDLE, small).to_dict() == bundle.verify(BUNDLE, small).to_dict()
    assert not warm.verify(BUNDLE, small).ok


@pytest.mark.parametrize("request_", [
    {"op": "verify", "key": KEY, "path": "relative.tar.gz", "limits": {}},
    {"op": "verify", "key": KEY, "path": "/x.tar.gz", "limits": {"members": 3}},
    {"op": "verify", "key": KEY, "path": "/x.tar.gz",
     "limits": {"unpacked_bytes": -1, "members": 3, "manifest_bytes": 1, "manifest_depth": 1}},
    {"op": "verify", "key": KEY, "path": "/x.tar.gz",
     "limits": {"unpacked_bytes": True, "members": 3, "manifest_bytes": 1, "manifest_depth": 1}},
])
def test_a_malformed_verify_request_is_refused(warm, request_):
    answer = warm.call(request_, 30)
    assert answer["ok"] is False and "bad request" in answer["error"]
    _serves(warm)


def test_a_client_verifies_itself_when_no_server_serves(tmp_path, monkeypatch):
    """No server in the directory: the verification is this process's, at
    once, and no server is started for it."""
    from kdiag.bundle import archive as bundle
    from kdiag.replay import _Verifier

    d = tmp_path / "none"
    monkeypatch.setenv("KDIAG_WARM_DIR", str(d))
    monkeypatch.setenv("KDIAG_WARM", "1")
    verify = _Verifier([BUNDLE], no_warm=False)
    t0 = time.monotonic()
    got = verify(BUNDLE, bundle.Limits.resolve())
    assert got.ok and verify.sources is None and time.monotonic() - t0 < 30
    # Nor its directory made (a replay without Java must leave none: test_quiet).
    assert not d.exists()
    _private(d)
    assert verify(BUNDLE, bundle.Limits.resolve()).ok and verify.sources is None
    assert not (d / LOCK_NAME).exists()


def test_a_warm_bundle_replays_client_imports_neither_arrow_nor_numpy(warm, tmp_path):
    # The bundle is verified by the server, which also names the raw/
    # folders the analysis reads; the report's path table is drawn from the
    # findings' rows. The client imports none of the parsers.
    env = {**os.environ, "KDIAG_WARM": "1", "KDIAG_WARM_DIR": str(warm.dir), "KDIAG_WARM_START_S": "5"}
    run = subprocess.run([sys.executable, "-c", _CLIENT.replace('"--json", ', ""), str(BUNDLE)], env=env,
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "VERDICT: nagle_delayed_ack" in run.stdout and "HOP" in run.stdout
    assert "note:" not in run.stderr
    heavy = [ln for ln in run.stderr.splitlines() if ln.startswith("HEAVY ")]
    assert heavy == ["HEAVY "], run.stderr[-2000:]


def test_the_server_practises_after_answering_and_gives_way_to_a_request(tmp_path, monkeypatch, spark):
    """After an answer the server analyses a copy of the tables again, so
    its JIT is warm for the next replay; a request that comes meanwhile
    ends the practice without waiting for it, is answered as always, and
    the practice goes on after it until the server has run its number of
    analyses."""
    from kdiag.analysis.job import analyze
    from kdiag.ingest.tables import parse_paths

    need("java")
    monkeypatch.setenv("KDIAG_WARM_PRACTICE", "4")
    d = _private(tmp_path / "srv")
    server = _start(d, monkeypatch, 600)
    ping = lambda: server.call({"op": "ping", "key": server.key}, 30)  # noqa: E731
    try:
        meta = {"kdiag_version": "t", "librdkafka_version": "2.16.0"}
        first = server.read_and_analyze(NAGLE, tmp_path / "t1", meta)[0]
        # The client removes its tables once answered: the practice has its own copy.
        import shutil

        shutil.rmtree(tmp_path / "t1")
        assert ping()["practising"] and [c.name for c in d.glob("practice-*/rdkafka_events.parquet")]
        parse_paths(NAGLE, tmp_path / "t2")
        second = server.analyze(tmp_path / "t2", meta)
        assert ping()["practice"]["interrupted"] == 1
        _same(first, second)
        _same(second, analyze(spark, tmp_path / "t2", meta))
        deadline = time.monotonic() + 120
        while ping()["practising"] and time.monotonic() < deadline:
            time.sleep(0.2)
        # 4 analyses in all: the two requests and two of practice.
        assert ping()["practice"] == {"left": 0, "ran": 2, "interrupted": 1}
        assert not list(d.glob("practice-*"))
        assert "practice stopped" not in (d / "server.log").read_text()
    finally:
        server.stop()


def _connect(server: Server) -> socket.socket:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(str(server.sock_path))   # blocking: waits for room in the listen backlog, as the client does
    c.settimeout(30)
    return c


def _send(server: Server, payload: bytes) -> dict | None:
    """The server's answer to a connection that sends ``payload`` and
    half-closes; None if it closes without one."""
    with _connect(server) as c:
        c.sendall(payload)
        c.shutdown(socket.SHUT_WR)
        line = c.makefile("rb").readline()
    return json.loads(line) if line else None


def _serves(server: Server) -> None:
    assert server.call({"op": "ping", "key": KEY}, 30)["ok"]


def _closed(c: socket.socket) -> bool:
    try:
        return c.recv(1) == b""
    except ConnectionResetError:   # the server left bytes unread: the peer sees a reset
        return True


def _nest(depth: int):
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


_ANALYZE = {"op": "analyze", "key": KEY}
MALFORMED = {
    "array": b"[]", "null": b"null", "number": b"7", "string": b'"ping"',
    "nested arrays": b"[" * 100_000 + b"]" * 100_000,
    "nested objects": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "nesting in meta": {**_ANALYZE, "tables": "/nonexistent", "meta": _nest(40)},
    "not JSON": b"ping", "empty line": b"", "not UTF-8": b'{"op": "ping", "key": "\xff\xfe"}',
    "a number past int's digits": b'{"op": "ping", "key": "test-warm", "n": ' + b"1" * 5000 + b"}",
    "empty object": {}, "no op": {"key": KEY}, "op not a string": {"op": ["ping"], "key": KEY},
    "unknown op": {"op": "shutdown", "key": KEY}, "no key": {"op": "ping"},
    "key not a string": {"op": "ping", "key": 1},
    "no tables": _ANALYZE, "tables a number": {**_ANALYZE, "tables": 5},
    "tables relative": {**_ANALYZE, "tables": "t"}, "tables with a NUL": {**_ANALYZE, "tables": "/tmp/t\0x"},
    "meta an array": {**_ANALYZE, "tables": "/nonexistent", "meta": []},
    "meta null": {**_ANALYZE, "tables": "/nonexistent", "meta": None},
    "raw a string": {**_ANALYZE, "tables": "/nonexistent", "raw": "/x"},
    "raw of numbers": {**_ANALYZE, "tables": "/nonexistent", "raw": [1]},
    "base a number": {**_ANALYZE, "tables": "/nonexistent", "base": 1},
}


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_is_answered_with_an_error_and_the_server_serves_on(warm, payload):
    line = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    answer = _send(warm, line + b"\n")
    assert answer is not None and answer["ok"] is False and "stale" not in answer
    assert answer["error"].startswith("bad request: ") and "\n" not in answer["error"]
    _serves(warm)


def test_a_request_cut_off_by_a_half_close_is_answered(warm):
    """A client that half-closes after its request, with no newline, is
    answered; one that connects and closes at once costs nothing."""
    assert _send(warm, json.dumps({"op": "ping", "key": KEY}).encode())["ok"]
    _connect(warm).close()
    _serves(warm)


def test_a_request_over_the_cap_is_answered_without_reading_it_all(warm):
    with _connect(warm) as c:
        sent: list = []

        def flood():
            try:
                c.sendall(b" " * (MAX_REQUEST_BYTES + (4 << 20)))
            except OSError as e:
                sent.append(e)

        t = threading.Thread(target=flood, daemon=True)
        t.start()
        answer = json.loads(c.makefile("rb").readline())
        t.join(30)
    assert answer == {"ok": False, "error": f"the request is over {MAX_REQUEST_BYTES} bytes"}
    assert sent, "the server read the whole request"
    _serves(warm)
    # The client does not send what the server would refuse.
    with pytest.raises(WarmUnavailable, match="over its"):
        warm.call({"op": "analyze", "key": KEY, "meta": {"x": "y" * MAX_REQUEST_BYTES}}, 5)


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
                     lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
                     max_leaves=16)
_NOT_TEXT = _JSON.filter(lambda v: not isinstance(v, str))
# Request shapes with every field of every type but a string where the
# server takes a path (that would be a real analysis), and no other key (a
# server whose key is not the client's stops, by design).
_SHAPES = st.fixed_dictionaries({}, optional={
    "op": st.sampled_from(["ping", "analyze", "stop!"]) | _NOT_TEXT, "key": st.just(KEY) | _NOT_TEXT,
    "tables": _NOT_TEXT, "meta": _JSON, "raw": _JSON, "base": _JSON})
_LINES = st.one_of(_SHAPES.map(lambda r: json.dumps(r).encode()), _JSON.map(lambda v: json.dumps(v).encode()),
                   st.binary(max_size=64), st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
                   st.integers(1, 3000).map(lambda n: b"[" * n))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(line=_LINES)
def test_fuzzed_requests_are_answered_and_the_server_serves_on(warm, line):
    line = line.replace(b"\n", b"")
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):
        request = None
    if isinstance(request, dict):   # what stops a server by design
        assume(request.get("op") != "stop")
        assume(not isinstance(request.get("key"), str) or request["key"] == KEY)
    well_formed = isinstance(request, dict) and request.get("op") == "ping" and request.get("key") == KEY
    answer = _send(warm, line + b"\n")
    assert answer is not None and answer["ok"] is well_formed, (line[:200], answer)
    if not well_formed:
        assert answer["error"] and "stale" not in answer
    _serves(warm)


def test_after_the_malformed_ones_a_real_request_is_answered(warm, tables):
    """Runs after the malformed and fuzzed requests: the same server gives
    the real analysis, also to a client that left before its answer."""
    with _connect(warm) as c:
        c.sendall(json.dumps({"op": "analyze", "key": KEY, "tables": str(tables), "meta": {}}).encode() + b"\n")
    assert warm.analyze(tables, {})["verdict"] == "nagle_delayed_ack"


def test_a_silent_or_trickling_connection_holds_only_itself(warm, tables):
    """Connections that send nothing, or a byte now and then, hold neither a
    ping nor a real analysis; each is answered and closed at its read
    deadline. (The trickle goes on for 90 s unless the server ends it:
    a server that read connections one at a time was held that long.)"""
    silent, trickling = _connect(warm), _connect(warm)
    start = time.monotonic()
    stop = threading.Event()
    ended: dict = {}

    def trickle():
        try:
            while not stop.wait(0.2) and time.monotonic() < start + 90:
                trickling.sendall(b" ")
        except OSError:
            pass

    def wait_end(name, c):
        c.settimeout(90)
        line = c.makefile("rb").readline()
        ended[name] = (time.monotonic() - start, json.loads(line) if line else None, _closed(c))

    threads = [threading.Thread(target=trickle, daemon=True)]
    threads += [threading.Thread(target=wait_end, args=a, daemon=True) for a in (("silent", silent),
                                                                                ("trickling", trickling))]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)   # both accepted, the trickle under way
        _serves(warm)
        ping_s = time.monotonic() - start
        findings = warm.analyze(tables, {})
        analysed_s = time.monotonic() - start
    finally:
        stop.set()
        for t in threads:
            t.join(90)
        silent.close()
        trickling.close()
    assert findings["verdict"] == "nagle_delayed_ack"
    # A warm analysis takes seconds; 30 on a loaded 2-core machine, cold.
    assert ping_s < 3 and analysed_s < 60, (ping_s, analysed_s)
    for name in ("silent", "trickling"):
        at_s, answer, closed = ended[name]
        assert answer == {"ok": False, "error": f"no request within {READ_S:g} s"} and closed, name
        assert READ_S - 0.5 < at_s < READ_S + 5, (name, at_s)
    _serves(warm)


def test_connections_past_the_cap_are_told_the_server_is_busy(warm):
    held = [_connect(warm) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.3)   # all accepted
        with _connect(warm) as extra:
            answer = json.loads(extra.makefile("rb").readline())
        assert answer == {"ok": False, "error": f"the analysis server is busy ({MAX_CONNECTIONS} connections at once)"}
    finally:
        for c in held:
            c.close()
    deadline = time.monotonic() + 10
    while True:   # the held connections' threads end as they see them closed
        answer = warm.call({"op": "ping", "key": KEY}, 30)
        if answer["ok"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert answer["ok"], answer


class _FakeServer:
    """A server that holds the lock and accepts, then crashes (closes), hangs
    or sends ``reply``."""

    def __init__(self, d: Path, hang: bool, reply: bytes = b"") -> None:
        self.lock = open(d / LOCK_NAME, "w")
        import fcntl

        fcntl.flock(self.lock, fcntl.LOCK_EX)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(d / SOCKET_NAME))
        os.chmod(d / SOCKET_NAME, 0o600)
        self.sock.listen(4)
        self.held: list = []
        self.hang, self.reply = hang, reply
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(1 << 20)
            conn.sendall(self.reply)
            if self.hang:
                self.held.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()
        self.lock.close()


def _analyse_here(monkeypatch, spark, d: Path, tmp_path: Path) -> tuple[dict, list[str]]:
    """pipeline.analyse with warm on, as a process without a session of its
    own would run it, its in-process fallback on the test's session."""
    monkeypatch.setenv("KDIAG_WARM_DIR", str(d))
    monkeypatch.setenv("KDIAG_WARM_TIMEOUT_S", "1")
    monkeypatch.setattr(pipeline, "_has_session", lambda: False)
    done: Future = Future()
    done.set_result(spark)
    monkeypatch.setattr(pipeline, "start_session", lambda raw: done)
    notes: list[str] = []
    findings, _ = pipeline.analyse(NAGLE, tmp_path / "tables", warm=True, say=notes.append)
    return findings, notes


@pytest.mark.parametrize("hang", [False, True], ids=["crashed", "hung"])
def test_a_server_that_cannot_answer_falls_back_to_in_process(spark, tmp_path, monkeypatch, hang):
    d = _private(tmp_path / "srv")
    fake = _FakeServer(d, hang)
    try:
        findings, notes = _analyse_here(monkeypatch, spark, d, tmp_path)
    finally:
        fake.close()
    assert findings["verdict"] == "nagle_delayed_ack"
    assert len(notes) == 1 and "analysing in this process" in notes[0]
    assert ("no answer within 1 s" if hang else "closed the connection") in notes[0]


@pytest.mark.parametrize("reply, said", [
    (b"[]\n", "the analysis server's answer is not a JSON object"),
    (b"[" * 100_000 + b"\n", "the analysis server's answer is not a JSON object"),
    (b'{"ok": false, "error": "bad \\u001b]8;;http://x\\u0007line"}\n', "bad \\x1b]8;;http://x\\x07line")],
    ids=["array", "deep", "escapes in the error"])
def test_an_answer_that_is_not_a_kdiag_servers_is_refused_in_one_line(tmp_path, monkeypatch, reply, said):
    d = _private(tmp_path / "srv")
    fake = _FakeServer(d, False, reply)
    monkeypatch.setenv("KDIAG_WARM_DIR", str(d))
    try:
        with pytest.raises(WarmUnavailable) as e:
            Server().analyze(tmp_path, {})
    finally:
        fake.close()
    assert str(e.value) == said


@pytest.mark.parametrize("how", ["socket owned by nobody", "socket open to others", "directory owned by nobody"])
def test_a_socket_that_is_not_private_is_refused(spark, tmp_path, monkeypatch, how):
    d = _private(tmp_path / "srv")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(d / SOCKET_NAME))
    s.listen(1)
    os.chmod(d / SOCKET_NAME, 0o600)
    if how == "socket owned by nobody":
        os.chown(d / SOCKET_NAME, NOBODY, NOBODY)
    elif how == "socket open to others":
        os.chmod(d / SOCKET_NAME, 0o666)
    else:
        os.chown(d, NOBODY, NOBODY)
    try:
        monkeypatch.setenv("KDIAG_WARM_DIR", str(d))
        monkeypatch.setenv("KDIAG_WARM_TIMEOUT_S", "1")
        with pytest.raises(WarmUnavailable, match="owned by uid 65534" if "nobody" in how else "open to others"):
            Server().analyze(tmp_path, {})
        findings, notes = _analyse_here(monkeypatch, spark, d, tmp_path)
    finally:
        s.close()
    assert findings["verdict"] == "nagle_delayed_ack"
    assert len(notes) == 1 and "not used" in notes[0] and "analysing in this process" in notes[0]
    # Nothing was started in a directory that was refused.
    assert not (d / LOCK_NAME).exists()


def test_a_server_killed_mid_request_fails_the_request_and_its_jvm_goes(warm, tables):
    pid = _server_pid(warm.dir)
    jvms = [c.pid for c in psutil.Process(pid).children(recursive=True) if "java" in c.name()]
    assert jvms
    outcome: list = []

    def ask():
        try:
            outcome.append(warm.analyze(tables, {}))
        except WarmUnavailable as e:
            outcome.append(e)

    asking = threading.Thread(target=ask)
    asking.start()
    time.sleep(0.3)   # the request is in; a warm analysis takes over a second
    os.kill(pid, signal.SIGKILL)
    asking.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], WarmUnavailable), outcome
    assert wait_gone([pid] + jvms, 20) == []


def test_an_idle_server_stops_by_itself(tmp_path, monkeypatch):
    need("java")
    d = _private(tmp_path / "srv")
    server = _start(d, monkeypatch, 1)
    pid = _server_pid(d)
    jvms = [c.pid for c in psutil.Process(pid).children(recursive=True) if "java" in c.name()]
    try:
        assert wait_gone([pid] + jvms, 30) == []
    finally:
        server.stop()
    assert not (d / SOCKET_NAME).exists()


def _jobs(spark, action) -> int:
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup())
    action()
    return len(set(tracker.getJobIdsForGroup()) - before)


def test_a_small_table_is_read_into_the_plan_and_judged_the_same(spark, tables, monkeypatch):
    """Small tables reach Spark as rows in the plan: a filter and first()
    over them run no Spark job, and the findings are those of the Parquet
    scan."""
    from pyspark.sql import functions as F

    from kdiag.analysis.job import analyze
    from kdiag.analysis.spark_plumbing import read_table

    events = read_table(spark, tables, "rdkafka_events")
    assert _jobs(spark, lambda: events.filter(F.col("event") == "init").first()) == 0
    local = analyze(spark, tables, {})
    monkeypatch.setenv("KDIAG_LOCAL_TABLE_BYTES", "0")
    scanned = read_table(spark, tables, "rdkafka_events")
    assert _jobs(spark, lambda: scanned.filter(F.col("event") == "init").first()) == 1
    _same(local, analyze(spark, tables, {}))


@pytest.mark.parametrize("argv, env, warm", [([], "1", True), (["--no-warm"], "1", False), ([], "0", False)])
def test_replay_asks_for_the_warm_server_unless_told_not_to(monkeypatch, tmp_path, argv, env, warm):
    import io

    from kdiag.cli import Environment, main

    asked: list[dict] = []

    def analyse(raw, tables_dir, meta=None, **kw):
        asked.append(kw)
        return {"verdict": None, "no_data": False}, None

    monkeypatch.setenv("KDIAG_WARM", env)
    monkeypatch.setattr("kdiag.analysis.pipeline.analyse", analyse)
    out, err = io.StringIO(), io.StringIO()
    assert main(["replay", "--json", *argv, str(NAGLE[0])], Environment(stdout=out, stderr=err)) == 0
    assert bool(asked[0].get("warm")) is warm
