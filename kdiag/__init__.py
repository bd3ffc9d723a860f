"""kdiag: where a Kafka producer's latency goes.

Importing kdiag is cheap: pyspark, scapy and confluent_kafka are imported
only by the commands that need them.
"""
__version__ = "0.1.0"
