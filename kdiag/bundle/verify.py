"""``kdiag bundle verify``: a bundle (.tar.gz or its unpacked directory)
against its manifest, read within the caps of ``kdiag.bundle.limits``.

manifest.json must come first in an archive: its sizes are what every
other member is held to before a byte of it is read, so a member bigger
than the manifest says is refused unread, and nothing is spooled whole.
"""
from __future__ import annotations

import collections
import hashlib
import os
import stat
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kdiag.bundle import schema
from kdiag.bundle.limits import Limits
from kdiag.bundle.reading import (
    FORMATS,
    MANIFEST,
    PROBE_SUMMARY,
    check_probe_summary,
    is_archive,
    members,
    open_regular,
    parse_manifest,
    unsafe_member,
)
from kdiag.bundle.table_versions import known_versions, table_schemas
from kdiag.errors import InputError
from kdiag.visible import visible

# A Parquet file's footer is at its end: the last this many bytes of a
# table are kept to read its schema and row count, the rest only hashed.
_PARQUET_TAIL_BYTES = 16 << 20


@dataclass
class Problem:
    path: str | None     # the member it is about, or None for the bundle as a whole
    what: str

    def __str__(self) -> str:
        # names and link targets come from the bundle: one line, whatever they hold
        return f"{_one_line(self.path)}: {_one_line(self.what)}" if self.path else _one_line(self.what)


def _one_line(text: str, most: int = 300) -> str:
    shown = visible(text)
    return shown if len(shown) <= most else shown[:most - 3] + "..."


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
            return f"{visible(self.path)}: ok ({self.files} files, {self.tables} tables)"
        return f"{visible(self.path)}: {self.state}"

    def to_dict(self) -> dict:
        return {"path": str(self.path), "state": self.state, "ok": self.ok, "unsealed": self.unsealed,
                "bundle_format": self.bundle_format,
                "files": self.files, "tables": self.tables,
                "problems": [{"path": p.path, "problem": p.what} for p in self.problems]}

    @classmethod
    def from_dict(cls, d: dict, path: Path) -> Verification:
        """The verification ``to_dict`` gave, of the bundle at ``path``."""
        def count(v) -> int:
            if type(v) is not int:
                raise TypeError("a count is not an integer")
            return v

        fmt = d["bundle_format"]
        if fmt is not None:
            fmt = count(fmt)
        return cls(Path(path), [Problem(None if p["path"] is None else str(p["path"]), str(p["problem"]))
                                for p in d["problems"]],
                   count(d["files"]), count(d["tables"]), fmt, d["state"] == "not a bundle", d["unsealed"] is True)

    def add(self, path: str | None, what: str) -> None:
        self.problems.append(Problem(path, what))


@dataclass
class _Scan:
    """What reading the bundle found, for the checks against its manifest."""
    manifest: dict | None = None
    manifest_problems: list[str] = field(default_factory=list)
    manifest_seen: bool = False
    manifest_first: bool = True
    capped: bool = False                # stopped at a cap: the rest was not read
    found: dict = field(default_factory=dict)       # name -> (bytes, sha256, or None when not read)
    facts: dict = field(default_factory=dict)       # table file -> (schema, rows), or why unreadable
    summary_problems: list[str] = field(default_factory=list)

    def declared(self, name: str) -> int | None:
        """The size the manifest gives ``name``, when the manifest came first
        and lists it well-formed: the only members read."""
        listed = self.manifest.get("files") if self.manifest_first and self.manifest else None
        entry = listed.get(name) if isinstance(listed, dict) else None
        if entry is None or schema.problems(entry, schema.FILE_ENTRY):
            return None
        return entry["bytes"]


