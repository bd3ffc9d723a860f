"""The analysis job runs unchanged under spark-submit, as on a cluster."""
import json
import os
import shutil
import subprocess

from conftest import CAPTURES, ROOT, need
from kdiag.ingest.tables import parse_paths


def test_analysis_under_spark_submit(tmp_path):
    need("java")
    submit = shutil.which("spark-submit")
    assert submit, "pyspark installs spark-submit"
    d = CAPTURES / "nagle_on"
    parse_paths([d / "rdkafka.log", d / "strace.txt", d / "stats.jsonl"], tmp_path / "tables")
    out = tmp_path / "findings.json"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    res = subprocess.run([submit, "--master", "local[1]", str(ROOT / "kdiag" / "analysis" / "__main__.py"),
                          "--tables", str(tmp_path / "tables"), "--out", str(out)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    f = json.loads(out.read_text())
    assert f["verdict"] == "nagle_delayed_ack" and f["summary"]["requests"] == 30
