"""A lab scenario whose producer is another library (the scenario's
``CLIENT``, kdiag.lab.clients): the lab started as for kdiag's probe, the
library's program run under ``kdiag trace -- CMD`` exactly as a user's
producer is (kdiag.capture.attach), and the lab stopped.

There is no librdkafka log and no probe summary: the requests are the
ones the tracer saw the program write, named by their Kafka headers where
the connection is plaintext, told apart by their timing over TLS. The
manifest's ``lab`` records the lab and the client's version."""
from __future__ import annotations

from pathlib import Path

from kdiag.capture.bundling import TraceResult
from kdiag.errors import UsageError

TOPIC = "kdiag-probe"


def run(scenario, out: Path | None, messages: int, argv: list[str], log=lambda m: None,
        tracer: str | None = None, lab=None) -> TraceResult:
    """``lab``: starts the lab, given the topic and the log (as
    ``TraceOptions.lab``); None: the scenario's own."""
    import functools

    from kdiag.capture import attach
    from kdiag.lab import clients, scenarios

    client = clients.get(scenario.client)
    why = client.missing()
    if why:
        raise UsageError(f"scenario {scenario.name} runs {client.name}, which cannot run here: {why}")
    lab = lab or functools.partial(scenarios.running, scenario.name)
    with lab(TOPIC, log) as target:
        target.start()
        cmd = client.command(target.config, TOPIC, messages)
        info = {**target.info, "client": client.name, "client_version": client.version()}
        opts = attach.TargetOptions(command=cmd, out=out, argv=argv, tracer=tracer, lab=info)
        res = attach.run(opts, log=log)
    if res.exit_status and res.error is None:
        res.error = f"{client.name}'s producer exited with status {res.exit_status} (its stderr is in the bundle)"
    return res
