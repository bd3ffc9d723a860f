"""The fleet job: many bundles, one Spark job, a cause per bundle and a
summary over the fleet. ``kdiag fleet`` (kdiag.commands.fleet) runs it.

Output, under ``-o`` (a path or a URI every executor can write):

- ``bundles/``: one row per bundle found: where it came from, its host,
  librdkafka version and creation time, its verdict, the top cause's share,
  p50/p99, its brokers and topics, the fix, which process parsed it, and
  its whole findings as JSON;
  a bundle that could not be read, or that the analysis failed on, is a row
  with its reasons (``judged`` false); an archive with the same content as
  another is a row of state ``duplicate`` naming the one judged, counted once.
- ``findings/``: one row per (bundle, cause): share, time share, requests,
  evidence and fix.
- ``summary/``: bundles per verdict by version, host, broker, topic and day.

All three are Parquet datasets: pandas, DuckDB and Spark read them as they
are. They hold what the bundles hold, so they are private as bundles are:
directories 0700, files 0600."""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

from kdiag.errors import UsageError
from kdiag.visible import visible, visible_text

# Dimensions of the summary: column of ``bundles`` -> what the summary calls it.
DIMENSIONS = {"librdkafka_version": "version", "host": "host", "broker": "broker", "topic": "topic",
              "day": "day"}
BUNDLES_DDL = ("bundle_id string, source string, state string, problems array<string>, host string, "
               "librdkafka_version string, created_us long, day string, judged boolean, verdict string, "
               "confidence string, share double, requests long, latency_p50_ms double, latency_p99_ms double, "
               "rtt_p50_ms double, path_rtt_ms double, brokers array<string>, topics array<string>, fix string, "
               "unknowns array<string>, parsed_by string, findings_json string, duplicate_of string")
FINDINGS_DDL = ("bundle_id string, host string, librdkafka_version string, day string, brokers array<string>, "
                "cause string, share double, time_share double, requests long, fix string, fix_text string, "
                "evidence array<string>")
SUMMARY_DDL = "dimension string, value string, verdict string, bundles long"
UMASK = "fs.permissions.umask-mask"


def remote_session(url: str):
    """A Spark Connect session: the job runs in the server's application,
    this process only sends plans and reads results."""
    from kdiag.errors import KdiagError

    if not url.startswith("sc://"):
        raise UsageError(f"--remote {url}: a Spark Connect endpoint is sc://HOST:PORT")
    try:
        from pyspark.sql.connect.utils import check_dependencies

        check_dependencies()
    except ImportError as e:
        raise KdiagError(f"--remote needs Spark Connect's client libraries ({e}): pip install 'kdiag[connect]'") \
            from None
    from pyspark.sql import SparkSession

    try:
        return SparkSession.builder.remote(url).appName("kdiag-fleet").getOrCreate()
    except Exception as e:  # noqa: BLE001 - gRPC's errors are many; the user needs the endpoint and why
        raise KdiagError(f"--remote {url}: {str(e).splitlines()[0]}") from None