def _is_table_file(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return len(parts) == 2 and parts[0] == "tables" and parts[1].endswith(".parquet")


def _safe_name(name) -> bool:
    if not isinstance(name, str) or not name or name.startswith("/"):
        return False
    p = PurePosixPath(name)
    return not p.is_absolute() and ".." not in p.parts and str(p) == name


def _parquet_facts(source):
    """(schema, rows) from a Parquet file's footer, or why it cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(source)
        return meta.schema.to_arrow_schema(), meta.num_rows
    except (OSError, ValueError, pa.ArrowException) as e:
        return str(e).splitlines()[0] if str(e) else type(e).__name__


def _read(f, size: int, keep_tail: int = 0) -> tuple[tuple[int, str], bytes]:
    """((bytes read, sha256), the last ``keep_tail`` of them), reading at
    most ``size`` bytes."""
    h = hashlib.sha256()
    got = 0
    tail: collections.deque = collections.deque()
    kept = 0
    while got < size and (block := f.read(min(1 << 20, size - got))):
        h.update(block)
        got += len(block)
        if keep_tail:
            tail.append(block)
            kept += len(block)
            while kept - len(tail[0]) >= keep_tail:
                kept -= len(tail.popleft())
    return (got, h.hexdigest()), b"".join(tail)[-keep_tail:] if keep_tail else b""


def _read_member(scan: _Scan, name: str, f, size: int, spool: Path | None, limits: Limits):
    """One listed member of the declared size: hashed; a table's footer
    read; the probe summary's content checked."""
    if _is_table_file(name):
        got, tail = _read(f, size, _PARQUET_TAIL_BYTES)
        if spool is None:         # a directory's file: its footer is read in place
            f.seek(0)
            scan.facts[name] = _parquet_facts(f)
        else:
            # the tail at its own offset in a sparse copy: the footer where
            # the reader looks for it, nothing else written
            copy = spool / f"{len(scan.facts)}.parquet"
            with open(copy, "wb") as out:
                out.truncate(got[0])
                out.seek(got[0] - len(tail))
                out.write(tail)
            scan.facts[name] = _parquet_facts(str(copy))
            copy.unlink()
        return got
    if name == PROBE_SUMMARY and size <= limits.manifest_bytes:
        got, data = _read(f, size, max(size, 1))
        scan.summary_problems = check_probe_summary(data, limits)[1]
        return got
    return _read(f, size)[0]


def _take_manifest(scan: _Scan, data: bytes | None, first: bool, limits: Limits) -> None:
    scan.manifest_seen, scan.manifest_first = True, first
    scan.manifest, scan.manifest_problems = parse_manifest(data, limits)


def _scan_tar(path: Path, res: Verification, spool: Path, limits: Limits) -> _Scan:
    """Reads the archive once, as a stream, within the caps; writes nothing
    but the footers of table files (in sparse copies) into ``spool``."""
    scan = _Scan()
    try:
        with tarfile.open(path, "r:*") as tar:
            for i, m, over in members(tar, limits):
                if over:
                    res.add(None, over)
                    scan.capped = True
                    break
                why = unsafe_member(m)
                if why:
                    res.add(m.name, f"refused: {why}")
                    continue
                if m.isdir():
                    continue
                name = str(PurePosixPath(m.name))
                if name in scan.found or (name == MANIFEST and scan.manifest_seen):
                    res.add(name, "appears more than once in the archive")
                    continue
                if name == MANIFEST:
                    data = tar.extractfile(m).read() if m.size <= limits.manifest_bytes else None
                    _take_manifest(scan, data, i == 0, limits)
                elif scan.declared(name) != m.size:
                    scan.found[name] = (m.size, None)     # refused unread; the checks say why
                else:
                    scan.found[name] = _read_member(scan, name, tar.extractfile(m), m.size, spool, limits)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        res.add(None, f"archive unreadable: {e}")
    return scan


def _scan_dir(path: Path, res: Verification, limits: Limits) -> _Scan:
    """The same for an unpacked bundle, reading no file through a link."""
    scan = _Scan()
    # the manifest first, so the other files are held to its sizes
    if stat.S_ISREG(_lstat_mode(path / MANIFEST)):
        try:
            _scan_dir_file(scan, MANIFEST, path / MANIFEST, limits)
        except (InputError, OSError) as e:
            res.add(MANIFEST, f"refused: {str(e).split(': ', 1)[-1]}")
    count = total_bytes = 0
    for root, dirs, files in os.walk(path):   # does not follow symlinked directories
        dirs.sort()
        for n in sorted(dirs) + sorted(files):
            p = Path(root) / n
            rel = p.relative_to(path).as_posix()
            st = os.lstat(p)
            count += 1
            if count > limits.members:
                res.add(None, limits.refusal("members", f"more than {limits.members} files"))
                scan.capped = True
                return scan
            if stat.S_ISDIR(st.st_mode):
                continue
            if stat.S_ISLNK(st.st_mode):
                res.add(rel, f"refused: symbolic link (to {os.readlink(p)})")
                continue
            if not stat.S_ISREG(st.st_mode):
                res.add(rel, "refused: not a regular file")
                continue
            if rel == MANIFEST:
                continue
            total_bytes += st.st_size
            if total_bytes > limits.unpacked_bytes:
                res.add(None, limits.refusal("unpacked_bytes", f"{rel}: files add up to more than "
                                                               f"{total_bytes >> 20} MiB"))
                scan.capped = True
                return scan
            try:
                _scan_dir_file(scan, rel, p, limits)
            except (InputError, OSError) as e:
                res.add(rel, f"refused: {str(e).split(': ', 1)[-1]}")
    return scan


def _lstat_mode(p: Path) -> int:
    try:
        return os.lstat(p).st_mode
    except OSError:
        return 0


def _scan_dir_file(scan: _Scan, rel: str, p: Path, limits: Limits) -> None:
    with open_regular(p) as f:
        size = os.fstat(f.fileno()).st_size
        if rel == MANIFEST:
            data = f.read(limits.manifest_bytes + 1)
            _take_manifest(scan, data if len(data) <= limits.manifest_bytes else None, True, limits)
        elif scan.declared(rel) != size:
            scan.found[rel] = (size, None)
        else:
            scan.found[rel] = _read_member(scan, rel, f, size, None, limits)


def verify(path: Path, limits: Limits | None = None) -> Verification:
    """Check a bundle (.tar.gz or its unpacked directory) against its manifest:
    within the caps; archive members safe to unpack and manifest.json first;
    the manifest as its schema says; every listed file present with the
    recorded size and SHA-256, none unlisted; the bundle format and each
    table's schema_version known, and the table files' columns and row
    counts as the manifest and that version say; the probe's summary readable."""
    path = Path(path)
    limits = limits or Limits.resolve()
    res = Verification(path)
    with tempfile.TemporaryDirectory(prefix="kdiag-verify-") as spool:
        if path.is_dir():
            scan = _scan_dir(path, res, limits)
        elif is_archive(path):
            scan = _scan_tar(path, res, Path(spool), limits)
        else:
            res.not_a_bundle = True
            res.add(None, "neither a tar archive nor a directory")
            return res
        _check_manifest(res, scan, limits)
    return res



def _known(value, known) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value in known


def _check_manifest(res: Verification, scan: _Scan, limits: Limits) -> None:
    man = _read_manifest(res, scan)
    if man is None or scan.capped:
        return
    for key in ("files", "tables"):
        if isinstance(man.get(key), dict) and len(man[key]) > limits.members:
            res.add(MANIFEST, limits.refusal("members", f'"{key}" lists {len(man[key])}'))
            return
    listed = _check_files(res, man, scan.found)
    _check_tables(res, man, listed, scan.facts)
    if PROBE_SUMMARY in listed:
        res.problems += [Problem(PROBE_SUMMARY, p) for p in scan.summary_problems]


def _read_manifest(res: Verification, scan: _Scan) -> dict | None:
    """The manifest, when it is one whose files and tables can be checked:
    first, JSON within the caps, a bundle format this kdiag reads, sealed."""
    if not scan.manifest_seen:
        if not scan.capped:
            res.add(MANIFEST, "missing")
        return None
    if not scan.manifest_first:
        # its sizes came too late to hold the members before it to them
        res.add(MANIFEST, "not the archive's first member")
        return None
    man = scan.manifest
    if man is None:
        res.add(MANIFEST, scan.manifest_problems[0])
        return None
    fmt = man.get("bundle_format", 1)
    res.bundle_format = fmt if _known(fmt, range(1 << 63)) else None
    if not _known(fmt, FORMATS):
        # Another format may lay files out differently: checking them
        # against this one's rules would only add noise.
        res.add(MANIFEST, f"bundle_format {_short(fmt)} is not one this kdiag reads "
                          f"({', '.join(map(str, FORMATS))})")
        return None
    if man.get("sealed") is False and "files" not in man:
        res.unsealed = True
        res.add(None, "unsealed: kdiag stopped before it listed and checksummed the files (killed, or the "
                      f"machine went down); replay reads it as it is, `kdiag bundle seal {res.path}` makes "
                      "it a bundle")
        man = None
    res.problems += [Problem(MANIFEST, p) for p in scan.manifest_problems]
    return man


def _short(value) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


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
        if schema.problems(entry, schema.FILE_ENTRY) or not _known(entry["bytes"], range(1 << 63)):
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
            res.add(MANIFEST, f"table name {_short(name)} is not a file name")
            continue
        version = info.get("schema_version") if isinstance(info, dict) else None
        versions = known_versions(name) or (1,)
        if not _known(version, versions):
            res.add(rel, f"schema_version {_short(version)} is not one this kdiag reads "
                         f"({', '.join(map(str, versions))})")
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
        want = table_schemas({name: version}).get(name) if expected else None
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
