"""Reading a bundle someone else made: its members, manifest and raw files,
within the caps of ``kdiag.bundle.limits`` and through no link."""
from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

from kdiag.bundle import schema
from kdiag.bundle.limits import Limits
from kdiag.errors import InputError
from kdiag.visible import visible

MANIFEST = "manifest.json"
# bundle_format values this kdiag reads. Bundles written before the field
# existed have the same layout: a missing bundle_format means 1.
FORMATS = (1,)
PROBE_SUMMARY = "raw/probe/summary.json"
PROBE_MESSAGES = "raw/probe/messages.jsonl"
# The compare's bootstrap needs a fair sample, not every message.
DELIVERY_MAX = 2000
_BLOCK = 1 << 20
_UNREADABLE = (tarfile.TarError, OSError, EOFError, zlib.error)


def __getattr__(name: str):
    # ANALYSED_SOURCES: the raw/<source>/ directories whose files the
    # analysis reads, where the format registry says a bundle keeps each
    # format; found when first asked for, since the parsers take seconds to
    # import and reading a manifest needs none of them.
    if name == "ANALYSED_SOURCES":
        from kdiag.parsers.registry import bundle_dirs

        return bundle_dirs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def analysed_files(root: Path) -> list[Path]:
    """The raw files under a bundle (directory) that the analysis reads."""
    from kdiag.parsers.registry import bundle_dirs

    return [f for f in raw_files(root) if f.parent.name in bundle_dirs()]


def is_bundle(path: Path) -> bool:
    path = Path(path)
    if path.is_dir():
        return (path / MANIFEST).is_file()
    if is_archive(path):
        try:
            with tarfile.open(path, "r:*") as tar:
                first = tar.next()
                return first is not None and first.name == MANIFEST
        except _UNREADABLE:
            return False
    return False


def is_archive(path: Path) -> bool:
    """A tar archive, bundle or not: no raw capture kdiag reads is one."""
    path = Path(path)
    try:
        return path.is_file() and tarfile.is_tarfile(path)
    except _UNREADABLE:   # a gzip cut short inside the first header
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


def members(tar: tarfile.TarFile, limits: Limits):
    """(index, member, why it is over a cap or None): the archive's members
    while they stay within the member-count and unpacked-size caps; the
    first one past a cap is the last yielded, so nothing past it is read."""
    total_bytes = 0
    for i, m in enumerate(tar):
        if i >= limits.members:
            yield i, m, limits.refusal("members", f"more than {limits.members} members")
            return
        total_bytes += m.size
        if total_bytes > limits.unpacked_bytes:
            yield i, m, limits.refusal("unpacked_bytes", f"members unpack to more than {total_bytes >> 20} MiB")
            return
        yield i, m, None


def unpack(path: Path, limits: Limits | None = None) -> Path:
    """A bundle as a directory: itself, or a fresh temp dir it is unpacked to."""
    path = Path(path)
    if path.is_dir():
        return path
    limits = limits or Limits.resolve()
    dest = Path(tempfile.mkdtemp(prefix="kdiag-replay-"))
    try:
        # A bundle comes from another host: every member is checked before
        # anything is written, so a bad one leaves nothing behind.
        with tarfile.open(path, "r:*") as tar:
            for _, m, over in members(tar, limits):
                if over:
                    raise InputError(f"{visible(path)}: {over}")
                why = unsafe_member(m)
                if why:
                    raise InputError(f"{visible(path)}: refusing to unpack member {m.name!r}: {why}")
        with tarfile.open(path, "r:*") as tar:
            _extract(tar, dest, limits, path)
    except InputError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        shutil.rmtree(dest, ignore_errors=True)
        raise InputError(f"{visible(path)}: not a readable bundle ({e})") from e
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def _extract(tar: tarfile.TarFile, dest: Path, limits: Limits, path: Path) -> None:
    """Only directories and regular files, created fresh (never through
    something already there), each at most the size its header gave when
    it was checked."""
    for _, m, over in members(tar, limits):
        why = over or unsafe_member(m)
        if why:   # the archive changed since it was checked
            raise InputError(f"{visible(path)}: refusing to unpack member {m.name!r}: {why}")
        target = dest / PurePosixPath(m.name)
        if m.isdir():
            target.mkdir(mode=0o700, parents=True, exist_ok=True)
            continue
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            raise InputError(f"{visible(path)}: member {m.name!r} appears more than once in the archive") from None
        src = tar.extractfile(m)
        with os.fdopen(fd, "wb") as out:
            left = m.size
            while left > 0 and (block := src.read(min(_BLOCK, left))):
                out.write(block)
                left -= len(block)