def fleet(sources: list[str], work: str, out: str, limits=None, verify: bool = True, say=None,
          spark=None, master: str | None = None) -> dict:
    """Ingest, judge, write: the summary (a dict) of what was written."""
    from kdiag import __version__
    from kdiag.analysis.spark import jvm_gone, restarted, session
    from kdiag.fleet.ingest import DUPLICATE, ingest, reopened
    from kdiag.fleet.judge import judged_apart

    spark = spark or session("kdiag-fleet", master=master)
    _hadoop_private(spark)
    clock = [time.monotonic()]

    def lap() -> float:
        clock.append(time.monotonic())
        return round(clock[-1] - clock[-2], 1)

    say = say or (lambda msg: None)
    got = ingest(spark, sources, work, limits, verify)
    facts = [r.asDict(recursive=True) for r in got.bundles.collect()]
    seconds = {"ingest": lap()}
    parsed = sum(1 for f in facts if f.get("state") == "parsed")
    say(f"{len(facts)} bundle(s) found, {parsed} parsed on the executors in {seconds['ingest']} s; judging them")
    now = [spark, got.tables]

    def current(after_failure: bool):
        if after_failure and jvm_gone():
            say("Spark's JVM is gone; starting a new one")
            now[0] = restarted("kdiag-fleet", master=master)
            _hadoop_private(now[0])
            now[1] = reopened(now[0], work)
        return now[0], now[1]

    found, failed = judged_apart(current, facts, __version__, say)
    spark, _ = current(bool(failed))     # the last bundle set aside may have taken the JVM with it
    for f in facts:
        if f["bundle_id"] in failed and f.get("state") == "parsed":
            f["problems"] = list(f.get("problems") or []) + [f"not judged: the analysis failed on this bundle "
                                                             f"({failed[f['bundle_id']]})"]
    seconds["judge"] = lap()
    bundles = [bundle_row(f, found.get(f["bundle_id"])) for f in facts]
    kept = {b["bundle_id"]: b["source"] for b in bundles if b["bundle_id"] and b["state"] != DUPLICATE}
    private = _private_dir(out)
    findings = [row for f in facts if f["bundle_id"] in found for row in finding_rows(f, found[f["bundle_id"]])]
    summary_rows = summarise(bundles)
    for name, rows, ddl in (("bundles", bundles, BUNDLES_DDL), ("findings", findings, FINDINGS_DDL),
                            ("summary", summary_rows, SUMMARY_DDL)):
        spark.createDataFrame(parquet_rows(rows, ddl), ddl).coalesce(1) \
            .write.mode("overwrite").parquet(f"{out}/{name}")
    if private:
        _make_private(private)
    seconds["write"] = lap()
    counted = [b for b in bundles if b["state"] != DUPLICATE]
    return {"output": out, "stage_seconds": seconds, "bundles": len(counted),
            "judged": sum(1 for b in bundles if b["judged"]),
            "unread": [{"source": b["source"], "problems": b["problems"]} for b in counted if b["state"] != "parsed"],
            "not_judged": [{"source": b["source"], "reason": failed[b["bundle_id"]]} for b in bundles
                           if b["bundle_id"] in failed and b["state"] == "parsed"],
            "duplicates": [{"source": b["source"], "bundle_id": b["duplicate_of"],
                            "kept": kept.get(b["duplicate_of"])} for b in bundles if b["state"] == DUPLICATE],
            "verdicts": dict(Counter(_verdict(b) for b in bundles if b["state"] == "parsed")),
            "by": {dim: _by(summary_rows, dim) for dim in DIMENSIONS.values()}}


def _private_dir(out: str) -> Path | None:
    """OUT as a local directory made 0700 before anything is written in it,
    so no one else can reach its files while Spark writes them; None for
    another filesystem."""
    from kdiag.fleet.ingest import local_path

    local = local_path(out)
    if local is None:
        return None
    d = Path(local)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    d.chmod(0o700)
    return d


def _hadoop_private(spark) -> None:
    """Hadoop's umask for what Spark writes, before any filesystem is opened
    (Hadoop caches each with the configuration it was opened with): HDFS
    then creates the output 0700 and 0600 wherever it lies. The local
    filesystem takes the JVM's own umask (077 when kdiag launched it: see
    ``interrupts.private_files``), and ``_make_private`` makes sure of it. An object store
    (s3a://, gs://) keeps no modes: there the bucket's policy is what keeps
    the output private."""
    try:
        spark.conf.set(UMASK, "077")
        spark.sparkContext._jsc.hadoopConfiguration().set(UMASK, "077")
    except Exception:  # noqa: BLE001 - Spark Connect has no context; a server may refuse the setting
        pass


def _make_private(d: Path) -> None:
    """Everything under ``d``: directories 0700, files 0600, as bundles are
    (whatever Spark's writers and the umask gave them)."""
    for root, dirs, files in os.walk(d):
        for n in dirs:
            os.chmod(os.path.join(root, n), 0o700, follow_symlinks=False)
        for n in files:
            p = os.path.join(root, n)
            if not os.path.islink(p):
                os.chmod(p, 0o600)


def _names(ddl: str) -> list[str]:
    return [c.split()[0] for c in ddl.split(", ")]


def parquet_rows(rows: list[dict], ddl: str) -> list[tuple]:
    """``rows`` as the tuples of ``ddl`` that the datasets hold: every string
    (alone or in an array) shown by ``visible``, since a bundle's host,
    version, source or evidence is read by whatever prints the dataset
    (pandas, DuckDB's shell, spark-shell), none of which escapes a control.
    ``findings_json`` is JSON whose writer escaped every control already,
    and so keeps each string as the bundle had it."""
    def shown(name: str, v):
        if name == "findings_json":
            return v
        if isinstance(v, str):
            return visible(v)
        if isinstance(v, list):
            return [visible(x) if isinstance(x, str) else x for x in v]
        return v

    names = _names(ddl)
    return [tuple(shown(n, r[n]) for n in names) for r in rows]


