"""The text scanner: addresses and hostnames found in free text (logs,
strace, JSON), each replaced by its pseudonym from the map.

Hostnames are found in two ways. Those learned from context (a librdkafka
broker name ``ssl://HOST:PORT/ID``, JSON keys such as ``nodename``,
``host``, ``target_host``, ``broker``, the producer's
``bootstrap.servers``, the manifest's host facts) are replaced wherever
they appear, if dotted; a name without a dot (``kafka1``) only where it
stands as a host (before ``:port``, or as a whole quoted string), since a
bare word would hit ordinary text. A name seen in no such context is not
known to be a hostname and stays.

A whole capture is also read for names in free text (``names``): fully
qualified names anywhere, cloud names that embed an address, bootstrap
lists, /etc/hosts lines and DNS wire names, which are rewritten in wire
form. A learned name without a dot that holds a digit, ``-`` or ``_``
(``kafka-prod-7``) is replaced wherever it stands as a whole token: such a
token is no ordinary word.

Not covered: a hostname inside another token (``kafka1.example.com.pem``);
a DNS name compressed into a pointer, or with a label of 32 characters or
more (its length byte is printable, so no escape marks it); an IPv6
address written with its port and no brackets (``fd00::1:9093`` is one
valid address, so its port is mapped with it); MAC addresses.
"""
from __future__ import annotations

import ipaddress
import re
from collections import Counter
from typing import TYPE_CHECKING

from kdiag.bundle.pseudonym import names as free_names
from kdiag.bundle.pseudonym.names import hostnames_in

if TYPE_CHECKING:
    from kdiag.bundle.pseudonym.mapping import PseudonymMap

# Candidates are found by patterns that start with a literal, which the re
# module scans for at hundreds of MB/s; a pattern with a lookbehind or an
# alternation in front runs at 20-40 MB/s. The boundaries around each
# candidate are then checked one by one.
_V4_ANCHOR = re.compile(rb"\.\d{1,3}\.\d{1,3}\.\d{1,3}")
_V6_ANCHOR = re.compile(rb":[0-9A-Fa-f]{0,4}:")
_V6_RUN = re.compile(rb"[0-9A-Fa-f:.]*")
_ZONE = re.compile(rb"%[\w\-]+")
# Where a hostname is learned: after a librdkafka/Tansu scheme, or as the
# value of a JSON key that holds one (also strace-escaped: \"host\":\"h\").
# A name holds a letter: most brokers are named by address, and those
# matches then fail inside the regex instead of in Python.
_SCHEME_LEARN = re.compile(
    rb"://(?:" + b"|".join(rb"(?<=" + s + rb"://)" for s in (b"(?i:ssl)", b"(?i:tcp)", b"(?i:plaintext)",
                                                              b"(?i:sasl_ssl)", b"(?i:sasl_plaintext)"))
    + rb")([A-Za-z0-9_.\-]*[A-Za-z_][A-Za-z0-9_.\-]*)(?=:\d)")
_KEY_LEARN = re.compile(
    rb'"(?:nodename|host|hostname|target_host|target|broker)\\?"\s*:\s*\\?"'
    rb'([A-Za-z0-9_][A-Za-z0-9_.\-]*)(?=:\d|\\?")')
_WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_DIGITS = frozenset(b"0123456789")
_V6CHARS = frozenset(b"0123456789abcdefABCDEF:.")
_OCTAL = frozenset(b"01234567")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_LEFT_V4 = _WORD | {ord(".")}
_LEFT_HOST = _WORD | {ord("."), ord("-")}
_HOST_RIGHT = _WORD | {ord("-")}
# A short name that no word of text is: it holds a digit, "-" or "_".
_DISTINCT_SHORT = re.compile(rb"[0-9_\-]")
# JSON keys whose string value is a list of brokers, or one host.
_BROKER_LIST_KEYS = ("bootstrap.servers", "metadata.broker.list", "brokers", "target", "broker")
_HOST_KEYS = ("host", "hostname", "nodename", "target_host")


