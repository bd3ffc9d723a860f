"""``kdiag parse``: raw captures into Arrow tables, one Parquet file each."""
from __future__ import annotations

from pathlib import Path

from kdiag.commands.options import input_path
from kdiag.errors import KdiagError
from kdiag.status import ExitStatus
from kdiag.visible import visible

NAME = "parse"
HELP = "turn raw captures into Arrow tables (Parquet)"
PROGRESS = True
GUARDED = True


def add_arguments(parser) -> None:
    parser.add_argument("paths", nargs="+", type=input_path, metavar="FILE", help="a raw capture")
    parser.add_argument("-o", "--output", type=Path, required=True, help="directory for <table>.parquet")


def run(args, env) -> ExitStatus:
    from kdiag.ingest.detect import readable_inputs
    from kdiag.ingest.parquet_sink import reason
    from kdiag.ingest.tables import parse_paths

    readable_inputs(list(args.paths))
    try:
        parsed = parse_paths(list(args.paths), args.output)
    except OSError as e:
        raise KdiagError(f"cannot write the tables to {visible(args.output)}: {reason(e)} "
                         "(give -o a directory with room that kdiag may write)") from None
    for f in parsed.files:
        c = f.get("counts") or {}
        env.stdout.write(f"{visible(f['path'])}: {f['kind'] or 'not recognised'}; lines {c.get('lines', 0)}, "
                         f"parsed {c.get('parsed', 0)}, skipped {c.get('skipped_total', 0)}"
                         + (f" ({f['error']})" if f.get("error") else "") + "\n")
    for name, path in sorted(parsed.paths.items()):
        env.stdout.write(f"{visible(path)}: {parsed.rows[name]} rows\n")
    return ExitStatus.OK if parsed.paths else ExitStatus.NO_DATA
