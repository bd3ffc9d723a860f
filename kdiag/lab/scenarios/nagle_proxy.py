"""socat terminates TLS and forwards to Tansu without TCP_NODELAY: Nagle on
a hop the client does not control (see kdiag.lab.broker). The producer
keeps librdkafka's defaults."""
from kdiag.lab.scenarios import Loopback

NAME = "nagle-proxy"
HELP = "a TLS terminator with Nagle between the probe and the broker"
CAUSE = "nagle_in_path"
SETUP = "socat TLS terminator without nodelay"
MESSAGES = 100
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = Loopback(variant="nagle-proxy", terminator="socat")
