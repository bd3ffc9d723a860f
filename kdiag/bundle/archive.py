"""Diagnostics bundles: one .tar.gz a ticket can carry.

Layout (manifest.json is the archive's first member, so a reader can
learn what it holds without unpacking the rest):
  manifest.json   versions, argv, collectors' status, SHA-256 of every file
  raw/<source>/   captures exactly as collected
  tables/         the parsed Arrow tables, as Parquet
  findings.json   the analysis result
  report.txt      the same, for people
  report.html     the same as one page with charts (kdiag report makes it anew)
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import tarfile
from pathlib import Path

# Reading and verifying a bundle, and its tables' versions, live in their own
# modules; their names are kdiag.bundle.archive's too.
from kdiag.bundle.limits import Limits  # noqa: F401
from kdiag.bundle.reading import (  # noqa: F401
    FORMATS,
    MANIFEST,
    PROBE_SUMMARY,
    analysed_files,
    delivery_ms,
    is_archive,
    is_bundle,
    is_sealed_dir,
    manifest,
    probe_summary,
    raw_files,
    refuse_links,
    unpack,
    unsafe_member,
)
from kdiag.bundle.table_versions import known_versions, table_schemas, table_versions  # noqa: F401
from kdiag.bundle.verify import Problem, Verification, verify  # noqa: F401

FORMAT = 1


def __getattr__(name: str):
    if name == "ANALYSED_SOURCES":   # from the format registry, when first asked for (see reading)
        from kdiag.bundle import reading

        return reading.ANALYSED_SOURCES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def start(staging: Path, fields: dict) -> None:
    """An unsealed bundle: a manifest saying so, before anything is captured.
    What a killed kdiag leaves behind is then recognisably a bundle, and says
    it is partial."""
    fields = {**fields, "bundle_format": FORMAT, "sealed": False, "partial": True,
              "partial_reasons": ["kdiag stopped before it sealed this bundle (killed, or the machine went down)"]}
    _write_private(staging / MANIFEST, json.dumps(fields, indent=2, default=str) + "\n")


def _write_private(path: Path, text: str) -> None:
    """A file only its owner reads (0600), whatever the umask: bundles hold
    captured traffic."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with open(fd, "w") as f:
        f.write(text)


def _private_member(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    # What an unpacked bundle's files get: 0600 files, 0700 directories.
    ti.mode = 0o700 if ti.isdir() else 0o600
    return ti


def seal_dir(staging: Path, fields: dict) -> list[Path]:
    """Write the final manifest (sizes and SHA-256 of every file) into the
    directory; it is then a bundle as an archive's unpacked copy is."""
    # is_file() follows links: a link must not bring outside content in.
    files = sorted(p for p in staging.rglob("*") if p.is_file() and not p.is_symlink() and p.name != MANIFEST)
    fields = dict(fields)
    fields["bundle_format"] = FORMAT
    fields["sealed"] = True
    fields["files"] = {
        str(p.relative_to(staging)): {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in files
    }
    tmp = staging / (MANIFEST + ".tmp")
    _write_private(tmp, json.dumps(fields, indent=2, default=str) + "\n")
    os.replace(tmp, staging / MANIFEST)
    return files


def write(staging: Path, out_path: Path, fields: dict) -> Path:
    files = seal_dir(staging, fields)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".part")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with open(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            tar.add(staging / MANIFEST, arcname=MANIFEST, filter=_private_member)
            for p in files:
                tar.add(p, arcname=str(p.relative_to(staging)), filter=_private_member)
        os.replace(tmp, out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out_path
