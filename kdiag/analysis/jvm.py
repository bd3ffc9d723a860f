"""The JVM that runs Spark in kdiag's own process: found, started with its
output kept out of the user's terminal, and its failures said in one line.

Spark's launcher and JVM write to the terminal before any log setting
applies (``WARNING: Using incubator modules: jdk.incubator.vector``,
``Setting default log level to "WARN".`` and the ``sc.setLogLevel`` hint).
Unless ``--verbose`` (KDIAG_VERBOSE=1), the JVM's output goes to a file
under ``~/.cache/kdiag/logs/`` instead, the newest KEEP_LOGS kept; a JVM
that fails to start is reported with that file's last line and its path.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from kdiag.errors import KdiagError

KEEP_LOGS = 10


class NoJava(KdiagError):
    """No Java runtime to run Spark with."""


class SparkDidNotStart(KdiagError):
    """The JVM exited before Spark's gateway answered."""


def verbose() -> bool:
    return os.environ.get("KDIAG_VERBOSE", "") not in ("", "0")


def java_or_fail() -> Path:
    """The java that Spark's launcher will run (JAVA_HOME first, as
    spark-class does), or NoJava saying what to install."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.exists():
            return java
        raise NoJava(f"JAVA_HOME is {home}, which has no bin/java: point it at a Java 17 or 21 runtime, or unset it")
    found = shutil.which("java")
    if found:
        return Path(found)
    raise NoJava("the analysis runs on Spark, which needs Java 17 or 21, and none was found (JAVA_HOME is unset and "
                 "no java on PATH): install one (Debian/Ubuntu: apt install openjdk-17-jre-headless; macOS: "
                 "brew install openjdk@17) and run again")


def log_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdiag" / "logs"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


def launch(conf):
    """Spark's gateway, started from ``conf`` (a SparkConf holding every
    launch option), its JVM's stderr in a log file unless verbose."""
    from pyspark import SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    java_or_fail()
    if verbose():
        return SparkContext._ensure_initialized(conf=conf)
    log = log_dir() / f"spark-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
    _prune(log.parent)
    with open(log, "ab") as out:
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
        except PySparkRuntimeError as e:
            raise SparkDidNotStart(f"Spark did not start: {_last_line(log) or e}; its output is in {log}") from None
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)
    return None


def _last_line(log: Path) -> str | None:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    # The JVM's own reason comes before the launcher script's complaint
    # ("spark-class: line 97: CMD: bad array subscript") and Java's stack.
    real = [ln for ln in lines if not ln.startswith(("Traceback", "File ", "at ")) and "/spark-class:" not in ln]
    return real[-1][:300] if real else None


def _prune(logs: Path) -> None:
    old = sorted(logs.glob("spark-*.log"), key=lambda p: p.stat().st_mtime)[:-(KEEP_LOGS - 1) or None]
    for p in old:
        p.unlink(missing_ok=True)
