"""Consistent pseudonyms for IP addresses and hostnames in what goes into a
bundle, so that a bundle can leave the site without naming its hosts.

The same real value always gets the same pseudonym: within a bundle (the
broker ``10.1.2.3`` is the same pseudonym in the librdkafka log, in strace's
``TCP:[...->10.1.2.3:9093]`` and ``inet_addr("10.1.2.3")``, in the
statistics, the socket samples, the probe results and the pcap), and across
runs that use the same map file. Ports are kept, so every join the analysis
makes still holds and the verdict is the same.

Pseudonyms:
- IPv4 -> ``10.a.b.c`` from a keyed HMAC of the address (never .0 or .255);
- IPv6 -> ``fdxx:...`` (the unique-local fd00::/8), 120 bits of HMAC;
  an IPv4-mapped ``::ffff:a.b.c.d`` keeps its prefix and maps the IPv4 part,
  so the two spellings of one host stay one host;
- hostnames -> ``host-<10 hex>.invalid`` (RFC 6761: never resolves).
Kept as they are: loopback (127.0.0.0/8, ::1), the unspecified address
(0.0.0.0, ::) and the limited broadcast 255.255.255.255. They are the same
on every machine, name nothing, and the loopback lab's captures stay
readable. ``keep_loopback=False`` maps loopback too.

The map file (JSON, mode 0600) holds the HMAC key, created on first use,
and every real -> pseudonym pair, so a reader holding it can translate a
bundle back. It must never travel with a bundle: ``tree`` refuses a
directory that contains it. A collision (two values, one pseudonym) is
resolved by hashing again with a counter; the map records the result, so
later runs repeat it. The map is locked from ``load_or_create`` to
``close``: two runs sharing it get one key and one answer per value.

Apply it once, to what was captured. Output computed from pseudonymised
captures (tables, findings) already holds pseudonyms; a second pass would
map them again, since a pseudonym is also a valid address.

Captures are rewritten in place and streamed: text in blocks of whole
lines, pcap and pcapng record by record. Packets keep their headers with
the addresses replaced and the IP, TCP, UDP and ICMP checksums adjusted
(also those of the datagram an ICMP error quotes); their payloads are cut
from the capture, as a short snaplen would (TLS SNI, certificates or Kafka
metadata in a payload would name hosts). What cannot be vetted is removed
and counted: frames of unknown link types or protocols are cut to their
link header, unknown pcapng blocks are dropped. Other binary files are left
alone and reported.

Hostnames are found in two ways. Those learned from context (a librdkafka
broker name ``ssl://HOST:PORT/ID``, JSON keys such as ``nodename``,
``host``, ``target_host``, ``broker``, the producer's
``bootstrap.servers``, the manifest's host facts) are replaced wherever
they appear, if dotted; a name without a dot (``kafka1``) only where it
stands as a host (before ``:port``, or as a whole quoted string), since a
bare word would hit ordinary text. A name seen in no such context is not
known to be a hostname and stays.

Not covered: a hostname in DNS wire form (``\\6kafka1\\7example\\3com`` in
the strace of a resolver's sendto/recvfrom), or inside another token
(``kafka1.example.com.pem``, ``ip-10-1-2-3.ec2.internal``); an IPv6
address written with its port and no brackets (``fd00::1:9093`` is one
valid address, so its port is mapped with it); MAC addresses.
"""
from __future__ import annotations

import fcntl
import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import shutil
import struct
import time
from collections import Counter
from pathlib import Path
from typing import Self

MAP_FORMAT = 1
BLOCK = 8 << 20
# A line longer than this is cut at a delimiter instead of waiting for its end.
MAX_LINE = 32 << 20
SNIFF = 64 << 10

# Candidates are found by patterns that start with a literal, which the re
# module scans for at hundreds of MB/s; a pattern with a lookbehind or an
# alternation in front runs at 20-40 MB/s. The boundaries around each
# candidate are then checked one by one.
_V4_ANCHOR = re.compile(rb"\.\d{1,3}\.\d{1,3}\.\d{1,3}")
_V6_ANCHOR = re.compile(rb":[0-9A-Fa-f]{0,4}:")
_V6_RUN = re.compile(rb"[0-9A-Fa-f:.]*")
_ZONE = re.compile(rb"%[\w\-]+")
_HOST_RUN_BACK = 255
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
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")
_WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_DIGITS = frozenset(b"0123456789")
_V6CHARS = frozenset(b"0123456789abcdefABCDEF:.")
_HOSTCHARS = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_.-")
_OCTAL = frozenset(b"01234567")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_LEFT_V4 = _WORD | {ord(".")}
_LEFT_HOST = _WORD | {ord("."), ord("-")}
_HOST_RIGHT = _WORD | {ord("-")}


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


