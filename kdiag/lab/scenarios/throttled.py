"""A proxy between stunnel4 and Tansu enforces a produce quota as a Kafka
broker does (KIP-219): ThrottleTimeMs in the response, then the connection
muted. Each message is throttled ~100 ms, so the matrix sends fewer."""
from kdiag.lab.scenarios import Loopback

NAME = "throttled"
HELP = "a proxy enforces a produce quota as a Kafka broker does"
CAUSE = "throttled"
SETUP = "proxy enforces a produce quota (KIP-219)"
MESSAGES = 100
MATRIX_MESSAGES = 30
PROPS: dict[str, str] = {}
RATE = None
# 20 KiB/s: a producer sending 2 KB messages one at a time is throttled
# about 100 ms each.
LAB = Loopback(variant="throttled", terminator="stunnel4", quota_bytes_per_s=20480.0)
