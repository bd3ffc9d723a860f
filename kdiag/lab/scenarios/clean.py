"""The network lab's control: the path still crosses a router, with nothing
added. The producer keeps librdkafka's defaults."""
from kdiag.lab.scenarios import NetworkPath

NAME = "clean"
HELP = "a multi-hop network in namespaces, no added delay or loss"
CAUSE = "healthy"
SETUP = "no delay or loss, namespaces"
MESSAGES = 100
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = NetworkPath(delay_ms=0.0, loss_pct=0.0,
                  description="no added delay or loss; the path still crosses a router")
