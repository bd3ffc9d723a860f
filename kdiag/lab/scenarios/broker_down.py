"""The broker is down when the producer starts: nothing listens on its
port, so each connect is refused and librdkafka retries after
reconnect.backoff.ms, growing; 3 s later the broker is up again."""
from kdiag.lab.scenarios import Loopback

NAME = "broker-down"
HELP = "the broker is down (connections refused) for the first 3 s, then up"
CAUSE = "broker_down"
SETUP = "relay refuses connections for 3000 ms from the start"
MESSAGES = 20
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = Loopback(variant="broker-down", terminator="stunnel4", outage_ms=3000.0)
