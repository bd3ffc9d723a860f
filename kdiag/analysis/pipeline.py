"""Raw files -> tables -> findings: the one path that trace and replay share,
so a bundle replayed elsewhere gives the findings it gave on the host."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from kdiag import __version__, progress

if TYPE_CHECKING:
    from kdiag.ingest.parsed import Parsed


def analyse(raw: list[Path], tables_dir: Path, meta: dict | None = None, spark=None,
            base: Path | None = None, warm: bool = False,
            say: Callable[[str], None] | None = None) -> tuple[dict, Parsed]:
    """``warm``: a small input goes to the warm analysis server (started on
    first use, see ``warm``), which runs the same ``job.analyze`` in a JVM
    that is already up; when it cannot, the analysis runs here, after a
    one-line note to ``say``."""
    server = _warm_server(raw, say) if warm and spark is None else None
    shown = progress.current()
    meta = {"kdiag_version": __version__, **(meta or {})}
    findings = parsed = None
    if server is not None:
        from kdiag.analysis.warm import WarmUnavailable

        # The server reads the captures too: its parsers are imported and
        # warm, and this process never imports numpy or pyarrow's compute
        # kernels (0.2-0.4 s of a warm replay of the 30-request bundle).
        try:
            with shown.stage("reading and analysing (warm analysis server)"):
                findings, parsed = server.read_and_analyze(raw, tables_dir, meta, base)
        except WarmUnavailable as e:
            _note(say, f"note: {e}; analysing in this process instead")
            shutil.rmtree(tables_dir, ignore_errors=True)   # what the server wrote before it failed
    if findings is None:
        from kdiag.ingest.tables import parse_paths

        starting = None if spark is not None else start_session(raw)
        parsed = parse_paths(raw, tables_dir, base=base)
        if spark is None:
            with shown.stage("starting Spark"):
                spark = (starting or start_session(raw)).result()
        from kdiag.analysis.job import analyze

        with shown.stage("analysing in Spark"):
            findings = analyze(spark, tables_dir, meta)
    findings["input_notes"] = parsed.notes
    findings["inputs"] = parsed.files
    _unread_kafka_inputs(findings, parsed.files)
    from kdiag.analysis.input_checks import name_inputs

    findings["input_checks"] = name_inputs(findings.get("input_checks") or [], parsed.files)
    return findings, parsed


def _unread_kafka_inputs(findings: dict, files: list[dict]) -> None:
    """An input kdiag could not read but which is about a Kafka client makes
    "nothing to judge" untrue: the verdict is then undecided, and says why."""
    unread = [f for f in files if f.get("about_kafka")]
    if not unread or not findings.get("no_data"):
        return
    findings["no_data"] = False
    findings["undecided"] = True
    findings["confidence"] = "none: an input about a Kafka client is in a form kdiag does not read"
    findings.setdefault("unknowns", []).extend(
        f"{f['path']}: about a Kafka client ({', '.join(f['about_kafka'])}) but in a form kdiag does not read; "
        "give librdkafka's own debug log or statistics JSON (debug=broker,protocol,msg; statistics.interval.ms)"
        for f in unread)


def _note(say, msg: str) -> None:
    if say is not None:
        say(msg)
    else:
        print(f"kdiag: {msg}", file=sys.stderr)


def _warm_server(raw: list[Path], say):
    """The warm server, starting, for a small input in a process without a
    Spark session of its own (one that has one is warm already); else None."""
    from kdiag.analysis.spark import SMALL_RAW_BYTES

    if _raw_bytes(raw) >= SMALL_RAW_BYTES or _has_session():
        return None
    from kdiag.analysis.jvm import java_or_fail
    from kdiag.analysis.warm import Server, WarmUnavailable

    java_or_fail()   # the server could not start either: say what to install

    try:
        server = Server()
        server.start()
        return server
    except (WarmUnavailable, OSError) as e:
        _note(say, f"note: no warm analysis server ({e}); analysing in this process")
        return None


def _has_session() -> bool:
    spark_sql = sys.modules.get("pyspark.sql")
    return spark_sql is not None and spark_sql.SparkSession.getActiveSession() is not None


def _raw_bytes(raw: list[Path]) -> int:
    size = 0
    for p in raw:
        try:
            size += Path(p).stat().st_size
        except OSError:
            pass
    return size


def start_session(raw: list[Path]):
    """The Spark session, started in a thread of its own: the JVM starts
    (seconds) while the captures are parsed. A future of the session."""
    from concurrent.futures import ThreadPoolExecutor

    from kdiag.analysis.spark import SMALL_RAW_BYTES, session

    pool = ThreadPoolExecutor(1, thread_name_prefix="kdiag-spark")
    future = pool.submit(session, small=_raw_bytes(raw) < SMALL_RAW_BYTES)
    pool.shutdown(wait=False)
    return future
