"""The Spark session: local mode by default, whatever spark-submit gave
when run on a cluster."""
from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

from kdiag import settings

LOG4J = Path(__file__).with_name("log4j2.properties")


# Below this much Parquet, the analysis is a few dozen Spark jobs over
# kilobytes: their cost is the JVM warming up and planning, not the data.
SMALL_INPUT_BYTES = 16 << 20
# Raw captures that make about that much Parquet (text is ~8x its tables).
SMALL_RAW_BYTES = 128 << 20
BIG_JVM = ["-XX:+UseParallelGC"]
BIG_MEMORY_FRACTION = "0.8"


def session(app: str = "kdiag", small: bool = False, master: str | None = None):
    """``small``: for an input known to be small. The JVM then compiles with
    C1 only: a JVM that lives seconds is gone before C2's code pays for its
    compiling. Measured on a 100-request capture, 2 cores: session start
    6.7 -> 4.6 s, first analysis 24 -> 16 s. It also maps the classes it
    loads from an archive when there is one (``class_archive``). A big
    input wants C2, and a heap for its sorts and cached requests (local
    mode: the driver's heap is the executors')."""
    # Loopback keeps local mode off the network; the executors' Python must
    # be this interpreter or they cannot import what the driver pickles.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    java = [f"-Dlog4j2.configurationFile={LOG4J}"]
    archive = None
    options = {"spark.app.name": app}
    # Under spark-submit the JVM already runs (its gateway port is in the
    # environment) with the master the user gave it: keep that.
    launching = not os.environ.get("PYSPARK_GATEWAY_PORT")
    if launching:
        from kdiag.analysis.jvm import java_or_fail

        java_or_fail()   # first: it may set JAVA_HOME, which the class archive is named by
        options["spark.master"] = master or settings.get("KDIAG_SPARK_MASTER")
        options["spark.driver.memory"] = settings.get("KDIAG_SPARK_MEMORY") or ("1g" if small else _big_heap())
        # C1 alone gets a 48 MB code cache, which a session that runs many
        # analyses (the warm server, the tests) fills: its sweeper and
        # compiler then churn (2 cores, the 30-request bundle, the 5
        # analyses after 8: 3.8 -> 2.3 s each). A big input is batch work,
        # where the collector's throughput counts and its pauses do not: at
        # 1e7 requests (2 cores, 5 GB heap) the analysis took 166.3 s with
        # the parallel collector against 186.2 s with G1, Java's default
        # (bench/RESULTS.md).
        tuned = ["-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m"] if small else BIG_JVM
        java += tuned
        # A cluster's executors run the tasks: tuned as the driver is (the
        # class archive and the log4j file are paths on this machine, not
        # theirs).
        if not options["spark.master"].startswith("local"):
            options["spark.executor.extraJavaOptions"] = " ".join(tuned)
        if small:
            from kdiag.analysis import class_archive

            archive = class_archive.current()
            if archive is not None:
                java += archive.java_options()
        else:
            # A big input's split sorts and walks each thread while the
            # requests it makes are cached: with Spark's 60 % of the heap
            # for both, the walk spilled (858 MB at 1e7 requests, 5 GB heap);
            # with 80 %, the analysis took 145.4 s against 154.7-155.6 s, as
            # much as an 8 GB heap gave (145.1 s). Its own objects are few:
            # the collected rows are aggregates and examples.
            options["spark.memory.fraction"] = BIG_MEMORY_FRACTION
    options.update({
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(settings.get("KDIAG_SHUFFLE_PARTITIONS") or 4),
        "spark.sql.session.timeZone": "UTC",
        # PySpark would otherwise send each Column function's Python call
        # site to the JVM (for error messages), four more round trips per
        # function wherever the session is active: with the side jobs in
        # threads (spark_plumbing.Later), 11,900 py4j calls an analysis of the
        # 30-request bundle, 4,800 without.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Case mapping (the statistics' broker state, upper()) by the JVM:
        # ICU's first use initialises its title-case break iterators and
        # their dictionaries, for ASCII state names. Cold replays of a
        # 100-request bundle, 2 cores, 6 alternated (2026-12-01): median
        # 6.33 s with ICU, 5.59 s without.
        "spark.sql.icu.caseMappings.enabled": "false",
        "spark.driver.extraJavaOptions": " ".join(java),
    })
    if launching:
        from pyspark import SparkConf, SparkContext

        from kdiag.analysis.jvm import launch

        # In kdiag's own JVM only: no session extension found on the class
        # path (Spark ML's vector functions register themselves that way;
        # the analysis calls none). Spark names the flag a test one; a Spark
        # without it ignores it. Cold replays of the 20-line excerpt, 2 cores,
        # 6 alternated (2026-12-01): median 3.97 s with them, 3.67 s without.
        options["spark.sql.extensions.test.loadFromCp"] = "false"
        if SparkContext._gateway is None:   # else this process's JVM is up already
            launch(SparkConf().setAll(list(options.items())))
    builder = SparkSession.builder
    for k, v in options.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from pyspark import SparkContext

    from kdiag.analysis.py4j_lookups import remember

    remember(SparkContext._gateway)
    if launching:
        _watch_jvm()
    quiet_when_gone()
    if archive is not None and archive.writing:
        atexit.register(archive.seal, spark)
    return spark


# How long the JVM may take to stop on its own once kdiag is gone (it exits
# when its stdin closes: a few hundred milliseconds measured) before the
# watchdog kills it.
JVM_GRACE_S = 10.0
_WATCHDOG = r"""
import os, signal, sys, time
jvm, started, kdiag, grace_s = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def same():
    try:
        with open(f"/proc/{jvm}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == started and fields[0] != "Z"
while os.getppid() == kdiag:
    if not same():
        sys.exit(0)
    time.sleep(0.5)
deadline = time.monotonic() + grace_s
while same() and time.monotonic() < deadline:
    time.sleep(0.2)
if same():
    os.kill(jvm, signal.SIGKILL)
"""
_watchdogs: list = []


