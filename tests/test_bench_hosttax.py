"""bench/hosttax.py: an unrelated process's calls timed with and without
bpfcalls attached to another process (the values are the machine's)."""
from conftest import need, require


def test_hosttax_smoke(tmp_path):
    need(root=True)
    from bench import hosttax
    from kdiag.collectors import bpfcalls

    require(bpfcalls.check())
    figures = hosttax.run(smoke=True, work=tmp_path)
    assert [f.name.split("()")[0] for f in figures] == list(hosttax.CALLS)
    for f in figures:
        assert f.value is not None and f.unit == "%", f.note
        assert f.goal == hosttax.GOAL and f.met is (f.value >= float(hosttax.GOAL.split()[-1]))
        # kdiag's default on a process this quiet: uprobes in its libc
        assert f.ref_value and "either side" in f.note and "uprobes in libc" in f.note, f.note
        assert "load average" in f.note
