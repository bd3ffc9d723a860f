"""Tables -> findings, in PySpark.

- ``job``: ``analyze``, the entry point, and its steps;
  ``__main__``: the same under spark-submit;
- ``spark_plumbing``: Spark plumbing (reading tables, caching, jobs at once);
- ``per_request``: requests paired, split into send, wait and read;
- ``connections``: connect(), TCP_NODELAY, handshakes, the path's RTT;
- ``samples``: socket, thread, cgroup and throttle samples beside requests;
- ``causes``: the cause registry, one module per cause, and ``classify``;
- ``thresholds``: the numbers the rules share;
- ``judge``: causes summed up into findings and the verdict;
- ``input_checks``, ``spark`` (the session), ``pipeline`` (raw files ->
  findings).
- ``warm``: the warm analysis server that small replays share.
"""
