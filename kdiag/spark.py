"""The Spark session: local mode by default, whatever spark-submit gave
when run on a cluster."""
from __future__ import annotations

import os
import sys
from pathlib import Path

LOG4J = Path(__file__).with_name("log4j2.properties")


# Below this much Parquet, the analysis is a few dozen Spark jobs over
# kilobytes: their cost is the JVM warming up and planning, not the data.
SMALL_INPUT_BYTES = 256 << 20


def session(app: str = "kdiag", small: bool = False):
    """``small``: for an input known to be small. The JVM then compiles with
    C1 only: a JVM that lives seconds is gone before C2's code pays for its
    compiling. Measured on a 100-request capture, 2 cores: session start
    6.7 -> 4.6 s, first analysis 24 -> 16 s. A big input wants C2."""
    # Loopback keeps local mode off the network; the executors' Python must
    # be this interpreter or they cannot import what the driver pickles.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    # Under spark-submit the JVM already runs (its gateway port is in the
    # environment) with the master the user gave it: keep that.
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        builder = builder.master(os.environ.get("KDIAG_SPARK_MASTER", "local[2]"))
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", os.environ.get("KDIAG_SHUFFLE_PARTITIONS", "4"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile={LOG4J}" + (" -XX:TieredStopAtLevel=1" if small else ""))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def tune_for(spark, input_bytes: int) -> None:
    """SQL settings by the size of the tables about to be analysed. For a
    small input: one shuffle partition and no adaptive execution, whose
    re-planning of each stage costs more than it saves on kilobytes (on a
    100-request capture: 128 Spark jobs -> 57, warm analysis 14 -> 9 s)."""
    small = input_bytes < SMALL_INPUT_BYTES
    default = "1" if small else "4"
    spark.conf.set("spark.sql.shuffle.partitions", os.environ.get("KDIAG_SHUFFLE_PARTITIONS", default))
    spark.conf.set("spark.sql.adaptive.enabled", "false" if small else "true")


def tables_bytes(tables_dir: Path) -> int:
    return sum(p.stat().st_size for p in Path(tables_dir).glob("*.parquet"))
