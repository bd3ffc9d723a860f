"""A real Spark standalone cluster on loopback, from the Spark that pyspark
ships, for the fleet's tests and benchmarks: one master and its workers,
each a JVM of its own, stopped (with the executors they started) when the
block ends."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kdiag.deadline import Deadline, wait_until

START_S = 90.0


@dataclass
class Cluster:
    master: str          # spark://127.0.0.1:PORT
    logs: list[Path]
    pids: list[int]      # the master's and the workers' (their executors are their children)


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen, timeout_s: float = START_S) -> re.Match:
    m = wait_until(lambda: re.search(pattern, log.read_text(errors="replace")), timeout_s, 0.2,
                   give_up=lambda: proc.poll() is not None)
    if m:
        return m
    raise RuntimeError(f"{pattern!r} not in {log} (exit {proc.poll()}): {log.read_text(errors='replace')[-2000:]}")


def _stop(procs: list[subprocess.Popen]) -> None:
    # Each started in a session of its own: the group holds the executors
    # a worker started too.
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = Deadline(15)
    for p in procs:
        try:
            p.wait(max(0.1, deadline.remaining_s()))
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


@contextlib.contextmanager
def standalone(work: Path, workers: int = 2, cores: int = 1, memory: str = "1g"):
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           # the REST submission server would take the fixed port 6066
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    work.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []

    def start(name: str, args: list[str]) -> subprocess.Popen:
        log = work / f"{name}.log"
        logs.append(log)
        with open(log, "wb") as out:
            p = subprocess.Popen([str(home / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env, cwd=work, start_new_session=True)
        procs.append(p)
        return p

    try:
        m = start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                             "--webui-port", "0"])
        url = _wait_for(work / "master.log", r"Starting Spark master at (spark://[\d.]+:\d+)", m).group(1)
        for i in range(workers):
            (work / f"worker{i}").mkdir(exist_ok=True)
            start(f"worker{i}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0",
                                 "--webui-port", "0", "--cores", str(cores), "--memory", memory,
                                 "--work-dir", str(work / f"worker{i}"), url])
        for i in range(workers):
            _wait_for(work / f"worker{i}.log", r"Successfully registered with master", procs[i + 1])
        yield Cluster(url, logs, [p.pid for p in procs])
    finally:
        _stop(procs)


@dataclass
class Connect:
    remote: str          # sc://127.0.0.1:PORT
    log: Path
    pid: int


@contextlib.contextmanager
def connect_server(work: Path, master: str = "local[2]"):
    """A Spark Connect server on loopback (the one pyspark ships in its
    jars), whose own application runs on ``master``: what ``kdiag fleet
    --remote`` talks to."""
    import socket
    import sys

    import pyspark

    home = Path(pyspark.__file__).parent
    with socket.socket() as s:   # a free port; the server binds it a moment later
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable}
    work.mkdir(parents=True, exist_ok=True)
    log = work / "connect.log"
    with open(log, "wb") as out:
        p = subprocess.Popen([str(home / "bin" / "spark-submit"), "--master", master,
                              "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                              "--conf", f"spark.connect.grpc.binding.port={port}",
                              "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                              "--conf", "spark.ui.enabled=false", "spark-internal"],
                             stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=work,
                             start_new_session=True)
    try:
        _wait_for(log, r"Spark Connect server started", p)
        yield Connect(f"sc://127.0.0.1:{port}", log, p.pid)
    finally:
        _stop([p])
