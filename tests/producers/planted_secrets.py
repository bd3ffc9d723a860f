"""A producer holding its secrets as real ones do (tests/test_planted_secrets.py)."""
SASL = {}
SASL["sasl.password"] = "Pl4ntedSourceLiteral"   # in the first bytes of the file: strace -s 256 shows them
# On its command line, in a registry client's config file, in key files it
# reads, and as that literal in its own source (which the interpreter reads).
# It produces to the lab broker for a moment, librdkafka's debug log on stderr.
#
#   python planted_secrets.py --bootstrap sasl_ssl://USER:PASS@HOST:PORT --ca CA --pw X --sasl-pass Y
#       --registry-config FILE --pem FILE --der FILE [--say TEXT] [--seconds S]
import argparse
import sys
import time

from confluent_kafka import Producer

ap = argparse.ArgumentParser()
ap.add_argument("--bootstrap", required=True)
ap.add_argument("--ca", required=True)
ap.add_argument("--pw")
ap.add_argument("--sasl-pass")
ap.add_argument("--registry-config")
ap.add_argument("--pem")
ap.add_argument("--der")
ap.add_argument("--seconds", type=float, default=1.0)
ap.add_argument("--say", default="", help="a line for stderr, as a producer logs its settings")
a = ap.parse_args()

for path, chunk in ((a.registry_config, 4096), (a.der, 4096), (a.pem, 64)):
    if path:
        # small reads, as a streaming parser reads: the BEGIN line falls in an earlier read than the body
        with open(path, "rb", buffering=0) as f:
            while f.read(chunk):
                pass
if a.say:
    print(a.say, file=sys.stderr, flush=True)
broker = a.bootstrap.partition("://")[2].rpartition("@")[2]
p = Producer({"bootstrap.servers": broker, "security.protocol": "ssl",
              "ssl.ca.location": a.ca, "socket.nagle.disable": "false", "acks": "all", "linger.ms": 0,
              "debug": "protocol,broker"})
end = time.time() + a.seconds
while time.time() < end:
    p.produce("kdiag-probe", b"v" * 2048)
    p.flush(10)
p.flush(10)
