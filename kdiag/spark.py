"""The Spark session: local mode by default, whatever spark-submit gave
when run on a cluster."""
from __future__ import annotations

import os
import sys
from pathlib import Path

LOG4J = Path(__file__).with_name("log4j2.properties")


def session(app: str = "kdiag"):
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
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
