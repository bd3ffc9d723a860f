"""The embedded default: Tansu behind stunnel4 on loopback, the probe with
Nagle on. librdkafka >= 2.10 disables Nagle by default; the lab reproduces
the producers that still have it on, so it sets the old default explicitly."""
from kdiag.lab.scenarios import Loopback

NAME = "nagle-on"
HELP = "the default: Tansu behind stunnel4 on loopback, the probe with Nagle on"
CAUSE = "nagle_delayed_ack"
SETUP = "default lab, socket.nagle.disable=false"
MESSAGES = 100
MATRIX_MESSAGES = None
PROPS = {"socket.nagle.disable": "false"}
RATE = None
LAB = Loopback(variant="tls", terminator="stunnel4")
