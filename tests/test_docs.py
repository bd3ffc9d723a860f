"""The docs a newcomer walks: a README short enough to read, whose commands
are the ones the project runs, and pages under docs/ whose links all lead
somewhere and which each say first what they cover."""
import re

import pytest

from conftest import ROOT

README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
RESULTS = ROOT / "bench" / "RESULTS.md"
HISTORY = sorted((ROOT / "bench" / "history").glob("*.md"))
# [text](target) and [label]: target; a target ends at a space (a title) or ")".
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)[^)]*\)|^\s*\[[^\]]+\]:\s*(\S+)", re.M)


def _lines_outside_code(text: str) -> list[str]:
    out, code = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            code = not code
        elif not code:
            out.append(line)
    return out


def _relative_links(path):
    text = "\n".join(_lines_outside_code(path.read_text()))
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        yield target


def test_readme_is_at_most_250_lines():
    assert len(README.read_text().splitlines()) <= 250


def test_readme_lines_are_wrapped():
    # Tables, verbatim output and bare links may run long; prose may not.
    long = [line for line in _lines_outside_code(README.read_text())
            if len(line) > 100 and not line.startswith("|") and " " in line.strip()]
    assert not long, long


def test_readme_gives_the_commands_the_project_runs():
    readme = README.read_text()
    first_screen = "\n".join(readme.splitlines()[:40])
    assert "    ./setup.sh && kdiag trace\n" in first_screen
    # .ci/run says it runs the README's test command: the same line, verbatim.
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = [line for line in ci.splitlines() if "pytest" in line and not line.startswith("#")]
    assert len(test_command) == 1, test_command
    assert f"    {test_command[0]}\n" in first_screen


@pytest.mark.parametrize("path", [README, *PAGES, RESULTS, *HISTORY], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path):
    targets = list(_relative_links(path))
    if path == README:
        assert any(t.startswith("docs/") for t in targets)
    missing = [t for t in targets if not (path.parent / t.split("#", 1)[0]).exists()]
    assert not missing, f"{path.name} links to {missing}"


def test_every_page_is_linked_from_the_readme():
    linked = {(ROOT / t.split("#", 1)[0]).resolve() for t in _relative_links(README)}
    assert [p.name for p in PAGES if p.resolve() not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_opens_with_a_title_and_what_it_covers(page):
    lines = page.read_text().splitlines()
    assert lines[0].startswith("# "), lines[0]
    assert lines[1] == ""
    # The first paragraph is prose, not a list, table, code or another heading.
    assert lines[2] and not re.match(r"^(#|\||-|\*|\d+\.|    |```)", lines[2]), lines[2]


def test_bench_results_hold_one_table_of_current_figures_per_bench():
    lines = RESULTS.read_text().splitlines()
    headers = [line for line, below in zip(lines, lines[1:]) if below.startswith("|---")]
    assert headers and set(headers) == {"| what | command | figure | date | commit |"}, headers
    days = {p.stem for p in HISTORY}
    rows = [line for line in lines if line.startswith("| ") and line not in headers]
    assert len(rows) >= len(headers)
    for row in rows:
        date = row.split(" | ")[3]
        # Each figure's run is told in full in the history file of its day.
        assert re.match(r"^\d{4}-\d\d-\d\d", date) and date[:10] in days, row


def test_bench_history_files_are_named_by_their_day():
    assert HISTORY
    for path in HISTORY:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", path.stem), path.name
        assert path.read_text().startswith(f"# Benchmark runs of {path.stem}\n"), path.name
