"""The pseudonym map: an HMAC key and every real -> pseudonym pair, kept in
a file of its own.

The map file (JSON, mode 0600) holds the HMAC key, created on first use,
and every real -> pseudonym pair, so a reader holding it can translate a
bundle back. It must never travel with a bundle: ``tree`` refuses a
directory that contains it. A collision (two values, one pseudonym) is
resolved by hashing again with a counter; the map records the result, so
later runs repeat it. The map is locked from ``load_or_create`` to
``close``: two runs sharing it get one key and one answer per value.
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
import time
from pathlib import Path
from typing import Self

from kdiag.deadline import wait_until

MAP_FORMAT = 1
# What the replacements and distinct values are counted by.
KINDS = ("ipv4", "ipv6", "hostname")
_KEPT_V4 = {"0.0.0.0", "255.255.255.255"}
KEPT_HOSTS = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")


class PseudonymError(Exception):
    pass


class PseudonymMap:
    """Real -> pseudonym for addresses and hostnames, backed by a map file.
    ``hosts``: the hostnames to replace wherever they stand as hosts (those
    mapped before, and those learned since). ``replaced`` and ``seen``
    count, by kind, the replacements made and the real values met."""

    def __init__(self, path: Path, data: dict, lock_fd: int | None) -> None:
        self.path = Path(path)
        self._lock_fd = lock_fd
        self._key = bytes.fromhex(data["key"])
        self.keep_loopback = bool(data.get("keep_loopback", True))
        self._created_us = data.get("created_us")
        self._pairs: dict[str, dict[str, str]] = {k: dict(data.get(k) or {})
                                                  for k in ("ipv4", "ipv6", "hostnames", "domains")}
        self._taken: dict[str, set[str]] = {k: set(v.values()) for k, v in self._pairs.items()}
        # The parents of fully qualified hosts: a domain keeps one pseudonym,
        # which its hosts' pseudonyms end in (sos's domain map).
        self.domains: set[str] = set(self._pairs["domains"])
        self.hosts: set[str] = set(self._pairs["hostnames"]) | self.domains
        self.seen: dict[str, set[str]] = {k: set() for k in KINDS}
        self.replaced: dict[str, int] = {k: 0 for k in KINDS}
        self._dirty = False

    # ------------------------------------------------------------ the map file

    @classmethod
    def load_or_create(cls, path, keep_loopback: bool | None = None, outside=(),
                       lock_timeout_s: float = 300.0) -> Self:
        """The map at ``path``, created with a fresh key if absent. ``outside``:
        directories (a bundle's staging dir) the map must not be inside.
        ``keep_loopback`` None takes the map's own setting (True for a new
        map); a different explicit value is an error, since it would break
        consistency with the bundles already made from that map."""
        path = Path(path).absolute()
        for d in outside:
            if is_under(path, Path(d)):
                raise PseudonymError(f"the pseudonym map {path} is inside {d}: it would end up in the bundle")
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _lock(lock_fd, lock_timeout_s, path)
            if path.exists():
                return cls(path, _read_map_file(path, keep_loopback), lock_fd)
            data = {"key": secrets.token_hex(32),
                    "keep_loopback": True if keep_loopback is None else keep_loopback,
                    "created_us": int(time.time() * 1e6)}
            self = cls(path, data, lock_fd)
            self._dirty = True
            self.save()
            return self
        except BaseException:
            os.close(lock_fd)
            raise

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
            **{k: dict(sorted(v.items())) for k, v in self._pairs.items()},
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
        got = self._pairs[kind].get(real)
        if got is None:
            for n in range(1 << 20):
                digest = hmac.new(self._key, f"{kind}\0{real}\0{n}".encode(), hashlib.sha256).digest()
                got = make(digest)
                if got is not None and got not in self._taken[kind]:
                    break
            else:  # pragma: no cover - the spaces are far larger than any map
                raise PseudonymError(f"no free {kind} pseudonym for {real}")
            self._pairs[kind][real] = got
            self._taken[kind].add(got)
            self._dirty = True
        return got

    def _kept_v4(self, a: ipaddress.IPv4Address) -> bool:
        return str(a) in _KEPT_V4 or (self.keep_loopback and a.is_loopback)

    def ipv4(self, a: ipaddress.IPv4Address) -> str:
        """``10.a.b.c`` from a keyed HMAC of the address (never .0 or .255)."""
        real = str(a)
        if self._kept_v4(a):
            return real

        def make(d: bytes):
            return None if d[2] in (0, 255) else f"10.{d[0]}.{d[1]}.{d[2]}"
        self.seen["ipv4"].add(real)
        return self._derive("ipv4", real, make)

    def ipv6(self, a: ipaddress.IPv6Address) -> str:
        """``fdxx:...`` (unique-local), 120 bits of HMAC; an IPv4-mapped
        address keeps its prefix and maps its IPv4 part."""
        if a.ipv4_mapped is not None:
            return "::ffff:" + self.ipv4(a.ipv4_mapped)
        if a.is_unspecified or (self.keep_loopback and a.is_loopback):
            return str(a)
        real = str(a)

        def make(d: bytes):
            return str(ipaddress.IPv6Address(b"\xfd" + d[:15]))
        self.seen["ipv6"].add(real)
        return self._derive("ipv6", real, make)

    def ip(self, s: str) -> str:
        """One address's pseudonym (a scope ``%zone`` is kept); ``s`` itself
        when it is no address."""
        addr, pct, zone = s.partition("%")
        try:
            a = ipaddress.ip_address(addr)
        except ValueError:
            return s
        out = self.ipv4(a) if a.version == 4 else self.ipv6(a)
        return out + pct + zone

    def hostname(self, name: str) -> str:
        """One hostname's pseudonym; it is also learned, so text scanned
        from now on has it replaced. A name of three labels or more is a
        host in a domain: ``host-<hash>.domain-<hash>.invalid``, the domain
        part the same for every host in it and for the domain alone."""
        key = name.lower().rstrip(".")
        if key in KEPT_HOSTS or key.endswith(".invalid") or not key or is_ip(key):
            return name
        self.add_hostnames([key])
        self.seen["hostname"].add(key)
        if key in self.domains:
            return self.domain(key)
        parent = key.split(".", 1)[1] if key.count(".") >= 2 else None
        if parent is None or key in self._pairs["hostnames"]:
            return self._derive("hostnames", key, lambda d: f"host-{d[:5].hex()}.invalid")
        under = self.domain(parent)[:-len(".invalid")]
        return self._derive("hostnames", key, lambda d: f"host-{d[:5].hex()}.{under}.invalid")

    def domain(self, name: str) -> str:
        """One domain's pseudonym, ``domain-<hash>.invalid``."""
        key = name.lower().rstrip(".")
        self.domains.add(key)
        self.hosts.add(key)
        return self._derive("domains", key, lambda d: f"domain-{d[:5].hex()}.invalid")

    def packed(self, raw: bytes) -> bytes:
        """A 4- or 16-byte address in network order -> its pseudonym's bytes."""
        a = ipaddress.ip_address(raw)
        out = self.ipv4(a) if a.version == 4 else self.ipv6(a)
        if out != str(a):
            self.replaced["ipv4" if len(raw) == 4 else "ipv6"] += 1
        return ipaddress.ip_address(out).packed

    def add_hostnames(self, names) -> None:
        """Names to replace wherever they stand as hosts from now on."""
        for n in names:
            if not isinstance(n, str):
                continue
            key = n.strip().lower().rstrip(".")
            if _is_host_name(key):
                self.hosts.add(key)
                if key.count(".") >= 2:
                    short, _, parent = key.partition(".")
                    self.domains.add(parent)
                    self.hosts.add(parent)
                    # The host by its short name (kafka-prod-7:9093, as
                    # the resolver's search domain lets a config name it).
                    if _is_host_name(short):
                        self.hosts.add(short)


def _is_host_name(key: str) -> bool:
    return bool(key) and bool(_NAME.match(key)) and not is_ip(key) and key not in KEPT_HOSTS \
        and not key.endswith(".invalid") and any(c.isalpha() for c in key)


def _read_map_file(path: Path, keep_loopback: bool | None) -> dict:
    """An existing map file's contents, checked to be a map this kdiag
    writes, made with the ``keep_loopback`` asked for (None: any)."""
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
    return data


def is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s.partition("%")[0])
        return True
    except ValueError:
        return False


def is_under(path: Path, d: Path) -> bool:
    try:
        path.resolve().relative_to(Path(d).resolve())
        return True
    except ValueError:
        return False


def _lock(fd: int, timeout_s: float, path: Path) -> None:
    def locked() -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    if not wait_until(locked, timeout_s, 0.1):
        raise PseudonymError(f"{path} is in use by another run (lock {path}.lock)")
