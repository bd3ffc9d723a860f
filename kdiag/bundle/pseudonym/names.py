"""Hostnames found in free text, beyond the contexts that name a broker.

A capture names hosts in more places than librdkafka's broker names:
- fully qualified names anywhere (``brokerA.corp.example.com``,
  ``10-1-2-3.ec2.internal``), known by their last label: a top-level or
  site-internal domain. Two labels are enough under the common generic
  ones (``.com``, ``.internal``, ...); under a country code or a suffix
  that is also a word in code (``.io``, ``.local``) it takes three, so
  that ``threading.local`` stays; ``.info`` is left out (``self.log.info``). Labels are
  letters, digits and hyphens: a Python name with ``_`` is no host;
- cloud names that embed an address, ``ip-10-1-2-3``, alone;
- ``bootstrap.servers`` and ``metadata.broker.list`` values in any text
  (a properties file read, a config printed);
- the names of ``/etc/hosts`` lines (``10.1.2.3<TAB>kafka-prod-7``), as
  strace prints a read of it;
- names in DNS wire form (``\\6kafka1\\7example\\3com\\0``), as strace
  prints a resolver's query or answer: learned, and rewritten in the same
  form (``wire_spans``).
"""
from __future__ import annotations

import re

from kdiag.bundle.sasl import decode, encode

_TLD_TWO_LABELS = ("com", "net", "org", "edu", "gov", "mil", "internal", "localdomain", "lan", "corp", "intra",
                   "intranet", "example", "test", "arpa", "cloud")
_TLD_THREE_LABELS = ("io", "co", "biz", "local", "home", "priv", "private", "dev", "app", "ai", "me",
                     "tech", "online", "site", "xyz", "int", "us", "uk", "de", "fr", "nl", "jp", "cn", "in", "au",
                     "ca", "eu", "ch", "se", "no", "fi", "dk", "it", "es", "ru", "br", "kr", "sg", "hk", "ie",
                     "be", "at", "cz", "nz", "za", "il", "tw", "mx", "ar")
# Found by the dot before the last label (a literal: fast), then walked back.
_TLD_AT = re.compile(rb"\.(" + b"|".join(t.encode() for t in _TLD_TWO_LABELS + _TLD_THREE_LABELS)
                     + rb")(?![A-Za-z0-9_\-(])(?!\.[A-Za-z0-9])")
_NEEDS_THREE = frozenset(t.encode() for t in _TLD_THREE_LABELS)
_LABEL_BACK = re.compile(rb"(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.){1,16}\Z")
_NAME_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-.")
# A literal first: the boundary before it is checked in Python.
_CLOUD_SHORT = re.compile(rb"ip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}(?![\w\-])")
_SERVERS = re.compile(rb"(?:bootstrap\.servers|metadata\.broker\.list)(?:\\?[\"'])?\s*[=:]\s*(?:\\?[\"'])?"
                      rb"([A-Za-z0-9_.:\[\]/,\- ]+)")
# An /etc/hosts line as strace prints a read of it: at the string's start
# or after "\\n", an address, then names to the line's end.
_HOSTS_LINE = re.compile(rb'(?:"|\\n)[ ]*([0-9A-Fa-f:.]{3,45})((?:(?:\\t|[ ])+[A-Za-z0-9][A-Za-z0-9_.\-]*)+)'
                         rb'[ ]*(?=\\n|"|#)')
_HOSTS_NAME = re.compile(rb"(?:\\t|[ ])+([A-Za-z0-9][A-Za-z0-9_.\-]*)")
# DNS wire form as strace escapes it: each label after its length (1-31, an
# escape), the name ended by a NUL, then a question's type (A, AAAA, ANY)
# and class IN: the bytes of a compiled program hold runs that look like
# names, never followed by that.
# Atomic: "\\12abc" is length 10 then "abc" (strace pads "\\0012abc" when a
# digit follows), never length 1 then "2abc"; trying both is exponential.
_WIRE_LEN = rb"(?>\\(?:[1-7][0-7]?|0[0-7][0-7]|[tnvfr])|\\x[01][0-9a-fA-F])"
_WIRE_MARKERS = (b"\\0\\0\\1\\0\\1", b"\\0\\0\\34\\0\\1", b"\\0\\0\\377\\0\\1",
                 b"\\x00\\x00\\x01\\x00\\x01", b"\\x00\\x00\\x1c\\x00\\x01")
_WIRE_NAME = re.compile(rb"(?:" + _WIRE_LEN + rb"[A-Za-z0-9_\-]{1,63}+){2,32}+"
                        rb"(?=\\0\\0(?:\\1|\\34|\\377)\\0\\1|\\x00\\x00\\x(?:01|1c|ff)\\x00\\x01)")


