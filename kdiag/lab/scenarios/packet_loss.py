"""A lossy link: the network lab's delay line drops 4 % of the frames in
each direction. The producer keeps librdkafka's defaults."""
from kdiag.lab.scenarios import NetworkPath

NAME = "packet-loss"
HELP = "a multi-hop network in namespaces, 4 % of frames lost each way"
CAUSE = "packet_loss"
SETUP = "4 % loss each way, namespaces"
MESSAGES = 100
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = NetworkPath(delay_ms=1.0, loss_pct=4.0, description="1 ms each way, 4% of frames lost in each direction")
