import io
import subprocess
import sys

import pyarrow.parquet as pq

from conftest import CAPTURES, ROOT
from kdiag.cli import Environment, main
from kdiag.status import ExitStatus


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    rc = main(list(argv), Environment(stdout=out, stderr=err))
    return rc, out.getvalue(), err.getvalue()


def test_import_stays_light():
    code = ("import sys, kdiag, kdiag.cli, parsers, collectors; "
            "heavy = [m for m in ('pyspark', 'scapy', 'confluent_kafka', 'pyarrow') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_help_ends_with_examples():
    for cmd in ("trace", "replay", "parse", "lab"):
        res = subprocess.run([sys.executable, "-m", "kdiag", cmd, "--help"], capture_output=True, text=True, cwd=ROOT)
        assert res.returncode == 0
        tail = res.stdout.split("examples:")[-1]
        assert "examples:" in res.stdout and "kdiag " + cmd in tail


def test_usage_errors():
    assert run("trace", "-X", "novalue")[0] == ExitStatus.USAGE
    assert run("trace", "--messages", "0")[0] == ExitStatus.USAGE
    assert run("bogus")[0] == ExitStatus.USAGE
    assert run()[0] == ExitStatus.USAGE
    rc, _, err = run("trace", "-F", "/nonexistent/client.properties")
    assert rc == ExitStatus.USAGE and "client.properties" in err
    assert run("trace", "--pid", "1", "--tracer", "dtrace")[0] == ExitStatus.USAGE


def test_parse_writes_one_parquet_per_table(tmp_path):
    d = CAPTURES / "nagle_on"
    rc, out, _ = run("parse", str(d / "rdkafka.log"), str(d / "strace.txt"), str(d / "stats.jsonl"),
                     "-o", str(tmp_path))
    assert rc == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["log_writes.parquet", "rdkafka_events.parquet", "stats.parquet", "stats_topics.parquet",
                     "syscalls.parquet"]
    ev = pq.read_table(tmp_path / "rdkafka_events.parquet")
    assert ev.num_rows == len((d / "rdkafka.log").read_text().splitlines())
    lw = pq.read_table(tmp_path / "log_writes.parquet").to_pylist()
    sends = [r for r in lw if r["event"] == "send" and r["request"] == "Produce"]
    assert len(sends) == 30 and all(r["pid"] and r["ts_us"] for r in sends)
    assert "strace.txt: strace" in out


def test_properties_file(tmp_path):
    from kdiag.capture.trace import read_properties

    p = tmp_path / "client.properties"
    p.write_text("# comment\nsecurity.protocol = ssl\n\nsasl.password=a=b\n")
    assert read_properties(p) == {"security.protocol": "ssl", "sasl.password": "a=b"}


def test_lab_up_status_down(tmp_path, monkeypatch):
    import json

    from conftest import need

    need("stunnel4")
    monkeypatch.setenv("KDIAG_LAB_DIR", str(tmp_path / "lab"))
    rc, out, _ = run("lab", "up")
    assert rc == 0
    up = json.loads(out)
    try:
        rc, out, _ = run("lab", "status")
        assert rc == 0 and json.loads(out)["tls_port"] == up["tls_port"]
    finally:
        rc, out, _ = run("lab", "down")
    assert rc == 0 and out == "stopped\n"
    rc, out, _ = run("lab", "status")
    assert rc == ExitStatus.NO_DATA and out == "no lab running\n"


def test_an_input_elsewhere_is_refused_whole_and_a_file_uri_is_read(tmp_path, capsys):
    """As a Path, "s3a://bucket/b.tar.gz" was "s3a:/bucket/b.tar.gz: no such
    file or directory"."""
    for cmd in (["replay"], ["report", "-o", str(tmp_path / "r.html")], ["bundle", "verify"]):
        rc, _, err = run(*cmd, "s3a://bucket/b.tar.gz")
        said = err + capsys.readouterr().err
        assert rc == ExitStatus.USAGE and "s3a://bucket/b.tar.gz: not on this machine (s3a://)" in said
    rc, _, err = run("replay", "file://elsewhere/b.tar.gz")
    assert rc == ExitStatus.USAGE and "not on this machine (host elsewhere)" in err + capsys.readouterr().err
    log = CAPTURES / "nagle_on" / "rdkafka.log"
    rc, out, _ = run("parse", log.as_uri(), "-o", str(tmp_path / "t"))
    assert rc == 0 and (tmp_path / "t" / "rdkafka_events.parquet").exists()
    assert f"{log}: rdkafka_log" in out