def bundle_row(facts: dict, res: dict | None) -> dict:
    """One row of ``bundles`` (BUNDLES_DDL)."""
    res = res or {}
    s = res.get("summary") or {}
    top = (res.get("findings") or [None])[0] or {}
    fix = ", ".join(f"{k}={v}" for k, v in (top.get("fix") or {}).items()) or None
    return dict(zip(_names(BUNDLES_DDL), (
        facts["bundle_id"], facts.get("source"), facts.get("state"), list(facts.get("problems") or []),
        facts.get("host"), res.get("librdkafka_version") or facts.get("librdkafka_version"),
        facts.get("created_us"), _day(facts.get("created_us")), bool(res.get("judged")), res.get("verdict"),
        res.get("confidence"), top.get("share"), s.get("requests"), s.get("latency_p50_ms"),
        s.get("latency_p99_ms"), s.get("rtt_p50_ms"), s.get("path_rtt_ms"), list(s.get("brokers") or []),
        list(res.get("topics") or []), fix, list(res.get("unknowns") or []), facts.get("parsed_by"),
        json.dumps(res, default=str) if res else None, facts.get("duplicate_of"))))


def finding_rows(facts: dict, res: dict) -> list[dict]:
    """The rows of ``findings`` (FINDINGS_DDL) of one bundle."""
    brokers = list((res.get("summary") or {}).get("brokers") or [])
    return [dict(zip(_names(FINDINGS_DDL), (
        facts["bundle_id"], facts.get("host"), res.get("librdkafka_version"), _day(facts.get("created_us")),
        brokers, f["cause"], f.get("share"), f.get("time_share"), f.get("requests"),
        ", ".join(f"{k}={v}" for k, v in (f.get("fix") or {}).items()) or None, f.get("fix_text"),
        [str(e) for e in f.get("evidence") or []]))) for f in res.get("findings") or []]


def summarise(bundles: list[dict]) -> list[dict]:
    """Bundles per verdict by each dimension (SUMMARY_DDL): a bundle with two
    brokers counts under each."""
    counts: dict = {}
    for b in bundles:
        if b["state"] != "parsed":
            continue
        verdict = _verdict(b)
        values = {"version": [b["librdkafka_version"]], "host": [b["host"]], "broker": b["brokers"] or [None],
                  "topic": b["topics"] or [None], "day": [b["day"]]}
        for dim, vs in values.items():
            for v in vs:
                key = (dim, v or "unknown", verdict)
                counts[key] = counts.get(key, 0) + 1
    return [dict(zip(_names(SUMMARY_DDL), (*k, n))) for k, n in sorted(counts.items())]


def render(summary: dict) -> str:
    """The summary as text: verdicts, then each dimension's table. Hosts,
    brokers, topics, versions and sources are the bundles' own words: each
    cell is shown as data before it is aligned, so an escape cannot act and
    a newline cannot add a row. (The Parquet datasets hold them shown as
    data too, ``parquet_rows``; --json is data as it is: JSON escapes every
    control character.)"""
    out = [f"{summary['bundles']} bundle(s), {summary['judged']} judged, written to {visible(summary['output'])}"
           + (f" in {summary['seconds']} s" if "seconds" in summary else "")]
    for u in summary["unread"]:
        out.append(f"  not read: {visible(u['source'])}: {'; '.join(map(visible, u['problems'] or ['?']))}")
    for u in summary.get("not_judged", []):
        out.append(f"  not judged: {visible(u['source'])}: the analysis failed on it ({visible(u['reason'])})")
    for d in summary.get("duplicates", []):
        out.append(f"  duplicate: {visible(d['source'])}: the same content as {visible(d['kept'])}, counted once")
    out.append("")
    out.append("VERDICT                    BUNDLES")
    out += [f"{visible(v):<26} {n:>7}" for v, n in sorted(summary["verdicts"].items(), key=lambda x: (-x[1], x[0]))]
    for dim, rows in summary["by"].items():
        out += ["", f"{dim.upper():<26} {'VERDICT':<22} BUNDLES"]
        out += [f"{visible(value):<26} {visible(verdict):<22} {n:>7}" for value, verdict, n in rows]
    return visible_text(out)


def _verdict(b: dict) -> str:
    """A read bundle's verdict as the summary counts it."""
    return b["verdict"] or ("no data" if b["judged"] else "not judged")


def _by(rows: list[dict], dim: str) -> list[tuple]:
    return [(r["value"], r["verdict"], r["bundles"]) for r in rows if r["dimension"] == dim]


def _day(created_us) -> str | None:
    """The bundle's creation day (UTC), for the summary over time."""
    if not isinstance(created_us, int):
        return None
    return time.strftime("%Y-%m-%d", time.gmtime(created_us / 1e6))