def _escape_before(buf, j: int) -> bool:
    """Whether buf[:j] ends in an escape strace or JSON writes inside a
    string (\\n, \\t, \\22, \\012, \\x0a): its letters are not part of what
    follows ("\\n10.1.2.3\\tkafka1" from a read of /etc/hosts)."""
    if j >= 2 and buf[j - 2] == 0x5C and buf[j - 1] in b"ntrvf":
        return True
    k = j
    while k > 0 and j - k < 3 and buf[k - 1] in _OCTAL:
        k -= 1
    if k < j and k > 0 and buf[k - 1] == 0x5C:
        return True
    return j >= 4 and buf[j - 4] == 0x5C and buf[j - 3] == 0x78 and all(c in _HEX for c in buf[j - 2:j])


def _left_ok(buf, j: int, bad) -> bool:
    return j == 0 or buf[j - 1] not in bad or _escape_before(buf, j)


class TextScanner:
    """Finds addresses and known hostnames in bytes and replaces them
    through ``map``; learns hostnames from their contexts into it."""

    def __init__(self, pseudonym_map: PseudonymMap) -> None:
        self.map = pseudonym_map
        self._plan = None
        # token -> (replacement, kind, real); bytes around an IPv4 anchor -> its decision
        self._memo: dict[bytes, tuple] = {}
        self._memo4: dict[bytes, tuple | None] = {}

    # ------------------------------------------------------------ learning

    def learn_config(self, config: dict) -> None:
        """The hosts of a producer config's ``bootstrap.servers``."""
        for k in ("bootstrap.servers", "metadata.broker.list"):
            if config.get(k):
                self.map.add_hostnames(hostnames_in(config[k]))

    def learn_bytes(self, data: bytes, free_text: bool = False) -> None:
        """Hostnames in their host contexts; with ``free_text`` also every
        fully qualified name (for whole captures: a single line of text
        may hold a dotted name that is no host)."""
        names = set(_KEY_LEARN.findall(data)) | set(_SCHEME_LEARN.findall(data))
        if names:
            self.map.add_hostnames(n.decode("ascii", "replace") for n in names)
        self.map.add_hostnames(free_names.hosts_named(data))
        if free_text:
            self.map.add_hostnames(free_names.fqdns(data.lower()))

    def learn_obj(self, obj) -> None:
        """Hostnames from a JSON-like value: keys that hold one, a config's
        bootstrap list, ``-b``/``--brokers`` in an argv, and strings (with
        the fully qualified names in them)."""
        if isinstance(obj, dict):
            for k, v in obj.items():
                if isinstance(v, str):
                    if k in _BROKER_LIST_KEYS:
                        self.map.add_hostnames(hostnames_in(v))
                    elif k in _HOST_KEYS:
                        self.map.add_hostnames([v])
                    else:
                        self.learn_bytes(v.encode("utf-8", "surrogateescape"), free_text=True)
                elif k == "argv" and isinstance(v, list):
                    self._learn_argv(v)
                    self.learn_obj(v)
                else:
                    self.learn_obj(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                self.learn_obj(v)
        elif isinstance(obj, str):
            self.learn_bytes(obj.encode("utf-8", "surrogateescape"), free_text=True)

    def _learn_argv(self, argv: list) -> None:
        for i, a in enumerate(argv):
            if not isinstance(a, str):
                continue
            if a in ("-b", "--brokers") and i + 1 < len(argv) and isinstance(argv[i + 1], str):
                self.map.add_hostnames(hostnames_in(argv[i + 1]))
            elif a.startswith(("--brokers=", "bootstrap.servers=", "metadata.broker.list=")):
                self.map.add_hostnames(hostnames_in(a.split("=", 1)[1]))

    # ------------------------------------------------------------ finding

    def _host_plan(self):
        """(last labels of the dotted names as ".label", {length: names} of
        the dotted names, names without a dot)."""
        hosts = self.map.hosts
        if self._plan is None or self._plan[0] != hosts:
            names = {h.encode() for h in hosts}
            labels = sorted({b"." + h.rsplit(b".", 1)[1] for h in names if b"." in h})
            by_len: dict[int, set[bytes]] = {}
            for h in names:
                if b"." in h:
                    by_len.setdefault(len(h), set()).add(h)
            single = sorted(h for h in names if b"." not in h)
            self._plan = (set(hosts), (labels, sorted(by_len.items(), reverse=True), single))
        return self._plan[1]

    def _span(self, spans: list, tok: bytes, start: int, group: str) -> None:
        got = self._memo.get(tok)
        if got is None:
            got = self._token(tok.decode("ascii", "replace"), group)
            if len(self._memo) > 1 << 20:
                self._memo.clear()
            self._memo[tok] = got
        if got[1] is not None:
            spans.append((start, start + len(tok), got))

    # Bytes either side of an IPv4 anchor that decide what it is: up to
    # three digits and a four-byte escape before it, two bytes after.
    _W4_BEFORE, _W4_AFTER = 7, 2

    def _find_v4(self, data: bytes, spans: list) -> None:
        # A capture repeats its addresses in the same surroundings
        # ("ssl://10.1.2.3:9093" on every line): the decision is cached by
        # the bytes around the anchor, so a repeat costs one lookup.
        n, wb, wa = len(data), self._W4_BEFORE, self._W4_AFTER
        memo = self._memo4
        for m in _V4_ANCHOR.finditer(data):
            s, e = m.span()
            if s >= wb and e + wa <= n:
                key = data[s - wb:e + wa]
                got = memo.get(key)
                if got is None:
                    if len(memo) > 1 << 18:
                        memo.clear()
                    got = memo[key] = self._v4_at(key, wb, len(key) - wa)
                if got is not None:
                    spans.append((s + got[0], e, got[1]))
            else:
                got = self._v4_at(data, s, e)
                if got is not None:
                    spans.append((s + got[0], e, got[1]))

    def _v4_at(self, data: bytes, s: int, e: int):
        """(offset of the address from the anchor, replacement) for the
        anchor data[s:e] (".b.c.d"), or None."""
        n = len(data)
        j = s
        while j > 0 and s - j < 3 and data[j - 1] in _DIGITS:
            j -= 1
        if j == s or (j > 0 and data[j - 1] in _DIGITS):
            return None
        if e < n and (data[e] in _WORD or (data[e] == 0x2E and e + 1 < n and data[e + 1] in _DIGITS)):
            return None
        if not _left_ok(data, j, _LEFT_V4):
            return None
        tok = data[j:e]
        got = self._memo.get(tok)
        if got is None:
            got = self._memo[tok] = self._token(tok.decode("ascii"), "v4")
        return None if got[1] is None else (j - s, got)

    def _find_v6(self, data: bytes, spans: list) -> None:
        n, pos = len(data), 0
        while (m := _V6_ANCHOR.search(data, pos)) is not None:
            s, e = m.span()
            a, lim = s, max(0, s - 48)
            while a > lim and data[a - 1] in _V6CHARS:
                a -= 1
            b = _V6_RUN.match(data, e).end()
            pos = b
            if (a == lim and a > 0 and data[a - 1] in _V6CHARS) or b - a > 56:
                continue   # a longer run of hex and colons: no address
            run = data[a:b].rstrip(b".")   # a sentence's full stop
            be = a + len(run)
            if b"::" not in run and run.count(b":") < 7:
                continue
            if (a > 0 and data[a - 1] in _WORD and not _escape_before(data, a)) or (be < n and data[be] in _WORD):
                continue
            if be < n and data[be] == 0x25:
                z = _ZONE.match(data, be)
                if z is not None:
                    run = data[a:z.end()]
            self._span(spans, run, a, "v6")

    def _find_hosts(self, data: bytes, spans: list) -> None:
        if not self.map.hosts:
            return
        labels, by_len, single = self._host_plan()
        low = data.lower()
        n = len(data)
        for label in labels:
            pos = 0
            while (i := low.find(label, pos)) >= 0:
                pos = i + 1
                e = i + len(label)
                if e < n and (low[e] in _HOST_RIGHT or (low[e] == 0x2E and e + 1 < n and low[e + 1] in _HOST_RIGHT)):
                    continue
                # Longest first: the left boundary then fails for a known
                # name's suffix ("example.com" inside "kafka1.example.com").
                for ln, names in by_len:
                    a = e - ln
                    if a >= 0 and low[a:e] in names and _left_ok(data, a, _LEFT_HOST):
                        self._span(spans, data[a:e], a, "h")
                        break
        for name in single:
            pos = 0
            distinct = _DISTINCT_SHORT.search(name) is not None
            while (i := low.find(name, pos)) >= 0:
                pos = i + 1
                e = i + len(name)
                nxt = data[e:e + 2]
                as_token = distinct and (e == n or (data[e] not in _HOST_RIGHT and not (
                    data[e] == 0x2E and e + 1 < n and data[e + 1] in _HOST_RIGHT)))
                if not (as_token or nxt[:1] in (b'"', b"'", b"]") or nxt in (b'\\"', b"\\'", b"\\n", b"\\t")
                        or (nxt[:1] == b":" and nxt[1:] and nxt[1] in _DIGITS)):
                    continue
                if _left_ok(data, i, _LEFT_HOST):
                    self._span(spans, data[i:e], i, "hs")

    def _find_wire(self, data: bytes, spans: list) -> None:
        """Known names in DNS wire form, rewritten in wire form."""
        if not self.map.hosts or not free_names.may_hold_wire(data):
            return
        known = self.map.hosts
        for start, end, out, real in free_names.wire_spans(
                data, lambda name: self.map.hostname(name) if name.lower() in known else None):
            spans.append((start, end, (out, "hostname", real.lower())))

    def _token(self, s: str, group: str) -> tuple[bytes, str | None, str | None]:
        """(replacement, kind, the real value as the map keys it); kind None
        when the token stays as it is."""
        if group in ("h", "hs"):
            out = self.map.hostname(s)
            return out.encode(), ("hostname" if out != s else None), s.lower().rstrip(".")
        addr, pct, zone = s.partition("%")
        tail = ""
        if group == "v6" and addr.endswith("."):
            tail = addr[len(addr.rstrip(".")):]
            addr = addr.rstrip(".")
        try:
            a = ipaddress.ip_address(addr)
        except ValueError:
            return b"", None, None
        if a.version == 6 and a.ipv4_mapped is not None:
            kind, real, out = "ipv4", str(a.ipv4_mapped), self.map.ipv6(a)
        elif a.version == 6:
            kind, real, out = "ipv6", str(a), self.map.ipv6(a)
        else:
            kind, real, out = "ipv4", str(a), self.map.ipv4(a)
        if out == str(a):
            return b"", None, None
        return (out + tail + pct + zone).encode(), kind, real

    # ------------------------------------------------------------ replacing

    def rewrite(self, data: bytes, learn: bool = True) -> bytes:
        """``data`` with every address and known hostname replaced; with
        ``learn``, hostnames in its own host contexts are learned first."""
        if learn:
            self.learn_bytes(data)
        spans: list = []
        self._find_v4(data, spans)
        others: list = []
        self._find_v6(data, others)
        self._find_hosts(data, others)
        self._find_wire(data, others)
        if others:
            spans = _outermost(spans + others)
        if not spans:
            return data
        out, pos = [], 0
        append = out.append
        for start, end, got in spans:
            append(data[pos:start])
            append(got[0])
            pos = end
        append(data[pos:])
        for (_rep, kind, real), n in Counter(sp[2] for sp in spans).items():
            self.map.replaced[kind] += n
            self.map.seen[kind].add(real)
        return b"".join(out)

    def text(self, s: str) -> str:
        """``s`` with every address and known hostname replaced; hostnames in
        ``s``'s own host contexts are learned first."""
        return self.rewrite(s.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")

    def obj(self, obj, skip_keys=()):
        """A JSON-like value with every string (and dict key) rewritten.
        Learn first (``learn_obj``) when hosts may be named in it."""
        if isinstance(obj, dict):
            return {(self.text(k) if isinstance(k, str) else k): (v if k in skip_keys else self.obj(v))
                    for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.obj(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.obj(v) for v in obj)
        if isinstance(obj, str):
            # A name without a dot is replaced in text only where it stands
            # as a host; a value that is nothing but the name is one.
            if obj.lower().rstrip(".") in self.map.hosts:
                return self.map.hostname(obj)
            return self.text(obj)
        return obj


def _outermost(spans: list) -> list:
    """The spans by start, the longer first at one start; one inside
    another ("10.1.2.3" in "::ffff:10.1.2.3") is dropped."""
    kept, pos = [], 0
    for sp in sorted(spans, key=lambda sp: (sp[0], -sp[1])):
        if sp[0] >= pos:
            kept.append(sp)
            pos = sp[1]
    return kept
