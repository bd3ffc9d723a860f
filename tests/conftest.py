import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
CAPTURES = FIXTURES / "captures"


def need(tool: str | None = None, root: bool = False) -> None:
    """Skip with the reason when the machine lacks a tool or privilege; in CI
    the project's own setup installs them, so there it fails instead."""
    missing = None
    if tool and shutil.which(tool) is None:
        missing = f"{tool} not installed (./setup.sh installs it)"
    elif root and os.geteuid() != 0:
        missing = "needs root (ptrace, raw sockets)"
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must not skip: {missing}")
        pytest.skip(missing)


@pytest.fixture(scope="session")
def spark():
    need("java")
    from kdiag.spark import session

    return session("kdiag-tests")
