"""An aiokafka producer, its library's defaults, in plaintext to Tansu: no
librdkafka log; each request is named by the Kafka header it begins with,
as the tracer sees the producer write it."""
from kdiag.lab.scenarios import Loopback

NAME = "aiokafka-plain"
HELP = "an aiokafka producer in plaintext, traced as -- CMD (no client log)"
CAUSE = "healthy"
SETUP = "aiokafka, plaintext"
MESSAGES = 100
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = Loopback(variant="plaintext", plaintext=True)
CLIENT = "aiokafka"
