"""``kdiag report``: the findings of a bundle or raw captures as one HTML
page that opens offline."""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from kdiag.commands.options import add_reading, input_path
from kdiag.errors import KdiagError, UsageError
from kdiag.replay import analysed, checked_inputs, say_merged
from kdiag.status import ExitStatus
from kdiag.visible import visible

NAME = "report"
HELP = "write the findings of a bundle or raw captures as an HTML page"
PROGRESS = True
GUARDED = True


def add_arguments(parser) -> None:
    parser.add_argument("paths", nargs="+", type=input_path, metavar="PATH", help="as for kdiag replay")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    add_reading(parser, merge="refusing them")


def run(args, env) -> ExitStatus:
    from kdiag.report.html import render_html, sockets_of

    page_path(args.output)
    source = ", ".join(p.name for p in args.paths)
    inputs = checked_inputs(args, env)
    runs = inputs.apart()
    if len(runs) > 1 and not args.merge:
        raise UsageError(f"{len(runs)} runs given ({', '.join(visible(r[0]) for r in runs)}): a page is one run's; "
                         "write one page each, or --merge for one analysis of all their requests")

    def page(findings, tables):
        if args.merge:
            say_merged(findings, inputs)
        return render_html(findings, sockets_of(tables), source=source)

    write_page(args.output, analysed(inputs, inputs.paths, env, args.no_warm, page))
    env.stdout.write(f"{visible(args.output)}\n")
    return ExitStatus.OK


def page_path(out: Path | None) -> None:
    """Refused before any work: -o naming a directory."""
    if out is not None and out.is_dir():
        raise UsageError(f"-o {visible(out)}: a directory; give the HTML file to write")


def write_page(out: Path, page: str) -> None:
    """The page whole, or none: written beside ``out`` and renamed over it,
    so a failure leaves no empty or half-written page. UTF-8, as the page
    declares, whatever the locale; a name that is not UTF-8 (a lone
    surrogate from surrogateescape) is written as the escape ``visible``
    shows for it, never raising UnicodeEncodeError."""
    import tempfile

    data = re.sub("[\ud800-\udfff]", lambda m: visible(m.group()), page).encode("utf-8")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, out)
    except OSError as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise KdiagError(f"cannot write {visible(out)}: {e.strerror or e}") from None
