"""kdiag's commands, one module each. A command module holds:

- ``NAME`` and ``HELP``: the subcommand and its line in ``kdiag --help``;
- ``add_arguments(parser)``: its options;
- ``run(args, env)``: the command itself, returning an ``ExitStatus``;
- ``PROGRESS``: whether it shows the progress display on a terminal;
- ``GUARDED``: whether it runs with SIGTERM as Ctrl-C and a private umask
  (a command that needs them for part of its run only sets them itself).

Its examples are ``examples/NAME.txt``, shown by ``kdiag NAME --help``.
``kdiag.cli`` builds the parser and dispatches from ``COMMANDS``; a new
command is one module here, its examples file and one entry below.
"""
from __future__ import annotations

from importlib import resources

from kdiag.commands import bundle, compare, fleet, lab, parse, replay, report, trace

COMMANDS = (trace, replay, report, compare, fleet, bundle, parse, lab)


def examples(name: str) -> str:
    """The command's examples file, as written."""
    return resources.files(__name__).joinpath("examples", f"{name}.txt").read_text(encoding="utf-8")


def epilog(name: str) -> str:
    """What ``kdiag NAME --help`` shows after the options."""
    return "examples:\n" + examples(name)
