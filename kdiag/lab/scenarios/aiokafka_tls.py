"""An aiokafka producer, its library's defaults, over TLS through the lab's
terminator: no librdkafka log and no header to read; each request is told
apart by the producer's writes and the response that follows."""
from kdiag.lab.scenarios import Loopback

NAME = "aiokafka-tls"
HELP = "an aiokafka producer over TLS, traced as -- CMD (no client log)"
CAUSE = "healthy"
SETUP = "aiokafka, TLS"
MESSAGES = 100
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = Loopback(variant="tls", terminator="stunnel4")
CLIENT = "aiokafka"
