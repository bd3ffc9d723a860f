"""A bundle is someone else's archive: kdiag reads it within declared
bounds (the manifest's sizes, the caps), through no link, and a bundle that
verifies is one that replays, or verify says why not."""
import io
import json
import os
import resource
import signal
import subprocess
import sys
import shutil

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import bundle_mutations as bm
from conftest import ROOT, need
from kdiag.bundle import archive as bundle
from kdiag.cli import Environment, main
from kdiag.errors import InputError
from kdiag.report.text import render
from kdiag.status import ExitStatus

MIB = 1 << 20


def run(*argv, env=None, monkeypatch=None):
    if env and monkeypatch:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
    out, err = io.StringIO(), io.StringIO()
    rc = main([str(a) for a in argv], Environment(stdout=out, stderr=err))
    return rc, out.getvalue(), err.getvalue()


def with_manifest(tmp_path, change, name="case.tar.gz", items=None):
    items = items or bm.real_members()
    man = json.loads(items[0][1])
    change(man)
    return bm.write(items, tmp_path / name, manifest=man)


def _limited(fsize_bytes: int, as_bytes: int = 1536 * MIB):
    def preexec():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG instead of death
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_bytes, fsize_bytes))
        resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
    return preexec


def kdiag_limited(*argv, fsize_bytes=64 * MIB, env=None):
    return subprocess.run([sys.executable, "-m", "kdiag", *map(str, argv)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **(env or {})}, preexec_fn=_limited(fsize_bytes),
                          timeout=120, check=False)


# --- 1. members held to the manifest's sizes ----------------------------------

def test_a_table_bigger_than_the_manifest_says_is_refused_unread(tmp_path):
    size = 256 * MIB
    items = [(m, (size, bm.Zeros(size)) if m.name == "tables/syscalls.parquet" else d) for m, d in bm.real_members()]
    bad = bm.write(items, tmp_path / "big-table.tar.gz")
    assert bad.stat().st_size < 2 * MIB
    declared = json.loads(items[0][1])["files"]["tables/syscalls.parquet"]["bytes"]
    # No file the child writes may pass 64 MiB: spooling the member whole would
    res = kdiag_limited("bundle", "verify", bad, env={"TMPDIR": str(tmp_path)})
    assert res.returncode == ExitStatus.ERROR and "Traceback" not in res.stderr
    assert res.stdout.splitlines() == [
        f"{bad}: TAMPERED",
        f"  tables/syscalls.parquet: size differs from the manifest ({size} bytes, the manifest says {declared})"]


def test_the_real_bundle_verifies_and_its_tables_are_read_from_their_footers(tmp_path):
    rc, out, _ = run("bundle", "verify", bm.REAL)
    assert rc == ExitStatus.OK and out == f"{bm.REAL}: ok (20 files, 9 tables)\n"
    # a table whose bytes match the manifest but are not Parquet is still named
    junk = b"PAR1" + b"\0" * 100
    items = [(m, junk if m.name == "tables/threads.parquet" else d) for m, d in bm.real_members()]
    bad = with_manifest(tmp_path, lambda man: man["files"].update({"tables/threads.parquet": bm.listing(junk)}),
                        items=items)
    rc, out, _ = run("bundle", "verify", bad)
    assert rc == ExitStatus.ERROR and "  tables/threads.parquet: not a readable Parquet file" in out


# --- 2. caps --------------------------------------------------------------------

def test_the_member_cap(tmp_path, monkeypatch):
    n = 12_000   # above the default cap of 10,000, each listed and hashed correctly
    items = bm.real_members()
    man = json.loads(items[0][1])
    for i in range(n):
        name = f"raw/strace/strace.{i}"
        items.append((bm.member(name), b"x"))
        man["files"][name] = bm.listing(b"x")
    many = bm.write(items, tmp_path / "many.tar.gz", manifest=man)
    rc, out, _ = run("bundle", "verify", many)
    assert rc == ExitStatus.ERROR
    assert out.splitlines()[1:] == ["  more than 10000 members: over the member count cap of 10000; not read "
                                    "(--max-members or KDIAG_MAX_MEMBERS raises it)"]
    rc, out, _ = run("bundle", "verify", many, "--max-members", 20_000)
    assert rc == ExitStatus.OK, out
    # replay refuses it too, even told not to verify: unpacking is capped
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    rc, _, err = run("replay", "--no-verify", many)
    assert rc == ExitStatus.ERROR and "member count cap of 10000" in err and "Traceback" not in err
    assert not list(tmp_path.glob("kdiag-replay-*"))
    monkeypatch.setattr("kdiag.analysis.pipeline.analyse", lambda *a, **k: ({"verdict": None}, None))
    rc, out, err = run("replay", "--json", many, "--max-members", 20_000)
    assert rc == ExitStatus.OK and err == "", err
    # the environment lowers (or raises) it as the option does
    rc, out, _ = run("bundle", "verify", bm.REAL, env={"KDIAG_MAX_MEMBERS": "10"}, monkeypatch=monkeypatch)
    assert rc == ExitStatus.ERROR and "member count cap of 10;" in out