def _watch_jvm() -> None:
    """A watchdog that kills the Spark JVM if it outlives kdiag. The JVM
    exits when its stdin closes, but a process that inherited kdiag's end
    of that pipe, or a JVM stuck in its shutdown, keeps it running for good.
    PR_SET_PDEATHSIG cannot do it: the JVM is started from a thread, and the
    signal comes when that thread ends. Nor can a pipe: whatever holds the
    JVM's stdin would hold it too. So the watchdog, kdiag's child, polls its
    parent (every 0.5 s; it is reparented when kdiag dies, killed or not),
    gives the JVM JVM_GRACE_S to stop on its own, then kills it if it is
    still the same process (its start time is checked)."""
    import subprocess

    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None or proc.poll() is not None:
        return
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            started = f.read().rsplit(")", 1)[1].split()[19]
        dog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(proc.pid), started, str(os.getpid()), str(JVM_GRACE_S)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return   # no /proc, or no process to spare: the JVM's own watch of its stdin remains
    _watchdogs.append(dog)


def _big_heap() -> str:
    """A quarter of the machine's memory, 2 to 8 GiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return "2g"
    return f"{max(2, min(8, total // 4 >> 30))}g"


def tune_for(spark, input_bytes: int) -> None:
    """SQL settings by the size of the tables about to be analysed. For a
    small input: one shuffle partition, no adaptive execution, whose
    re-planning of each stage costs more than it saves on kilobytes (on a
    100-request capture: 128 Spark jobs -> 57, warm analysis 14 -> 9 s),
    and expressions interpreted rather than compiled to Java first (a cold
    JVM compiles each query's code slower than it runs it on kilobytes: on
    a 200-request capture, first analysis 15.8 -> 11.9 s). For a large one,
    partitions enough that the threads' rows (the split is partitioned by
    thread) spread over every core, adaptive execution to merge the small
    ones, and compiled code."""
    small = input_bytes < SMALL_INPUT_BYTES
    cores = spark.sparkContext.defaultParallelism
    default = "1" if small else str(8 * max(1, cores))
    spark.conf.set("spark.sql.shuffle.partitions", str(settings.get("KDIAG_SHUFFLE_PARTITIONS") or default))
    spark.conf.set("spark.sql.adaptive.enabled", "false" if small else "true")
    spark.conf.set("spark.sql.codegen.wholeStage", "false" if small else "true")
    spark.conf.set("spark.sql.codegen.factoryMode", "NO_CODEGEN" if small else "FALLBACK")


def tables_bytes(tables_dir: Path) -> int:
    return sum(p.stat().st_size for p in Path(tables_dir).glob("*.parquet"))


def failure(e: BaseException) -> str | None:
    """One line saying why Spark could not analyse, when ``e`` was raised
    by Spark or by the bridge to its JVM (a job that failed, a JVM that died
    under the input); None for anything else. Spark's own message is many
    lines of JVM stack: its first line is the reason."""
    from kdiag.visible import visible

    tb = e.__traceback__
    while tb is not None and not tb.tb_frame.f_globals.get("__name__", "").startswith(("py4j", "pyspark")):
        tb = tb.tb_next
    if tb is None:
        return None
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    # A call to a JVM killed under it fails in py4j's words ("An error occurred
    # while calling o27.sc"), which name no reason: ask the JVM itself.
    if isinstance(e, ConnectionError) or "Answer from Java side is empty" in first or jvm_gone():
        why = "Spark's JVM stopped during the analysis (out of memory, or killed)"
    else:
        why = f"Spark could not analyse the input: {type(e).__name__}: {first[:300]}"
    return visible(why)


def jvm_gone() -> bool:
    """This process launched Spark's JVM and it no longer answers (killed,
    out of memory): no call through the old session can succeed. One that
    does not answer but has not exited yet (its shutdown hooks still
    running) is killed, so that it frees its memory for the next."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return False
    if proc.poll() is None:
        try:
            gateway.jvm.java.lang.System.currentTimeMillis()
            return False
        except Exception:  # noqa: BLE001 - py4j's network errors and the socket's own
            proc.kill()
            proc.wait()
    return True


def quiet_when_gone() -> None:
    """When the JVM dies, PySpark's accumulator server (an EOFError, from a
    thread) and py4j's logger (each call that cannot connect) print
    tracebacks of their own: whoever survives the death says it in its own
    words, and py4j's errors still reach it as exceptions."""
    import logging

    from pyspark import SparkContext

    logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)
    # py4j's gateway logs a failed call on the root logger, not its own
    root = logging.getLogger()
    if _not_py4j not in root.filters:
        root.addFilter(_not_py4j)
    server = getattr(SparkContext._active_spark_context, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, client_address: None


def _not_py4j(record) -> bool:
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def restarted(app: str = "kdiag", master: str | None = None):
    """A session in a fresh JVM, after ``jvm_gone``: PySpark keeps the dead
    one's context, gateway and session as its current ones, and would hand
    them back."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    from pyspark.sql.context import SQLContext

    ctx = SparkContext._active_spark_context
    if ctx is not None:
        ctx._jsc = None     # stopping it would ask the dead JVM
        ctx.stop()
    gateway = SparkContext._gateway
    SparkContext._gateway = SparkContext._jvm = None
    SparkSession._instantiatedSession = SparkSession._activeSession = None
    SQLContext._instantiatedContext = None
    if gateway is not None:
        try:
            gateway.shutdown()
        except Exception:  # noqa: BLE001 - its JVM is gone: only its Python side is closed
            pass
    return session(app, master=master)
