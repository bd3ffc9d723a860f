"""``kdiag fleet`` on a real standalone cluster on loopback (a master and two
workers from the Spark that pyspark ships): every bundle's verdict, causes
and shares as ``kdiag replay`` gives them for it alone, whatever its
source of requests (librdkafka's lines under strace, a log alone, syscalls
alone, signals alone); a bundle it cannot judge, or read, said so."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys

import pytest

from conftest import CAPTURES, FIXTURES
from kdiag.cli import Environment, main
from kdiag.status import ExitStatus
from made_bundles import ON, bundle_of, healthy_bundle

EXCERPTS = FIXTURES / "excerpts"
# What replay and fleet must agree on, of each bundle's findings.
SUMMARY_KEYS = ("requests", "latency_p50_ms", "latency_p99_ms", "rtt_p50_ms", "path_rtt_ms", "path_rtt_source",
                "brokers")


def _bundles(folder):
    shutil.copy(ON, folder / "on.tar.gz")
    healthy_bundle(folder, "off.tar.gz")
    bundle_of(folder, "throttled.tar.gz", {f"raw/{d}/{f}": CAPTURES / "throttled" / f for d, f in (
        ("rdkafka_log", "rdkafka.log"), ("strace", "strace.txt"), ("stats", "stats.jsonl"))})
    for name, case, files in (("retries.tar.gz", "log_retries_not_leader", {"rdkafka_log": "producer.log"}),
                              ("timeouts.tar.gz", "log_reqtmout_only", {"rdkafka_log": "producer.log"}),
                              ("inferred.tar.gz", "strace_healthy_nagle_off", {"strace": "strace.txt"}),
                              # Connections, phase by phase (analysis.life), each run's walked apart.
                              ("resolve.tar.gz", "log_conn_resolve_failed", {"rdkafka_log": "producer.log"}),
                              ("connect.tar.gz", "log_conn_connect_timed_out", {"rdkafka_log": "rdkafka.log"}),
                              ("other-run.tar.gz", "strace_plus_log_other_run",
                               {"rdkafka_log": "rdkafka.log", "strace": "strace.txt"})):
        bundle_of(folder, name, {f"raw/{d}/{f}": EXCERPTS / case / f for d, f in files.items()})
    # A kafka-python producer that logs nothing: its plaintext requests
    # named by their first bytes, only the Produce ones judged.
    bundle_of(folder, "named.tar.gz", {"raw/strace/strace.txt": FIXTURES / "strace" / "kafka_python_plain.txt"})
    # cat strace.txt strace.txt: each copy's rows dropped, as replay drops them.
    twice = folder.parent / "strace-twice.txt"
    twice.write_bytes((CAPTURES / "nagle_on" / "strace.txt").read_bytes() * 2)
    bundle_of(folder, "copies.tar.gz", {"raw/rdkafka_log/rdkafka.log": CAPTURES / "nagle_on" / "rdkafka.log",
                                        "raw/strace/strace.txt": twice})
    (folder / "junk.tar.gz").write_bytes(b"pasted text, not an archive\n")


def replay(bundle) -> dict:
    out, err = io.StringIO(), io.StringIO()
    rc = main(["replay", "--json", "--no-warm", str(bundle)], Environment(stdout=out, stderr=err))
    assert rc in (ExitStatus.OK, ExitStatus.NO_DATA), err.getvalue()
    return json.loads(out.getvalue())


def agreed(f: dict) -> tuple:
    return (f["verdict"], [(x["cause"], x["share"], x.get("time_share"), x["evidence"]) for x in f["findings"]],
            {k: (f.get("summary") or {}).get(k) for k in SUMMARY_KEYS})


def charted(f: dict) -> tuple:
    """What the report's charts and each finding's prediction are drawn
    from: the request rows (in send order, whose ties either may break
    apart) and the predictions built on them."""
    rr = f.get("request_rows") or {}
    rows = lambda k: sorted(rr.get(k) or [], key=json.dumps)  # noqa: E731
    return ((rr.get("columns"), rows("rows"), rows("slowest"), rr.get("of"), rr.get("sampled")),
            [(x["cause"], x.get("predicted"), x.get("predicted_text")) for x in f["findings"]])


@pytest.fixture(scope="module")
def fleet_run(cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    folder = tmp / "tickets"
    folder.mkdir()
    _bundles(folder)
    out = tmp / "out"
    res = subprocess.run([sys.executable, "-m", "kdiag", "fleet", str(folder), "--master", cluster.master,
                          "--work-dir", (tmp / "work").as_uri(), "-o", str(out), "--json"],
                         capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-4000:]
    return folder, out, json.loads(res.stdout)


def test_each_bundle_is_judged_as_its_replay_alone(fleet_run, spark):
    import pandas as pd

    folder, out, summary = fleet_run
    rows = pd.read_parquet(out / "bundles")
    by_name = {r.source.rsplit("/", 1)[-1]: r for r in rows.itertuples()}
    assert set(by_name) == {p.name for p in folder.glob("*.tar.gz")}
    judged = ["on.tar.gz", "off.tar.gz", "throttled.tar.gz", "retries.tar.gz", "timeouts.tar.gz", "inferred.tar.gz",
              "copies.tar.gz", "resolve.tar.gz", "connect.tar.gz", "named.tar.gz"]
    verdicts = {}
    for name in judged:
        r = by_name[name]
        alone = replay(folder / name)
        fleet = json.loads(r.findings_json)
        assert agreed(fleet) == agreed(alone), name
        assert charted(fleet) == charted(alone), name
        assert r.verdict == alone["verdict"] and r.judged
        verdicts[name] = r.verdict
    # The sources of requests differ, and so do the causes: not one verdict for all.
    assert verdicts["on.tar.gz"] == "nagle_delayed_ack" and verdicts["off.tar.gz"] == "healthy"
    assert verdicts["throttled.tar.gz"] == "throttled" and verdicts["retries.tar.gz"] == "retry_backoff"
    assert verdicts["timeouts.tar.gz"] == "request_timeout"
    assert {json.loads(by_name[n].findings_json)["confidence"].split(":")[0] for n in judged} >= {"high", "low"}
    assert verdicts["copies.tar.gz"] == "nagle_delayed_ack"
    assert verdicts["resolve.tar.gz"] == "dns_slow" and verdicts["connect.tar.gz"] == "connect_slow"
    resolve = json.loads(by_name["resolve.tar.gz"].findings_json)
    assert resolve["life"]["timed_out"]["kinds"][0]["cause"] == "dns_slow"
    on = json.loads(by_name["on.tar.gz"].findings_json)
    assert on["request_rows"]["rows"] and on["findings"][0]["predicted"]["saves_p50_ms"] > 30
    assert json.loads(by_name["named.tar.gz"].findings_json)["summary"]["requests"] == 30
    assert summary["judged"] == len(judged) and summary["bundles"] == 12


def test_what_the_fleet_cannot_judge_or_read_is_said(fleet_run):
    import pandas as pd

    _, out, summary = fleet_run
    rows = {r.source.rsplit("/", 1)[-1]: r for r in pd.read_parquet(out / "bundles").itertuples()}
    other = rows["other-run.tar.gz"]
    assert not other.judged and other.verdict is None
    assert "replay the bundle alone" in " ".join(other.unknowns)
    junk = rows["junk.tar.gz"]
    assert junk.state == "refused" and list(junk.problems) == ["neither a tar archive nor a directory"]
    assert [u["source"].rsplit("/", 1)[-1] for u in summary["unread"]] == ["junk.tar.gz"]


def test_the_output_is_parquet_any_reader_takes_and_the_summary_adds_up(fleet_run):
    import pyarrow.parquet as pq

    _, out, summary = fleet_run
    bundles = pq.read_table(out / "bundles").to_pylist()
    findings = pq.read_table(out / "findings").to_pylist()
    counts = pq.read_table(out / "summary").to_pylist()
    on = next(b for b in bundles if b["source"].endswith("/on.tar.gz"))
    assert on["host"] == "vm" and on["librdkafka_version"] == "2.16.0" and on["day"]
    assert on["latency_p50_ms"] > 40 and on["fix"] == "socket.nagle.disable=true"
    mine = [f for f in findings if f["bundle_id"] == on["bundle_id"]]
    assert mine[0]["cause"] == "nagle_delayed_ack" and mine[0]["evidence"]
    # Each dimension counts every judged or unjudged bundle that was read.
    read = sum(1 for b in bundles if b["state"] == "parsed")
    for dim in ("version", "host", "day"):
        assert sum(c["bundles"] for c in counts if c["dimension"] == dim) == read
    assert summary["verdicts"]["nagle_delayed_ack"] == 2
    assert {(c["value"], c["verdict"]) for c in counts if c["dimension"] == "version"} >= {
        ("2.16.0", "nagle_delayed_ack"), ("2.16.0", "healthy")}
    # DuckDB reads the folder as it is (it is kdiag[bench]'s, which CI installs).
    duckdb = pytest.importorskip("duckdb", reason="DuckDB is in kdiag[bench]: pip install 'kdiag[bench]'")
    got = duckdb.sql(f"SELECT verdict, count(*) FROM '{out}/bundles/*.parquet' WHERE verdict IS NOT NULL "
                     "GROUP BY verdict").fetchall()
    assert dict(got) == {k: n for k, n in summary["verdicts"].items() if k not in ("no data", "not judged")}
    assert summary["verdicts"]["not judged"] == 1


def test_through_a_spark_connect_endpoint_the_verdicts_are_the_same(fleet_run, tmp_path):
    """``--remote``: the job runs in a Spark Connect server's application
    (in local mode: the cluster's part is the test above); this process only
    sends plans."""
    import pandas as pd

    from kdiag.fleet.loopback import connect_server

    folder, out, _ = fleet_run
    mine = tmp_path / "two"
    mine.mkdir()
    for name in ("on.tar.gz", "retries.tar.gz", "junk.tar.gz"):
        shutil.copy(folder / name, mine / name)
    with connect_server(tmp_path / "connect") as server:
        res = subprocess.run([sys.executable, "-m", "kdiag", "fleet", str(mine), "--remote", server.remote,
                              "--work-dir", (tmp_path / "work").as_uri(), "-o", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "3 bundle(s), 2 judged" in res.stdout
    before = pd.read_parquet(out / "bundles").set_index("bundle_id")
    now = pd.read_parquet(tmp_path / "out" / "bundles")
    for r in now.itertuples():
        if r.state == "parsed":
            assert r.verdict == before.loc[r.bundle_id, "verdict"]
            assert agreed(json.loads(r.findings_json)) == agreed(json.loads(before.loc[r.bundle_id, "findings_json"]))


def test_a_cluster_without_a_work_dir_every_executor_reads_is_refused(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    rc = main(["fleet", str(ON), "--master", "spark://127.0.0.1:7", "-o", str(tmp_path / "o")],
              Environment(stdout=out, stderr=err))
    assert rc == ExitStatus.USAGE and "give --work-dir" in err.getvalue()
    rc = main(["fleet", str(ON), "--remote", "http://x", "--work-dir", "file:///tmp/w", "-o", str(tmp_path / "o")],
              Environment(stdout=out, stderr=err))
    assert rc == ExitStatus.USAGE and "sc://HOST:PORT" in err.getvalue()


def test_the_strace_timing_a_fleet_reads_is_each_runs_alone(spark):
    from kdiag.analysis.typical_exchange import timing_by_run, timing_unknowns

    rows = [(run, "syscall", ts, dur) for run, calls in (
        ("T", [(1, 5), (2, None)]),              # -ttt -T: one call with both is enough
        ("noT", [(1, None), (None, 7)]),
        ("untimed", [(None, None), (None, None)]),
        ("noT-none", [(1, None), (2, None)])) for ts, dur in calls]
    df = spark.createDataFrame(rows, "bundle_id string, kind string, ts_us long, dur_us long")
    keyed = timing_by_run(df)
    alone = {run: timing_unknowns(df.filter(df.bundle_id == run)) for run in ("T", "noT", "untimed", "noT-none")}
    assert keyed == alone
    assert alone["T"] == [] and "no timestamps" in alone["untimed"][0]
    assert "only for the 1 of 2 calls" in alone["noT"][0] and "for none of them" in alone["noT-none"][0]
