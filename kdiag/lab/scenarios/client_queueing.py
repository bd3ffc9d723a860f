"""The default lab, an asynchronous probe batching for 200 ms: messages wait
in librdkafka's queue longer than their requests take."""
from kdiag.lab.scenarios import Loopback

NAME = "client-queueing"
HELP = "the default lab, the probe at 20 messages a second with linger.ms=200"
CAUSE = "client_queueing"
SETUP = "--rate 20, linger.ms=200"
MESSAGES = 100
MATRIX_MESSAGES = 40
PROPS = {"linger.ms": "200", "socket.nagle.disable": "true"}
RATE = 20
LAB = Loopback(variant="tls", terminator="stunnel4")
