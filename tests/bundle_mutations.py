"""Bundles as an attacker or a careless user would make them, from a real
one: members, sizes, manifests and raw JSON changed, with the manifest's
hashes rewritten to match when the case asks for it (so the change reaches
past the hash check)."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

from hypothesis import strategies as st

from conftest import ROOT

REAL = ROOT / "fixtures" / "bundles" / "nagle_on.tar.gz"
MANIFEST = "manifest.json"
SUMMARY = "raw/probe/summary.json"
MIB = 1 << 20


class Zeros(io.RawIOBase):
    """``size`` zero bytes, never held in memory at once."""

    def __init__(self, size: int):
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = min(len(buf), self.left)
        buf[:n] = bytes(n)
        self.left -= n
        return n


def zeros_sha256(size: int) -> str:
    h, block = hashlib.sha256(), bytes(MIB)
    for _ in range(size // MIB):
        h.update(block)
    h.update(bytes(size % MIB))
    return h.hexdigest()


def real_members() -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(REAL) as tar:
        return [(m, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]


def write(items, path: Path, manifest: dict | None = None, manifest_bytes: bytes | None = None) -> Path:
    """items: [(TarInfo, bytes | (size, fileobj) | None)]; manifest.json's
    data replaced by ``manifest`` (JSON) or ``manifest_bytes`` when given."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for info, data in items:
            info = _copy(info)
            if info.name == MANIFEST and (manifest is not None or manifest_bytes is not None):
                data = manifest_bytes if manifest_bytes is not None else json.dumps(manifest).encode()
            if data is None:
                tar.addfile(info)
            elif isinstance(data, tuple):
                info.size = data[0]
                tar.addfile(info, data[1])
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def _copy(info: tarfile.TarInfo) -> tarfile.TarInfo:
    new = tarfile.TarInfo(info.name)
    new.size, new.mode, new.mtime, new.type, new.linkname = info.size, info.mode, info.mtime, info.type, info.linkname
    return new


def member(name: str, kind=tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


def listing(data) -> dict:
    if isinstance(data, tuple):
        return {"bytes": data[0], "sha256": zeros_sha256(data[0])}
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


# --- the mutations: each (items, manifest) -> (items, manifest or bytes) -------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _paths(value, here=()):
    """Every place in a JSON value, as a tuple of keys/indexes."""
    yield here
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*here, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*here, i))


def _set(value, where, new):
    if not where:
        return new
    parent = value
    for k in where[:-1]:
        parent = parent[k]
    parent[where[-1]] = new
    return value


@st.composite
def wrong_type(draw, items, man):
    places = [p for p in _paths(man) if p and p[0] != "files"] + [("files",), ("versions",), ("tables",)]
    where = draw(st.sampled_from(places))
    return items, _set(man, where, draw(json_values))


@st.composite
def deep_manifest(draw, items, man):
    depth = draw(st.sampled_from([63, 65, 900, 5000, 200_000]))
    key = draw(st.sampled_from(["versions", "lab", "extra", "parse"]))
    text = json.dumps(man)[:-1] + f', "{key}": ' + "[" * depth + "]" * depth + "}"
    return items, text.encode()


@st.composite
def huge_manifest(draw, items, man):
    pad_mib = draw(st.sampled_from([1, 5, 40]))
    return items, (json.dumps(man) + " " * (pad_mib * MIB)).encode()


@st.composite
def huge_member(draw, items, man):
    name = draw(st.sampled_from(["tables/syscalls.parquet", "raw/strace/strace.txt", "raw/extra.bin", SUMMARY]))
    size = draw(st.sampled_from([70, 150])) * MIB
    declare = draw(st.booleans())     # the manifest tells the truth about it (hash and all)
    data = (size, Zeros(size))
    items = [(m, d) for m, d in items if m.name != name] + [(member(name), data)]
    if declare:
        man["files"][name] = listing(data)
    return items, man


@st.composite
def many_members(draw, items, man):
    n = draw(st.integers(150, 400))
    listed = draw(st.booleans())
    for i in range(n):
        name = f"raw/strace/strace.{i}"
        items.append((member(name), b"x"))
        if listed:
            man["files"][name] = listing(b"x")
    return items, man


@st.composite
def bad_summary(draw, items, man):
    data = draw(st.sampled_from([b"not json", b"[1, 2]", b'"text"', b"{", b"1e999999", b"[" * 100_000,
                                 b'{"rate": "fast", "delivered": [1]}', b'{"tcp_counters_after": 7}'])
                | json_values.map(lambda v: json.dumps(v).encode()))
    items = [(m, data if m.name == SUMMARY else d) for m, d in items]
    if draw(st.booleans()):
        man["files"][SUMMARY] = listing(data)
    return items, man


@st.composite
def unsafe(draw, items, man):
    kind, link = draw(st.sampled_from([(tarfile.SYMTYPE, "/etc/passwd"), (tarfile.LNKTYPE, "report.txt"),
                                       (tarfile.CHRTYPE, ""), (tarfile.FIFOTYPE, "")]))
    name = draw(st.sampled_from(["raw/strace/strace.txt", "raw/strace/link", "../up", "/abs/x"]))
    items = [(m, d) for m, d in items if m.name != name] + [(member(name, kind, link), None)]
    return items, man


MUTATIONS = [wrong_type, deep_manifest, huge_manifest, huge_member, many_members, bad_summary, unsafe]


@st.composite
def bundles(draw, out_dir: Path):
    """(path, what was done): a mutated copy of the real bundle, or the real
    one's bytes cut short or replaced."""
    items = real_members()
    man = json.loads(items[0][1])
    kind = draw(st.sampled_from([*MUTATIONS, "truncated", "garbage"]))
    path = out_dir / f"case-{draw(st.integers(0, 10**9))}.tar.gz"
    if kind == "truncated":
        data = REAL.read_bytes()
        path.write_bytes(data[:draw(st.integers(0, len(data) - 1))])
        return path, kind
    if kind == "garbage":
        path.write_bytes(gzip.compress(draw(st.binary(max_size=4096))))
        return path, kind
    items, new = draw(kind(items, man))
    if isinstance(new, bytes):
        write(items, path, manifest_bytes=new)
    else:
        write(items, path, manifest=new)
    return path, kind.__name__
