"""librdkafka's message inside any wrapper, and lines mangled on the way
into a ticket.

Every client library hands librdkafka's (level, facility, client name,
message) to the application, which prints it its own way: a logger with
its own prefix (Java's log4j/logback, Go's log and zap, C++ loggers with
source-file prefixes, syslog, journald, structured JSON). What they share is
librdkafka's message itself, which begins ``[thrd:NAME]: `` (rd_kafka_dbg()
and rd_kafka_log() prefix it since v0.9.0) or, without a thread name, with
the broker handle's name and one of the messages read here
(``ssl://h:9093/1: Sent ProduceRequest ...``). The message is taken from
there; the prefix before it is searched for a timestamp, a level, the
facility and the client name (``rdkafka#producer-1``), each null when
absent. A timestamp's resolution is what its fraction of a second prints
(``.123``: 1000 us); a time without a fraction cannot time a request and is
left out, as elsewhere in this parser.

Chat and markdown change lines on the way: ``> `` quoting, autolinks
(``<ssl://h:9093/1>``, Slack's ``<url|label>``), markdown links, inline
code backticks, HTML escapes and no-break spaces are undone first.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers import scan
from kdiag.parsers.rdkafka_log.columns import (
    frac_resolution,
    local_ts,
    null_as_false,
    optional_group,
    resolution_where_stamped,
    unescape,
)
from kdiag.parsers.rdkafka_log.patterns import BROKER_NAME

# The messages a line without "[thrd:" must begin with, after the broker's
# name, to be taken for librdkafka's (the prefixes of patterns.EVENTS, the
# disconnect reasons, and the old TOPPAR "%s [%d] %d+%d msgs").
_BROKER_MESSAGE = (r"^(?P<prefix>.*?)(?P<msg>(?:" + BROKER_NAME + r"): (?:Sent |Received |Timed out |Retrying |"
                   r"Response for unknown CorrId|Broker changed state |Connecting to |Connected to |"
                   r"[0-9]+ request\(s\) timed out|failed: err: |(?:Receive|Send) failed: |Connect to |"
                   r"Failed to connect to broker |Disconnected|Connection closed|[A-Za-z]+Request failed: |"
                   r"Metadata request failed: |\S+ \[-?[0-9]+\] [0-9]+\+[0-9]+ msgs).*)$")
# The message alone, without a thread or broker name (a user's excerpt of
# the lines' ends): the request lines, by their API word and "(".
_BARE_MESSAGE = (r"^(?P<prefix>(?:.*?[\s:\]|])?)(?P<msg>(?:Sent (?:partial )?[A-Za-z]+Request|Received [A-Za-z]+Response"
                 r"|Retrying [A-Za-z]+Request) \(.*|Timed out [A-Za-z]+Request [a-z].*)$")
# A line that holds no librdkafka log message but one of its errors as the
# application got it (patterns.APP_ERROR), or a disconnect's reason whose
# broker name was redacted: the message from there on.
_ERROR_MESSAGE = (r"^(?P<prefix>.*?)(?P<msg>(?:KafkaError\{|(?:Local|Broker): [A-Z]|Local_[A-Z][a-z]|"
                  r"(?:RD_KAFKA_RESP_)?ERR__[A-Z]|_MSG_TIMED_OUT|failed: err: |[0-9]+/[0-9]+ brokers are down|"
                  r"(?:Receive|Send) failed: ).*)$")
# An application's own line saying it hands a message to the client
# ("Sending message", "produce_msg", "enqueueing record"): present-tense
# words only, as "Produced record ... @ offset" is a delivery report.
APP_PRODUCE = (r"(?i)(?:^|[^a-z])(?:produce|producing|send|sending|enqueue|enqueuing)[ _:-]{0,3}"
               r"(?:(?:a|the|one|[0-9]{1,6}) )?(?:msg|message|record)s?(?:[^a-z]|$)")
# A JSON object's string value ends at its first unescaped quote.
_JSON_VALUE_END = r'^((?:[^"\\]|\\.)*)".*$'
# Where a structured logger names the facility.
_JSON_FACILITY = r'"(?:fac|facility|tag|Facility|Tag)"\s*:\s*"(?P<v>[A-Za-z0-9_\-]{1,32})"'
# The facility: the last upper-case word before the message once the words
# that name levels, zones and JSON keys are removed.
_NOT_FACILITY = (r"\b(?:DEBUG|DBG|TRACE|INFO|NOTICE|WARN|WARNING|ERROR|ERR|CRIT|CRITICAL|FATAL|ALERT|EMERG|"
                 r"UTC|GMT|MESSAGE|MSG|LOG|LEVEL|THREAD|SEVERITY|TIME|TIMESTAMP)\b")
_FACILITY = r"(?:^|.*[^A-Za-z0-9_])(?P<v>[A-Z][A-Z0-9_]{2,15})(?:[^A-Za-z0-9_].*|)$"
# rd_kafka_name(): "%s#%s-%i" (client.id, producer or consumer, instance).
_CLIENT = r"(?P<v>[A-Za-z0-9_.\-]*#(?:producer|consumer)-[0-9]+)"
# syslog's and the loggers' level names, to syslog levels.
_LEVEL_WORD = r"(?i)(?:^|[^A-Za-z])(?P<v>emerg|alert|critical|crit|error|err|warning|warn|notice|info|debug|dbg|trace)(?:[^A-Za-z]|$)"
_LEVEL_OF = {"emerg": 0, "alert": 1, "critical": 2, "crit": 2, "error": 3, "err": 3, "warning": 4, "warn": 4,
             "notice": 5, "info": 6, "debug": 7, "dbg": 7, "trace": 7}
# librdkafka's own "%7|" or kafkacat's, and "LOG-7-FAC:" (rdkafka_example's).
# An application's "LOG:7SEND" (level and facility run together).
_LEVEL_NUMBER = r"(?:^|[^0-9])(?:%(?P<v>[0-7])[|\-]|LOG-(?P<w>[0-7])[|\-]|LOG:(?P<x>[0-7])[A-Z])"

# Timestamps, tried in this order; each gives epoch microseconds.
# journald's JSON (``journalctl -o json``): microseconds, as a string.
_JOURNALD = r'"__REALTIME_TIMESTAMP"\s*:\s*"(?P<us>[0-9]{16})"'
# ISO 8601 / RFC 3339 and the loggers' "2026-11-25 10:00:01,123", Go's log
# package "2026/11/25 10:00:01.123456".
# Whole seconds ("2026/11/25 10:00:01") and minutes ("2026-11-25 10:00")
# are kept, their resolution saying so; "10:00:01:123" (a ":" before the
# milliseconds) and "2026.11.25" are loggers' own forms.
_DATE_TIME = (r"(?P<date>[0-9]{4}[-/.][0-9]{2}[-/.][0-9]{2})[T ](?P<time>[0-9]{2}:[0-9]{2}(?::[0-9]{2})?)"
              r"(?:[.,:](?P<frac>[0-9]{1,9}))?(?P<tz>Z|[+\-][0-9]{2}:?[0-9]{2})?")
# Epoch seconds with a fraction (librdkafka's own "%u.%03u"), epoch ms.
_EPOCH_S = r"(?:^|[^0-9.])(?P<s>1[0-9]{9})\.(?P<frac>[0-9]{1,9})(?:[^0-9]|$)"
_EPOCH_MS = r"(?:^|[^0-9.])(?P<ms>1[0-9]{12})(?:[^0-9.]|$)"
# A time of day: syslog's ("Nov 25 10:00:01", its high-precision form
# "Nov 25 10:00:01.123456"), Serilog's "[10:00:01 INF]", "[10:00:01.123]".
_TIME_OF_DAY = (r"(?:^|[^0-9:.])(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,](?P<frac>[0-9]{1,9}))?"
                r"(?:[^0-9:]|$)")

# Undoing chat and markdown: (pattern, replacement), in order.
_UNMANGLE = [
    (r"^\s*(?:>\s?)+", ""),                                             # > quoting, nested
    (r"^\s*`+|`+\s*$", ""),                                             # inline code
    (r"<([A-Za-z][A-Za-z0-9+._\-]*://[^<>|\s]*)\|[^<>]*>", r"\1"),       # Slack <url|label>
    (r"<([A-Za-z][A-Za-z0-9+._\-]*://[^<>\s]*)>", r"\1"),                # <autolink>
    (r"\[([^\[\]]*)\]\((?:[A-Za-z]+://|mailto:)[^()\s]*\)", r"\1"),      # [text](url)
    (r"&lt;", "<"), (r"&gt;", ">"), (r"&quot;", '"'), (r"&amp;", "&"),
    ("\u00a0", " "),
]
_MANGLED = r"^\s*[>`]|<[A-Za-z][A-Za-z0-9+._\-]*://|&(?:lt|gt|quot|amp);|\]\([A-Za-z]+:|`\s*$|\x{a0}"


def unmangle(lines: pa.Array) -> pa.Array:
    """The lines with chat's and markdown's changes undone; the others as
    they are (a literal check keeps a plain log from paying the regexes)."""
    cheap = scan.mangle_candidates(lines)
    if not cheap.any():
        return lines
    idx = np.flatnonzero(cheap)
    sub = lines.take(pa.array(idx))
    hit = null_as_false(pc.match_substring_regex(sub, _MANGLED))
    if not hit.any():
        return lines
    idx, fixed = idx[hit], sub.filter(pa.array(hit))
    for pattern, repl in _UNMANGLE:
        fixed = pc.replace_substring_regex(fixed, pattern, repl)
    mask = np.zeros(len(lines), dtype=bool)
    mask[idx] = True
    return pc.replace_with_mask(lines, pa.array(mask), fixed)


def wrapped(lines: pa.Array, idx: np.ndarray, pieces: list) -> np.ndarray:
    """Rows of lines where librdkafka's message stands inside any other
    wrapper, appended to ``pieces`` (the message without the space the
    stderr format puts before it, as the other wrappers'); returns the
    lines not read."""
    sub = lines.take(pa.array(idx))
    # "[thrd:NAME]: ", as rd_kafka_log0() prints it: a "[thrd:" alone is not it.
    has_thrd = null_as_false(pc.match_substring_regex(sub, r"\[thrd:[^\]]*\]: "))
    prefix = pa.nulls(len(sub), pa.string())
    msg = pa.nulls(len(sub), pa.string())
    if has_thrd.any():
        parts = pc.split_pattern(sub.filter(pa.array(has_thrd)), "[thrd:", max_splits=1)
        prefix = _scatter(prefix, has_thrd, pc.list_element(parts, 0))
        msg = _scatter(msg, has_thrd, pc.binary_join_element_wise("[thrd:", pc.list_element(parts, 1), ""))
    rest = ~has_thrd
    if rest.any():
        got = pc.extract_regex(sub.filter(pa.array(rest)), _BROKER_MESSAGE)
        prefix = _scatter(prefix, rest, pc.struct_field(got, "prefix"))
        msg = _scatter(msg, rest, pc.struct_field(got, "msg"))
        bare = ~null_as_false(pc.is_valid(msg))
        if bare.any():
            got = pc.extract_regex(sub.filter(pa.array(bare)), _BARE_MESSAGE)
            prefix = _scatter(prefix, bare, pc.struct_field(got, "prefix"))
            msg = _scatter(msg, bare, pc.struct_field(got, "msg"))
    hit = null_as_false(pc.is_valid(msg))
    if not hit.any():
        return idx
    keep = pa.array(hit)
    line, prefix, msg = sub.filter(keep), prefix.filter(keep), msg.filter(keep)
    is_json = null_as_false(pc.starts_with(pc.utf8_ltrim_whitespace(line), "{"))
    search = prefix
    if is_json.any():
        j = pa.array(is_json)
        cut = pc.replace_substring_regex(msg.filter(j), _JSON_VALUE_END, r"\1", max_replacements=1)
        msg = _scatter(msg, is_json, unescape(cut, '"\\\\/'))
        search = _scatter(prefix, is_json, line.filter(j))
    if not is_json.all():
        plain = ~is_json
        msg = _scatter(msg, plain, unquoted(prefix.filter(pa.array(plain)), msg.filter(pa.array(plain))))
    ts, res = timestamps(search)
    pieces.append((idx[hit], {"ts_us": ts, "level": _level(prefix), "facility": _facility(prefix, search, is_json),
                              "client": _client(prefix, line), "msg": msg,
                              "ts_resolution_us": res}))
    return idx[~hit]


def error_lines(lines: pa.Array, idx: np.ndarray, pieces: list) -> np.ndarray:
    """Rows of lines that hold one of librdkafka's errors but no log
    message of it (a delivery report, an exception, an error callback, a
    BROKERFAIL line cut from its prefix), appended to ``pieces``; returns
    the lines not read."""
    sub = lines.take(pa.array(idx))
    got = pc.extract_regex(sub, _ERROR_MESSAGE)
    hit = null_as_false(pc.is_valid(got))
    if not hit.any():
        return idx
    got = got.filter(pa.array(hit))
    prefix, msg = pc.struct_field(got, "prefix"), pc.struct_field(got, "msg")
    ts, res = timestamps(prefix)
    pieces.append((idx[hit], {"ts_us": ts, "level": _level(prefix),
                              "facility": _facility(prefix, prefix, np.zeros(len(msg), dtype=bool)),
                              "client": _client(prefix, sub.filter(pa.array(hit))), "msg": msg,
                              "ts_resolution_us": res}))
    return idx[~hit]


def app_produce_lines(lines: pa.Array, idx: np.ndarray, pieces: list) -> np.ndarray:
    """Rows of the application's own timed lines that say it hands a
    message to the client (APP_PRODUCE), appended to ``pieces`` with the
    whole line as the message (no thread, no broker: parser.APP_PRODUCE
    names them); returns the lines not read. Without a fraction of a second
    such a line times nothing and is left out."""
    sub = lines.take(pa.array(idx))
    said = null_as_false(pc.match_substring_regex(sub, APP_PRODUCE))
    if not said.any():
        return idx
    ts, res = timestamps(sub.filter(pa.array(said)))
    hit = np.zeros(len(idx), dtype=bool)
    hit[np.flatnonzero(said)[null_as_false(pc.is_valid(ts))]] = True
    if not hit.any():
        return idx
    keep = pa.array(null_as_false(pc.is_valid(ts)))
    msg = sub.filter(pa.array(hit))
    m = len(msg)
    pieces.append((idx[hit], {"ts_us": ts.filter(keep), "level": pa.nulls(m, pa.int8()),
                              "facility": pa.nulls(m, pa.string()), "client": pa.nulls(m, pa.string()),
                              "msg": msg, "ts_resolution_us": res.filter(keep)}))
    return idx[~hit]


def unquoted(prefix: pa.Array, msg: pa.Array) -> pa.Array:
    """A message that a quote opened before it (``message: '...',``,
    logfmt's ``msg="..." k=v``: an odd count of that quote in the prefix)
    ends at that quote's last occurrence in the line."""
    for q in ("'", '"', "`"):
        opened = null_as_false(pc.equal(pc.bit_wise_and(pc.count_substring(prefix, q), 1), 1))
        if opened.any():
            cut = pc.replace_substring_regex(msg.filter(pa.array(opened)), "^(.*)" + q + r"[^" + q + "]*$", r"\1")
            msg = _scatter(msg, opened, unescape(cut, q + "\\\\"))
    return msg


def timestamps(text: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The first timestamp form found in each text: (epoch us, resolution
    us), null where none has a fraction of a second."""
    n = len(text)
    ts = pa.nulls(n, pa.int64())
    res = pa.nulls(n, pa.int32())

    def take(found_us: pa.Array, digits: pa.Array | int, time: pa.Array | None = None) -> None:
        nonlocal ts, res
        r = (resolution_where_stamped(found_us, 10 ** (6 - digits)) if isinstance(digits, int) else
             frac_resolution(found_us, digits, time))
        fresh = pc.and_(pc.is_null(ts), pc.is_valid(found_us))
        ts = pc.if_else(fresh, found_us, ts)
        res = pc.if_else(fresh, r, res)

    g = pc.extract_regex(text, _JOURNALD)
    take(pc.cast(pc.struct_field(g, "us"), pa.int64()), 6)
    g = pc.extract_regex(text, _DATE_TIME)
    frac = optional_group(g, "frac")
    date = pc.replace_substring_regex(pc.struct_field(g, "date"), "[/.]", "-")
    time = pc.struct_field(g, "time")
    take(local_ts(date, time, pc.utf8_slice_codeunits(frac, 0, 6), optional_group(g, "tz")), frac, time)
    g = pc.extract_regex(text, _EPOCH_S)
    frac = pc.struct_field(g, "frac")
    whole = pc.multiply(pc.cast(pc.struct_field(g, "s"), pa.int64()), 1_000_000)
    take(pc.add(whole, pc.cast(pc.utf8_rpad(pc.utf8_slice_codeunits(frac, 0, 6), 6, "0"), pa.int64())), frac)
    g = pc.extract_regex(text, _EPOCH_MS)
    take(pc.multiply(pc.cast(pc.struct_field(g, "ms"), pa.int64()), 1000), 3)
    g = pc.extract_regex(text, _TIME_OF_DAY)
    frac = optional_group(g, "frac")
    no_date = pa.nulls(n, pa.string())
    take(local_ts(no_date, pc.struct_field(g, "time"), pc.utf8_slice_codeunits(frac, 0, 6), None), frac)
    return ts, res


def _client(prefix: pa.Array, line: pa.Array) -> pa.Array:
    """The client name before the message, else anywhere in the line (a
    logfmt ``client=`` after it)."""
    return pc.coalesce(pc.struct_field(pc.extract_regex(prefix, _CLIENT), "v"),
                       pc.struct_field(pc.extract_regex(line, _CLIENT), "v"))


def _level(prefix: pa.Array) -> pa.Array:
    got = pc.extract_regex(prefix, _LEVEL_NUMBER)
    number = pc.cast(pc.coalesce(*(optional_group(got, g) for g in "vwx")), pa.int8())
    word = pc.utf8_lower(pc.struct_field(pc.extract_regex(prefix, _LEVEL_WORD), "v"))
    by_word = pc.take(pa.array(list(_LEVEL_OF.values()), pa.int8()), pc.index_in(word, pa.array(list(_LEVEL_OF))))
    return pc.coalesce(number, by_word)


def _facility(prefix: pa.Array, search: pa.Array, is_json: np.ndarray) -> pa.Array:
    words = pc.replace_substring_regex(prefix, r"LOG:[0-7]|" + _NOT_FACILITY, " ")
    words = pc.replace_substring_regex(words, _CLIENT, " ")
    fac = pc.struct_field(pc.extract_regex(words, _FACILITY), "v")
    if is_json.any():
        keyed = pc.struct_field(pc.extract_regex(search, _JSON_FACILITY), "v")
        fac = pc.coalesce(keyed, fac)
    return fac


def _scatter(base: pa.Array, where: np.ndarray, values: pa.Array) -> pa.Array:
    """base with the ``where`` positions replaced by values, in order."""
    return pc.replace_with_mask(base, pa.array(where), values.cast(base.type))