def test_the_unpacked_size_cap(tmp_path, monkeypatch):
    size = 48 * MIB
    data = (size, bm.Zeros(size))
    items = [*bm.real_members(), (bm.member("raw/strace/huge.txt"), data)]
    big = with_manifest(tmp_path, lambda man: man["files"].update({"raw/strace/huge.txt": bm.listing((size, None))}),
                        items=items)
    assert run("bundle", "verify", big)[0] == ExitStatus.OK     # honest, and under the default cap
    rc, out, _ = run("bundle", "verify", big, "--max-unpacked-mb", 16)
    assert rc == ExitStatus.ERROR and out.splitlines()[1].endswith(
        "over the unpacked size cap of 16 MiB; not read (--max-unpacked-mb or KDIAG_MAX_UNPACKED_MB raises it)")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(InputError, match="unpacked size cap of 16 MiB"):
        bundle.unpack(big, bundle.Limits(unpacked_bytes=16 * MIB))
    rc, _, err = run("replay", "--no-verify", big, env={"KDIAG_MAX_UNPACKED_MB": "16"}, monkeypatch=monkeypatch)
    assert rc == ExitStatus.ERROR and "unpacked size cap of 16 MiB" in err
    assert not list(tmp_path.glob("kdiag-replay-*"))


def test_the_manifest_size_cap(tmp_path):
    # valid JSON, every hash right: 40 MiB of spaces after the object
    items = bm.real_members()
    padded = items[0][1] + b" " * (40 * MIB)
    bad = bm.write(items, tmp_path / "fat.tar.gz", manifest_bytes=padded)
    res = kdiag_limited("bundle", "verify", bad)
    assert res.returncode == ExitStatus.ERROR and "Traceback" not in res.stderr
    assert res.stdout.splitlines()[1] == ("  manifest.json: too big: over the manifest size cap of "
                                          "16 MiB; not read (--max-manifest-mb or KDIAG_MAX_MANIFEST_MB raises it)")
    rc, out, _ = run("bundle", "verify", bad, "--max-manifest-mb", 64)
    assert rc == ExitStatus.OK, out


@pytest.mark.parametrize("depth", [100, 200_000])
def test_the_manifest_depth_cap(tmp_path, monkeypatch, depth):
    items = bm.real_members()
    text = items[0][1].decode().rstrip().rstrip("}") + ', "extra": ' + "[" * depth + "]" * depth + "}"
    deep = bm.write(items, tmp_path / "deep.tar.gz", manifest_bytes=text.encode())
    rc, out, _ = run("bundle", "verify", deep)
    assert rc == ExitStatus.ERROR and out.splitlines()[1].startswith("  manifest.json: nested deeper than ")
    assert "over the manifest nesting depth cap of 64" in out
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    rc, _, err = run("replay", "--no-verify", deep)
    assert rc == ExitStatus.ERROR and "nesting depth cap of 64" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2


def test_caps_must_be_numbers(monkeypatch):
    rc, _, err = run("bundle", "verify", bm.REAL, env={"KDIAG_MAX_MEMBERS": "lots"}, monkeypatch=monkeypatch)
    assert rc == ExitStatus.USAGE and err == "kdiag: error: KDIAG_MAX_MEMBERS='lots': want a number\n"


# --- 3. links -------------------------------------------------------------------

