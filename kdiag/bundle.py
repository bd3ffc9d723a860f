"""Diagnostics bundles: one .tar.gz a ticket can carry.

Layout (manifest.json is the archive's first member, so a reader can
learn what it holds without unpacking the rest):
  manifest.json   versions, argv, collectors' status, SHA-256 of every file
  raw/<source>/   captures exactly as collected
  tables/         the parsed Arrow tables, as Parquet
  findings.json   the analysis result
  report.txt      the same, for people
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import tarfile
import tempfile
from pathlib import Path

from kdiag.errors import InputError

MANIFEST = "manifest.json"
FORMAT = 1
# raw/<source>/ directories whose files the analysis reads; raw/probe/ holds
# the probe's own summary, read as metadata.
ANALYSED_SOURCES = ("rdkafka_log", "strace", "stats", "tcp_probe", "sockets")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def host_facts() -> dict:
    return {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "hostname": platform.node(),
    }


def write(staging: Path, out_path: Path, manifest: dict) -> Path:
    files = sorted(p for p in staging.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = dict(manifest)
    manifest["bundle_format"] = FORMAT
    manifest["files"] = {
        str(p.relative_to(staging)): {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in files
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".part")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(staging / MANIFEST, arcname=MANIFEST)
        for p in files:
            tar.add(p, arcname=str(p.relative_to(staging)))
    os.replace(tmp, out_path)
    return out_path


def is_bundle(path: Path) -> bool:
    path = Path(path)
    if path.is_dir():
        return (path / MANIFEST).is_file()
    if path.is_file() and tarfile.is_tarfile(path):
        try:
            with tarfile.open(path, "r:*") as tar:
                first = tar.next()
                return first is not None and first.name == MANIFEST
        except (tarfile.TarError, OSError, EOFError):
            return False
    return False


def unpack(path: Path) -> Path:
    """A bundle as a directory: itself, or a fresh temp dir it is unpacked to."""
    path = Path(path)
    if path.is_dir():
        return path
    dest = Path(tempfile.mkdtemp(prefix="kdiag-replay-"))
    try:
        with tarfile.open(path, "r:*") as tar:
            # The "data" filter refuses absolute paths, "..", links out of
            # the tree and device files: a bundle comes from another host.
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise InputError(f"{path}: not a readable bundle ({e})") from e
    return dest


def manifest(bundle_dir: Path) -> dict:
    try:
        return json.loads((bundle_dir / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{bundle_dir}: manifest.json unreadable ({e})") from e


def raw_files(bundle_dir: Path) -> list[Path]:
    return sorted(p for p in (bundle_dir / "raw").rglob("*") if p.is_file())
