"""Collectors: one per source, each writing its raw capture under raw/<name>/.

A collector declares what it needs as data (``Requirement``); a collector
whose needs are not met is skipped with the reason, and the trace goes on.
"""
