"""kdiag bundle verify, and replay refusing what it rejects. The bundle is
made by trace's own finish() from a fixture capture: no Kafka, no strace."""
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from conftest import CAPTURES, ROOT
from kdiag.bundle import archive as bundle
from kdiag.cli import Environment, main
from kdiag.errors import InputError
from kdiag.status import ExitStatus

STRACE = "raw/strace/strace.txt"


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    rc = main([str(a) for a in argv], Environment(stdout=out, stderr=err))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def made(tmp_path_factory, spark):
    from kdiag.capture.trace import finish

    work = tmp_path_factory.mktemp("made")
    staging = work / "staging"
    raw = []
    for source, name in (("rdkafka_log", "rdkafka.log"), ("strace", "strace.txt"), ("stats", "stats.jsonl")):
        (staging / "raw" / source).mkdir(parents=True)
        raw.append(staging / "raw" / source / name)
        shutil.copy(CAPTURES / "nagle_on" / name, raw[-1])
    warm = threading.Thread(target=lambda: None)
    warm.start()
    findings, out = finish(staging, raw, {}, {"spark": spark}, warm, work / "good.tar.gz", [],
                           {"argv": ["kdiag", "trace"], "partial": False}, {})
    return out, findings


@pytest.fixture
def good(made):
    return made[0]


def members(path):
    """[(TarInfo, bytes or None)] in archive order."""
    with tarfile.open(path) as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]


def rewrite(src, dst, change):
    """dst: src's members passed through change(list) -> list, as a new .tar.gz."""
    with tarfile.open(dst, "w:gz") as tar:
        for info, data in change(members(src)):
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return dst


def replace(items, name, fn):
    return [(m, fn(d) if m.name == name else d) for m, d in items]


def with_manifest(items, fn):
    def edit(data):
        man = json.loads(data)
        fn(man)
        return json.dumps(man).encode()
    return replace(items, bundle.MANIFEST, edit)


def verify(path, *extra):
    rc, out, _ = run("bundle", "verify", path, *extra)
    return rc, out.splitlines()


def test_a_fresh_bundle_verifies(good, tmp_path):
    man = json.loads(members(good)[0][1])
    assert members(good)[0][0].name == "manifest.json" and man["bundle_format"] == bundle.FORMAT
    assert {name: t["schema_version"] for name, t in man["tables"].items()} == \
        {name: v for name, v in bundle.table_versions().items() if name in man["tables"]}
    rc, lines = verify(good)
    assert rc == ExitStatus.OK
    n, m = len(man["files"]), len(man["tables"])
    assert lines == [f"{good}: ok ({n} files, {m} tables)"] and m == 5
    # the unpacked directory too, and both at once as JSON
    d = bundle.unpack(good)
    try:
        rc, out, _ = run("bundle", "verify", "--json", good, d)
        assert rc == ExitStatus.OK
        res = json.loads(out)["bundles"]
        assert [(r["state"], r["files"], r["tables"], r["problems"]) for r in res] == [("ok", n, m, [])] * 2
    finally:
        shutil.rmtree(d)


def test_a_flipped_byte_is_named(good, tmp_path):
    def flip(data):
        i = data.rindex(b"+++")
        return data[:i] + b"-" + data[i + 1:]

    bad = rewrite(good, tmp_path / "bad.tar.gz", lambda items: replace(items, STRACE, flip))
    rc, lines = verify(bad)
    assert rc == ExitStatus.ERROR
    assert lines == [f"{bad}: TAMPERED", f"  {STRACE}: sha256 differs from the manifest"]


def test_missing_unlisted_and_resized_files(good, tmp_path):
    extra = tarfile.TarInfo("raw/strace/extra.txt")

    def change(items):
        items = [(m, d) for m, d in items if m.name != "raw/stats/stats.jsonl"] + [(extra, b"x\n")]
        return replace(items, "report.txt", lambda d: d + b"more\n")

    rc, lines = verify(rewrite(good, tmp_path / "bad.tar.gz", change))
    assert rc == ExitStatus.ERROR
    assert "  raw/stats/stats.jsonl: listed in the manifest but missing" in lines
    assert "  raw/strace/extra.txt: not listed in the manifest" in lines
    assert any(ln.startswith("  report.txt: size differs from the manifest") for ln in lines)


