"""The docs tables made from the registries, and where each lives: between
``<!-- made by NAME -->`` and ``<!-- end of the table -->`` in its page.

    python tests/docs_tables.py     # rewrites each table from its registry

The tests compare each page's table with its registry in full."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
END = "<!-- end of the table -->"


def tables() -> dict[tuple[str, str], str]:
    """(page, the marker's NAME) -> the table as the registry makes it."""
    from kdiag.capture import tracers
    from kdiag.lab import scenarios

    return {
        ("docs/lab.md", "kdiag.lab.scenarios.markdown_table()"): scenarios.markdown_table(),
        ("docs/tracers.md", "kdiag.capture.tracers.markdown_table()"): tracers.markdown_table(),
    }


def table_in(text: str, name: str) -> str:
    """The table a page holds under ``<!-- made by name -->``."""
    start = text.index("\n", text.index(f"<!-- made by {name} -->")) + 1
    return text[start:text.index(END, start)]


def with_table(text: str, name: str, table: str) -> str:
    start = text.index("\n", text.index(f"<!-- made by {name} -->")) + 1
    return text[:start] + table + text[text.index(END, start):]


def main() -> int:
    for (page, name), table in tables().items():
        path = ROOT / page
        text = path.read_text()
        if table_in(text, name) != table:
            path.write_text(with_table(text, name, table))
            print(f"{page}: table rewritten from {name}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
