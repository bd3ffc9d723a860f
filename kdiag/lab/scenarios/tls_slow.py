"""A relay in front of stunnel4 holds the server's first TLS flight
(ServerHello to Finished) 1.5 s on every connection: each TLS handshake,
the bootstrap's and the broker's, takes that long, and nothing after it is
late."""
from kdiag.lab.scenarios import Loopback

NAME = "tls-slow"
HELP = "a relay holds the server's first TLS flight 1.5 s on every connection"
CAUSE = "tls_handshake_slow"
SETUP = "relay holds the TLS server's first flight 1500 ms"
# Every message after the handshakes is fast; a few show it.
MESSAGES = 20
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = Loopback(variant="tls-slow", terminator="stunnel4", first_flight_delay_ms=1500.0)
