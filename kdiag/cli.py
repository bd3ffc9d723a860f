"""kdiag's command line: the parser assembled from ``kdiag.commands``, and
the dispatch to a command's ``run``.

``main(argv, env)`` takes its streams from an ``Environment`` so tests drive
it in-process; the console script calls it with the real ones.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import dataclass, field
from typing import TextIO

from kdiag import __version__, interrupts, settings
from kdiag.commands import COMMANDS, epilog
from kdiag.errors import KdiagError, UsageError
from kdiag.status import ExitStatus
from kdiag.visible import VisibleStream, visible_lines

# Set before numpy and pyarrow are first imported (lazily, by the commands).
# numpy's OpenBLAS starts a thread a core that spins after its import;
# kdiag does no linear algebra, and the spinning took 1.7 % of both cores
# from a parse.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Arrow's default pool (mimalloc) keeps what a parsed chunk freed: the
# peak RSS of parsing 10 M strace lines was 464-537 MiB with it, 402-412
# MiB with the C library's malloc, in the same time (2026-11-27).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

BY_NAME = {cmd.NAME: cmd for cmd in COMMANDS}


class _Results(VisibleStream):
    """stdout: the results, shown as data. The first of them takes the
    progress display off stderr's terminal, which is the same screen: a
    bar redrawn after them glued itself to their first line, and its
    clearing at the end erased the lines above the cursor, theirs."""

    def write(self, text) -> int:
        from kdiag import progress

        progress.current().stop()
        return super().write(text)


@dataclass
class Environment:
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)

    def __post_init__(self) -> None:
        # Whatever a command writes for people shows outside text as data:
        # kdiag itself writes no escape code to stdout, so none may pass.
        # stderr stays raw for the progress display's own codes; notes go
        # through say.
        if not isinstance(self.stdout, _Results):
            self.stdout = _Results(self.stdout)

    def say(self, msg: str) -> None:
        """Notes for people: stderr, so stdout stays the result; above the
        progress display when one is shown."""
        from kdiag import progress

        line = visible_lines(f"kdiag: {msg}")
        if not progress.current().say(line):
            stream = VisibleStream(self.stderr)
            stream.write(line + "\n")
            stream.flush()


class _Parser(argparse.ArgumentParser):
    """argparse writes its errors to the real stderr itself, quoting the
    argument it refuses (a file name, anyone's): shown as data too."""

    def _print_message(self, message: str, file=None) -> None:
        if message:
            try:
                VisibleStream(file or sys.stderr).write(message)
            except (AttributeError, OSError):   # as argparse's own: no stream, nothing to say
                pass


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """kdiag's parser. ``only``: the one command whose options are added
    (the others are named, for ``kdiag --help`` and the usage error of a
    misspelt one), so a command builds no other's options; None: all."""
    fmt = argparse.RawDescriptionHelpFormatter
    ap = _Parser(prog="kdiag", description="Where a Kafka producer's latency goes.",
                 epilog="kdiag COMMAND --help shows a command's options and examples (docs/commands.md).\n\n"
                        + settings.help_text(), formatter_class=fmt)
    ap.add_argument("--version", action="version", version=f"kdiag {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.NAME, help=cmd.HELP, epilog=epilog(cmd.NAME), formatter_class=fmt)
        if only is None or only == cmd.NAME:
            cmd.add_arguments(p)
    return ap


def main(argv: list[str] | None = None, env: Environment | None = None) -> int:
    if argv is None:   # the process's own command line: a process of kdiag's own
        from kdiag.no_pandas import skip_pandas_lookups

        skip_pandas_lookups()
    env = env or Environment()
    argv = list(sys.argv[1:] if argv is None else argv)
    # "kdiag trace [options] -- CMD ARGS": what follows "--" is the producer's
    # own command line, never kdiag's options.
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    ap = parser(only=argv[0] if argv and argv[0] in BY_NAME else None)
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) and ExitStatus.USAGE
    if args.command is None:
        ap.print_help(env.stdout)
        return ExitStatus.USAGE
    args.argv, args.producer = argv, command
    if getattr(args, "verbose", False):
        os.environ["KDIAG_VERBOSE"] = "1"   # read where the JVM starts (analysis/jvm.py)
    from kdiag import progress

    cmd = BY_NAME[args.command]
    # The JVM's own output (--verbose) would tear a redrawn line.
    shown = progress.wanted(env.stderr, getattr(args, "json", False)) and not getattr(args, "verbose", False)
    with progress.shown(env.stderr, shown and cmd.PROGRESS):
        return _run(cmd, args, env)


def _run(cmd, args, env: Environment) -> int:
    interrupts.SIGNALLED.clear()
    try:
        if args.producer and cmd.NAME != "trace":
            raise UsageError("'-- CMD' goes with kdiag trace only")
        with contextlib.ExitStack() as guard:
            if cmd.GUARDED:
                guard.enter_context(interrupts.sigterm_interrupts())
                guard.enter_context(interrupts.private_files())
            return cmd.run(args, env)
    except KeyboardInterrupt:
        env.say("interrupted")
        return ExitStatus.INTERRUPTED
    except Exception as e:
        if interrupts.interrupted(e):   # what the interrupted call raised instead
            env.say("interrupted")
            return ExitStatus.INTERRUPTED
        if isinstance(e, UsageError):
            env.say(f"error: {e}")
            return ExitStatus.USAGE
        if isinstance(e, KdiagError):
            env.say(f"error: {e}")
            return ExitStatus.ERROR
        raise


if __name__ == "__main__":
    sys.exit(main())
