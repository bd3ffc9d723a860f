"""Every case under fixtures/excerpts/ replays to its verdict: the files
users paste into tickets, read whole or counted, never refused whole."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

CASES = Path(__file__).resolve().parent.parent / "fixtures" / "excerpts"


def case_fields(case: Path) -> dict:
    fields, key = {}, None
    for line in (case / "CASE").read_text().splitlines():
        if line[:1].isspace() and key:
            fields[key] += " " + line.strip()
            continue
        key, _, value = line.partition(":")
        key = key.strip()
        fields[key] = value.strip()
    return fields


def case_dirs() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if (p / "CASE").is_file())


def inputs_of(case: Path) -> list[Path]:
    return sorted(p for p in case.iterdir() if p.is_file() and p.name != "CASE")


def catalogued_facts() -> list[tuple[str, list[str]]]:
    """(first words, cases named) of each fact of docs/formats.md's
    catalogue of pastes."""
    text = (CASES.parents[1] / "docs" / "formats.md").read_text()
    section = text[text.index("## Pastes as they reach tickets"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    facts = re.split(r"\n(?=- )", section)[1:]
    return [(f[:60], re.findall(r"`([a-z0-9_]+)`", f.split("Cases:", 1)[1]) if "Cases:" in f else [])
            for f in facts]


def test_every_catalogued_structure_has_a_case_that_replays():
    facts = catalogued_facts()
    assert len(facts) >= 20, "the catalogue's facts were not found"
    names = {c.name for c in case_dirs()}
    for first, cases in facts:
        assert cases, f"no Cases: for the catalogued fact {first!r}"
        assert set(cases) <= names, f"{first!r} names cases that do not exist: {sorted(set(cases) - names)}"


def test_every_case_declares_format_verdict_and_origin():
    assert case_dirs(), "no excerpt cases"
    for case in case_dirs():
        f = case_fields(case)
        for key in ("format", "verdict", "made"):
            assert f.get(key), f"{case.name}: CASE lacks {key}"
        assert inputs_of(case), f"{case.name}: no input files"


@pytest.mark.parametrize("case", case_dirs(), ids=lambda p: p.name)
def test_case_replays_to_its_verdict(case, spark, tmp_path):
    from kdiag.analysis.pipeline import analyse

    expected = case_fields(case)["verdict"]
    findings, parsed = analyse(inputs_of(case), tmp_path / "tables", {}, spark=spark)
    refused = [f["path"] for f in parsed.files if f.get("kind") in (None, "unknown")]
    # "read: no": output about a Kafka client that no format reads; it must
    # be said so, and leave the result undecided rather than empty.
    if case_fields(case).get("read") == "no":
        assert refused and findings.get("undecided"), (refused, findings.get("undecided"))
    else:
        assert not refused, f"refused whole: {refused}; notes {parsed.notes}"
    for f in parsed.files:
        c = f.get("counts") or {}
        if c:
            assert c["parsed"] + c["skipped_total"] >= c["lines"] - c.get("record_parts", 0), f
    got = "undecided" if findings["verdict"] is None and findings.get("undecided") else findings["verdict"]
    assert got == expected, (findings["verdict"], [x["cause"] for x in findings["findings"]], findings.get("unknowns"))
    # What a user sees of it: the terminal's report and the page.
    from kdiag.report.html import render_html
    from kdiag.report.text import render

    assert render(findings).startswith("kdiag: ")
    assert "Verdict" in render_html(findings)
