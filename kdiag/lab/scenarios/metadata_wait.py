"""The probe's topic does not exist when the producer starts and is
created 3 s later; meanwhile Metadata answers "unknown topic or partition"
and the messages wait for it.

Tansu creates a missing topic as soon as a Metadata request allows it
(AllowAutoTopicCreation, which librdkafka's producer sets by default) and
has no setting to stop that, so the probe asks it not to, as a broker with
auto.create.topics.enable=false would refuse."""
from kdiag.lab.scenarios import Loopback

NAME = "metadata-wait"
HELP = "the probe's topic is missing for the first 3 s, then created"
CAUSE = "metadata_wait"
SETUP = "topic created 3000 ms after the start, no auto-creation"
MESSAGES = 20
MATRIX_MESSAGES = None
PROPS = {"allow.auto.create.topics": "false"}
RATE = None
LAB = Loopback(variant="metadata-wait", terminator="stunnel4", topic_delay_ms=3000.0)
