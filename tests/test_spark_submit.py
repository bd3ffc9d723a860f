"""The analysis job runs unchanged under spark-submit, as on a cluster."""
import json
import os
import shutil
import subprocess

import pytest
from conftest import CAPTURES, ROOT, need
from kdiag.ingest.tables import parse_paths


def test_analysis_under_spark_submit(tmp_path):
    """Given its tables as a file:// URI, as a cluster's scheduler would."""
    need("java")
    submit = shutil.which("spark-submit")
    assert submit, "pyspark installs spark-submit"
    d = CAPTURES / "nagle_on"
    parse_paths([d / "rdkafka.log", d / "strace.txt", d / "stats.jsonl"], tmp_path / "tables")
    out = tmp_path / "findings.json"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    res = subprocess.run([submit, "--master", "local[1]", str(ROOT / "kdiag" / "analysis" / "__main__.py"),
                          "--tables", (tmp_path / "tables").as_uri(), "--out", str(out)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    f = json.loads(out.read_text())
    assert f["verdict"] == "nagle_delayed_ack" and f["summary"]["requests"] == 30


@pytest.mark.parametrize("given, says", [
    ("s3a://bucket/tables", "not from s3a://bucket"),
    ("hdfs://nn:8020/t", "not from hdfs://nn:8020"),
    ("{tmp}/absent", "no such directory"),
    ("file://{tmp}/empty", "none of the tables the analysis reads is there"),
])
def test_tables_it_cannot_read_are_an_error_not_no_data(tmp_path, capsys, given, says):
    """Before this, a URI or an empty directory gave "no_data": true and exit 0."""
    from kdiag.analysis.__main__ import main

    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exited:
        main(["--tables", given.format(tmp=tmp_path)])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_a_bundle_under_spark_submit_keeps_its_metadata(tmp_path, spark):
    """Given tables alone, the job had no probe, no inputs and a null
    tcp_retransmits: --bundle reads the bundle as replay does."""
    import io

    from kdiag.cli import Environment, main

    bundle = ROOT / "fixtures" / "bundles" / "nagle_on.tar.gz"
    out = tmp_path / "findings.json"
    res = subprocess.run([shutil.which("spark-submit"), "--master", "local[1]",
                          str(ROOT / "kdiag" / "analysis" / "__main__.py"), "--bundle", bundle.as_uri(),
                          "--out", str(out)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(out.read_text())
    text = io.StringIO()
    assert main(["replay", "--json", str(bundle)], Environment(stdout=text, stderr=io.StringIO())) == 0
    want = json.loads(text.getvalue())
    assert got["probe"] == want["probe"] and got["probe"]["msgs_per_s"] == 19.96
    assert got["summary"]["tcp_retransmits"] == want["summary"]["tcp_retransmits"] == 2
    assert [i["kind"] for i in got["inputs"]] == [i["kind"] for i in want["inputs"]] and got["inputs"]
    for key in ("verdict", "librdkafka_version", "findings", "delivery_ms"):
        assert got[key] == want[key], key
