"""Packets, TCP streams and the Kafka protocol from packet captures."""
