"""Tool output users paste: strace's summary tables (fixtures made here by
real runs, fixtures/tools/README.md says how), read into their tables
however a chat mangled them, recognised by content alone, without taking
another format's files."""
from __future__ import annotations

import random
import time
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import FIXTURES
from kdiag.ingest.detect import detect
from kdiag.parsers import strace_summary
from kdiag.parsers.strace_summary import parse_summary

TOOLS = FIXTURES / "tools"
FORMATS = FIXTURES / "formats"
OURS = ("strace_summary",)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def accounted(counts) -> None:
    assert counts.lines == counts.parsed + counts.skipped_total, counts.to_dict()


def mangled(raw: list[str]) -> dict[str, list[str]]:
    return {
        "quote": ["> " + s for s in raw],
        "crlf": [s + "\r" for s in raw],
        "fence": ["```", *raw, "```"],
        "trailing": [s + "   " for s in raw],
        "prompt": ["$ strace -c -f -o out python3 producer.py", *raw],
    }


def _content(t: pa.Table, drop=("line_no",)) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in drop} for r in t.to_pylist()]


# ------------------------------------------------------------ strace -c

def test_strace_c_rows_total_and_blank_errors():
    t, c = parse_summary(lines(FORMATS / "strace_summary.txt"))
    accounted(c)
    assert c.parsed == c.lines == 54
    rows = t.to_pylist()
    assert len(rows) == 51
    assert rows[0] == {"line_no": 3, "summary": 1, "syscall": "futex", "total": False, "calls": 249, "errors": 24,
                       "seconds": 0.094542, "usecs_per_call": 379, "time_pct": 59.74, "shortest_s": None,
                       "longest_s": None, "wall": None}
    # A blank errors cell is no errors, not a missing column.
    assert rows[1]["syscall"] == "clock_nanosleep" and rows[1]["errors"] == 0 and rows[1]["calls"] == 200
    assert rows[4]["syscall"] == "read" and (rows[4]["calls"], rows[4]["errors"]) == (1127, 326)
    assert rows[-1] == {"line_no": 54, "summary": 1, "syscall": None, "total": True, "calls": 5136, "errors": 605,
                        "seconds": 0.158243, "usecs_per_call": 30, "time_pct": 100.0, "shortest_s": None,
                        "longest_s": None, "wall": None}
    body = [r for r in rows if not r["total"]]
    assert sum(r["calls"] for r in body) == 5136 and sum(r["errors"] for r in body) == 605


def test_strace_cw_is_wall_only_when_the_command_line_says_so():
    raw = lines(TOOLS / "strace_cw.txt")
    t, _ = parse_summary(raw)
    assert set(t["wall"].to_pylist()) == {None}
    assert t.to_pylist()[0]["syscall"] == "futex" and t.to_pylist()[0]["seconds"] == 2.187168
    for cmd, wall in (("$ strace -c -w -f -o o python3 p.py", True), ("# strace -cfw python3 p.py", True),
                      ("$ strace --summary-wall-clock -c python3 p.py", True), ("$ strace -c -f python3 p.py", False)):
        t, _ = parse_summary([cmd, *raw])
        assert set(t["wall"].to_pylist()) == {wall}, cmd


def test_strace_U_columns_in_any_order_with_blank_cells():
    raw = ["syscall              calls    errors  longest",
           "---------------- --------- --------- --------",
           "execve                   1           0.000206",
           "openat                  12         3 0.000031",
           "---------------- --------- --------- --------",
           "total                   13         3 0.000206"]
    t, c = parse_summary(raw)
    accounted(c)
    assert [(r["syscall"], r["calls"], r["errors"], r["longest_s"], r["total"]) for r in t.to_pylist()] == [
        ("execve", 1, 0, 0.000206, False), ("openat", 12, 3, 0.000031, False), (None, 13, 3, 0.000206, True)]
    # strace 4's total row leaves usecs/call blank.
    old = ["% time     seconds  usecs/call     calls    errors syscall",
           "------ ----------- ----------- --------- --------- ----------------",
           " 90.00    0.000900          90        10         1 sendmsg",
           "------ ----------- ----------- --------- --------- ----------------",
           "100.00    0.001000                    12         1 total"]
    t, c = parse_summary(old)
    assert t.to_pylist()[-1]["usecs_per_call"] is None and t.to_pylist()[-1]["calls"] == 12
    assert c.parsed == 5


def test_two_tables_in_one_paste_are_numbered():
    raw = lines(FORMATS / "strace_summary.txt")
    t, _ = parse_summary([*raw, "", "then with linger.ms=0:", *lines(TOOLS / "strace_cw.txt")])
    assert t["summary"].unique().to_pylist() == [1, 2]
    assert sum(t["total"].to_pylist()) == 2


