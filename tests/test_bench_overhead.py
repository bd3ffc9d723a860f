"""bench/overhead.py: the figures come out (their values are the machine's)."""
import pytest

from conftest import need, need_tansu

pytestmark = pytest.mark.e2e


def test_overhead_smoke(tmp_path):
    need("strace", root=True)
    need("stunnel4")
    need("bpftrace")
    need_tansu()
    from bench import overhead

    figures = overhead.run(smoke=True, work=tmp_path)
    names = [f.name for f in figures]
    assert names[0] == "untraced producer msg/s" and figures[0].value, figures[0]
    expected = [m[0] for m in overhead.MODES if m[4]]
    assert names[1:] == [f"{m} % of untraced" for m in expected]
    for f in figures[1:]:
        assert f.unit == "%" and f.goal == overhead.GOAL and f.command and f.ref_value == figures[0].value
        assert f.value is not None, f"{f.name}: {f.note}"
        assert f.met is (f.value >= 70)