def _partial_with_link(tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text("OUTSIDE-SECRET 1.2.3.4\n")
    staging = tmp_path / "kdiag-x.tar.gz.partial"
    (staging / "raw" / "strace").mkdir(parents=True)
    (staging / "raw" / "strace" / "strace.txt").symlink_to(secret)
    bundle.start(staging, {"argv": ["kdiag", "trace"]})
    return staging, secret


def test_seal_refuses_a_directory_holding_a_link(tmp_path):
    staging, secret = _partial_with_link(tmp_path)
    rc, out, err = run("bundle", "seal", staging)
    assert rc == ExitStatus.ERROR and out == ""
    assert err == (f"kdiag: error: {staging}/raw/strace/strace.txt: a symbolic link (to {secret}); kdiag reads "
                   "no link in a bundle (put the file itself there)\n")
    assert not (tmp_path / "kdiag-x.tar.gz").exists()
    assert secret.read_text() == "OUTSIDE-SECRET 1.2.3.4\n"      # nor rewritten by redaction


def test_seal_itself_and_the_redaction_follow_no_link(tmp_path):
    """Beside the CLI's check: trace.seal, bundle.seal_dir and the redaction
    passes never read or rewrite a file through a link."""
    from kdiag.bundle import redact
    from kdiag.capture import trace

    staging, secret = _partial_with_link(tmp_path)
    with pytest.raises(InputError, match="symbolic link"):
        trace.seal(staging)
    assert redact.scrub_tree(staging, ["OUTSIDE-SECRET"]) == 0
    redact.scrub_tree_patterns(staging)
    assert secret.read_text() == "OUTSIDE-SECRET 1.2.3.4\n"
    assert "raw/strace/strace.txt" not in {str(p.relative_to(staging)) for p in bundle.seal_dir(staging, {})}


def test_replay_and_verify_of_a_directory_read_no_link(tmp_path, monkeypatch):
    staging, secret = _partial_with_link(tmp_path)
    read = []
    monkeypatch.setattr("kdiag.analysis.pipeline.analyse", lambda raw, *a, **k: read.extend(raw) or ({}, None))
    rc, _, err = run("replay", "--json", staging)
    assert rc == ExitStatus.ERROR and read == [] and "a symbolic link" in err and "Traceback" not in err
    # an unpacked bundle whose manifest is a link: refused, not read
    d = tmp_path / "unpacked"
    d.mkdir()
    (d / "manifest.json").symlink_to(secret)
    rc, out, _ = run("bundle", "verify", d)
    assert rc == ExitStatus.ERROR and f"manifest.json: refused: symbolic link (to {secret})" in out
    with pytest.raises(InputError, match="symbolic link"):
        bundle.manifest(d)


# --- 4. the manifest's schema, and raw JSON read defensively --------------------

def test_a_manifest_field_of_the_wrong_type_fails_verify_and_replay_says_one_line(tmp_path, monkeypatch):
    bad = with_manifest(tmp_path, lambda man: man.update(versions="2.16.0"))
    rc, out, _ = run("bundle", "verify", bad)
    assert rc == ExitStatus.ERROR and out.splitlines()[1:] == ['  manifest.json: "versions" is a string, not an object']
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    rc, _, err = run("replay", "--no-verify", bad)
    assert rc == ExitStatus.ERROR and "Traceback" not in err
    assert err.splitlines()[-1].startswith('kdiag: error: ') and '"versions" is a string, not an object' in err

    bad = with_manifest(tmp_path, lambda man: man["parse"][0]["counts"].update(lines="many"), name="b.tar.gz")
    rc, out, _ = run("bundle", "verify", bad)
    assert out.splitlines()[1:] == ['  manifest.json: "parse"[0]["counts"]["lines"] is a string, not an integer']


def test_schema_problems_come_in_a_fixed_order_and_their_count_is_bounded():
    """Known fields in the schema's order, a map's keys in the file's (not
    the validator's set order), and past 1000 problems no more are sought."""
    from kdiag.bundle import schema

    man = {"host": {"b": [], "a": {}}, "versions": {"z": 1, "y": 2}, "parse": [{"bytes": 3.0}]}
    assert schema.problems(man, schema.MANIFEST) == [
        '"versions"["z"] is a number, not a string', '"versions"["y"] is a number, not a string',
        '"host"["b"] is a list, not a string or number or boolean',
        '"host"["a"] is an object, not a string or number or boolean',
        '"parse"[0]["bytes"] is a number, not an integer']
    assert schema.problems({"bytes": True}, schema.FILE_ENTRY) == ['"sha256" missing',
                                                                    '"bytes" is a boolean, not an integer']
    few = schema.problems({"argv": [1] * 15}, schema.MANIFEST)
    assert len(few) == 11 and few[-1] == "and 5 more fields of the wrong type"
    many = schema.problems({"versions": {str(i): i for i in range(200_000)}}, schema.MANIFEST)
    assert many[0] == '"versions"["0"] is a number, not a string'
    assert many[-1] == "and at least 990 more fields of the wrong type"


@pytest.mark.parametrize("summary", [b"not json", b"[1, 2]", b'{"rate": "fast"}', b"[" * 200_000])
def test_a_probe_summary_that_is_not_one_fails_verify(tmp_path, monkeypatch, summary):
    items = [(m, summary if m.name == bm.SUMMARY else d) for m, d in bm.real_members()]
    bad = with_manifest(tmp_path, lambda man: man["files"].update({bm.SUMMARY: bm.listing(summary)}), items=items)
    rc, out, _ = run("bundle", "verify", bad)
    assert rc == ExitStatus.ERROR and out.splitlines()[1].startswith(f"  {bm.SUMMARY}: ")
    d = bundle.unpack(bad)
    try:
        assert bundle.probe_summary(d) is None
    finally:
        shutil.rmtree(d)
    assert "PROBE" not in render({}, probe=[1, 2]) and "one at a time" in render({}, probe={"rate": "fast"})
    # told to replay it anyway, replay reports without the probe's summary
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr("kdiag.analysis.pipeline.analyse", lambda *a, **k: ({"verdict": None}, None))
    rc, out, err = run("replay", "--no-verify", bad)
    assert rc == ExitStatus.OK and "Traceback" not in err and "VERDICT" in out and "PROBE" not in out


# --- 5. the generator -----------------------------------------------------------

# What replay does before Spark: unpack, the manifest (versions read as
# kdiag.replay reads them), the raw files, the probe's summary into the report.
RUNNER = r"""
import json, sys
from pathlib import Path
from kdiag.cli import main
from kdiag.bundle import archive as bundle
from kdiag.errors import KdiagError
from kdiag.report.text import render

def summary(d):
    p = Path(d) / "raw" / "probe" / "summary.json"
    return json.loads(p.read_text()) if p.exists() else None

path = sys.argv[1]
rc = main(["bundle", "verify", path])
print("VERIFY-RC", rc)
try:
    d = bundle.unpack(path)
    man = bundle.manifest(d)
    man.get("versions", {}).get("librdkafka")
    bundle.raw_files(d)
    render({}, probe=getattr(bundle, "probe_summary", summary)(d))
    print("REPLAYABLE")
except KdiagError as e:
    print("REFUSED", str(e).replace(chr(10), " | "))
"""
CAPS = {"KDIAG_MAX_UNPACKED_MB": "64", "KDIAG_MAX_MEMBERS": "200", "KDIAG_MAX_MANIFEST_MB": "4"}


def _run_case(path, tmpfs):
    # TMPDIR on a 96 MiB tmpfs of the child's own (a private mount
    # namespace): past the 64 MiB cap it would run out of room
    script = (f"mount -t tmpfs -o size=96m kdiag-test {tmpfs} && "
              f"exec {sys.executable} -c '{RUNNER}' {path}")
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
                          env={**os.environ, **CAPS, "TMPDIR": str(tmpfs)}, preexec_fn=_limited(256 * MIB))


