"""SYNs lost: nftables in the broker namespace drops the run's first two
SYNs to the TLS port, so the producer's first connect() completes only with
its second SYN retransmit, 1 s and then 2 s more after the first SYN. The
producer keeps librdkafka's defaults."""
from kdiag.lab.scenarios import NetworkPath

NAME = "connect-slow"
HELP = "a multi-hop network in namespaces, the first two SYNs to the broker dropped"
CAUSE = "connect_slow"
SETUP = "nftables drops 2 SYNs, namespaces"
MESSAGES = 20
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = NetworkPath(delay_ms=0.0, loss_pct=0.0, syn_drops=2,
                  description="no added delay or loss; the run's first 2 SYNs to the TLS port dropped")