def fqdns(data: bytes) -> set[str]:
    """Fully qualified names anywhere in ``data``."""
    found = set()
    for m in _TLD_AT.finditer(data):
        start = m.start()
        back = _LABEL_BACK.search(data, max(0, start - 253), start + 1)
        if back is None:
            continue
        a = _after_escape(data, back.start())
        if a == back.start() and a > 0 and (data[a - 1] in _NAME_CHARS or data[a - 1] == 0x5F):
            continue   # inside a longer token
        name = data[a:m.end()]
        labels = name.count(b".") + 1
        if labels < (3 if m.group(1).lower() in _NEEDS_THREE else 2):
            continue
        if not any(65 <= c <= 90 or 97 <= c <= 122 for c in name[:start - a]):
            continue   # 1.2.3.com: numbers, not a name
        found.add(name.decode("ascii"))
    return found


def _after_escape(data: bytes, a: int) -> int:
    """Where a name starts that strace printed after an escape: the letters
    of "\\t" or the digits of "\\12" are not part of it."""
    if a == 0 or data[a - 1] != 0x5C:
        return a
    if data[a] in b"ntrvf":
        return a + 1
    digits = 0
    while digits < 3 and a + digits < len(data) and data[a + digits] in b"01234567":
        digits += 1
    return a + digits if digits in (1, 2, 3) else a


def hostnames_in(servers: str) -> list[str]:
    """Hosts of a ``bootstrap.servers`` / ``-b`` list: ``h:p,SSL://h2:p``."""
    out = []
    for hp in str(servers).split(","):
        hp = hp.strip()
        if "://" in hp:
            hp = hp.split("://", 1)[1]
        if hp.startswith("["):
            continue   # an IPv6 literal: an address, not a name
        host = hp.rsplit(":", 1)[0] if ":" in hp else hp
        host = host.split("/", 1)[0]
        if host:
            out.append(host)
    return out


def hosts_named(data: bytes) -> set[str]:
    """Names the text itself says are hosts: cloud short names, the brokers
    of a bootstrap list, /etc/hosts lines, DNS wire names."""
    from kdiag.bundle.pseudonym.mapping import is_ip

    found = set()
    for m in _CLOUD_SHORT.finditer(data):
        a = m.start()
        if a == 0 or data[a - 1] not in _NAME_CHARS or _after_escape(data, a - 1) == a:
            found.add(m.group(0).decode("ascii"))
    for servers in _SERVERS.findall(data):
        found.update(hostnames_in(servers.decode("ascii", "replace").replace(" ", ",")))
    if b"localhost" in data:
        # /etc/hosts: its first lines name localhost, and a read shows them
        for addr, names in _HOSTS_LINE.findall(data):
            if is_ip(addr.decode("ascii")):
                found.update(n.decode("ascii") for n in _HOSTS_NAME.findall(names))
    if may_hold_wire(data):
        for m in _WIRE_NAME.finditer(data):
            name = wire_name(m.group(0))
            if name is not None:
                found.add(name)
    return found


def may_hold_wire(data: bytes) -> bool:
    """Whether ``data`` may hold a DNS question or answer as strace prints
    it: a name's end, then type A or AAAA (or any), class IN."""
    return any(m in data for m in _WIRE_MARKERS)


def wire_name(escaped: bytes) -> str | None:
    """The dotted name of an escaped DNS wire name, or None when its label
    lengths do not hold (no DNS name, only something like one)."""
    raw = decode(escaped)
    labels, pos = [], 0
    while pos < len(raw):
        n = raw[pos]
        label = raw[pos + 1:pos + 1 + n]
        if n == 0 or len(label) != n or not re.fullmatch(rb"[A-Za-z0-9_\-]+", label):
            return None
        labels.append(label.decode("ascii"))
        pos += 1 + n
    name = ".".join(labels)
    return name if any(c.isalpha() for c in name) else None


def wire_spans(data: bytes, pseudonym_of) -> list[tuple[int, int, bytes, str]]:
    """(start, end, replacement, real name) for each DNS wire name in
    ``data`` that ``pseudonym_of(name)`` maps (it returns None for a name to
    keep); the replacement is the pseudonym in wire form, escaped alike."""
    spans = []
    for m in _WIRE_NAME.finditer(data):
        escaped = m.group(0)
        name = wire_name(escaped)
        if name is None:
            continue
        out = pseudonym_of(name)
        if out is None or out == name:
            continue
        wire = b"".join(bytes([len(lab)]) + lab.encode() for lab in out.split("."))
        spans.append((m.start(), m.end(), encode(wire, "x" if b"\\x" in escaped else "octal"), name))
    return spans
