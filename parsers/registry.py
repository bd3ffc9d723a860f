"""The input formats kdiag reads: one ordered list of the parser modules
that declare them (each module's ``FORMATS``, see ``kdiag.parsers.format``).

Adding a format is one parser module with a ``FORMATS`` declaration plus
its name here.
"""
from __future__ import annotations

import functools
import importlib

from kdiag.parsers.format import Format

# Detection order matters and is today's: recognition runs by magic bytes,
# then by JSON keys, then by line score (kdiag.parsers.format), and within
# each way in this order; of equal line scores the earlier module wins, so
# rdkafka_log goes before strace, stats and sockets.
FORMAT_MODULES = (
    "wire.parser",   # pcap, pcapng (magic): kdiag's probes and the producer's connections
    "tcp_probe",     # probes_jsonl, handshakes_jsonl (JSON keys)
    "rdkafka_log",
    "strace",
    "strace_summary",  # strace -c / -C / -w tables -> syscall_totals
    "strace_counts",   # strace lines counted by uniq -c -> syscall_totals
    "stats",
    "rdkafka_performance",  # its interval table and summary lines -> perf_intervals, stats
    "sockets",
    # The user's own path tools, last: read only a file no format above
    # scores as high (their hop lines hold no librdkafka or strace line).
    "traceroute",    # tcptraceroute, traceroute -T / UDP / ICMP listings
    "mtr",           # mtr --report / --report-wide / --json
    "ping",
    "ss",            # ss -ti socket listings -> the sockets table
)


@functools.cache
def formats() -> tuple[Format, ...]:
    """Every declared format, in detection order."""
    found: list[Format] = []
    for module in FORMAT_MODULES:
        found += importlib.import_module(f"{__package__}.{module}").FORMATS
    return tuple(found)


def format_named(name: str) -> Format:
    for fmt in formats():
        if fmt.name == name:
            return fmt
    raise KeyError(name)


def format_filling(table: str) -> Format:
    """The format whose parser's own rows go to ``table`` (its first)."""
    for fmt in formats():
        if fmt.table == table:
            return fmt
    raise KeyError(table)


def table_schemas() -> dict:
    """Each table any format fills -> its Arrow schema."""
    out: dict = {}
    for fmt in formats():
        out.update(fmt.tables)
    return out


def bundle_dirs() -> tuple[str, ...]:
    """The raw/ folders a bundle keeps formats in: those whose files the
    analysis reads (raw/probe/ holds the probe's own summary, metadata)."""
    return tuple(dict.fromkeys(f.bundle_dir for f in formats() if f.bundle_dir))


def tables_feeding(*inputs: str) -> tuple[str, ...]:
    """The tables whose rows give any of these analysis inputs, in
    registry order."""
    return tuple(dict.fromkeys(t for f in formats() for t, fed in f.feeds.items() if set(fed) & set(inputs)))


def inputs_of(tables) -> frozenset[str]:
    """The analysis inputs that rows of these tables give."""
    return frozenset(i for f in formats() for t, fed in f.feeds.items() if t in tables for i in fed)
