"""A slow resolver: the client knows the broker by a name, and the lab's
resolver (kdiag.lab.resolver, in the router namespace, which the client
namespace's own resolv.conf names) answers every query 2 s late. The
bootstrap connection waits for the lookup before its connect(); Tansu
advertises its address, so the broker connections that follow do not look
the name up again. The producer keeps librdkafka's defaults."""
from kdiag.lab.scenarios import NetworkPath

NAME = "dns-slow"
HELP = "a multi-hop network in namespaces, the broker's name resolved 2 s late"
CAUSE = "dns_slow"
SETUP = "resolver answers 2000 ms late, namespaces"
MESSAGES = 20
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = NetworkPath(delay_ms=0.0, loss_pct=0.0, dns_delay_ms=2000.0,
                  description="no added delay or loss; every DNS answer 2000 ms late")
