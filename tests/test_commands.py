"""The command line as its modules declare it: every command's examples are
command lines its parser takes, shown by its --help and in
docs/commands.md, with every option; cli.py only assembles."""
import argparse
import re
import shlex

import pytest

from conftest import ROOT
from kdiag import cli
from kdiag.bundle.limits import CAPS
from kdiag.commands import COMMANDS, examples

EXAMPLES = ROOT / "kdiag" / "commands" / "examples"
PAGE = ROOT / "docs" / "commands.md"
NAMES = [cmd.NAME for cmd in COMMANDS]
CAP_OPTIONS = {cap.option for cap in CAPS.values()}


def _command_lines(text: str) -> list[str]:
    """The kdiag command lines of an examples file: a line indented by two
    that runs kdiag (after any VAR=value), with its continuation lines."""
    lines, current = [], None
    for line in text.splitlines():
        if current is None:
            if not re.match(r"^  (\w+=\S+ )*kdiag ", line):
                continue
            current = line.strip()
        else:
            current += " " + line.strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip()
        else:
            lines.append(current)
            current = None
    return lines


def _argv(line: str) -> list[str]:
    words = shlex.split(line)
    while re.match(r"^\w+=", words[0]):
        words.pop(0)
    assert words[0] == "kdiag", line
    words = words[1:]
    # As main() does: what follows "--" is the producer's command line.
    return words[:words.index("--")] if "--" in words else words


def _subparsers(ap: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_cli_only_assembles():
    assert len((ROOT / "kdiag" / "cli.py").read_text().splitlines()) < 200


def test_every_command_has_an_examples_file_and_no_file_is_left_over():
    assert sorted(p.stem for p in EXAMPLES.glob("*.txt")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_example_is_a_command_line_the_parser_takes(name):
    lines = _command_lines(examples(name))
    assert any(_argv(line)[0] == name for line in lines), f"{name}.txt has no kdiag {name} example"
    ap = cli.parser()
    for line in lines:
        try:
            args = ap.parse_args(_argv(line))
        except SystemExit:
            pytest.fail(f"{name}.txt: the parser refuses {line!r}")
        assert args.command == name, line


def test_a_wrong_option_in_an_example_would_fail():
    with pytest.raises(SystemExit):
        cli.parser().parse_args(_argv("  kdiag replay --no-such-option x.tar.gz"))
    assert _command_lines("  kdiag trace -b a:1 \\\n      --messages 2\n      what it does\n") \
        == ["kdiag trace -b a:1 --messages 2"]


@pytest.mark.parametrize("name", NAMES)
def test_help_shows_the_examples_file(name, capsys):
    assert cli.main([name, "--help"]) == 0
    shown = capsys.readouterr().out
    assert shown.rstrip().endswith("examples:\n" + examples(name).rstrip())


def test_kdiag_help_lists_every_setting(capsys):
    from kdiag import settings

    cli.main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for s in settings.SETTINGS:
        assert f"{s.name} {' '.join(s.doc.split())}" in shown, s.name


def _options(p: argparse.ArgumentParser):
    """(names as the page writes them, the choices) of each option."""
    for a in p._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        if a.option_strings:
            yield a.option_strings, a.choices or ()
        else:
            yield ([] if a.choices else [a.metavar or a.dest]), a.choices or ()


@pytest.mark.parametrize("name", NAMES)
def test_the_commands_page_gives_every_option_and_example(name):
    page = PAGE.read_text()
    assert f"\n## kdiag {name}\n" in page
    section = page.split(f"\n## kdiag {name}\n")[1].split("\n## ")[0]
    shared = page.split("\n## Options shared by the commands that read bundles\n")[1].split("\n## ")[0]
    for options, choices in _options(_subparsers(cli.parser())[name]):
        for option in options:
            where = shared if option in CAP_OPTIONS else section
            assert re.search(rf"`{re.escape(option)}[` ]", where), f"{name}: {option}"
        for choice in choices:
            assert re.search(rf"\b{re.escape(choice)}\b", section), f"{name}: {choice}"
    assert "```\n" + examples(name).rstrip("\n") + "\n```" in section


@pytest.mark.parametrize("cmd", COMMANDS, ids=NAMES)
def test_every_command_module_declares_what_the_cli_reads(cmd):
    assert cmd.__name__ == f"kdiag.commands.{cmd.NAME}"
    assert isinstance(cmd.HELP, str) and cmd.HELP
    assert isinstance(cmd.PROGRESS, bool) and isinstance(cmd.GUARDED, bool)
    assert callable(cmd.add_arguments) and callable(cmd.run)
