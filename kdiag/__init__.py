"""kdiag: where a Kafka producer's latency goes.

Importing kdiag is cheap: pyspark, scapy and confluent_kafka are imported
only by the commands that need them.
"""
__version__ = "0.1.0"


def python_m(module) -> list:
    """``[python, -m, NAME]`` for an imported module. The name comes from the
    module's spec (right under ``python -m`` too, where ``__name__`` is
    ``__main__``), so moving a module cannot leave a stale string behind."""
    import sys

    return [sys.executable, "-m", module.__spec__.name]
