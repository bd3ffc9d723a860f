"""A long cable: the network lab's delay line holds every frame 15 ms each
way. The producer keeps librdkafka's defaults."""
from kdiag.lab.scenarios import NetworkPath

NAME = "network-latency"
HELP = "a multi-hop network in namespaces, 15 ms each way"
CAUSE = "network_latency"
SETUP = "15 ms each way, namespaces"
MESSAGES = 100
MATRIX_MESSAGES = 50
PROPS: dict[str, str] = {}
RATE = None
LAB = NetworkPath(delay_ms=15.0, loss_pct=0.0, description="15 ms each way (30 ms RTT), no loss")
