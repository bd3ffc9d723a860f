"""What ``kdiag replay`` does with its inputs, which ``report`` and
``compare`` read the same way: every path checked and every bundle
verified first, then the runs analysed (a bundle unpacked, its raw captures
and probe summary taken), apart or merged, and the findings printed."""
from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kdiag.errors import InputError, KdiagError
from kdiag.interrupts import interrupted
from kdiag.status import ExitStatus
from kdiag.visible import visible


@dataclass
class Inputs:
    """What replay was given, readable and verified: the bundles among the
    paths, unpacked only when analysed."""
    paths: list[Path]
    bundles: list[Path]
    limits: object
    probes: int = 0                                       # bundles with a probe, once analysed
    versions: dict = field(default_factory=dict)          # bundle -> librdkafka version, once analysed
    sources: tuple[str, ...] | None = None                # bundle.ANALYSED_SOURCES, when the warm server told them

    def apart(self) -> list[list[Path]]:
        """The runs to analyse apart: each bundle alone, and the raw
        captures together (a log and an strace given side by side are one
        producer's), in the order given."""
        runs: list[list[Path]] = []
        raw: list[Path] = []
        for p in self.paths:
            if p in self.bundles:
                runs.append([p])
            else:
                if not raw:
                    runs.append(raw)
                raw.append(p)
        return runs


def emit(env, findings: dict, as_json: bool, bundle: str | None = None) -> ExitStatus:
    """The findings on stdout, as text or JSON; the status they make."""
    if as_json:
        env.stdout.write(json.dumps(findings, default=str) + "\n")
    else:
        from kdiag.report.text import render

        env.stdout.write(render(findings, bundle=bundle, probe=findings.get("probe")))
    return ExitStatus.NO_DATA if findings.get("no_data") else ExitStatus.OK


def replayed(args, env, then):
    """``then(findings, tables_dir)`` of the inputs that ``kdiag replay``
    takes, analysed as it analyses them, together; the tables are gone
    afterwards."""
    inputs = checked_inputs(args, env)
    return analysed(inputs, inputs.paths, env, args.no_warm, then)


def checked_inputs(args, env) -> Inputs:
    """Every path readable and every bundle verified, before any is
    analysed: a bad one refuses the command, not its last part."""
    from kdiag import progress
    from kdiag.bundle import archive as bundle
    from kdiag.ingest.detect import readable_inputs

    paths = list(args.paths)
    readable_inputs(paths)
    # Any tar archive is taken for a bundle: none is a raw capture, and one
    # whose manifest is missing or not first is what verification reports.
    bundles = [p for p in paths if bundle.is_bundle(p) or bundle.is_archive(p)]
    limits = bundle.Limits.resolve(args)
    verify = _Verifier(bundles, getattr(args, "no_warm", False))
    with progress.current().stage(f"verifying {len(bundles)} bundle(s)" if bundles else "reading"):
        checked = [verify(p, limits) for p in bundles]
    for v in checked:
        if v.unsealed:
            env.say(f"warning: {visible(v.path)} is unsealed (kdiag was stopped before it finished); its captures are "
                    "read as they are, unchecked")
    failed = [v for v in checked if not v.ok and not v.unsealed]
    if failed and not args.no_verify:
        raise InputError("\n".join(
            f"{visible(v.path)}: failed verification, not replaying it (--no-verify replays it anyway):\n"
            + "\n".join(f"  {pr}" for pr in v.problems) for v in failed))
    for v in failed:
        env.say(f"warning: {visible(v.path)} failed verification, replaying it anyway: "
                + "; ".join(map(str, v.problems)))
    return Inputs(paths, bundles, limits, sources=verify.sources)


class _Verifier:
    """bundle.verify, run by the warm analysis server when one is serving
    already (a fresh process spends most of a second importing pyarrow and
    the parsers to check a bundle's tables): the same function, the same
    answer; here whenever it cannot. ``sources``: the raw/ folders the
    analysis reads, from the server's registry (the same code: a server
    whose key is not the client's answers nothing), else None."""

    def __init__(self, bundles: list, no_warm: bool) -> None:
        self.server = None
        self.sources: tuple[str, ...] | None = None
        if bundles:
            from kdiag.analysis.warm import Server, wanted

            if wanted(no_warm):
                self.server = Server()

    def __call__(self, path: Path, limits):
        from kdiag.bundle import archive as bundle

        if self.server is not None:
            from kdiag.analysis.warm import WarmUnavailable

            try:
                checked = self.server.verify(path, limits)
                self.sources = self.server.sources
                return checked
            except (WarmUnavailable, OSError):
                pass
        return bundle.verify(path, limits)