def test_versions_this_kdiag_does_not_know(good, tmp_path):
    def v99(man):
        man["tables"]["syscalls"]["schema_version"] = 99

    rc, lines = verify(rewrite(good, tmp_path / "v99.tar.gz", lambda items: with_manifest(items, v99)))
    assert rc == ExitStatus.ERROR
    assert lines[1:] == ["  tables/syscalls.parquet: schema_version 99 is not one this kdiag reads (1, 2)"]

    rc, lines = verify(rewrite(good, tmp_path / "f2.tar.gz",
                               lambda items: with_manifest(items, lambda m: m.update(bundle_format=2))))
    assert rc == ExitStatus.ERROR and "manifest.json: bundle_format 2 is not one this kdiag reads (1)" in lines[1]

    # bundles written before bundle_format existed are format 1
    rc, lines = verify(rewrite(good, tmp_path / "f0.tar.gz",
                               lambda items: with_manifest(items, lambda m: m.pop("bundle_format"))))
    assert rc == ExitStatus.OK


def test_table_columns_are_checked(good, tmp_path):
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"line_no": pa.array([1, 2, 3], pa.int64()), "x": [1, 2, 3]}), tmp_path / "t.parquet")
    data = (tmp_path / "t.parquet").read_bytes()
    name = "tables/stats.parquet"

    def change(items):
        items = replace(items, name, lambda _: data)
        return with_manifest(items, lambda m: m["files"].update(
            {name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}))

    rc, lines = verify(rewrite(good, tmp_path / "cols.tar.gz", change))
    assert rc == ExitStatus.ERROR
    cols = next(ln for ln in lines if "columns differ" in ln)
    assert cols.startswith(f"  {name}: columns differ from schema_version 2: missing ts_us, client, ")
    assert cols.endswith(" and 44 more; unexpected x")
    assert any(ln.startswith(f"  {name}: 3 rows, the manifest says 2") for ln in lines)


def test_manifest_must_be_first_and_valid(good, tmp_path):
    rc, lines = verify(rewrite(good, tmp_path / "last.tar.gz", lambda items: items[1:] + items[:1]))
    assert rc == ExitStatus.ERROR and lines[1:] == ["  manifest.json: not the archive's first member"]

    rc, lines = verify(rewrite(good, tmp_path / "json.tar.gz",
                               lambda items: replace(items, bundle.MANIFEST, lambda d: d[:-10])))
    assert rc == ExitStatus.ERROR and lines[1].startswith("  manifest.json: not valid JSON")

    rc, lines = verify(rewrite(good, tmp_path / "none.tar.gz", lambda items: items[1:]))
    assert rc == ExitStatus.ERROR and lines[1:] == ["  manifest.json: missing"]