def open_regular(path: Path):
    """A binary file object for ``path`` if it is a regular file reached
    through no symbolic link in its last component; InputError otherwise.
    Never blocks on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{visible(path)}: a symbolic link; kdiag reads no link in a bundle "
                             "(put the file itself there)") from None
        raise InputError(f"{visible(path)}: cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{visible(path)}: not a regular file; kdiag reads only regular files in a bundle")
    return os.fdopen(fd, "rb")


def read_capped(path: Path, cap_bytes: int) -> bytes | None:
    """The file's bytes, or None when it holds more than ``cap_bytes``."""
    with open_regular(path) as f:
        if os.fstat(f.fileno()).st_size > cap_bytes:
            return None
        data = f.read(cap_bytes + 1)
    return None if len(data) > cap_bytes else data


def load_json(data: bytes, max_depth: int):
    """(value, None) or (None, why not): JSON nested at most ``max_depth``
    deep. The decoder recurses, so a deeper document is refused without
    the traceback it would give."""
    try:
        value = json.loads(data)
    except RecursionError:
        return None, "nested deeper than the JSON decoder goes"
    except ValueError as e:
        return None, f"not valid JSON ({str(e).splitlines()[0][:200]})"
    if schema.depth(value) > max_depth:
        return None, f"nested deeper than {max_depth}"
    return value, None


def parse_manifest(data: bytes | None, limits: Limits) -> tuple[dict | None, list[str]]:
    """(manifest, problems): the manifest is None when it cannot be read at
    all; problems lists what differs from the schema."""
    if data is None:
        return None, [limits.refusal("manifest_bytes", "too big")]
    man, why = load_json(data, limits.manifest_depth)
    if why is not None:
        if why.startswith("nested deeper"):
            why = limits.refusal("manifest_depth", why)
        return None, [why]
    if not isinstance(man, dict):
        return None, ["not a JSON object"]
    return man, schema.problems(man, schema.MANIFEST)


def manifest(bundle_dir: Path, limits: Limits | None = None) -> dict:
    """The manifest of a bundle directory, read within the caps and
    checked against the schema; InputError, one line, if it cannot be used."""
    limits = limits or Limits.resolve()
    path = Path(bundle_dir) / MANIFEST
    try:
        data = read_capped(path, limits.manifest_bytes)
    except InputError as e:
        raise InputError(f"{visible(bundle_dir)}: manifest.json unreadable ({e})") from None
    except OSError as e:
        raise InputError(f"{visible(bundle_dir)}: manifest.json unreadable ({e.strerror or e})") from None
    man, problems = parse_manifest(data, limits)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(f"{visible(path)}: {problems[0]}{more}; kdiag bundle verify {visible(bundle_dir)} "
                         "lists the problems")
    return man


def is_sealed_dir(path: Path) -> bool:
    limits = Limits.resolve()
    try:
        data = read_capped(Path(path) / MANIFEST, limits.manifest_bytes)
    except (InputError, OSError):
        return False
    man = load_json(data, limits.manifest_depth)[0] if data is not None else None
    return isinstance(man, dict) and man.get("sealed", True) is True


