# A kafka-python producer with the library's defaults (kdiag.lab.clients).
# argv: BOOTSTRAP TOPIC CA MESSAGES MODE; CA empty for plaintext.
import sys
import time

import kafka

bootstrap, topic, ca, n, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
conf = {"bootstrap_servers": bootstrap}
if ca:
    conf.update({"security_protocol": "SSL", "ssl_cafile": ca})
p = kafka.KafkaProducer(**conf)
if mode == "each":
    for _ in range(n):
        p.send(topic, b"x" * 100).get(timeout=30)
elif mode == "steady":
    import threading

    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    while not closed.is_set():
        p.send(topic, b"x" * 100).get(timeout=30)
        closed.wait(n / 1000.0)
else:
    futures = [p.send(topic, b"x" * 100) for _ in range(n)]
    p.flush(30)
    for f in futures:
        f.get(timeout=30)
if mode in ("each", "steady"):
    # A producer stays up: its sockets are sampled (TCP_INFO) while it does.
    time.sleep(1)
else:
    print("READY", f"kafka-python {kafka.__version__}", flush=True)
    sys.stdin.read()
p.close()
