"""The end of every trace, the probe's or an attached producer's: the
staging directory a capture fills (held by a lock, so a killed kdiag's is
known as such), then scrub, parse, analyse, report and bundle; sealing a
staging directory a killed kdiag left; and Spark, started while the capture
runs. ``kdiag.capture.trace`` and ``kdiag.capture.attach`` both end here.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kdiag import __version__
from kdiag.bundle import archive as bundle
from kdiag.bundle import redact
from kdiag.capture import disk_budget
from kdiag.errors import KdiagError, UsageError


@dataclass
class TraceResult:
    findings: dict
    bundle: Path
    probe: dict | None
    partial: bool
    error: str | None = None
    # Stopped before its end: Ctrl-C, SIGTERM, the size cap or a full disk.
    interrupted: bool = False
    tracer: str | None = None       # the syscall tracer that ran, if any
    exit_status: int | None = None  # -- CMD's, once it ended (negative: the signal that ended it)



def default_bundle_path() -> Path:
    return Path.cwd() / time.strftime("kdiag-%Y%m%d-%H%M%S.tar.gz")


def _warm_spark(holder: dict, small: bool) -> None:
    # Spark takes seconds to start; doing it while the probe runs keeps the
    # time to a verdict down.
    try:
        from kdiag.analysis.spark import session
        holder["spark"] = session(small=small)
    except Exception as e:  # reported when analysis needs it
        holder["error"] = e



def staging_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def capture_running(staging: Path) -> bool:
    """Whether a live kdiag holds ``staging`` (see ``_hold``). A kdiag that
    died, even by SIGKILL, holds nothing: the kernel drops its lock."""
    try:
        fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _hold(staging: Path) -> int:
    """An flock on the staging directory itself, held while kdiag writes it:
    nothing to clean up, and no file that could end up in the bundle."""
    fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@contextlib.contextmanager
def staged(out: Path, argv: list[str], log):
    """The capture is written beside the bundle it becomes, as OUT.partial/
    (0700: it holds captured traffic): the disk it fills is the one the disk
    budget watches, and a kdiag killed before it sealed the bundle leaves an
    unsealed bundle there that ``kdiag replay`` and ``kdiag bundle seal``
    read. Removed once the bundle is written, and on failure when nothing
    was captured."""
    staging = staging_path(out)
    try:
        staging.mkdir(parents=True, mode=0o700)
        held = _hold(staging)
    except FileExistsError:
        if capture_running(staging):
            raise UsageError(f"{staging} is being written by a kdiag trace that is still running; "
                             "give this one another -o") from None
        raise UsageError(f"{staging} exists: an earlier kdiag run stopped before sealing it. "
                         f"kdiag bundle seal {staging} makes it a bundle; or remove it") from None
    except OSError as e:
        raise UsageError(f"cannot write beside {out}: {e.strerror or e}") from None
    try:
        yield from _staged(staging, argv, log)
    finally:
        os.close(held)


def _staged(staging: Path, argv: list[str], log):
    bundle.start(staging, {"kdiag_version": __version__, "created_us": int(time.time() * 1e6),
                           "argv": redact.argv(argv)})
    keep = False
    try:
        yield staging
    except BaseException:
        keep = disk_budget.tree_bytes(staging / "raw") > 0
        if keep:
            log(f"the captures so far are kept in {staging} (kdiag bundle seal {staging} makes a bundle of them)")
        raise
    finally:
        # A sealed directory is the bundle itself: the archive did not fit.
        if not keep and not bundle.is_sealed_dir(staging):
            shutil.rmtree(staging, ignore_errors=True)


def cap_bytes(mb: float | None) -> int | None:
    return None if mb is None or mb <= 0 else int(mb * disk_budget.MIB)


def finish(staging: Path, raw_inputs: list[Path], meta: dict, spark_holder: dict, warm: threading.Thread,
           out: Path, secrets: list[str], manifest: dict, extra: dict, log=lambda msg: None,
           pseudonymise: Path | None = None) -> tuple[dict, Path]:
    """Scrub, parse, analyse, report, bundle: the end of every trace.

    A full disk costs the bundle its tables (replay parses the raw captures
    again) and then its compression (the staging directory, sealed, is the
    bundle); it never costs the captures."""
    scrubbed = redact.scrub_tree(staging / "raw", secrets)
    by_pattern = redact.scrub_tree_patterns(staging / "raw")
    host = bundle.host_facts()
    pseudo = None
    if pseudonymise is not None:
        manifest, extra, host, pseudo = _pseudonymise(staging, pseudonymise, manifest, extra, host)
        log(f"hosts and addresses pseudonymised; the map is {pseudonymise} (keep it out of the bundle)")
    warm.join()
    if "error" in spark_holder:
        raise KdiagError(f"Spark did not start: {spark_holder['error']}")
    from kdiag.analysis.pipeline import analyse

    reasons = list(manifest.get("partial_reasons") or [])
    with contextlib.ExitStack() as stack:
        try:
            findings, parsed = analyse(raw_inputs, staging / "tables", meta, spark=spark_holder["spark"],
                                       base=staging)
        except OSError as e:
            if not _disk_full(e):
                raise
            shutil.rmtree(staging / "tables", ignore_errors=True)
            reasons.append("the output disk filled up while writing the tables: the bundle holds the raw "
                           "captures, which replay parses again")
            log(reasons[-1])
            elsewhere = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kdiag-tables-")))
            findings, parsed = analyse(raw_inputs, elsewhere, meta, spark=spark_holder["spark"], base=staging)
            parsed.rows, parsed.paths = {}, {}
    findings.update(extra)
    if reasons:
        findings["partial"] = True
    findings["partial_reasons"] = reasons
    findings["input_notes"] = [f"capture partial: {r}" for r in reasons] + list(findings.get("input_notes") or [])
    versions = bundle.table_versions()
    manifest = {
        "kdiag_version": __version__,
        "created_us": int(time.time() * 1e6),
        **manifest,
        "partial": bool(manifest.get("partial") or reasons),
        "partial_reasons": reasons,
        "redaction": {"secret_values": len(secrets), "replacements": scrubbed, "by_pattern": by_pattern},
        "host": host,
        "pseudonyms": pseudo,
        "parse": parsed.files,
        "input_checks": findings.get("input_checks", []),
        "tables": {name: {"rows": n, "schema_version": versions.get(name, 1)} for name, n in parsed.rows.items()},
    }
    try:
        _write_reports(staging, findings, extra, out.name)
        bundle.write(staging, out, manifest)
        shutil.rmtree(staging, ignore_errors=True)
        return findings, out
    except OSError as e:
        if not _disk_full(e):
            raise
    # No room for the archive: the staging directory becomes the bundle.
    reasons.append(f"no room on the output disk for {out.name}: the bundle is the directory {staging}")
    log(reasons[-1])
    findings["partial"], manifest["partial"] = True, True
    findings["input_notes"].insert(len(reasons) - 1, f"capture partial: {reasons[-1]}")
    try:
        with contextlib.suppress(OSError):
            _write_reports(staging, findings, extra, out.name)
        bundle.seal_dir(staging, manifest)
    except OSError as e:
        raise KdiagError(f"the output disk is full; the captures are in {staging} ({e.strerror or e})") from e
    return findings, staging


def _write_reports(staging: Path, findings: dict, extra: dict, name: str) -> None:
    """findings.json, and the same for people: report.txt for a terminal,
    report.html (its charts read the socket samples in tables/)."""
    from kdiag.report.html import render_html, sockets_of
    from kdiag.report.text import render

    (staging / "findings.json").write_text(json.dumps(findings, indent=2, default=str) + "\n")
    (staging / "report.txt").write_text(render(findings, probe=extra.get("probe")))
    (staging / "report.html").write_text(render_html(findings, sockets_of(staging / "tables"), source=name))


def _pseudonymise(staging: Path, map_path: Path, manifest: dict, extra: dict,
                  host: dict) -> tuple[dict, dict, dict, dict]:
    """Once, on the raw captures: tables and findings come from them and so
    hold pseudonyms already (a second pass would map those again). The
    manifest, extra findings and host facts pseudonymised, and the record of it."""
    from kdiag.bundle.pseudonym import Pseudonyms, pseudonymise_manifest

    with Pseudonyms.load_or_create(map_path, outside=[staging]) as ps:
        ps.hostname(host["hostname"])
        ps.learn_obj(manifest)
        ps.learn_obj(extra)
        pseudo = {"map_id": ps.map_id, "keep_loopback": ps.keep_loopback, **ps.tree(staging / "raw")}
        manifest = pseudonymise_manifest({**manifest, "host": host}, ps)
        host = manifest.pop("host")
        extra = ps.obj(extra)
    return manifest, extra, host, pseudo


def _disk_full(e: OSError) -> bool:
    return e.errno in (errno.ENOSPC, errno.EDQUOT)


def seal(staging: Path, out: Path | None = None, log=lambda msg: None) -> Path:
    """``kdiag bundle seal``: the OUTPUT.partial/ directory a killed kdiag
    left becomes the bundle it would have written, marked partial. Secrets
    are redacted by pattern only: the values kdiag was told died with it."""
    staging = Path(staging).resolve()
    if capture_running(staging):
        raise UsageError(f"{staging} is being written by a kdiag trace that is still running; "
                         "it seals it itself when it stops")
    if not (staging / bundle.MANIFEST).is_file():
        raise UsageError(f"{staging}: not a directory kdiag trace left (no {bundle.MANIFEST})")
    # A link would seal (and redact in place) a file from outside the capture.
    bundle.refuse_links(staging)
    if bundle.is_sealed_dir(staging):
        raise UsageError(f"{staging}: already sealed; kdiag replay reads it")
    name = staging.name
    out = (out or staging.with_name(name[:-len(".partial")] if name.endswith(".partial") else name + ".tar.gz"))
    if out.exists():
        raise UsageError(f"{out} exists; not overwriting it")
    man = bundle.manifest(staging)
    # Tables or findings half-written when kdiag died are not to be trusted.
    shutil.rmtree(staging / "tables", ignore_errors=True)
    for leftover in ("findings.json", "report.txt", "report.html"):
        (staging / leftover).unlink(missing_ok=True)
    raw_inputs = [f for f in bundle.raw_files(staging) if f.parent.name in bundle.ANALYSED_SOURCES]
    reasons = list(man.get("partial_reasons") or [])
    reasons.append("sealed afterwards with kdiag bundle seal: secrets redacted by pattern only")
    manifest = {k: v for k, v in man.items() if k not in ("files", "sealed", "bundle_format")}
    manifest.update({"partial": True, "partial_reasons": reasons})
    holder, warm = start_spark()
    meta = {"librdkafka_version": (man.get("versions") or {}).get("librdkafka")}
    probe = bundle.probe_summary(staging)
    _, out_path = finish(staging, raw_inputs, meta, holder, warm, out.resolve(), [], manifest,
                         {"partial": True, "probe": probe, "delivery_ms": bundle.delivery_ms(staging / "raw" / "probe")},
                         log)
    return out_path


def start_spark(small: bool = False) -> tuple[dict, threading.Thread]:
    """``small``: the capture will be small (kdiag.analysis.spark.session)."""
    holder: dict = {}
    warm = threading.Thread(target=_warm_spark, args=(holder, small), daemon=True)
    warm.start()
    return holder, warm
