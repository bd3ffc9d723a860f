"""A proxy between stunnel4 and Tansu holds every response: a fast path
with a late broker."""
from kdiag.lab.scenarios import Loopback

NAME = "slow-broker"
HELP = "a proxy delays every broker response by 50 ms"
CAUSE = "broker_slow"
SETUP = "proxy holds responses 50 ms"
MESSAGES = 100
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = Loopback(variant="slow-broker", terminator="stunnel4", response_delay_ms=50.0)