_KEPT_V4 = {"0.0.0.0", "255.255.255.255"}
_KEPT_HOSTS = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
# Checksum offsets within the transport header.
_CK_OFF = {6: 16, 17: 6, 1: 2, 58: 2}
_ICMP4_ERRORS = (3, 4, 5, 11, 12)
_ICMP6_ERRORS = (1, 2, 3, 4)


class PseudonymError(Exception):
    pass


def _hostnames_in(servers: str) -> list[str]:
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


class Pseudonyms:
    """Real -> pseudonym for addresses and hostnames, backed by a map file."""

    def __init__(self, path: Path, data: dict, lock_fd: int | None) -> None:
        self.path = Path(path)
        self._lock_fd = lock_fd
        self._key = bytes.fromhex(data["key"])
        self.keep_loopback = bool(data.get("keep_loopback", True))
        self._created_us = data.get("created_us")
        self._maps: dict[str, dict[str, str]] = {k: dict(data.get(k) or {}) for k in ("ipv4", "ipv6", "hostnames")}
        self._taken: dict[str, set[str]] = {k: set(v.values()) for k, v in self._maps.items()}
        self._hosts: set[str] = set(self._maps["hostnames"])
        self._plan = None
        self._memo: dict[bytes, tuple] = {}
        self._memo4: dict[bytes, tuple | None] = {}
        self._seen: dict[str, set[str]] = {"ipv4": set(), "ipv6": set(), "hostname": set()}
        self._counts: dict[str, int] = {"ipv4": 0, "ipv6": 0, "hostname": 0}
        self._dirty = False

    # ------------------------------------------------------------ the map file

    @classmethod
    def load_or_create(cls, path, keep_loopback: bool | None = None, outside=(),
                       lock_timeout_s: float = 300.0) -> Pseudonyms:
        """The map at ``path``, created with a fresh key if absent. ``outside``:
        directories (a bundle's staging dir) the map must not be inside.
        ``keep_loopback`` None takes the map's own setting (True for a new
        map); a different explicit value is an error, since it would break
        consistency with the bundles already made from that map."""
        path = Path(path).absolute()
        for d in outside:
            if _is_under(path, Path(d)):
                raise PseudonymError(f"the pseudonym map {path} is inside {d}: it would end up in the bundle")
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _lock(lock_fd, lock_timeout_s, path)
            if path.exists():
                try:
                    data = json.loads(path.read_text())
                    ok = isinstance(data, dict) and data.get("kdiag_pseudonym_map") == MAP_FORMAT \
                        and len(bytes.fromhex(data.get("key", ""))) >= 16
                except (OSError, ValueError) as e:
                    raise PseudonymError(f"{path}: not a readable pseudonym map ({e})") from None
                if not ok:
                    raise PseudonymError(f"{path}: not a kdiag pseudonym map (format {MAP_FORMAT})")
                stored = bool(data.get("keep_loopback", True))
                if keep_loopback is not None and keep_loopback != stored:
                    raise PseudonymError(f"{path} was made with keep_loopback={stored}; "
                                         f"mixing settings would give one address two pseudonyms")
                self = cls(path, data, lock_fd)
            else:
                data = {"key": secrets.token_hex(32),
                        "keep_loopback": True if keep_loopback is None else keep_loopback,
                        "created_us": int(time.time() * 1e6)}
                self = cls(path, data, lock_fd)
                self._dirty = True
                self.save()
        except BaseException:
            os.close(lock_fd)
            raise
        return self

    @property
    def map_id(self) -> str:
        """Names the map without revealing it: record it in a manifest, so a
        reader knows which map translates the bundle back."""
        return hmac.new(self._key, b"kdiag map id", hashlib.sha256).hexdigest()[:16]

    def to_dict(self) -> dict:
        return {
            "kdiag_pseudonym_map": MAP_FORMAT,
            "note": "real -> pseudonym for kdiag bundles. This file undoes the pseudonyms: never ship it with one.",
            "key": self._key.hex(),
            "keep_loopback": self.keep_loopback,
            "created_us": self._created_us,
            "map_id": self.map_id,
            **{k: dict(sorted(v.items())) for k, v in self._maps.items()},
        }

    def save(self) -> None:
        """Write the map atomically, readable by its owner only."""
        if not self._dirty and self.path.exists():
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._dirty = False

    def close(self) -> None:
        """Save and let other runs have the map."""
        try:
            self.save()
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ single values

    def _derive(self, kind: str, real: str, make) -> str:
        got = self._maps[kind].get(real)
        if got is None:
            for n in range(1 << 20):
                digest = hmac.new(self._key, f"{kind}\0{real}\0{n}".encode(), hashlib.sha256).digest()
                got = make(digest)
                if got is not None and got not in self._taken[kind]:
                    break
            else:  # pragma: no cover - the spaces are far larger than any map
                raise PseudonymError(f"no free {kind} pseudonym for {real}")
            self._maps[kind][real] = got
            self._taken[kind].add(got)
            self._dirty = True
        return got

    def _kept_v4(self, a: ipaddress.IPv4Address) -> bool:
        return str(a) in _KEPT_V4 or (self.keep_loopback and a.is_loopback)

    def _v4(self, a: ipaddress.IPv4Address) -> str:
        real = str(a)
        if self._kept_v4(a):
            return real

        def make(d: bytes):
            return None if d[2] in (0, 255) else f"10.{d[0]}.{d[1]}.{d[2]}"
        self._seen["ipv4"].add(real)
        return self._derive("ipv4", real, make)

    def _v6(self, a: ipaddress.IPv6Address) -> str:
        if a.ipv4_mapped is not None:
            return "::ffff:" + self._v4(a.ipv4_mapped)
        if a.is_unspecified or (self.keep_loopback and a.is_loopback):
            return str(a)
        real = str(a)

        def make(d: bytes):
            return str(ipaddress.IPv6Address(b"\xfd" + d[:15]))
        self._seen["ipv6"].add(real)
        return self._derive("ipv6", real, make)

    def ip(self, s: str) -> str:
        """One address's pseudonym (a scope ``%zone`` is kept); ``s`` itself
        when it is no address."""
        addr, pct, zone = s.partition("%")
        try:
            a = ipaddress.ip_address(addr)
        except ValueError:
            return s
        out = self._v4(a) if a.version == 4 else self._v6(a)
        return out + pct + zone

    def hostname(self, name: str) -> str:
        """One hostname's pseudonym; it is also learned, so ``text`` replaces it."""
        key = name.lower().rstrip(".")
        if key in _KEPT_HOSTS or key.endswith(".invalid") or not key or _is_ip(key):
            return name
        self.add_hostnames([key])
        self._seen["hostname"].add(key)
        return self._derive("hostnames", key, lambda d: f"host-{d[:5].hex()}.invalid")

    # ------------------------------------------------------------ learning

    def add_hostnames(self, names) -> None:
        """Names to replace wherever they stand as hosts from now on."""
        for n in names:
            if not isinstance(n, str):
                continue
            key = n.strip().lower().rstrip(".")
            if key and _NAME.match(key) and not _is_ip(key) and key not in _KEPT_HOSTS \
                    and not key.endswith(".invalid") and any(c.isalpha() for c in key):
                self._hosts.add(key)

    def learn_config(self, config: dict) -> None:
        """The hosts of a producer config's ``bootstrap.servers``."""
        for k in ("bootstrap.servers", "metadata.broker.list"):
            if config.get(k):
                self.add_hostnames(_hostnames_in(config[k]))

    def learn_bytes(self, data: bytes) -> None:
        names = set(_KEY_LEARN.findall(data)) | set(_SCHEME_LEARN.findall(data))
        if names:
            self.add_hostnames(n.decode("ascii", "replace") for n in names)

    def learn_obj(self, obj) -> None:
        """Hostnames from a JSON-like value: keys that hold one, a config's
        bootstrap list, ``-b``/``--brokers`` in an argv, and strings."""
        if isinstance(obj, dict):
            for k, v in obj.items():
                if isinstance(v, str):
                    if k in ("bootstrap.servers", "metadata.broker.list", "brokers", "target", "broker"):
                        self.add_hostnames(_hostnames_in(v))
                    elif k in ("host", "hostname", "nodename", "target_host"):
                        self.add_hostnames([v])
                    else:
                        self.learn_bytes(v.encode("utf-8", "surrogateescape"))
                elif k == "argv" and isinstance(v, list):
                    self._learn_argv(v)
                    self.learn_obj(v)
                else:
                    self.learn_obj(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                self.learn_obj(v)
        elif isinstance(obj, str):
            self.learn_bytes(obj.encode("utf-8", "surrogateescape"))

    def _learn_argv(self, argv: list) -> None:
        for i, a in enumerate(argv):
            if not isinstance(a, str):
                continue
            if a in ("-b", "--brokers") and i + 1 < len(argv) and isinstance(argv[i + 1], str):
                self.add_hostnames(_hostnames_in(argv[i + 1]))
            elif a.startswith(("--brokers=", "bootstrap.servers=", "metadata.broker.list=")):
                self.add_hostnames(_hostnames_in(a.split("=", 1)[1]))

    # ------------------------------------------------------------ text

    def _host_plan(self):
        """(last labels of the dotted names as ".label", {length: names} of
        the dotted names, names without a dot)."""
        if self._plan is None or self._plan[0] != self._hosts:
            names = {h.encode() for h in self._hosts}
            labels = sorted({b"." + h.rsplit(b".", 1)[1] for h in names if b"." in h})
            by_len: dict[int, set[bytes]] = {}
            for h in names:
                if b"." in h:
                    by_len.setdefault(len(h), set()).add(h)
            single = sorted(h for h in names if b"." not in h)
            self._plan = (set(self._hosts), (labels, sorted(by_len.items(), reverse=True), single))
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
        if not self._hosts:
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
            while (i := low.find(name, pos)) >= 0:
                pos = i + 1
                e = i + len(name)
                nxt = data[e:e + 2]
                if not (nxt[:1] in (b'"', b"'", b"]") or nxt in (b'\\"', b"\\'", b"\\n", b"\\t")
                        or (nxt[:1] == b":" and nxt[1:] and nxt[1] in _DIGITS)):
                    continue
                if _left_ok(data, i, _LEFT_HOST):
                    self._span(spans, data[i:e], i, "hs")

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
        if others:
            # By start, the longer first at one start; one inside another
            # ("10.1.2.3" in "::ffff:10.1.2.3") is dropped below.
            spans = sorted(spans + others, key=lambda sp: (sp[0], -sp[1]))
            kept, pos = [], 0
            for sp in spans:
                if sp[0] >= pos:
                    kept.append(sp)
                    pos = sp[1]
            spans = kept
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
            self._counts[kind] += n
            self._seen[kind].add(real)
        return b"".join(out)

    def _token(self, s: str, group: str) -> tuple[bytes, str | None, str | None]:
        """(replacement, kind, the real value as the map keys it); kind None
        when the token stays as it is."""
        if group in ("h", "hs"):
            out = self.hostname(s)
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
            kind, real, out = "ipv4", str(a.ipv4_mapped), self._v6(a)
        elif a.version == 6:
            kind, real, out = "ipv6", str(a), self._v6(a)
        else:
            kind, real, out = "ipv4", str(a), self._v4(a)
        if out == str(a):
            return b"", None, None
        return (out + tail + pct + zone).encode(), kind, real

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
            if obj.lower().rstrip(".") in self._hosts:
                return self.hostname(obj)
            return self.text(obj)
        return obj

    # ------------------------------------------------------------ files

    def tree(self, root, cut_payloads: bool = True) -> dict:
        """Rewrite every file under ``root`` in place; counts for the manifest.
        Every text file is read once first, for the hostnames it names in
        host contexts, so that a name is replaced also where it appears
        before (or without) such a context. ``cut_payloads``: packets keep
        only their headers (their checksums, right for the whole packet,
        can then no longer be verified from the capture)."""
        root = Path(root)
        if _is_under(self.path, root) or _is_under(Path(f"{self.path}.lock"), root):
            raise PseudonymError(f"the pseudonym map {self.path} is inside {root}: it would end up in the bundle")
        before = dict(self._counts)
        for s in self._seen.values():
            s.clear()
        links = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_symlink())
        files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        kinds = {p: file_kind(p) for p in files}
        for p in files:
            if kinds[p] == "text":
                self._learn_file(p)
        out = {"files": {"text": 0, "pcap": 0, "pcapng": 0, "empty": 0, "changed": 0},
               "replacements": {}, "distinct": {}, "packets": {}, "binary_left_alone": [],
               "symlinks_left_alone": links}
        for p in files:
            kind = kinds[p]
            rel = str(p.relative_to(root))
            if kind == "binary":
                out["binary_left_alone"].append(rel)
                continue
            out["files"][kind] += 1
            if kind == "text":
                changed = self._text_file(p)
            elif kind in ("pcap", "pcapng"):
                changed = self._packet_file(p, kind, out["packets"], cut_payloads)
            else:
                changed = False
            out["files"]["changed"] += bool(changed)
        out["replacements"] = {k: self._counts[k] - before[k] for k in self._counts}
        out["distinct"] = {k: len(v) for k, v in self._seen.items()}
        self.save()
        return out

    def _learn_file(self, path: Path) -> None:
        keep = 512   # a host context cut by a block's end is read again whole
        with open(path, "rb") as f:
            tail = b""
            while data := f.read(BLOCK):
                self.learn_bytes(tail + data)
                tail = data[-keep:]

    def _text_file(self, path: Path) -> bool:
        tmp = path.with_name(f".{path.name}.pseudo")
        changed = False
        from kdiag.ingest.lines import line_blocks

        with open(path, "rb") as src, open(tmp, "wb") as dst:
            for buf in line_blocks(src, BLOCK, MAX_LINE, _delimiter_cut):
                out = self.rewrite(buf, learn=False)
                changed |= out is not buf
                dst.write(out)
        return _commit(tmp, path, changed)

    def _packet_file(self, path: Path, kind: str, counts: dict, cut_payloads: bool = True) -> bool:
        tmp = path.with_name(f".{path.name}.pseudo")
        rw = _PcapRewriter(self, counts, cut_payloads)
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            rw.pcap(src, dst) if kind == "pcap" else rw.pcapng(src, dst)
        return _commit(tmp, path, True)

    # ------------------------------------------------------------ raw addresses

    def packed(self, raw: bytes) -> bytes:
        """A 4- or 16-byte address in network order -> its pseudonym's bytes."""
        a = ipaddress.ip_address(raw)
        out = self._v4(a) if a.version == 4 else self._v6(a)
        if out != str(a):
            self._counts["ipv4" if len(raw) == 4 else "ipv6"] += 1
        return ipaddress.ip_address(out).packed


