"""Pseudonyms applied to what goes into a bundle: every capture under a
staging directory, rewritten in place, and the manifest.

Apply it once, to what was captured. Output computed from pseudonymised
captures (tables, findings) already holds pseudonyms; a second pass would
map them again, since a pseudonym is also a valid address.

Captures are rewritten in place and streamed: text in blocks of whole
lines, pcap and pcapng record by record. Each file is taken as the format it
holds declares (``Format.pseudonymised`` in kdiag.parsers.format); a file in
no format kdiag reads is scanned as text unless it holds a NUL byte. Binary
files in no known format, and files of a format that says why it is left as
it is, are left alone, listed in the counts and said aloud.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from kdiag import progress
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
        kinds = {p: pseudonymiser_of(p) for p in files}
        for p in files:
            if kinds[p][0] == "text":
                self._learn_file(p)
        out = {"files": {"text": 0, "pcap": 0, "pcapng": 0, "empty": 0, "changed": 0},
               "replacements": {}, "distinct": {}, "packets": {}, "binary_left_alone": [],
               "symlinks_left_alone": links}
        for p in files:
            kind, why = kinds[p]
            if kind in (BINARY, LEFT):
                _left_alone(out, str(p.relative_to(root)), why, kind == BINARY)
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


BINARY = "binary"   # in no format kdiag reads, and not text
LEFT = "left"       # in a format that says why it is left as it is


def file_kind(path: Path) -> str:
    """``text``, ``pcap``, ``pcapng``, ``empty``, ``binary`` or ``left``, by
    content (see ``pseudonymiser_of``)."""
    return pseudonymiser_of(path)[0]


def pseudonymiser_of(path: Path) -> tuple[str, str]:
    """(kind, why): ``text`` for the text scanner, ``pcap`` or ``pcapng`` for
    the packet rewriter, ``empty``; or a kind left alone with why: ``left``
    (the format's own reason) or ``binary``. A format that declares a
    pseudonymiser there is none for is refused: its files would otherwise
    leave the site as they are."""
    from kdiag.ingest.detect import detect
    from kdiag.parsers.format import PACKET_REWRITER, TEXT_SCANNER, LeftAsIs
    from kdiag.parsers.registry import format_named

    with open(path, "rb") as f:
        head = f.read(SNIFF)
    if not head:
        return "empty", ""
    name = detect(path)
    if name is None:
        # strace and JSON escape NUL; a raw one means a binary format.
        return (BINARY, "binary, in no format kdiag reads") if b"\0" in head else ("text", "")
    how = format_named(name).pseudonymised
    if how == TEXT_SCANNER:
        return "text", ""
    if how == PACKET_REWRITER:
        capture = capture_kind(head)
        return (capture, "") if capture else (BINARY, f"{name}, but no packet capture the rewriter reads")
    if isinstance(how, LeftAsIs):
        return LEFT, f"{name}: {how.why}"
    raise PseudonymError(f"{path}: format {name} declares pseudonymiser {how!r}, which kdiag does not have")


def _left_alone(out: dict, shown: str, why: str, binary: bool) -> None:
    """A file that keeps its real addresses: in the counts, and said where
    the person who ships the bundle sees it."""
    if binary:
        out["binary_left_alone"].append(shown)
    out.setdefault("left_alone", {})[shown] = why
    line = f"not pseudonymised, left as it is: {shown} ({why}); check it before the bundle leaves the site"
    if not progress.current().say(line):
        print(f"kdiag: {line}", file=sys.stderr)


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
