"""``kdiag compare``: whether a change fixed the latency, two runs side by
side."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from kdiag.commands.options import add_reading, input_path
from kdiag.commands.report import page_path, write_page
from kdiag.replay import replayed
from kdiag.status import ExitStatus
from kdiag.visible import visible

NAME = "compare"
HELP = "whether a change fixed the latency: two runs side by side"
PROGRESS = True
GUARDED = True


def add_arguments(parser) -> None:
    parser.add_argument("before", type=input_path, metavar="BEFORE",
                        help="a bundle, a raw capture or a directory of them")
    parser.add_argument("after", type=input_path, metavar="AFTER", help="the same, after the change")
    parser.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    parser.add_argument("-o", "--output", type=Path, help="also write the comparison as an HTML page")
    add_reading(parser, merge=None)


def run(args, env) -> ExitStatus:
    from kdiag.report.compare import compare, render_text

    page_path(args.output)
    sides = []
    for path in (args.before, args.after):
        one = argparse.Namespace(**{**vars(args), "paths": [path]})
        sides.append(replayed(one, env, lambda findings, tables: findings))
    result = compare(*sides, names=(args.before.name, args.after.name))
    if args.output is not None:
        from kdiag.report.compare_page import render_compare_html

        write_page(args.output, render_compare_html(result))
        env.say(f"wrote {visible(args.output)}")
    env.stdout.write(json.dumps(result, default=str) + "\n" if args.json else render_text(result))
    return ExitStatus.OK
