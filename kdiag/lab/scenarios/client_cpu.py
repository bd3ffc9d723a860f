"""The probe and a busy neighbour (the application's own work) in a cgroup
allowed 0.2 of one core per 100 ms period, a Kubernetes-style CPU limit
below what the two use. The producer keeps librdkafka's defaults."""
from kdiag.lab.scenarios import Loopback

NAME = "client-cpu"
HELP = "the probe and a busy neighbour under a CPU limit of 0.2 core"
CAUSE = "client_cpu"
SETUP = "cgroup 0.2 core + busy neighbour"
# A request stalls only when the quota runs out while it is in flight, about
# one period in ten here; 100 messages take 5 periods, 600 take 30.
MESSAGES = 600
MATRIX_MESSAGES = None
PROPS: dict[str, str] = {}
RATE = None
LAB = Loopback(variant="tls", terminator="stunnel4", cpu_limit_cores=0.2)
