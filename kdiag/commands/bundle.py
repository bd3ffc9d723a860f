"""``kdiag bundle verify|seal``: check bundles against their manifests, or
finish the one a killed trace left."""
from __future__ import annotations

import json

from kdiag.commands.options import input_path
from kdiag.errors import UsageError
from kdiag.status import ExitStatus
from kdiag.visible import visible

NAME = "bundle"
HELP = "check bundles against their manifests"
PROGRESS = False
GUARDED = False


def add_arguments(parser) -> None:
    from kdiag.bundle import limits as bundle_limits

    parser.add_argument("action", choices=["verify", "seal"],
                        help="verify: check each bundle against its manifest; seal: make the directory a killed "
                             "kdiag trace left (OUTPUT.partial/) into the bundle it would have written")
    parser.add_argument("paths", nargs="+", type=input_path, metavar="PATH",
                        help="a .tar.gz bundle or an unpacked one")
    parser.add_argument("--json", action="store_true", help="the results as one JSON object")
    bundle_limits.add_options(parser.add_argument_group("reading"))


def run(args, env) -> ExitStatus:
    from kdiag.bundle import archive as bundle

    for p in args.paths:
        if not p.exists():
            raise UsageError(f"{visible(p)}: no such file or directory")
    limits = bundle.Limits.resolve(args)
    if args.action == "seal":
        return _seal(args, env, limits)
    results = [bundle.verify(p, limits) for p in args.paths]
    if args.json:
        env.stdout.write(json.dumps({"bundles": [r.to_dict() for r in results]}) + "\n")
    else:
        for r in results:
            env.stdout.write(r.headline() + "\n" + "".join(f"  {pr}\n" for pr in r.problems))
    return ExitStatus.OK if all(r.ok for r in results) else ExitStatus.ERROR


def _seal(args, env, limits) -> ExitStatus:
    from kdiag.bundle import archive as bundle
    from kdiag.capture.trace import seal

    for p in args.paths:
        if p.is_dir():
            # what seal reads and rewrites must be the directory's own
            # files, never one a link points at
            bundle.refuse_links(p, limits)
            bundle.manifest(p, limits)
        out = seal(p, log=env.say)
        env.stdout.write(f"{visible(out)}\n")
    return ExitStatus.OK
