"""What a parser module declares about each input format it reads.

A parser module names its formats in a module-level ``FORMATS`` tuple of
``Format`` records; ``kdiag.parsers.registry`` lists those modules, and
format detection, the table mapping and a bundle's table schemas are all
read from there. A format is recognised by content, never by file name.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

# How a format is recognised, in the order detection tries the three ways:
# a binary format by the file's first bytes (``recognise(head) -> bool``),
# a JSON lines format by the keys of its first JSON line
# (``recognise(keys) -> bool``), a text format by a 0..1 score of its first
# lines (``recognise(sample) -> float``; the best score wins).
BY_MAGIC = "magic"
BY_JSON_KEYS = "json_keys"
BY_LINES = "lines"
RECOGNITION_ORDER = (BY_MAGIC, BY_JSON_KEYS, BY_LINES)

# How the file reaches the parser. CHUNKS: ``parser()`` makes an object
# that is fed chunks of lines (``feed(lines, first_line_no)``, then
# ``finish()``, with ``counts``); its tables come out as one table (the
# format's first) or a dict of them. Whole files, small by nature:
# ``parser(data, told) -> (table, counts)`` with the file's bytes (BYTES)
# or its text lines (TEXT); ``told`` (``Told``) is what the whole files
# parsed before it in the same parse said, and the parser adds what it says.
CHUNKS = "chunks"
BYTES = "bytes"
TEXT = "text"
READS = (CHUNKS, BYTES, TEXT)

@dataclass
class Told:
    """What whole files tell those parsed after them in one parse (see
    ``Format.parse_order``)."""
    # (host, port) -> the broker name a capture's handshakes gave, for a
    # format that cannot name brokers.
    brokers: dict = field(default_factory=dict)
    # A probe pcap with packets was read: they are the record of SYN probes.
    packets: bool = False


# How a file of the format is pseudonymised before it goes into a bundle
# (kdiag.bundle.pseudonym): its text and JSON values scanned for addresses
# and hostnames, or its packets rewritten record by record. A format neither
# can rewrite says why it is left as it is (``LeftAsIs``); the bundle's
# record of pseudonyms then lists its files with that reason.
TEXT_SCANNER = "text scanner"
PACKET_REWRITER = "pcap rewriter"
PSEUDONYMISERS = (TEXT_SCANNER, PACKET_REWRITER)


@dataclass(frozen=True)
class LeftAsIs:
    why: str

    def __str__(self) -> str:
        return f"none: {self.why}"


# What the analysis takes from a format's rows (docs/formats.md says what
# each means): requests paired from librdkafka's Sent/Received lines;
# syscalls, which split a request's time and show the connections;
# librdkafka's other lines (timeouts, retries, batches); the client queue
# and throttles from librdkafka's statistics; the network path's RTT and
# hops; live samples of the producer's sockets, threads and host; the
# connections and requests a packet capture shows.
REQUESTS = "requests"
SYSCALLS = "syscalls"
SIGNALS = "signals"
CLIENT_QUEUE = "client queue"
PATH = "path"
SOCKET_SAMPLES = "socket samples"
THREAD_SAMPLES = "thread samples"
WIRE = "wire"
ANALYSIS_INPUTS = (REQUESTS, SYSCALLS, SIGNALS, CLIENT_QUEUE, PATH, SOCKET_SAMPLES, THREAD_SAMPLES, WIRE)


@dataclass(frozen=True)
class Format:
    name: str                       # what detection calls it; kept in a bundle's file list
    recognised_by: str              # one of RECOGNITION_ORDER
    recognise: Callable             # see RECOGNITION_ORDER for its argument and result
    tables: Mapping[str, pa.Schema]  # the tables it fills -> schema; the parser's own first
    schema_version: int             # the tables' schema_version a bundle records
    reads: str                      # one of READS
    parser: Callable                # see READS
    title: str                      # what a person calls it: "librdkafka log"
    pseudonymised: str | LeftAsIs   # one of PSEUDONYMISERS, or why it is not
    feeds: Mapping[str, tuple[str, ...]]  # each of its tables -> the ANALYSIS_INPUTS its rows give
    # The raw/ folder a bundle keeps it in (the collector's raw_dir), None
    # for a capture only a user gives (kdiag replay reads it, kdiag trace
    # never makes it).
    bundle_dir: str | None
    # A CHUNKS parser that keeps nothing from one chunk to the next but its
    # counts: chunks may be parsed in parallel, one parser each.
    stateless: bool = False
    # Files are parsed in this order, lowest first, else as given: a whole
    # file whose rows tell later ones something (``Told``) goes first.
    parse_order: int = 0
    # Its times are not all on the epoch clock, nor its pids all in its rows,
    # until kdiag.ingest.strace_clock dates them from librdkafka's own
    # timestamps and takes pids from file names; its line numbers run on
    # from one file to the next.
    dated_after_parse: bool = False
    # Earlier schema versions of tables that changed: version -> table ->
    # schema; a bundle written then still verifies. A table not named at an
    # earlier version had the schema it has now.
    older: Mapping[int, Mapping[str, pa.Schema]] = field(default_factory=dict)

    def schema_at(self, table: str, version: int) -> pa.Schema | None:
        """The table's schema at that version, None for a version it never had."""
        if version == self.schema_version:
            return self.tables[table]
        if version in self.older:
            return self.older[version].get(table, self.tables[table])
        return None

    @property
    def table(self) -> str:
        """The table the parser's own rows go to."""
        return next(iter(self.tables))

    @property
    def inputs(self) -> tuple[str, ...]:
        """The analysis inputs any of its tables gives."""
        return tuple(dict.fromkeys(i for fed in self.feeds.values() for i in fed))