def refuse_links(bundle_dir: Path, limits: Limits | None = None) -> None:
    """InputError, one line, if anything in the directory is a symbolic link
    or neither a regular file nor a directory, or it holds more entries than
    the member cap."""
    limits = limits or Limits.resolve()
    count = 0
    for here, dirs, files in os.walk(bundle_dir):
        for name in dirs + files:
            count += 1
            if count > limits.members:
                raise InputError(f"{visible(bundle_dir)}: "
                                 + limits.refusal("members", f"more than {limits.members} files"))
            _regular_or_dir(Path(here) / name)


def _regular_or_dir(p: Path) -> bool:
    """True for a regular file, False for a directory, InputError otherwise."""
    mode = os.lstat(p).st_mode
    if stat.S_ISLNK(mode):
        raise InputError(f"{visible(p)}: a symbolic link (to {visible(os.readlink(p))}); kdiag reads no link in a "
                         "bundle (put the file itself there)")
    if stat.S_ISDIR(mode):
        return False
    if not stat.S_ISREG(mode):
        raise InputError(f"{visible(p)}: not a regular file; kdiag reads only regular files in a bundle")
    return True


def raw_files(bundle_dir: Path) -> list[Path]:
    """The regular files under raw/. A symbolic link or another kind of
    file there is refused, never followed: an unsealed or unpacked bundle
    directory may come from anyone."""
    root = Path(bundle_dir) / "raw"
    found: list[Path] = []
    for here, dirs, files in os.walk(root):    # lists linked directories, never enters them
        found += [Path(here) / name for name in dirs + files if _regular_or_dir(Path(here) / name)]
    return sorted(found)


def probe_summary(bundle_dir: Path, limits: Limits | None = None) -> dict | None:
    """raw/probe/summary.json when it is a JSON object of the fields the
    report reads; None when absent or not that (kdiag bundle verify names
    what is wrong with it)."""
    value, problems = read_probe_summary(Path(bundle_dir) / PROBE_SUMMARY, limits or Limits.resolve())
    return None if problems else value


def delivery_ms(raw_probe_dir: Path, limits: Limits | None = None) -> list[float] | None:
    """Each delivered message's time from produce() to its delivery report,
    in ms, from the probe's messages.jsonl ({"seq", "produce_us",
    "delivered_us", "error"} a line): every message up to DELIVERY_MAX, an
    even sample beyond. Lines of another shape are left out; None when
    there is no such file or it is over the manifest cap."""
    path = Path(raw_probe_dir) / Path(PROBE_MESSAGES).name
    if not path.is_file():
        return None
    limits = limits or Limits.resolve()
    try:
        data = read_capped(path, max(limits.manifest_bytes, 64 << 20))
    except (InputError, OSError):
        return None
    if data is None:
        return None
    out = []
    for line in data.splitlines():
        try:
            m = json.loads(line)
            took = (m["delivered_us"] - m["produce_us"]) / 1000
        except (ValueError, TypeError, KeyError):
            continue
        if isinstance(took, float) and took == took and m.get("error") is None and 0 <= took < 1e9:
            out.append(round(took, 3))
    step = -(-len(out) // DELIVERY_MAX) or 1
    return out[::step]


def read_probe_summary(path: Path, limits: Limits) -> tuple[dict | None, list[str]]:
    if not os.path.lexists(path):
        return None, []
    try:
        data = read_capped(path, limits.manifest_bytes)
    except InputError as e:
        return None, [str(e).split(": ", 1)[-1]]
    except OSError as e:
        return None, [f"cannot be read ({e.strerror or e})"]
    if data is None:
        return None, [limits.refusal("manifest_bytes", "too big")]
    return check_probe_summary(data, limits)


def check_probe_summary(data: bytes, limits: Limits) -> tuple[dict | None, list[str]]:
    value, why = load_json(data, limits.manifest_depth)
    if why is not None:
        return None, [why]
    if not isinstance(value, dict):
        return None, ["not a JSON object"]
    return value, schema.problems(value, schema.PROBE_SUMMARY)
