"""What every parser shares: the record of what it could not read.

Parsers are pure: they take Arrow string arrays of lines and return Arrow
tables. They never open files and never read the clock, so the same input
always gives the same tables, on a producer host or on a laptop.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

# A handful of the lines that did not parse are kept verbatim so a report can
# show what they looked like; the count is always exact.
EXAMPLES_KEPT = 5


# Skip reasons of lines whose text was read, as part of a record that
# another line starts (a wrapped record's pieces, a multi-line object's
# lines) or of a cut statistics object: counted apart from what was not read.
READ_AS_PART = frozenset({"record_part", "joined", "cut"})


@dataclass
class ParseCounts:
    """Exact accounting of a parser's input: lines == parsed + sum(skipped)."""

    source: str
    lines: int = 0
    parsed: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    examples: list[tuple[int, str, str]] = field(default_factory=list)  # (line_no, reason, text)
    # Records a paste joined onto a line after its first, each read as a row
    # with the line's number (outside lines == parsed + skipped).
    records_after_first: int = 0

    def skip(self, reason: str, n: int = 1) -> None:
        if n:
            self.skipped[reason] = self.skipped.get(reason, 0) + n

    def example(self, line_no: int, reason: str, text: str) -> None:
        if len(self.examples) < EXAMPLES_KEPT:
            self.examples.append((line_no, reason, text[:300]))

    def reject(self, line_no: int, reason: str, text: str) -> None:
        """A line skipped for a reason worth showing: counted and kept as an
        example."""
        self.skip(reason)
        self.example(line_no, reason, text)

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def merge(self, other: "ParseCounts") -> None:
        self.lines += other.lines
        self.parsed += other.parsed
        self.records_after_first += other.records_after_first
        for k, v in other.skipped.items():
            self.skip(k, v)
        for ex in other.examples:
            self.example(*ex)

    def to_dict(self) -> dict:
        extra = {"records_after_first": self.records_after_first} if self.records_after_first else {}
        return {**extra,
            "source": self.source,
            "lines": self.lines,
            "parsed": self.parsed,
            "skipped": dict(sorted(self.skipped.items())),
            "skipped_total": self.skipped_total,
            "examples": [
                {"line_no": n, "reason": r, "text": t} for n, r, t in self.examples
            ],
        }


def json_lines(lines, counts: ParseCounts, first_line_no: int = 1):
    """(line number, stripped text, decoded value) for each line of a JSON
    lines input (a list or an Arrow array of strings). Every line is counted;
    blank and undecodable ones are skipped here as ``empty`` and
    ``not_json``. Deep nesting (``[[[[...``) fails to decode, not to parse."""
    if hasattr(lines, "to_pylist"):
        lines = lines.to_pylist()
    for no, line in enumerate(lines, first_line_no):
        counts.lines += 1
        text = line.strip() if isinstance(line, str) else ""
        if not text:
            counts.skip("empty")
            continue
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            counts.reject(no, "not_json", text)
            continue
        yield no, text, obj


_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(value):
    """value with each lone surrogate replaced by U+FFFD in every string,
    however nested. JSON may spell them ("\\ud800") and json.loads keeps
    them, but Arrow strings must be UTF-8."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    return value
