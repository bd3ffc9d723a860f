"""bench/cold_phases.py: a cold replay timed from inside, phase by phase,
run as the command runs (the figures are the machine's; their order and
what the run was are not)."""
import json

from bench import cold_phases
from bench.small_inputs import make_excerpt


def test_one_cold_replay_of_the_excerpt_in_phases(tmp_path, capsys):
    excerpt = make_excerpt(tmp_path / "excerpt20.log")
    out = tmp_path / "runs.json"
    assert cold_phases.main([str(excerpt), "-n", "1", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    got = json.loads(out.read_text())[0]
    m = got["marks"]
    # Measured as `kdiag replay` runs, not as a caller of main(): that
    # caller's pyarrow imports pandas, which the command never does.
    assert m["pandas_imported"] is False, m
    order = ["imported", "session_called", "jvm_launch", "gateway_up", "session_up", "analyze_start",
             "analyze_end", "exit"]
    assert [m[k] for k in order] == sorted(m[k] for k in order), m
    assert 0 < m["exit"] <= got["wall_s"]
    assert got["jobs"] and all(d >= 0 for _, d in got["jobs"]), got["jobs"]
    assert m["jvm_cpu_at_gateway_s"] > 0 and m["jvm_cpu_at_end_s"] > m["jvm_cpu_at_analyze_s"], m
    phases = dict(cold_phases.phases(got))
    assert all(v is not None and v >= 0 for v in phases.values()), phases
    assert 0 < phases["analysis, whole"] < got["wall_s"], phases
    assert f"| analysis: jobs run ({len(got['jobs'])}) |" in table, table
    assert "| Spark's launcher and the JVM, to its gateway |" in table, table
