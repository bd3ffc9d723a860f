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
import shutil
import stat
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kdiag.errors import InputError

MANIFEST = "manifest.json"
FORMAT = 1
# bundle_format values this kdiag reads. Bundles written before the field
# existed have the same layout: a missing bundle_format means 1.
FORMATS = (1,)
# The schema_version trace records for every table, and the ones verify
# accepts. The parsers' schemas are what version 1 means, so a parser that
# changes its columns must bump this, or every older bundle fails verify.
TABLE_SCHEMA_VERSION = 1
SCHEMA_VERSIONS = (1,)
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


def start(staging: Path, manifest: dict) -> None:
    """An unsealed bundle: a manifest saying so, before anything is captured.
    What a killed kdiag leaves behind is then recognisably a bundle, and says
    it is partial."""
    manifest = {**manifest, "bundle_format": FORMAT, "sealed": False, "partial": True,
                "partial_reasons": ["kdiag stopped before it sealed this bundle (killed, or the machine went down)"]}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n")


def seal_dir(staging: Path, manifest: dict) -> list[Path]:
    """Write the final manifest (sizes and SHA-256 of every file) into the
    directory; it is then a bundle as an archive's unpacked copy is."""
    files = sorted(p for p in staging.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = dict(manifest)
    manifest["bundle_format"] = FORMAT
    manifest["sealed"] = True
    manifest["files"] = {
        str(p.relative_to(staging)): {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in files
    }
    tmp = staging / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    os.replace(tmp, staging / MANIFEST)
    return files


def is_sealed_dir(path: Path) -> bool:
    try:
        return json.loads((Path(path) / MANIFEST).read_text()).get("sealed", True) is True
    except (OSError, ValueError, AttributeError):
        return False


def write(staging: Path, out_path: Path, manifest: dict) -> Path:
    files = seal_dir(staging, manifest)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".part")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(staging / MANIFEST, arcname=MANIFEST)
            for p in files:
                tar.add(p, arcname=str(p.relative_to(staging)))
        os.replace(tmp, out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
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


def is_archive(path: Path) -> bool:
    """A tar archive, bundle or not: no raw capture kdiag reads is one."""
    path = Path(path)
    try:
        return path.is_file() and tarfile.is_tarfile(path)
    except OSError:
        return False


def unsafe_member(m: tarfile.TarInfo) -> str | None:
    """Why an archive member may not be unpacked, or None."""
    if not m.name or m.name.startswith("/") or PurePosixPath(m.name).is_absolute():
        return "absolute path"
    if ".." in PurePosixPath(m.name).parts:
        return "path leaves the bundle (..)"
    if m.issym():
        return f"symbolic link (to {m.linkname})"
    if m.islnk():
        return f"hard link (to {m.linkname})"
    if m.ischr() or m.isblk():
        return "device file"
    if m.isfifo():
        return "FIFO"
    if not (m.isfile() or m.isdir()):
        return "not a regular file"
    return None


def unpack(path: Path) -> Path:
    """A bundle as a directory: itself, or a fresh temp dir it is unpacked to."""
    path = Path(path)
    if path.is_dir():
        return path
    dest = Path(tempfile.mkdtemp(prefix="kdiag-replay-"))
    try:
        with tarfile.open(path, "r:*") as tar:
            # A bundle comes from another host: every member is checked
            # before anything is written, so a bad one leaves nothing behind.
            members = tar.getmembers()
            for m in members:
                why = unsafe_member(m)
                if why:
                    raise InputError(f"{path}: refusing to unpack member {m.name!r}: {why}")
            if hasattr(tarfile, "data_filter"):   # Python >= 3.11.4 / 3.12: a second line of defence
                tar.extractall(dest, members=members, filter="data")
            else:
                tar.extractall(dest, members=members)
    except InputError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        shutil.rmtree(dest, ignore_errors=True)
        raise InputError(f"{path}: not a readable bundle ({e})") from e
    return dest


def manifest(bundle_dir: Path) -> dict:
    try:
        return json.loads((bundle_dir / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{bundle_dir}: manifest.json unreadable ({e})") from e


def raw_files(bundle_dir: Path) -> list[Path]:
    return sorted(p for p in (bundle_dir / "raw").rglob("*") if p.is_file())


# --- verification -------------------------------------------------------------

@dataclass
class Problem:
    path: str | None     # the member it is about, or None for the bundle as a whole
    what: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}" if self.path else self.what


@dataclass
class Verification:
    path: Path
    problems: list[Problem] = field(default_factory=list)
    files: int = 0                      # files the manifest lists
    tables: int = 0                     # tables the manifest lists
    bundle_format: int | None = None
    not_a_bundle: bool = False
    # Written by a kdiag that was stopped before it listed and checksummed
    # the files: nothing to check them against, nothing to refuse either.
    unsealed: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def state(self) -> str:
        if self.not_a_bundle:
            return "not a bundle"
        if self.unsealed:
            return "UNSEALED"
        return "ok" if self.ok else "TAMPERED"

    def headline(self) -> str:
        if self.ok:
            return f"{self.path}: ok ({self.files} files, {self.tables} tables)"
        return f"{self.path}: {self.state}"

    def to_dict(self) -> dict:
        return {"path": str(self.path), "state": self.state, "ok": self.ok, "unsealed": self.unsealed,
                "bundle_format": self.bundle_format,
                "files": self.files, "tables": self.tables,
                "problems": [{"path": p.path, "problem": p.what} for p in self.problems]}

    def add(self, path: str | None, what: str) -> None:
        self.problems.append(Problem(path, what))


def table_schemas() -> dict:
    """Each table's Arrow schema at schema_version 1, as the formats that
    fill it declare it (kdiag.parsers.registry)."""
    from kdiag.parsers.registry import formats

    return {name: schema for fmt in formats() if fmt.schema_version == TABLE_SCHEMA_VERSION
            for name, schema in fmt.tables.items()}


def _is_table_file(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return len(parts) == 2 and parts[0] == "tables" and parts[1].endswith(".parquet")


def _safe_name(name) -> bool:
    if not isinstance(name, str) or not name or name.startswith("/"):
        return False
    p = PurePosixPath(name)
    return not p.is_absolute() and ".." not in p.parts and str(p) == name


def _parquet_facts(path: Path):
    """(schema, rows) from a Parquet file's footer, or why it cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
        return meta.schema.to_arrow_schema(), meta.num_rows
    except (OSError, ValueError, pa.ArrowException) as e:
        return str(e).splitlines()[0] if str(e) else type(e).__name__


def _hash_stream(f, copy_to=None) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
        size += len(block)
        if copy_to is not None:
            copy_to.write(block)
    return size, h.hexdigest()


def _scan_tar(path: Path, res: Verification, spool: Path):
    """Members -> (manifest bytes or None, {name: (bytes, sha256)}, {table file: parquet facts}).
    Reads the archive once, as a stream, and writes nothing but copies of the
    table files (under names of its own) into ``spool``."""
    found: dict[str, tuple[int, str]] = {}
    facts: dict = {}
    manifest_bytes = None
    try:
        with tarfile.open(path, "r:*") as tar:
            for i, m in enumerate(tar):
                why = unsafe_member(m)
                if why:
                    res.add(m.name, f"refused: {why}")
                    continue
                if m.isdir():
                    continue
                name = str(PurePosixPath(m.name))
                if name in found or (name == MANIFEST and manifest_bytes is not None):
                    res.add(name, "appears more than once in the archive")
                    continue
                f = tar.extractfile(m)
                if name == MANIFEST:
                    if i != 0:
                        res.add(MANIFEST, "not the archive's first member")
                    manifest_bytes = f.read()
                    continue
                if _is_table_file(name):
                    copy = spool / f"{len(facts)}.parquet"
                    with open(copy, "wb") as out:
                        found[name] = _hash_stream(f, out)
                    facts[name] = _parquet_facts(copy)
                else:
                    found[name] = _hash_stream(f)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        res.add(None, f"archive unreadable: {e}")
    return manifest_bytes, found, facts


def _scan_dir(path: Path, res: Verification):
    found: dict[str, tuple[int, str]] = {}
    facts: dict = {}
    manifest_bytes = None
    for root, dirs, files in os.walk(path):   # does not follow symlinked directories
        for n in sorted(dirs) + sorted(files):
            p = Path(root) / n
            rel = p.relative_to(path).as_posix()
            mode = os.lstat(p).st_mode
            if stat.S_ISDIR(mode):
                continue
            if stat.S_ISLNK(mode):
                res.add(rel, f"refused: symbolic link (to {os.readlink(p)})")
                continue
            if not stat.S_ISREG(mode):
                res.add(rel, "refused: not a regular file")
                continue
            if rel == MANIFEST:
                manifest_bytes = p.read_bytes()
                continue
            with open(p, "rb") as f:
                found[rel] = _hash_stream(f)
            if _is_table_file(rel):
                facts[rel] = _parquet_facts(p)
    return manifest_bytes, found, facts


def verify(path: Path) -> Verification:
    """Check a bundle (.tar.gz or its unpacked directory) against its manifest:
    archive members safe to unpack and manifest.json first; every listed file
    present with the recorded size and SHA-256, none unlisted; the bundle
    format and each table's schema_version known, and the table files' columns
    and row counts as the manifest and that version say."""
    path = Path(path)
    res = Verification(path)
    with tempfile.TemporaryDirectory(prefix="kdiag-verify-") as spool:
        if path.is_dir():
            manifest_bytes, found, facts = _scan_dir(path, res)
        elif is_archive(path):
            manifest_bytes, found, facts = _scan_tar(path, res, Path(spool))
        else:
            res.not_a_bundle = True
            res.add(None, "neither a tar archive nor a directory")
            return res
        _check_manifest(res, manifest_bytes, found, facts)
    return res


def _known(value, known) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value in known


def _check_manifest(res: Verification, manifest_bytes: bytes | None, found: dict, facts: dict) -> None:
    man = _read_manifest(res, manifest_bytes)
    if man is None:
        return
    listed = _check_files(res, man, found)
    _check_tables(res, man, listed, facts)


def _read_manifest(res: Verification, manifest_bytes: bytes | None) -> dict | None:
    """The manifest, when it is one whose files and tables can be checked:
    JSON, a bundle format this kdiag reads, sealed."""
    if manifest_bytes is None:
        res.add(MANIFEST, "missing")
        return None
    try:
        man = json.loads(manifest_bytes)
    except ValueError as e:
        res.add(MANIFEST, f"not valid JSON ({e})")
        return None
    if not isinstance(man, dict):
        res.add(MANIFEST, "not a JSON object")
        return None
    fmt = man.get("bundle_format", 1)
    res.bundle_format = fmt
    if not _known(fmt, FORMATS):
        # Another format may lay files out differently: checking them
        # against this one's rules would only add noise.
        res.add(MANIFEST, f"bundle_format {fmt!r} is not one this kdiag reads "
                          f"({', '.join(map(str, FORMATS))})")
        return None

    if man.get("sealed") is False and "files" not in man:
        res.unsealed = True
        res.add(None, "unsealed: kdiag stopped before it listed and checksummed the files (killed, or the "
                      f"machine went down); replay reads it as it is, `kdiag bundle seal {res.path}` makes "
                      "it a bundle")
        return None
    return man


def _check_files(res: Verification, man: dict, found: dict) -> dict:
    """Every file the manifest lists against what was found, and nothing
    unlisted; returns the listing."""
    listed = man.get("files")
    if not isinstance(listed, dict):
        res.add(MANIFEST, 'no "files" object listing the bundle\'s files')
        listed = {}
    res.files = len(listed)
    for name, entry in sorted(listed.items()):
        if not _safe_name(name):
            res.add(name, "listed in the manifest under a path outside the bundle")
            continue
        if not (isinstance(entry, dict) and _known(entry.get("bytes"), range(1 << 63))
                and isinstance(entry.get("sha256"), str)):
            res.add(name, "manifest entry malformed (want bytes and sha256)")
            continue
        got = found.get(name)
        if got is None:
            res.add(name, "listed in the manifest but missing")
        elif got[0] != entry["bytes"]:
            res.add(name, f"size differs from the manifest ({got[0]} bytes, the manifest says {entry['bytes']})")
        elif got[1] != entry["sha256"].lower():
            res.add(name, "sha256 differs from the manifest")
    for name in sorted(set(found) - set(listed)):
        res.add(name, "not listed in the manifest")
    return listed


def _check_tables(res: Verification, man: dict, listed: dict, facts: dict) -> None:
    """Each table the manifest names: a schema_version this kdiag reads,
    its file there and readable, its columns and rows as recorded; and no
    table file it does not name."""
    tables = man.get("tables", {})
    if not isinstance(tables, dict):
        res.add(MANIFEST, '"tables" is not an object')
        tables = {}
    res.tables = len(tables)
    expected = table_schemas() if tables else {}
    named = set()
    for name, info in sorted(tables.items()):
        rel = f"tables/{name}.parquet"
        named.add(rel)
        if not _is_table_file(rel) or not _safe_name(rel):
            res.add(MANIFEST, f"table name {name!r} is not a file name")
            continue
        version = info.get("schema_version") if isinstance(info, dict) else None
        if not _known(version, SCHEMA_VERSIONS):
            res.add(rel, f"schema_version {version!r} is not one this kdiag reads "
                         f"({', '.join(map(str, SCHEMA_VERSIONS))})")
            continue
        got = facts.get(rel)
        if got is None:
            if rel in listed:
                continue    # reported above as missing
            res.add(rel, "table in the manifest but its file is missing")
            continue
        if isinstance(got, str):
            res.add(rel, f"not a readable Parquet file ({got})")
            continue
        schema, rows = got
        want = expected.get(name)
        if want is not None:
            res.problems += [Problem(rel, p) for p in _schema_problems(schema, want, version)]
        if _known(info.get("rows"), range(1 << 63)) and rows != info["rows"]:
            res.add(rel, f"{rows} rows, the manifest says {info['rows']}")
    for rel in sorted(set(facts) - named):
        res.add(rel, 'a table file the manifest\'s "tables" does not name')


def _schema_problems(schema, want, version: int) -> list[str]:
    have = {f.name: f.type for f in schema}
    need = {f.name: f.type for f in want}
    missing = [n for n in need if n not in have]
    extra = [n for n in have if n not in need]
    out = []
    if missing or extra:
        parts = ([f"missing {_names(missing)}"] if missing else []) + \
                ([f"unexpected {_names(extra)}"] if extra else [])
        out.append(f"columns differ from schema_version {version}: " + "; ".join(parts))
    retyped = [f"{n} is {have[n]}, not {t}" for n, t in need.items() if n in have and have[n] != t]
    if retyped:
        out.append(f"column types differ from schema_version {version}: " + ", ".join(retyped))
    return out


def _names(names: list[str], shown: int = 8) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")
