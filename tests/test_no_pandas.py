"""kdiag's own processes parse and analyse without importing pandas
(kdiag.no_pandas), and pyarrow still converts to and from pandas once asked
to."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "fixtures" / "logs" / "librdkafka_stderr.log"

# The command as its console script runs it (main() reading sys.argv), or as
# a caller handing main() its arguments: only the first is a kdiag process.
# Its stdout is the command's; what it imported goes last to stderr.
_KDIAG = r'''
import sys
from kdiag import cli
how, sys.argv = sys.argv[1], ["kdiag", *sys.argv[2:]]
rc = cli.main() if how == "entry" else cli.main(sys.argv[1:])
print("RC", rc, "PANDAS", "pandas" in sys.modules, file=sys.stderr)
'''


def _kdiag(how: str, *args: str, cwd: Path = ROOT, env: dict | None = None) -> tuple[str, subprocess.CompletedProcess]:
    """("RC n PANDAS b", the process) of ``kdiag ARGS`` run ``how``."""
    p = subprocess.run([sys.executable, "-c", _KDIAG, how, *args], capture_output=True, text=True, cwd=cwd,
                       env=env, timeout=600)
    return p.stderr.strip().splitlines()[-1], p


def test_a_parse_from_the_command_line_never_imports_pandas(tmp_path):
    said, p = _kdiag("entry", "parse", str(LOG), "-o", str(tmp_path / "a"))
    assert said == "RC 0 PANDAS False", p.stderr[-3000:]
    assert (tmp_path / "a" / "rdkafka_events.parquet").exists()


def test_a_caller_of_main_keeps_pyarrow_as_it_is(tmp_path):
    # pyarrow's own behaviour, unchanged where kdiag is a library: this is what
    # the first test would see without kdiag.no_pandas.
    said, p = _kdiag("library", "parse", str(LOG), "-o", str(tmp_path / "b"))
    assert said == "RC 0 PANDAS True", p.stderr[-3000:]


def test_a_cold_replay_never_imports_pandas(tmp_path):
    # Spark started in the replay's own process: pyspark's createDataFrame
    # and F.lit look for pandas too.
    said, p = _kdiag("entry", "replay", "--json", str(LOG), cwd=tmp_path, env={**os.environ, "KDIAG_WARM": "0"})
    assert said == "RC 0 PANDAS False", p.stderr[-3000:]
    assert json.loads(p.stdout)["verdict"] != "none"


def test_pyarrow_converts_to_and_from_pandas_after_its_first_look_found_none():
    code = r'''
import sys
from kdiag.no_pandas import skip_pandas_lookups
skip_pandas_lookups()
import pyarrow as pa
pa.array([1, 2])
assert "pandas" not in sys.modules
assert [type(f).__name__ for f in sys.meta_path if type(f).__module__ == "kdiag.no_pandas"] == ["_Watch"]
# What PySpark's F.lit imports, for have_numpy.
from pyspark.testing.utils import have_numpy
assert have_numpy and "pandas" not in sys.modules
assert not [f for f in sys.meta_path if type(f).__module__ == "kdiag.no_pandas"]
df = pa.table({"a": ["x", "y", "x"]}).to_pandas()
import pandas as pd
print(type(df).__name__, pa.array(pd.Series(pd.Categorical(df["a"]))).type)
'''
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["DataFrame", "dictionary<values=string,", "indices=int8,", "ordered=0>"]


def test_the_analysis_makes_its_dataframes_through_frame():
    # A createDataFrame of its own would import pandas again in every cold
    # replay; spark_plumbing.frame hides it.
    import ast

    direct = []
    for path in sorted((ROOT / "kdiag" / "analysis").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "createDataFrame":
                direct.append(str(path.relative_to(ROOT)))
    assert direct == ["kdiag/analysis/spark_plumbing.py"]
