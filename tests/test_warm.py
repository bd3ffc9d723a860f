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
from conftest import CAPTURES, need, wait_gone

from kdiag.analysis import pipeline
from kdiag.analysis.warm import LOCK_NAME, SOCKET_NAME, Server, WarmUnavailable

NAGLE = [CAPTURES / "nagle_on" / n for n in ("rdkafka.log", "strace.txt", "stats.jsonl")]
NOBODY = 65534


def _private(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    return d


def _server_pid(d: Path) -> int:
    return int((d / LOCK_NAME).read_text().split()[0])


def _start(d: Path, monkeypatch, idle_s: float) -> Server:
    monkeypatch.setenv("KDIAG_WARM_KEY", "test-warm")
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
    mp.setenv("KDIAG_WARM_KEY", "test-warm")
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


class _FakeServer:
    """A server that holds the lock and accepts, then crashes (closes) or hangs."""

    def __init__(self, d: Path, hang: bool) -> None:
        self.lock = open(d / LOCK_NAME, "w")
        import fcntl

        fcntl.flock(self.lock, fcntl.LOCK_EX)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(d / SOCKET_NAME))
        os.chmod(d / SOCKET_NAME, 0o600)
        self.sock.listen(4)
        self.held: list = []
        self.hang = hang
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(1 << 20)
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

    from kdiag.analysis.frames import read_table
    from kdiag.analysis.job import analyze

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
