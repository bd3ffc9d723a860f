"""A librdkafka producer whose brokers are named, never numbered, so that a
trace of it names hosts everywhere a capture can: librdkafka's broker names
and log lines, the resolver's read of /etc/hosts and its DNS queries, and a
line of the producer's own.

    python named_brokers.py JSON_CONFIG

Nothing listens: the producer gives up after a few seconds."""
import json
import sys

from confluent_kafka import Producer


def main() -> int:
    conf = {"debug": "broker,topic,metadata", "message.timeout.ms": 2500, "socket.timeout.ms": 1500,
            "reconnect.backoff.ms": 300, **json.loads(sys.argv[1])}
    print(f"producing to {conf['bootstrap.servers']}", file=sys.stderr, flush=True)
    producer = Producer(conf)
    producer.produce("orders.v2", b"x" * 16)
    producer.flush(4)
    return 0


if __name__ == "__main__":
    sys.exit(main())
