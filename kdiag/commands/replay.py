"""``kdiag replay``: the findings of bundles or raw captures, offline.
How the inputs are read and analysed is ``kdiag.replay``'s."""
from __future__ import annotations

import json

from kdiag.commands.options import add_reading, input_path
from kdiag.replay import analysed, checked_inputs, emit, say_merged
from kdiag.status import ExitStatus
from kdiag.visible import visible

NAME = "replay"
HELP = "analyse a bundle or raw captures offline"
PROGRESS = True
# SIGTERM as Ctrl-C: the temporary directories go, and the exit status is
# the documented 130.
GUARDED = True


def add_arguments(parser) -> None:
    parser.add_argument("paths", nargs="+", type=input_path, metavar="PATH",
                        help="a bundle (.tar.gz or unpacked), a raw capture, or a directory of raw captures")
    parser.add_argument("--json", action="store_true",
                        help="print the findings as one JSON object; of several bundles reported apart, "
                             "one object whose 'apart' list holds each one's findings")
    add_reading(parser, merge="one each")


def _findings(findings, tables):
    return findings


def run(args, env) -> ExitStatus:
    inputs = checked_inputs(args, env)
    runs = [inputs.paths] if args.merge else inputs.apart()
    if len(runs) == 1:
        findings = analysed(inputs, runs[0], env, args.no_warm, _findings)
        if args.merge:
            say_merged(findings, inputs)
        return emit(env, findings, args.json)
    # Each bundle is its own run (its own producer, host and probe): one
    # analysis of them all would give one verdict to requests that have
    # none in common. They share the warm server or this process's Spark.
    apart = []
    for one in runs:
        findings = analysed(inputs, one, env, args.no_warm, _findings)
        findings["source"] = [str(p) for p in one]
        apart.append(findings)
    if args.json:
        env.stdout.write(json.dumps({"apart": apart}, default=str) + "\n")
    else:
        from kdiag.report.text import render, render_apart

        for i, findings in enumerate(apart, 1):
            env.stdout.write(f"=== {i} of {len(apart)}: {', '.join(map(visible, findings['source']))}\n")
            env.stdout.write(render(findings, probe=findings.get("probe")) + "\n")
        env.stdout.write(render_apart(apart))
    # A script reading the status learns that one of them held nothing.
    return ExitStatus.NO_DATA if any(f.get("no_data") for f in apart) else ExitStatus.OK
