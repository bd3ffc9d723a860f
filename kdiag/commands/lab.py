"""``kdiag lab``: start, stop or show the local lab broker, or trace every
lab scenario once (``matrix``)."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

from kdiag.errors import UsageError
from kdiag.interrupts import sigterm_interrupts
from kdiag.status import ExitStatus

NAME = "lab"
HELP = "start/stop the local lab broker"
PROGRESS = False
GUARDED = False   # matrix sets SIGTERM up around its cases


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=["up", "down", "status", "matrix"],
                        help="up: start the lab; down: stop it; status: show it; matrix: trace every scenario")
    matrix = parser.add_argument_group("matrix")
    matrix.add_argument("cases", nargs="*", metavar="CASE",
                        help="matrix: only these scenarios (default: all; kdiag trace --help lists them)")
    matrix.add_argument("--messages", type=int, help="matrix: messages per case (default: each case's own)")
    matrix.add_argument("-o", "--output", type=Path,
                        help="matrix: directory for the bundles (default: a temporary one)")
    matrix.add_argument("--json", action="store_true", help="matrix: the rows as one JSON object")


def run(args, env) -> ExitStatus:
    from kdiag.lab import broker as lab

    if args.action == "matrix":
        return _matrix(args, env)
    if args.cases or args.messages or args.output or args.json:
        raise UsageError("CASE, --messages, -o and --json go with kdiag lab matrix only")
    if args.action == "up":
        the_lab = lab.up()
        env.stdout.write(json.dumps(the_lab.to_dict(), indent=2) + "\n")
    elif args.action == "down":
        env.stdout.write("stopped\n" if lab.down() else "no lab running\n")
    else:
        the_lab = lab.status()
        if the_lab is None:
            env.stdout.write("no lab running\n")
            return ExitStatus.NO_DATA
        env.stdout.write(json.dumps(the_lab.to_dict(), indent=2) + "\n")
    return ExitStatus.OK


def _matrix(args, env) -> ExitStatus:
    import tempfile

    from kdiag.lab import matrix

    cases = matrix.select(args.cases)
    if args.messages is not None and args.messages < 1:
        raise UsageError("--messages must be >= 1")
    with contextlib.ExitStack() as stack:
        out = args.output or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kdiag-matrix-")))
        out.mkdir(parents=True, exist_ok=True)
        rows = []
        with sigterm_interrupts():
            for case in cases:
                env.say(f"case {case.name}: expecting {case.expected}")
                rows.append(matrix.run_case(case, out, args.messages, env.say))
    if args.json:
        env.stdout.write(json.dumps({"rows": [r.to_dict() for r in rows]}) + "\n")
    else:
        env.stdout.write(matrix.table(rows))
    return ExitStatus.OK if all(r.ok for r in rows) else ExitStatus.ERROR