def pseudonymise_manifest(manifest: dict, ps: Pseudonyms,
                          skip=("parse", "tables", "files", "redaction", "pseudonyms")) -> dict:
    """The manifest with hosts and addresses replaced: argv, producer config,
    lab facts, collector reasons, the host facts (its ``hostname`` always,
    even without a dot). ``skip``: keys whose values came from the rewritten
    captures, or hold only counts; mapping those again would map pseudonyms."""
    manifest = dict(manifest)
    rest = {k: v for k, v in manifest.items() if k not in skip}
    host = rest.get("host")
    if isinstance(host, dict) and isinstance(host.get("hostname"), str):
        ps.hostname(host["hostname"])
    ps.learn_obj(rest)
    if isinstance(rest.get("producer_config"), dict):
        ps.learn_config(rest["producer_config"])
    manifest.update(ps.obj(rest))
    return manifest


# ---------------------------------------------------------------- helpers

def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s.partition("%")[0])
        return True
    except ValueError:
        return False


def _is_under(path: Path, d: Path) -> bool:
    try:
        path.resolve().relative_to(Path(d).resolve())
        return True
    except ValueError:
        return False


def _lock(fd: int, timeout_s: float, path: Path) -> None:
    end = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > end:
                raise PseudonymError(f"{path} is in use by another run (lock {path}.lock)") from None
            time.sleep(0.1)


