"""The default lab with Nagle off: the control, nothing to find."""
from kdiag.lab.scenarios import Loopback

NAME = "nagle-off"
HELP = "the default lab with Nagle off: nothing to find"
CAUSE = "healthy"
SETUP = "default lab, socket.nagle.disable=true"
MESSAGES = 100
MATRIX_MESSAGES = None
PROPS = {"socket.nagle.disable": "true"}
RATE = None
LAB = Loopback(variant="tls", terminator="stunnel4")
