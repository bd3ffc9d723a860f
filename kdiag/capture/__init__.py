"""What runs on the producer's host while it runs: the trace of kdiag's own
probe producer, attaching to a producer kdiag did not start, the disk budget
that keeps the capture from filling the host, and what tracing cost."""