def _commit(tmp: Path, path: Path, changed: bool) -> bool:
    if changed:
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    else:
        tmp.unlink()
    return changed


_DELIM = re.compile(rb"[^0-9A-Za-z_.:%\-\\]")


def _delimiter_cut(buf: bytes) -> int:
    """Where to cut an endless line: after its last byte that cannot be
    inside an address or hostname."""
    start = max(0, len(buf) - (1 << 20))
    last = None
    for last in _DELIM.finditer(buf, start):
        pass
    return last.end() if last is not None else len(buf)


def file_kind(path: Path) -> str:
    """``text``, ``pcap``, ``pcapng``, ``empty`` or ``binary``, by content."""
    with open(path, "rb") as f:
        head = f.read(SNIFF)
    if not head:
        return "empty"
    if head[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"):
        return "pcap"
    if head[:4] == b"\x0a\x0d\x0d\x0a" and head[8:12] in (b"\x1a\x2b\x3c\x4d", b"\x4d\x3c\x2b\x1a"):
        return "pcapng"
    # strace and JSON escape NUL; a raw one means a binary format.
    return "binary" if b"\0" in head else "text"


# ---------------------------------------------------------------- packets

def _osum(b) -> int:
    """Ones'-complement sum of 16-bit big-endian words (odd end padded)."""
    if len(b) % 2:
        b = bytes(b) + b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def _adjust(ck: int, old, new) -> int:
    """RFC 1624 incremental update of checksum ``ck`` for the change of the
    covered bytes from ``old`` to ``new`` (same length, same alignment).
    Incremental, not recomputed: it is right for a packet cut short by the
    snaplen, and keeps a NIC-offloaded partial checksum what it was."""
    s = (~ck & 0xFFFF) + (~_osum(old) & 0xFFFF) + _osum(new)
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _fix_ck(buf: bytearray, at: int, limit: int, old, new, udp: bool = False) -> None:
    if at + 2 > limit:
        return   # cut off by the snaplen: nothing to fix
    ck = int.from_bytes(buf[at:at + 2], "big")
    if udp and ck == 0:
        return   # IPv4 UDP without a checksum
    ck = _adjust(ck, old, new)
    if udp and ck == 0:
        ck = 0xFFFF
    buf[at:at + 2] = ck.to_bytes(2, "big")


# Link-layer types: raw IP, Ethernet, Linux cooked v1/v2, BSD loopback.
_RAW = (101, 12, 14, 228, 229)
_ETHERNET, _NULL, _LOOP, _SLL, _SLL2 = 1, 0, 108, 113, 276
_ET_IPV4, _ET_IPV6, _ET_ARP = 0x0800, 0x86DD, 0x0806


class _PcapRewriter:
    def __init__(self, ps: Pseudonyms, counts: dict, cut_payloads: bool = True) -> None:
        self.ps = ps
        self.cut = cut_payloads
        self.c = counts
        for k in ("rewritten", "cut_to_link_header", "payload_bytes_cut", "dropped_corrupt_tail",
                  "pcapng_blocks_dropped"):
            counts.setdefault(k, 0)

    def _n(self, k: str, v: int = 1) -> None:
        self.c[k] = self.c.get(k, 0) + v

    # -- frames

    def frame(self, linktype: int, frame: bytearray) -> bytearray:
        """The frame with its addresses replaced and its payload cut."""
        off, et = self._link(linktype, frame)
        if off is None:
            self._n("cut_to_link_header")
            return frame[:et or 0]
        if et == _ET_ARP:
            end = self._arp(frame, off)
        else:
            end = self._ip(frame, off, len(frame), quoted=False)
        if end is None:
            self._n("cut_to_link_header")
            return frame[:off]
        self._n("rewritten")
        if not self.cut:
            return frame
        if end < len(frame):
            self._n("payload_bytes_cut", len(frame) - end)
        return frame[:end]

    @staticmethod
    def _link(lt: int, f: bytearray):
        """(offset of the network header, ethertype), or (None, bytes of
        link header to keep) when the frame is not one this rewrites."""
        def by_version(off):
            if len(f) > off and f[off] >> 4 == 4:
                return off, _ET_IPV4
            if len(f) > off and f[off] >> 4 == 6:
                return off, _ET_IPV6
            return None, 0
        if lt in _RAW:
            return by_version(0)
        if lt == _ETHERNET:
            off = 12
            while len(f) >= off + 2 and f[off:off + 2] in (b"\x81\x00", b"\x88\xa8", b"\x91\x00"):
                off += 4
            et = int.from_bytes(f[off:off + 2], "big") if len(f) >= off + 2 else 0
            return (off + 2, et) if et in (_ET_IPV4, _ET_IPV6, _ET_ARP) else (None, min(len(f), off + 2))
        if lt == _SLL:
            et = int.from_bytes(f[14:16], "big") if len(f) >= 16 else 0
            return (16, et) if et in (_ET_IPV4, _ET_IPV6, _ET_ARP) else (None, min(len(f), 16))
        if lt == _SLL2:
            et = int.from_bytes(f[0:2], "big") if len(f) >= 20 else 0
            return (20, et) if et in (_ET_IPV4, _ET_IPV6, _ET_ARP) else (None, min(len(f), 20))
        if lt in (_NULL, _LOOP):
            if len(f) < 4:
                return None, 0
            fam = {int.from_bytes(f[:4], "little"), int.from_bytes(f[:4], "big")}
            if 2 in fam:
                return 4, _ET_IPV4
            if fam & {10, 24, 28, 30}:
                return 4, _ET_IPV6
            return None, 4
        return None, 0

    def _arp(self, f: bytearray, off: int) -> int | None:
        # Ethernet/IPv4 ARP only: 6-byte hardware, 4-byte protocol addresses.
        if len(f) < off + 28 or f[off:off + 6] != b"\x00\x01\x08\x00\x06\x04":
            return None
        for at in (off + 14, off + 24):
            f[at:at + 4] = self.ps.packed(bytes(f[at:at + 4]))
        return off + 28

    def _ip(self, f: bytearray, off: int, end: int, quoted: bool) -> int | None:
        """Rewrite the IP datagram at f[off:end] in place; returns where the
        kept bytes end (headers only), or None when it is not IP."""
        if end - off < 1:
            return None
        v = f[off] >> 4
        if v == 4:
            return self._ip4(f, off, end, quoted)
        if v == 6:
            return self._ip6(f, off, end, quoted)
        return None

    def _ip4(self, f: bytearray, off: int, end: int, quoted: bool) -> int | None:
        ihl = (f[off] & 0x0F) * 4
        if ihl < 20 or end - off < ihl:
            return None
        old = bytes(f[off + 12:off + 20])
        new = self.ps.packed(old[:4]) + self.ps.packed(old[4:])
        f[off + 12:off + 20] = new
        _fix_ck(f, off + 10, off + ihl, old, new)
        total = int.from_bytes(f[off + 2:off + 4], "big")
        if total >= ihl:
            end = min(end, off + total)   # Ethernet pads short frames
        proto = f[off + 9]
        frag = int.from_bytes(f[off + 6:off + 8], "big") & 0x1FFF
        t = off + ihl
        if frag:
            return t   # a later fragment: no transport header of its own
        return self._transport(f, proto, t, end, old, new, quoted, icmp6=False)

    def _ip6(self, f: bytearray, off: int, end: int, quoted: bool) -> int | None:
        if end - off < 40:
            return None
        old = bytes(f[off + 8:off + 40])
        new = self.ps.packed(old[:16]) + self.ps.packed(old[16:])
        f[off + 8:off + 40] = new
        plen = int.from_bytes(f[off + 4:off + 6], "big")
        if plen:
            end = min(end, off + 40 + plen)
        nh, t = f[off + 6], off + 40
        # Hop-by-hop and destination options carry no addresses kdiag's
        # captures use; a routing header lists addresses: cut there.
        while nh in (0, 60, 44, 51):
            if end - t < 8:
                return t
            if nh == 44:
                if int.from_bytes(f[t + 2:t + 4], "big") & 0xFFF8:
                    return t + 8   # a later fragment
                nh, t = f[t], t + 8
            elif nh == 51:
                nh, t = f[t], t + (f[t + 1] + 2) * 4
            else:
                nh, t = f[t], t + (f[t + 1] + 1) * 8
        if t > end:
            return end
        if nh == 43:
            self._n("ipv6_routing_header_cut")
            return t
        return self._transport(f, nh, t, end, old, new, quoted, icmp6=True)

    def _transport(self, f, proto, t, end, old_addrs, new_addrs, quoted, icmp6) -> int:
        """Fix the transport checksum for the new addresses (its pseudo-
        header), rewrite what an ICMP error quotes, and say where the
        headers end."""
        if proto == 6:
            hdr = (f[t + 12] >> 4) * 4 if end - t >= 13 else 20
            _fix_ck(f, t + 16, end, old_addrs, new_addrs)
            return min(end, t + max(hdr, 20))
        if proto == 17:
            _fix_ck(f, t + 6, end, old_addrs, new_addrs, udp=not icmp6)
            return min(end, t + 8)
        if proto in (1, 58):
            if end - t < 8:
                return end
            typ = f[t]
            errors = _ICMP6_ERRORS if proto == 58 else _ICMP4_ERRORS
            keep = t + 8
            old_msg = bytes(f[t:end])
            if proto == 1 and typ == 5:
                f[t + 4:t + 8] = self.ps.packed(bytes(f[t + 4:t + 8]))   # redirect's gateway
            if typ in errors and not quoted and end - keep >= 1:
                inner = self._ip(f, keep, end, quoted=True)
                keep = inner if inner is not None else keep
            if proto == 58:
                # ICMPv6's checksum covers a pseudo-header with the addresses.
                _fix_ck(f, t + 2, end, old_addrs + old_msg, new_addrs + bytes(f[t:end]))
            else:
                _fix_ck(f, t + 2, end, old_msg, bytes(f[t:end]))
            return keep
        return t

    # -- files

    def pcap(self, src, dst) -> None:
        head = src.read(24)
        endian = "<" if head[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        if len(head) < 24:
            return   # nothing but a cut header: nothing kept
        dst.write(head)
        linktype = struct.unpack_from(endian + "I", head, 20)[0] & 0xFFFF
        rec = struct.Struct(endian + "IIII")
        while True:
            rh = src.read(16)
            if not rh:
                return
            if len(rh) < 16:
                self._n("dropped_corrupt_tail")
                return
            sec, frac, incl, orig = rec.unpack(rh)
            if incl > 1 << 20:
                self._n("dropped_corrupt_tail")
                return
            frame = bytearray(src.read(incl))
            if len(frame) < incl:
                self._n("dropped_corrupt_tail")
                return
            out = self.frame(linktype, frame)
            dst.write(rec.pack(sec, frac, len(out), orig))
            dst.write(out)

    def pcapng(self, src, dst) -> None:
        endian = "<"
        ifaces: list[int] = []
        while True:
            head = src.read(8)
            if not head:
                return
            if len(head) < 8:
                self._n("dropped_corrupt_tail")
                return
            if head[:4] == b"\x0a\x0d\x0d\x0a":
                bom = src.read(4)
                endian = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">" if bom == b"\x1a\x2b\x3c\x4d" else ""
                if not endian:
                    self._n("dropped_corrupt_tail")
                    return
                head += bom
                ifaces = []
            btype, blen = struct.unpack(endian + "II", head[:8])
            if blen < 12 or blen % 4 or blen > (1 << 20) + 64:
                self._n("dropped_corrupt_tail")
                return
            rest = src.read(blen - len(head))
            if len(rest) < blen - len(head):
                self._n("dropped_corrupt_tail")
                return
            body = bytearray((head + rest)[8:-4])
            out = self._block(btype, body, endian, ifaces)
            if out is None:
                self._n("pcapng_blocks_dropped")
                continue
            n = 12 + len(out)
            dst.write(struct.pack(endian + "II", btype, n) + out + struct.pack(endian + "I", n))

    def _block(self, btype: int, body: bytearray, e: str, ifaces: list[int]) -> bytes | None:
        if btype == 0x0A0D0D0A:   # section header: the section's length is no longer known
            return bytes(body[:8]) + struct.pack(e + "q", -1) + self._options(body[16:], e, {})
        if btype == 1:            # interface description
            if len(body) < 8:
                return None
            ifaces.append(struct.unpack_from(e + "H", body)[0])
            return bytes(body[:8]) + self._options(body[8:], e, {4: self._opt_v4, 5: self._opt_v6})
        if btype in (6, 2):       # enhanced packet, obsolete packet
            if len(body) < 20:
                return None
            iface = struct.unpack_from(e + ("I" if btype == 6 else "H"), body)[0]
            caplen = struct.unpack_from(e + "I", body, 12)[0]
            if iface >= len(ifaces) or 20 + caplen > len(body):
                return None
            pkt = self.frame(ifaces[iface], bytearray(body[20:20 + caplen]))
            opts = body[20 + caplen + (-caplen % 4):]
            fixed = bytearray(body[:20])
            fixed[12:16] = struct.pack(e + "I", len(pkt))
            # epb_hash (3) is a digest of the original packet: now wrong.
            return bytes(fixed) + _pad(pkt) + self._options(opts, e, {3: None})
        if btype == 3:            # simple packet
            if len(body) < 4 or not ifaces:
                return None
            orig = struct.unpack_from(e + "I", body)[0]
            pkt = self.frame(ifaces[0], bytearray(body[4:4 + orig]))
            return bytes(body[:4]) + _pad(pkt)
        if btype == 4:            # name resolution: address -> names
            return self._nrb(body, e)
        if btype == 5:            # interface statistics
            return bytes(body[:12]) + self._options(body[12:], e, {})
        return None               # custom, decryption secrets, unknown: may hold anything

    def _opt_v4(self, v: bytes) -> bytes:
        return self.ps.packed(v[:4]) + v[4:] if len(v) >= 4 else v

    def _opt_v6(self, v: bytes) -> bytes:
        return self.ps.packed(v[:16]) + v[16:] if len(v) >= 16 else v

    def _options(self, opts, e: str, special: dict) -> bytes:
        """Options with strings (comments, names, descriptions, OS) through
        ``rewrite``, those in ``special`` through their function (None: dropped)."""
        out, i = [], 0
        while i + 4 <= len(opts):
            code, ln = struct.unpack_from(e + "HH", opts, i)
            val = bytes(opts[i + 4:i + 4 + ln])
            i += 4 + ln + (-ln % 4)
            if code == 0:
                break
            if code in special:
                if special[code] is None:
                    continue
                val = special[code](val)
            elif _printable(val):
                val = self.ps.rewrite(val)
            out.append(struct.pack(e + "HH", code, len(val)) + _pad(val))
        if not out:
            return b""
        return b"".join(out) + struct.pack(e + "HH", 0, 0)

    def _nrb(self, body, e: str) -> bytes:
        out, i = [], 0
        while i + 4 <= len(body):
            rtype, ln = struct.unpack_from(e + "HH", body, i)
            val = bytes(body[i + 4:i + 4 + ln])
            i += 4 + ln + (-ln % 4)
            if rtype == 0:
                break
            alen = {1: 4, 2: 16}.get(rtype)
            if alen is None or len(val) < alen:
                continue
            names = [n for n in val[alen:].split(b"\0") if n]
            names = [self.ps.hostname(n.decode("utf-8", "replace")).encode() for n in names]
            val = self.ps.packed(val[:alen]) + b"".join(n + b"\0" for n in names)
            out.append(struct.pack(e + "HH", rtype, len(val)) + _pad(val))
        return b"".join(out) + struct.pack(e + "HH", 0, 0) + self._options(body[i:], e, {})


def _pad(b: bytes) -> bytes:
    return bytes(b) + b"\0" * (-len(b) % 4)


def _printable(v: bytes) -> bool:
    try:
        v.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in v.rstrip(b"\0")