@pytest.fixture(scope="module")
def cases_dir(tmp_path_factory):
    need("unshare", root=True)
    d = tmp_path_factory.mktemp("malicious")
    (d / "tmpfs").mkdir()
    return d


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_malicious_bundles_are_refused_in_one_line_or_replay(cases_dir, data):
    path, kind = data.draw(bm.bundles(cases_dir))
    event(kind)
    try:
        res = _run_case(path, cases_dir / "tmpfs")
    finally:
        path.unlink()
    note = f"{kind}: rc {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    assert "Traceback" not in res.stderr, note
    assert res.returncode == 0, note
    verify_rc = [ln for ln in res.stdout.splitlines() if ln.startswith("VERIFY-RC")]
    assert verify_rc in (["VERIFY-RC 0"], ["VERIFY-RC 1"]), note
    outcome = res.stdout.splitlines()[-1]
    assert outcome == "REPLAYABLE" or outcome.startswith("REFUSED "), note
    # nothing ran out of room or memory: the caps stopped it first
    assert "No space left" not in res.stdout and "MemoryError" not in res.stdout, note
    assert verify_rc == ["VERIFY-RC 1"] or outcome == "REPLAYABLE", f"verified but does not replay: {note}"
    for line in res.stdout.splitlines():
        assert len(line) < 1000, note
