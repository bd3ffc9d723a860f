"""Benchmarks: speed and memory goals, measured, with their references.

``python -m bench`` runs them all and writes ``bench/results/latest.json``
(one record per figure, with the machine it ran on); ``--smoke`` runs each at
small sizes to show that it works, which is what the test suite does.
A figure worth keeping replaces its row in ``bench/RESULTS.md`` (the current
figures, with their command); the run itself goes into
``bench/history/YYYY-MM-DD.md``.
"""
