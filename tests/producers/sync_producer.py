"""A producer that is not kdiag's: synchronous produce+flush for a while,
librdkafka's debug log on stderr, progress in a file kdiag never touches.

    python sync_producer.py BOOTSTRAP CA_FILE NAGLE_DISABLE SECONDS PROGRESS_FILE
"""
import sys
import time

from confluent_kafka import Producer

bootstrap, ca, nagle_disable, seconds, progress = sys.argv[1:6]
p = Producer({"bootstrap.servers": bootstrap, "security.protocol": "ssl", "ssl.ca.location": ca,
              "socket.nagle.disable": nagle_disable, "acks": "all", "linger.ms": 0,
              "debug": "protocol,broker"})
end = time.time() + float(seconds)
n = 0
while time.time() < end:
    p.produce("kdiag-probe", b"v" * 2048)
    p.flush(10)
    n += 1
    with open(progress, "w") as f:
        f.write(f"{n} {time.time()}\n")
p.flush(10)