@dataclass
class _Gathered:
    """What the paths of one run hold for the analysis."""
    raw: list[Path] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    probe: dict | None = None
    delivery: object = None
    probes: int = 0


def _gather(inputs: Inputs, paths: list[Path], cleanup: contextlib.ExitStack) -> _Gathered:
    """The raw captures of ``paths``, each bundle unpacked (and removed at
    the end of ``cleanup``), with its probe summary and librdkafka version."""
    from kdiag.bundle import archive as bundle

    got = _Gathered()
    for p in paths:
        if p in inputs.bundles:
            from kdiag.capture.probe_producer import retransmits

            d = bundle.unpack(p, inputs.limits)
            if d != p:
                cleanup.callback(shutil.rmtree, d, ignore_errors=True)
            man = bundle.manifest(d, inputs.limits)
            inputs.versions[str(p)] = man.get("versions", {}).get("librdkafka")
            # The registry's answer, from the warm server when it gave it:
            # asked here, it imports every parser.
            sources = inputs.sources or bundle.ANALYSED_SOURCES
            got.raw += [f for f in bundle.raw_files(d) if f.parent.name in sources]
            summary = bundle.probe_summary(d, inputs.limits)
            if summary is not None:
                got.probes += 1
                got.probe = summary
                got.meta["tcp_retrans"] = retransmits(got.probe)
                got.delivery = bundle.delivery_ms(d / "raw" / "probe", inputs.limits)
            elif isinstance(man.get("target"), dict):      # -- CMD or --pid: the producer's namespace
                got.meta["tcp_retrans"] = retransmits(man["target"])
        elif p.is_dir():
            got.raw += sorted(f for f in p.rglob("*") if f.is_file())
        else:
            got.raw.append(p)
    if got.probes > 1:   # merged: each probe is its own run's (see say_merged)
        got.probe = got.delivery = None
        got.meta.pop("tcp_retrans")
    # Bundles that disagree on the version leave it to librdkafka's own
    # init lines (merged, they are said to differ: see say_merged).
    stated = {inputs.versions[str(p)] for p in paths if str(p) in inputs.versions}
    if len(stated) == 1:
        got.meta["librdkafka_version"] = stated.pop()
    return got


def analysed(inputs: Inputs, paths: list[Path], env, no_warm: bool, then):
    """``then(findings, tables_dir)`` of ``paths`` (some of ``inputs``),
    analysed as one run."""
    import tempfile

    from kdiag.analysis.pipeline import analyse

    with contextlib.ExitStack() as cleanup:
        got = _gather(inputs, paths, cleanup)
        inputs.probes = got.probes
        tmp = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="kdiag-replay-"))
        try:
            from kdiag.analysis.warm import wanted

            warm = {"warm": True, "say": env.say} if wanted(no_warm) else {}
            findings, _ = analyse(got.raw, Path(tmp) / "tables", got.meta, **warm)
        except Exception as e:
            from kdiag.analysis.spark import failure
            from kdiag.ingest.parquet_sink import reason

            why = None if interrupted(e) else failure(e)
            if why is not None:
                raise KdiagError(why) from None
            if not isinstance(e, OSError):
                raise
            raise KdiagError(f"cannot write the tables to {tmp}: {reason(e)} "
                             "(set TMPDIR to a directory with room)") from None
        findings["probe"] = got.probe
        findings["delivery_ms"] = got.delivery
        return then(findings, Path(tmp) / "tables")


def say_merged(findings: dict, inputs: Inputs) -> None:
    """--merge of several bundles: the findings say they are one analysis
    of several runs, and drop what belongs to one run only."""
    if len(inputs.apart()) < 2:
        return
    findings["merged"] = [str(p) for p in inputs.paths]
    said = [f"one analysis of the requests of {len(findings['merged'])} inputs together (--merge): "
            + ", ".join(findings["merged"]) + "; the verdict and percentiles are over all of them"]
    if inputs.probes > 1:
        said.append(f"{inputs.probes} of the bundles carry a probe of their own: no one probe line stands "
                    "for them all (replay them without --merge to see each)")
    if len(set(inputs.versions.values())) > 1:
        findings["librdkafka_version"] = None
        said.append("their librdkafka versions differ (" + ", ".join(
            f"{b}: {v or '?'}" for b, v in inputs.versions.items()) + "): no version-aware fix applies to all")
    findings["unknowns"] = said + list(findings.get("unknowns") or [])
