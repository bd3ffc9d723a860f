"""Progress on stderr: shown on a terminal (a real pseudo-terminal here),
never into a pipe and never with --json."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

from conftest import FIXTURES, need

STRACE = FIXTURES / "captures" / "nagle_on" / "strace.txt"
BUNDLE = FIXTURES / "bundles" / "nagle_on.tar.gz"


def _run(args: list[str], tmp_path, terminal: bool) -> tuple[int, str, str]:
    """kdiag's exit code, stdout, and stderr: a pseudo-terminal's output
    when ``terminal``, else a pipe's."""
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "KDIAG_WARM": "0"}
    cmd = [sys.executable, "-m", "kdiag", *args]
    if not terminal:
        r = subprocess.run(cmd, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=300)
        return r.returncode, r.stdout, r.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave, text=True)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 300)
        if not ready:
            proc.kill()
            raise AssertionError("no output from kdiag for 300 s")
        try:
            got = os.read(master, 65536)
        except OSError:   # the terminal's other end closed: kdiag is done
            break
        if not got:
            break
        seen += got
    os.close(master)
    out = proc.stdout.read()
    return proc.wait(timeout=60), out, seen.decode(errors="replace")


def test_parse_shows_its_reading_on_a_terminal(tmp_path):
    """A capture that takes about a second to read: 60 copies of the
    fixture's strace (40 MB, 200,000 lines)."""
    big = tmp_path / "strace.txt"
    big.write_bytes(STRACE.read_bytes() * 60)
    rc, out, err = _run(["parse", str(big), "-o", str(tmp_path / "t")], tmp_path, terminal=True)
    assert rc == 0 and "syscalls.parquet" in out
    assert "reading strace.txt" in err and "lines/s" in err, err


def test_parse_into_a_pipe_shows_none(tmp_path):
    rc, out, err = _run(["parse", str(STRACE), "-o", str(tmp_path / "t")], tmp_path, terminal=False)
    assert rc == 0 and "syscalls.parquet" in out
    assert "reading" not in err and "\x1b[" not in err, err


def test_replay_stages_on_a_terminal_and_none_with_json(tmp_path):
    need("java")
    rc, out, err = _run(["replay", str(BUNDLE)], tmp_path, terminal=True)
    assert rc == 0 and "VERDICT: nagle_delayed_ack" in out
    for stage in ("verifying 1 bundle(s)", "reading strace.txt", "analysing in Spark"):
        assert stage in err, (stage, err)
    rc, out, err = _run(["replay", "--json", str(BUNDLE)], tmp_path, terminal=True)
    assert rc == 0 and '"verdict": "nagle_delayed_ack"' in out
    assert "analysing" not in err and "reading" not in err and "\x1b[" not in err, err
