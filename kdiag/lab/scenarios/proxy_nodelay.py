"""The nagle-proxy lab with its fix: socat forwards to Tansu with
TCP_NODELAY (",nodelay"). The control for nagle-proxy, and the AFTER of the
lab's check that nagle_in_path predicts what its fix leaves."""
from kdiag.lab.scenarios import Loopback

NAME = "proxy-nodelay"
HELP = "the nagle-proxy lab with its fix: socat sets TCP_NODELAY toward the broker"
CAUSE = "healthy"
SETUP = "socat TLS terminator with nodelay"
MESSAGES = 100
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = Loopback(variant="proxy-nodelay", terminator="socat", nodelay=True)