def _evil(name, kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info, (b"evil\n" if kind == tarfile.REGTYPE else None)


def test_unsafe_members_are_refused(good, tmp_path, monkeypatch):
    # unpack's temp dir inside tmp_path, so "../" lands where the test can look
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    outside = tmp_path / "abs" / "x"
    cases = {
        "../evil": ("path leaves the bundle (..)", _evil("../evil")),
        str(outside): ("absolute path", _evil(str(outside))),
        "raw/strace/link": ("symbolic link (to /etc/passwd)", _evil("raw/strace/link", tarfile.SYMTYPE, "/etc/passwd")),
        "raw/strace/hard": ("hard link (to report.txt)", _evil("raw/strace/hard", tarfile.LNKTYPE, "report.txt")),
        "raw/strace/null": ("device file", _evil("raw/strace/null", tarfile.CHRTYPE)),
    }
    for i, (name, (why, member)) in enumerate(cases.items()):
        bad = rewrite(good, tmp_path / f"bad{i}.tar.gz", lambda items, member=member: [*items, member])
        rc, lines = verify(bad)
        assert rc == ExitStatus.ERROR and lines == [f"{bad}: TAMPERED", f"  {name}: refused: {why}"]
        with pytest.raises(InputError, match="refusing to unpack member"):
            bundle.unpack(bad)
        # even told to skip verification, replay unpacks none of it
        rc, _, err = run("replay", "--no-verify", bad)
        assert rc == ExitStatus.ERROR and "refusing to unpack member" in err
    assert not (tmp_path / "evil").exists() and not outside.exists()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_an_unpacked_bundle_is_checked_too(good, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    d = bundle.unpack(good)
    (d / "findings.json").write_text("{}\n")
    (d / "raw" / "strace" / "link").symlink_to("/etc/passwd")
    rc, lines = verify(d)
    assert rc == ExitStatus.ERROR
    recorded = json.loads((d / "manifest.json").read_text())["files"]["findings.json"]["bytes"]
    assert lines == [f"{d}: TAMPERED", "  raw/strace/link: refused: symbolic link (to /etc/passwd)",
                     f"  findings.json: size differs from the manifest (3 bytes, the manifest says {recorded})"]


def test_usage(tmp_path):
    rc, _, err = run("bundle", "verify", tmp_path / "nope.tar.gz")
    assert rc == ExitStatus.USAGE and "no such file" in err
    assert run("bundle")[0] == ExitStatus.USAGE
    assert run("bundle", "check", tmp_path)[0] == ExitStatus.USAGE
    (tmp_path / "notes.txt").write_text("hello\n")
    rc, out, _ = run("bundle", "verify", tmp_path / "notes.txt")
    assert rc == ExitStatus.ERROR and out.startswith(f"{tmp_path / 'notes.txt'}: not a bundle\n")
    res = subprocess.run([sys.executable, "-m", "kdiag", "bundle", "--help"], capture_output=True, text=True,
                         check=False, cwd=ROOT, env={**os.environ, "COLUMNS": "120"})
    assert res.returncode == 0 and "kdiag bundle verify" in res.stdout.split("examples:")[-1]


def test_replay_refuses_a_tampered_bundle(made, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))   # where replay unpacks
    good, findings = made
    bad = rewrite(good, tmp_path / "bad.tar.gz",
                  lambda items: replace(items, STRACE, lambda d: d.replace(b"+++ exited", b"+++ exiteD")))
    rc, out, err = run("replay", "--json", bad)
    assert rc == ExitStatus.ERROR and out == ""
    assert f"{bad}: failed verification, not replaying it (--no-verify replays it anyway)" in err
    assert f"  {STRACE}: sha256 differs from the manifest" in err

    rc, out, err = run("replay", "--json", "--no-verify", bad)
    assert rc == ExitStatus.OK
    warning = [ln for ln in err.splitlines() if "warning" in ln]
    assert warning == [(f"kdiag: warning: {bad} failed verification, replaying it anyway: "
                        f"{STRACE}: sha256 differs from the manifest")]
    f = json.loads(out)
    assert f["verdict"] == findings["verdict"] == "nagle_delayed_ack"


def test_replay_of_an_intact_bundle_says_nothing_of_verification(good, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    seen = []

    def analyse(raw, tables_dir, meta=None, spark=None, base=None):
        seen.extend(p.relative_to(p.parents[2]).as_posix() for p in raw)
        return {"verdict": None, "no_data": False}, None

    monkeypatch.setattr("kdiag.analysis.pipeline.analyse", analyse)
    rc, out, err = run("replay", "--json", good)
    assert rc == ExitStatus.OK and err == "" and json.loads(out)["verdict"] is None
    assert sorted(seen) == ["raw/rdkafka_log/rdkafka.log", "raw/stats/stats.jsonl", STRACE]


def test_bundles_of_either_schema_version_verify(tmp_path):
    """rdkafka_events grew columns in schema version 2: a bundle written
    before (version 1, fixtures/bundles/nagle_on.tar.gz) still verifies, and
    one that claims version 2 with version 1's columns does not."""
    old = Path(__file__).resolve().parent.parent / "fixtures" / "bundles" / "nagle_on.tar.gz"
    man = json.loads(members(old)[0][1])
    assert man["tables"]["rdkafka_events"]["schema_version"] == 1
    rc, lines = verify(old)
    assert rc == ExitStatus.OK, lines

    def claim_v2(m):
        m["tables"]["rdkafka_events"]["schema_version"] = 2

    rc, lines = verify(rewrite(old, tmp_path / "v2.tar.gz", lambda items: with_manifest(items, claim_v2)))
    assert rc == ExitStatus.ERROR
    assert any("tables/rdkafka_events.parquet: columns differ from schema_version 2: missing" in ln for ln in lines)
