"""The producer's thread was runnable but without a core: the response was
there, the producer could not run to read it."""
from __future__ import annotations

from kdiag.analysis import samples
from kdiag.analysis.samples import cpu_starvation
from kdiag.analysis.spark_plumbing import rounded
from kdiag.analysis.thresholds import CPU_STARVED_SHARE, SLOW_MS

NAME = "client_cpu"
# A CPU limit stalls a few requests for long (the rest of a CFS period).
TAIL = True
COLUMNS = ("total_ms", "runq_ms")
SUMMED = ("runq_ms",)
EXAMPLE_COLUMNS = ("pid", "runq_ms")
MEETS = {"wait_ms": 80.0, "total_ms": 80.5, "n_writes": 3, "runq_ms": 75.0}
COLOUR = "#bcbd22"
PART = "wait"
SIGNATURE = (
    "A tail of requests stalls for up to a CFS period (100 ms) while the broker and path are "
    "fast, and the thread that sent each one was runnable but without a core for at least half of"
    " it (run-queue wait from `/proc/PID/task/TID/schedstat`, sampled every 100 ms). The evidence"
    " adds the producer cgroup's CPU limit and how often it was throttled (`cpu.stat`). Named the"
    " verdict, like `packet_loss`, when its requests take 25 % of the time."
)
FIX_DOC = (
    "Give the producer CPU: raise or remove its CPU limit (Kubernetes `limits.cpu`, `cpu.max`), "
    "move busy neighbours off its cores. No librdkafka property fixes a starved thread."
)


def rule(x):
    from pyspark.sql import functions as F

    # Against the whole request: a thread can lose its core while writing or
    # after reading the response, not only while it waits.
    starved = F.coalesce(x.col("runq_ms") >= CPU_STARVED_SHARE * x.total, F.lit(False))
    return (x.total > SLOW_MS) & starved


def fix(version: tuple[int, ...] | None) -> dict[str, str]:
    return {}   # no librdkafka property fixes a starved thread


def evidence(facts) -> list[str]:
    agg, n = facts.agg, facts.requests
    ev = [f"{agg.k} of {n} Produce requests stalled: median {agg.total:.1f} ms from first write to "
          f"response, while the median request took {facts.summary['latency_p50_ms']} ms",
          f"their thread was runnable but waiting for a core for up to {agg.p50['runq_ms']:.1f} ms of that "
          f"(median; run-queue wait from /proc/PID/task/TID/schedstat, sampled ~every 100 ms): the "
          f"response was there, the producer could not run to read it"]
    ev += _cpu_samples(cpu_starvation(samples.of(facts.meta), facts.example.get("pid")))
    path_rtt = facts.path_rtt_ms
    ev.append(f"the path ({rounded(path_rtt, 3) if path_rtt is not None else '?'} ms) and the broker answer fast; "
              f"the time is lost in the client")
    return ev


def _cpu_samples(cpu: dict | None) -> list[str]:
    if not cpu:
        return []
    ev = []
    th = cpu.get("thread")
    if th and th.get("runq_ms") is not None:
        ev.append(f"thread {th['name']} ({th['tid']}) waited {th['runq_ms']:.0f} ms for a core in "
                  f"{cpu['wall_ms']:.0f} ms of samples, with {th['nonvoluntary']} involuntary context "
                  f"switches; the whole process waited {cpu['process_runq_ms']:.0f} ms")
    cg = cpu.get("cgroup")
    if cg and cg["periods"]:
        limit = (f"limited to {cg['quota_cores']:.2f} cores per {cg['period_ms']:g} ms period"
                 if cg["quota_cores"] else "with no CPU limit of its own")
        ev.append(f"the producer's cgroup is {limit} and was throttled in {cg['throttled']} of "
                  f"{cg['periods']} periods, {cg['throttled_ms']:.0f} ms in all (cpu.stat)")
    return ev


def fix_text(facts) -> str:
    return ("give the producer CPU: raise or remove its CPU limit (Kubernetes limits.cpu, cgroup "
            "cpu.max / cpu.cfs_quota_us), or move busy neighbours off its cores; no librdkafka "
            "property fixes a starved thread")
