"""pyarrow and PySpark without their imports of pandas, in kdiag's own
processes.

pyarrow and PySpark import pandas, when it is installed, in three places
only to ask whether an object is a pandas one, and kdiag paid for the
import (0.2-0.3 s of a quiet machine, over a second of a loaded one) in
every parse, replay and trace:

- pyarrow, the first time it is handed any array at all: ``pa.array`` asks
  its pandas shim whether the object is a pandas Series (pyarrow/array.pxi
  ``_is_array_like``, pandas-shim.pxi ``_have_pandas_internal``), and the
  shim's first answer is an import of pandas;
- PySpark 4, at the analysis's first ``F.lit``: ``lit`` imports
  ``pyspark.testing.utils`` for its ``have_numpy``, and that module checks
  pandas' version at import;
- PySpark's ``createDataFrame``, at every call, to ask whether its data is a
  pandas DataFrame: kdiag hands it Arrow tables (``pandas_hidden`` around
  the call, in kdiag.analysis.spark_plumbing).

kdiag hands neither library a pandas object. So in a kdiag command's
process the first two looks find no pandas, and the analysis makes its
DataFrames through ``spark_plumbing.frame``. pyarrow's shim keeps
the answer for its questions only: a conversion that needs pandas
(``Table.to_pandas``) imports it then, and from then on the shim knows it.
What is lost is pyarrow's recognition of a pandas object handed to
``pa.array`` before any such conversion, and ``pyspark.testing.utils``'s
``have_pandas``, which only PySpark's own tests read. pandas itself stays
importable by anyone. A library user's pyarrow is never changed (only the
command-line entry points call ``skip_pandas_lookups``); ``frame`` hides
pandas from the analysis's own calls only.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
import threading

# Module -> whether to hand it an array once it has run (pyarrow's shim
# looks for pandas then, not at import).
_LOOKS_FOR_PANDAS = {"pyarrow": True, "pyspark.testing.utils": False}


def skip_pandas_lookups() -> None:
    """Makes pyarrow's and PySpark's first looks for pandas, whenever each
    is first imported, find none. Does nothing where pandas or pyarrow is
    already imported: pyarrow's shim may have looked already, or pandas is
    wanted."""
    if "pandas" in sys.modules or "pyarrow" in sys.modules:
        return
    if not any(isinstance(f, _Watch) for f in sys.meta_path):
        # First, so that it sees the imports before the finders that load them.
        sys.meta_path.insert(0, _Watch())


@contextlib.contextmanager
def pandas_hidden():
    """Within: this thread's ``import pandas`` fails as if pandas were not
    installed, where it is not imported yet; other threads' imports are
    untouched."""
    if "pandas" in sys.modules:
        yield
        return
    blocker = _NoPandas(threading.get_ident())
    # Not sys.modules["pandas"] = None: Cython's import (pyarrow's) takes the
    # None for the module, and every thread would see it.
    sys.meta_path.insert(0, blocker)
    try:
        yield
    finally:
        sys.meta_path.remove(blocker)


class _NoPandas(importlib.abc.MetaPathFinder):
    def __init__(self, thread: int) -> None:
        self.thread = thread

    def find_spec(self, name, path, target=None):
        if (name == "pandas" or name.startswith("pandas.")) and threading.get_ident() == self.thread:
            raise ModuleNotFoundError("hidden while a library looks for it", name=name)
        return None


class _Watch(importlib.abc.MetaPathFinder):
    """Finds each module of _LOOKS_FOR_PANDAS as the other finders would and
    runs it with pandas hidden; leaves the import system once both have."""

    def __init__(self) -> None:
        self.left = set(_LOOKS_FOR_PANDAS)

    def find_spec(self, name, path, target=None):
        if name not in self.left:
            return None
        # Off the list first: the find_spec below asks this finder again.
        self.left.discard(name)
        if not self.left:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or "pandas" in sys.modules:
            return spec
        run, hand_array = spec.loader.exec_module, _LOOKS_FOR_PANDAS[name]

        def exec_module(module):
            if hand_array:
                run(module)
                with pandas_hidden():
                    module.array([])
            else:
                with pandas_hidden():
                    run(module)

        spec.loader.exec_module = exec_module
        return spec
