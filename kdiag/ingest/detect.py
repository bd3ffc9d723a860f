"""Which format a file holds, judged by its content, never by its name.

The formats, and how each is recognised, are the ones the parser modules
declare (kdiag.parsers.registry). Recognition runs in three rounds, in
kdiag.parsers.format.RECOGNITION_ORDER: the file's first bytes (binary
captures), then the keys of its first JSON line, then a 0..1 score of its
first lines, where the best score of at least LINE_SCORE_MIN wins and a
tie goes to the format listed first.
"""
from __future__ import annotations

import json
import re
import stat
from pathlib import Path

from kdiag.errors import UsageError
from kdiag.visible import visible

# pcap's magic is 4 bytes; pcapng's byte-order magic is not read here (the
# parser counts a bad one as corrupt).
MAGIC_BYTES = 4
LINE_SCORE_MIN = 0.2
# A file in no format kdiag reads may still be about a Kafka client (a form
# of its log or statistics not catalogued yet): then the findings must say
# it was not read, not that the inputs hold nothing. The words are
# librdkafka's own names, its structs' member prefix (`rkb_`: a debugger's
# dump of a broker handle), its statistics' keys and the lines its example
# producers print, which name neither Kafka nor librdkafka (examples/producer.c:
# "% Enqueued message (%zd bytes) for topic %s", "% Message delivered (%zd
# bytes, partition %d)", "% Message delivery failed: %s"; rdkafka_example.c:
# "% Sent %zd bytes to topic %s partition %i"); the head read is bounded.
KAFKA_WORDS = re.compile(rb"(?i)\b(?:lib)?rdkafka\b|kafka|\b(?:Produce|Metadata|ApiVersion)(?:Request|Response)\b"
                         rb"|\brd_kafka_|\brkb_(?=[a-z])|\bint_latency\b|\boutbuf_latency\b|\btxretries\b|\bmsg_cnt\b|\[thrd:"
                         rb"|(?m:^% (?:Enqueued message \(|Message delivered \(|Message delivery failed:|Sent \d+ bytes to topic ))")
KAFKA_HEAD_BYTES = 1 << 20
EXAMPLE_OUTPUT = "librdkafka example producer output"


def _json_keys(sample: list[str]) -> set[str]:
    for line in sample:
        line = line.strip()
        if line:
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                return set()
            return set(obj) if isinstance(obj, dict) else set()
    return set()


def detect(path: Path) -> str | None:
    """The name of the format this file holds, or None for none kdiag reads."""
    from kdiag.parsers.format import BY_JSON_KEYS, BY_LINES, BY_MAGIC
    from kdiag.parsers.registry import formats

    known = formats()
    with open(path, "rb") as f:
        head = f.read(MAGIC_BYTES)
    for fmt in known:
        if fmt.recognised_by == BY_MAGIC and fmt.recognise(head):
            return fmt.name
    from kdiag.ingest.lines import sniff  # numpy and pyarrow: not for readable_inputs' callers

    sample = sniff(path)
    keys = _json_keys(sample)
    for fmt in known:
        if fmt.recognised_by == BY_JSON_KEYS and fmt.recognise(keys):
            return fmt.name
    best, name = 0.0, None
    for fmt in (f for f in known if f.recognised_by == BY_LINES):
        score = fmt.recognise(sample)
        if score > best:
            best, name = score, fmt.name
        if best >= 1.0:
            # No later format can beat a full score, and a tie goes to the
            # one listed first: the rest need not read the sample (a bundle's
            # librdkafka log scored by seven more recognisers: 9 ms).
            break
    return name if best >= LINE_SCORE_MIN else None


def kafka_words(path: Path) -> list[str]:
    """The Kafka client words in the file's head, each once, lower case:
    empty for a file about something else."""
    with open(path, "rb") as f:
        head = f.read(KAFKA_HEAD_BYTES)
    seen: dict[str, None] = {}
    for m in KAFKA_WORDS.finditer(head):
        word = m.group()
        seen.setdefault(EXAMPLE_OUTPUT if word.startswith(b"%") else word.decode("ascii", "replace").lower())
        if len(seen) >= 5:
            break
    return list(seen)


def readable_inputs(paths: list[Path]) -> None:
    """Each input exists and is not a stream: a FIFO or socket would block
    the first read, and kdiag reads a file more than once (recognition,
    then parsing). stat() never blocks, so this comes before any open()."""
    for p in paths:
        try:
            mode = Path(p).stat().st_mode
        except FileNotFoundError:
            raise UsageError(f"{visible(p)}: no such file or directory") from None
        except OSError as e:
            raise UsageError(f"{visible(p)}: cannot read it ({e.strerror or e})") from None
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else None
        if kind:
            raise UsageError(f"{visible(p)}: {kind}, not a file; save what it carries to a file and give kdiag that")
