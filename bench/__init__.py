"""Benchmarks: speed and memory goals, measured, with their references.

``python -m bench`` runs them all and writes ``bench/results/latest.json``
(one record per figure, with the machine it ran on); ``--smoke`` runs each at
small sizes to show that it works, which is what the test suite does.
Figures worth keeping go into ``bench/RESULTS.md`` with their command.
"""