@pytest.mark.parametrize("name", [FORMATS / "strace_summary.txt", TOOLS / "strace_cw.txt"], ids=lambda p: p.name)
def test_chat_and_markdown_mangling_reads_the_same(name, tmp_path):
    raw = lines(name)
    want, _ = parse_summary(raw)
    for how, text in mangled(raw).items():
        got, c = parse_summary(text)
        accounted(c)
        drop = ("line_no", "wall") if how == "prompt" else ("line_no",)
        assert _content(got, drop) == _content(want, drop), how
        blind = tmp_path / f"{how}.bin"
        blind.write_text("\n".join(text) + "\n")
        assert detect(blind) == "strace_summary", how


def test_program_output_around_the_table_is_counted_not_read():
    raw = ["produced 200", "strace: Process 1234 detached", *lines(FORMATS / "strace_summary.txt")]
    t, c = parse_summary(raw)
    accounted(c)
    assert len(t) == 51 and c.skipped == {"not_summary": 1, "strace_message": 1}


# ------------------------------------------------------------ any input

def _junk(seed: int, fixtures: list[Path]) -> list[str]:
    rnd = random.Random(seed)
    alphabet = " \t*!()[]<>|`-.:/%0123456789abcdefms{}\"\r"
    junk = ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 80))) for _ in range(400)]
    for p in fixtures:
        junk += [s[:rnd.randrange(0, len(s) + 1)] for s in lines(p)]
    rnd.shuffle(junk)
    return junk


@pytest.mark.parametrize("parse,module", [(parse_summary, strace_summary)], ids=lambda p: getattr(p, "__name__", ""))
def test_junk_never_crashes_and_every_line_is_counted(parse, module):
    junk = _junk(40, [FORMATS / "strace_summary.txt", TOOLS / "strace_cw.txt"])
    _, c = parse(junk)
    accounted(c)
    module.looks_like(junk[:50])


# Lines of n characters that lead each pattern far before it fails.
HOSTILE = [lambda n: "% time " + " " * n + "calls syscall", lambda n: "-" * n, lambda n: "- " * (n // 2),
           lambda n: " 1" * (n // 2) + " futex", lambda n: "9" * n]


@pytest.mark.parametrize("parse,module", [(parse_summary, strace_summary)], ids=lambda p: getattr(p, "__name__", ""))
def test_a_10_mb_line_costs_linear_time(parse, module):
    head = lines(FORMATS / "strace_summary.txt")[:2]

    def cost(n: int) -> float:
        start = time.perf_counter()
        for make in HOSTILE:
            line = make(n)
            module.looks_like([line] * 2)
            t, c = parse([*head, line, line])
            accounted(c)
            assert len(t) <= 2
        return time.perf_counter() - start

    # Ten times the length costs about ten times the time, not a hundred.
    small, big = cost(1_000_000), cost(10_000_000)
    assert big < 25 * small + 1.0, (small, big)


@pytest.mark.parametrize("parse,row", [
    (parse_summary, "  0.00    0.000001           1         1         1 read"),
], ids=["strace_summary"])
def test_many_rows_parse_in_linear_time(parse, row):
    head = lines(FORMATS / "strace_summary.txt")[:2]

    def cost(n: int) -> float:
        start = time.perf_counter()
        t, c = parse([*head, *([row] * n)])
        assert len(t) == n and c.parsed == n + 2
        return time.perf_counter() - start

    # Half a million: a million costs a minute on a loaded CI runner; ten
    # times the rows must cost about ten times the time, not a hundred.
    small, big = cost(50_000), cost(500_000)
    assert big < 25 * small + 1.0, (small, big)


# ------------------------------------------------------------ recognition

def _inputs() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix not in (".cmd", ".py")
                  and p.name not in ("CASE", "README.md", "CAPTURED"))


def test_each_tool_fixture_is_recognised():
    assert detect(FORMATS / "strace_summary.txt") == "strace_summary"
    assert detect(TOOLS / "strace_cw.txt") == "strace_summary"


def test_no_other_fixture_changes_its_format(monkeypatch):
    """Every fixture in the tree is detected as it was before these formats
    were registered, but for the tools' own output."""
    from kdiag.parsers import registry

    with_ours = {p: detect(p) for p in _inputs()}
    without = tuple(f for f in registry.formats() if f.name not in OURS)
    monkeypatch.setattr(registry, "formats", lambda: without)
    for p, kind in with_ours.items():
        if kind in OURS:
            assert detect(p) is None, p
        else:
            assert detect(p) == kind, p
