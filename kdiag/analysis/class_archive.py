"""The class archive: a CDS archive (JDK 13+, -XX:ArchiveClassesAtExit) of
the classes a short Spark run loads. A small run's JVM maps it instead of
loading and verifying those classes one by one, which halves the session's
start (2 cores: 4.9-5.2 -> 2.4-2.7 s) and nearly halves a small replay's
cold start (the 20-line excerpt, 2026-11-30: 6.6-7.7 s with it, 11.3-12.8 s
without).

Recording one slows the run that records it (2 cores: a 200-request replay
20 -> 28 s to the verdict, then 14 s more to write 170 MB), so no run a user
waits for does. It is recorded

- by setup (``python -m kdiag.analysis.class_archive``), from a replay of
  the fixture capture a source tree has;
- by the warm server, when there is none (an installed kdiag has no
  fixtures): after its first answer, a child at the lowest CPU priority
  analyses a copy of that request's tables and records
  (``warm.record_archive_later``).

The recording JVM is stopped at its Python's exit and waited for, then the
archive is renamed into place, so no run ever maps a half-written one.
``KDIAG_SPARK_CDS=0``: no archive at all. A JVM that finds an archive it
cannot use (-Xshare:auto, the default) runs without it; its CDS messages are
switched off, as they would otherwise land on stdout."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from kdiag import settings

PREFIX = "spark-classes-"
# A recording that has not ended by then stops (its copy of the tables
# removed, its JVM stopped); one killed leaves a temporary archive, which the
# next recording removes.
RECORD_TIMEOUT_S = 600
# The warm server records only while the cache's filesystem keeps this
# much free after the archive (about 170 MB).
MIN_FREE_BYTES = 2 << 30
# Held by the recording under way in the cache (one at a time).
LOCK_NAME = f"{PREFIX}recording.lock"


class Archive:
    """The archive of this Java and these jars, at ``path``: mapped by a
    small run's JVM when it exists; ``writing``, recorded by it."""

    def __init__(self, path: Path, write: bool) -> None:
        self.path = path
        self.writing = write and not path.exists()
        self.temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")

    def java_options(self) -> list[str]:
        if self.writing:
            use = f"-XX:ArchiveClassesAtExit={self.temp}"
        elif self.path.exists():
            use = f"-XX:SharedArchiveFile={self.path}"
        else:
            return []
        return [use, "-Xlog:cds*=off", "-Xlog:class+path=off"]

    def seal(self, spark) -> None:
        """At the recording run's exit: stops its JVM, which writes the
        archive as it exits, and moves the archive into place."""
        from pyspark import SparkContext

        try:
            gateway = SparkContext._gateway
            proc = getattr(gateway, "proc", None)
            spark.stop()
            if proc is None:
                return
            # The JVM exits when its stdin closes, and writes the archive then.
            proc.stdin.close()
            proc.wait(timeout=60)
            if self.temp.exists() and self.temp.stat().st_size and not self.path.exists():
                self.temp.replace(self.path)
                drop_replaced(self.path)
        except Exception:  # noqa: BLE001 - a cache: without it the next run just starts slower
            pass
        finally:
            self.temp.unlink(missing_ok=True)


def current() -> Archive | None:
    """This Java's and these jars' archive (it may not exist yet); None
    with KDIAG_SPARK_CDS=0, or no Java or no Spark jars to name one by."""
    mode = settings.get("KDIAG_SPARK_CDS")
    if mode == "0":
        return None
    try:
        import pyspark

        jars = Path(pyspark.__file__).parent / "jars"
        from kdiag.analysis.jvm import NoJava, cache_dir, java_or_fail

        try:
            java = java_or_fail().resolve()
        except NoJava:
            return None
        if not jars.is_dir():
            return None
        return Archive(cache_dir() / name(pyspark.__version__, jars, java), write=mode == "write")
    except OSError:
        return None


def name(version: str, jars: Path, java: Path) -> str:
    """An archive's file name: where its jars are, then what they are. The
    JVM maps an archive only if every jar on its class path has the size
    and modification time it had when the archive was written, and
    otherwise runs without it, silently (its CDS messages are off). So both
    are in the name: a pyspark reinstalled at the same version (same jars,
    new times) gets a new archive, where a name without the times kept
    naming one the JVM refused (measured: one jar touched, 13,261 classes
    from the archive -> 0)."""
    where = hashlib.sha256(f"{jars}".encode()).hexdigest()[:8]
    h = hashlib.sha256(f"{version}|{java}|{java.stat().st_mtime_ns}".encode())
    for jar in sorted(jars.iterdir()):
        st = jar.stat()
        h.update(f"{jar.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return f"{PREFIX}{where}-{h.hexdigest()[:16]}.jsa"


def drop_replaced(kept: Path) -> None:
    """Removes the archives written before ``kept`` for the same jars'
    place (about 170 MB each), which no JVM will map again, and those named
    before names held the place; another place's (another environment's
    pyspark) are its own. A JVM mapping one right now keeps it readable
    until it exits."""
    where = kept.name[len(PREFIX):].split("-", 1)[0]
    for old in kept.parent.glob(f"{PREFIX}*.jsa"):
        named = old.name[len(PREFIX):-len(".jsa")]
        if old != kept and ("-" not in named or named.startswith(f"{where}-")):
            old.unlink(missing_ok=True)


def drop_dead_temps(cache: Path) -> None:
    """Half-written archives of recordings that were killed (``.PID.tmp``)."""
    for temp in cache.glob(f"{PREFIX}*.jsa.*.tmp"):
        pid = temp.name.rsplit(".", 2)[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            temp.unlink(missing_ok=True)


def build(capture: Path | None = None) -> Path | None:
    """Setup's recording: a replay of ``capture`` (default: the fixture
    capture of a source tree) whose JVM records the classes it loads. Takes
    about a minute, once per Java and Spark. Returns the archive, or None
    when it could not be written."""
    archive = current()
    if archive is None:
        return None
    if archive.path.exists():
        return archive.path
    capture = capture or Path(__file__).resolve().parents[2] / "fixtures" / "captures" / "nagle_on"
    if not capture.exists():
        return None
    # In a process of its own, not the warm server: the JVM that records
    # must be the one stopped and waited for at this run's exit.
    env = {**os.environ, "KDIAG_SPARK_CDS": "write", "KDIAG_WARM": "0"}
    subprocess.run([sys.executable, "-m", "kdiag", "replay", str(capture)], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=RECORD_TIMEOUT_S, check=False)
    return archive.path if archive.path.exists() else None


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kdiag.analysis.class_archive",
                                 description="Write the class archive small Spark runs start from.")
    ap.add_argument("capture", nargs="?", type=Path, help="the capture to record with (default: the fixture's)")
    a = ap.parse_args(argv)
    made = build(a.capture)
    print(made or "no class archive: no Java, no Spark jars or no capture to record it with")
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main())
