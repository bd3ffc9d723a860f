"""How much of its input a page shows, declared in one place.

A page lists what the input held: hops of a pasted traceroute, requests,
evidence, files, socket samples. Drawn whole, the input sets the page's
size (a 0.5 MB gzipped traceroute paste of 99,030 hops made a 15 MB page
with a table row per hop). Each section shows at most ``SHOWN[section]``
rows and says how many it left out and where they all are, so a page's size
is bounded by these numbers, whatever the input holds. Charts bin or thin
their points to these numbers instead of drawing a mark per row.
"""
from __future__ import annotations

SHOWN = {
    "findings": 20,         # causes found, a box each
    "evidence": 20,         # lines of evidence of one finding
    "likely": 20,           # rows of the likely causes
    "notes": 30,            # items of one list of unknowns, notes or partial reasons
    "input_checks": 50,     # rows of the input checks
    "inputs": 50,           # rows of the files read
    "paths": 200,           # hops, over every target
    "statistics": 60,       # points of the statistics series (the findings keep as many)
    "requests": 2_500,      # dots of latency over time (findings keep 2,000 and the slowest)
    "causes": 12,           # causes given a colour of their own in a chart; the rest share one
    "connections": 12,      # socket series in a panel
    "socket_points": 600,   # points of one series in one panel
    "text_chars": 1_000,    # characters of any one text
}

# Where every hop is kept when a listing is capped.
IN_PROBES = ("the full listing is the probes table: tables/probes.parquet in a bundle, "
             "or what kdiag parse -o DIR writes of raw files")


def capped(items: list, section: str) -> tuple[list, int]:
    """The first ``SHOWN[section]`` of ``items``, and how many were left out."""
    n = SHOWN[section]
    return items[:n], max(0, len(items) - n)


def paths_shown(paths) -> tuple[list[dict], int]:
    """The hops a report lists, and how many it left out. The paths to the
    brokers come first: a paste of other hosts' listings must not push them
    past the cap. Entries that are not objects (a bundle anyone may edit) are
    none of them."""
    rows = [p for p in paths if isinstance(p, dict)] if isinstance(paths, list) else []
    return capped(sorted(rows, key=lambda p: p.get("broker") is None), "paths")


def clipped(text: str) -> str:
    n = SHOWN["text_chars"]
    if len(text) <= n:
        return text
    return f"{text[:n]}\u2026 ({len(text) - n:,} more characters)"
