"""``kdiag fleet``: judge many bundles in one Spark job. The job itself is
``kdiag.fleet.job``'s."""
from __future__ import annotations

import json
import time
from pathlib import Path

from kdiag import settings
from kdiag.errors import UsageError
from kdiag.status import ExitStatus

NAME = "fleet"
HELP = "judge many bundles in one Spark job: a cause per bundle, a summary over all"
PROGRESS = False
GUARDED = True


def add_arguments(parser) -> None:
    from kdiag.bundle import limits as bundle_limits

    parser.add_argument("sources", nargs="+", metavar="BUNDLES",
                        help="bundle files, folders (searched for *.tar.gz, *.tgz), globs, or URIs of any of these")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="where bundles/, findings/ and summary/ (Parquet) are written: a path or a URI")
    spark = parser.add_argument_group("where it runs")
    where = spark.add_mutually_exclusive_group()
    where.add_argument("--master", help="the Spark master (default: KDIAG_SPARK_MASTER, else local mode)")
    where.add_argument("--remote", metavar="sc://HOST:PORT",
                       help="a Spark Connect endpoint to run on instead (needs kdiag[connect])")
    spark.add_argument("--work-dir", metavar="URI",
                       help="where the parsed tables are staged; every executor must read it (required with a "
                            "master other than local mode; default: a temporary local directory)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    reading = parser.add_argument_group("reading")
    reading.add_argument("--no-verify", action="store_true",
                         help="judge bundles that fail verification too (their problems are kept in bundles/)")
    reading.add_argument("-v", "--verbose", action="store_true",
                         help="let Spark's and the JVM's own output through")
    bundle_limits.add_options(reading)


def run(args, env) -> ExitStatus:
    import shutil
    import tempfile

    from kdiag.bundle import limits as bundle_limits
    from kdiag.fleet.job import fleet, remote_session, render

    master = args.master or settings.get("KDIAG_SPARK_MASTER")
    if (args.remote or not master.startswith("local")) and not args.work_dir:
        raise UsageError(f"{'--remote ' + args.remote if args.remote else '--master ' + master}: give "
                         "--work-dir, a URI every executor can read and write (hdfs://..., s3a://..., or "
                         "file:///shared/... on a filesystem all of them mount)")
    spark = remote_session(args.remote) if args.remote else None
    limits = bundle_limits.Limits.resolve(args)
    tmp = None if args.work_dir else tempfile.mkdtemp(prefix="kdiag-fleet-")
    work = args.work_dir or Path(tmp).as_uri()
    started = time.monotonic()
    try:
        summary = fleet(args.sources, work, _uri(args.output), limits, verify=not args.no_verify, say=env.say,
                        spark=spark, master=master)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    summary["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        env.stdout.write(json.dumps(summary, default=str) + "\n")
    else:
        env.stdout.write(render(summary))
    return ExitStatus.OK if summary["judged"] else ExitStatus.NO_DATA


def _uri(out: str) -> str:
    """A path as an absolute file:// URI (Spark would take a relative one
    against its own working directory); a URI as it is."""
    return out if "://" in out else Path(out).resolve().as_uri()
