"""Pseudonyms applied to what goes into a bundle: every capture under a
staging directory, rewritten in place, and the manifest.

Apply it once, to what was captured. Output computed from pseudonymised
captures (tables, findings) already holds pseudonyms; a second pass would
map them again, since a pseudonym is also a valid address.

Captures are rewritten in place and streamed: text in blocks of whole
lines, pcap and pcapng record by record. Other binary files are left
alone and reported.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from kdiag.bundle.pseudonym.mapping import PseudonymError, PseudonymMap, is_under
from kdiag.bundle.pseudonym.packets import PacketRewriter
from kdiag.bundle.pseudonym.scanner import TextScanner
from kdiag.parsers.pcap import capture_kind

BLOCK = 8 << 20
# A line longer than this is cut at a delimiter instead of waiting for its end.
MAX_LINE = 32 << 20
SNIFF = 64 << 10


class Pseudonyms(PseudonymMap):
    """The map with its text scanner: single values, text, JSON-like
    values, and whole directories of captures."""

    def __init__(self, path: Path, data: dict, lock_fd: int | None) -> None:
        super().__init__(path, data, lock_fd)
        self.scanner = TextScanner(self)

    # ------------------------------------------------------------ text

    def learn_config(self, config: dict) -> None:
        self.scanner.learn_config(config)

    def learn_bytes(self, data: bytes) -> None:
        self.scanner.learn_bytes(data)

    def learn_obj(self, obj) -> None:
        self.scanner.learn_obj(obj)

    def rewrite(self, data: bytes, learn: bool = True) -> bytes:
        return self.scanner.rewrite(data, learn)

    def text(self, s: str) -> str:
        return self.scanner.text(s)

    def obj(self, obj, skip_keys=()):
        return self.scanner.obj(obj, skip_keys)

    # ------------------------------------------------------------ files

    def tree(self, root, cut_payloads: bool = True) -> dict:
        """Rewrite every file under ``root`` in place; counts for the manifest.
        Every text file is read once first, for the hostnames it names in
        host contexts, so that a name is replaced also where it appears
        before (or without) such a context. ``cut_payloads``: packets keep
        only their headers (their checksums, right for the whole packet,
        can then no longer be verified from the capture)."""
        root = Path(root)
        if is_under(self.path, root) or is_under(Path(f"{self.path}.lock"), root):
            raise PseudonymError(f"the pseudonym map {self.path} is inside {root}: it would end up in the bundle")
        before = dict(self.replaced)
        for s in self.seen.values():
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
            if kind == "binary":
                out["binary_left_alone"].append(str(p.relative_to(root)))
                continue
            out["files"][kind] += 1
            out["files"]["changed"] += self._rewrite_file(p, kind, out["packets"], cut_payloads)
        out["replacements"] = {k: self.replaced[k] - before[k] for k in self.replaced}
        out["distinct"] = {k: len(v) for k, v in self.seen.items()}
        self.save()
        return out

    def _rewrite_file(self, path: Path, kind: str, packet_counts: dict, cut_payloads: bool) -> bool:
        """Whether the file changed."""
        if kind == "text":
            return self._text_file(path)
        if kind in ("pcap", "pcapng"):
            return self._packet_file(path, kind, packet_counts, cut_payloads)
        return False

    def _learn_file(self, path: Path) -> None:
        keep = 512   # a host context cut by a block's end is read again whole
        with open(path, "rb") as f:
            tail = b""
            while data := f.read(BLOCK):
                self.scanner.learn_bytes(tail + data, free_text=True)
                tail = data[-keep:]

    def _text_file(self, path: Path) -> bool:
        tmp = path.with_name(f".{path.name}.pseudo")
        changed = False
        # Lazy: the line reader brings numpy and pyarrow.
        from kdiag.ingest.lines import line_blocks

        with open(path, "rb") as src, open(tmp, "wb") as dst:
            for buf in line_blocks(src, BLOCK, MAX_LINE, _delimiter_cut):
                out = self.scanner.rewrite(buf, learn=False)
                changed |= out is not buf
                dst.write(out)
        return _commit(tmp, path, changed)

    def _packet_file(self, path: Path, kind: str, counts: dict, cut_payloads: bool = True) -> bool:
        tmp = path.with_name(f".{path.name}.pseudo")
        rw = PacketRewriter(self, self.scanner, counts, cut_payloads)
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            rw.pcap(src, dst) if kind == "pcap" else rw.pcapng(src, dst)
        return _commit(tmp, path, True)


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


def file_kind(path: Path) -> str:
    """``text``, ``pcap``, ``pcapng``, ``empty`` or ``binary``, by content."""
    with open(path, "rb") as f:
        head = f.read(SNIFF)
    if not head:
        return "empty"
    capture = capture_kind(head)
    if capture is not None:
        return capture
    # strace and JSON escape NUL; a raw one means a binary format.
    return "binary" if b"\0" in head else "text"


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
