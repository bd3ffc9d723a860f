"""Arguments several commands share: the inputs they read, how they read
bundles, and Spark's output."""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from kdiag.visible import visible


def input_path(text: str) -> Path:
    """An input on this machine: a path, or a file:// URI of one. Another
    URI is refused whole; as a Path, "s3a://b/x" would be "s3a:/b/x", a
    file that is not there. So is a URI that names no file for certain:
    a query or fragment (a "?" or "#" in a name is %3F or %23), a "%" that
    starts no escape, a NUL byte (no path holds one)."""
    import urllib.parse

    def refused(why: str) -> argparse.ArgumentTypeError:
        return argparse.ArgumentTypeError(f"{visible(text)}: {why}")

    if "\0" in text:
        raise refused("a NUL byte; no path holds one")
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]+)://", text)
    if not m:
        return Path(text)
    elsewhere = "this command reads files here (a path, or file:///path): copy it here first"
    if m.group(1).lower() != "file":
        raise refused(f"not on this machine ({visible(m.group(1))}://); {elsewhere}")
    try:
        u = urllib.parse.urlsplit(text)
    except ValueError as e:   # "Invalid IPv6 URL": a "[" in the host
        raise refused(f"not a URI kdiag can read ({e})") from None
    if u.netloc not in ("", "localhost"):
        raise refused(f"not on this machine (host {visible(u.netloc)}); {elsewhere}")
    if u.query or u.fragment or text.endswith(("?", "#")):
        raise refused("a file URI names a file only, with no query or fragment (write ? and # in a name "
                      "as %3F and %23)")
    if re.search(r"%(?![0-9A-Fa-f]{2})", u.path):
        raise refused("a % that starts no %XX escape (write % in a name as %25)")
    raw = urllib.parse.unquote_to_bytes(u.path)
    if b"\0" in raw:
        raise refused("a NUL byte (%00); no path holds one")
    # The bytes the escapes give, as this system names files (a name that
    # is not UTF-8 keeps its bytes, as a name given as a path does).
    return Path(os.fsdecode(raw))


def add_reading(parser: argparse.ArgumentParser, merge: str | None) -> None:
    """What replay reads, report and compare read the same way: how a
    bundle is checked and where it is analysed. ``merge``: what several
    runs get without --merge (None: no --merge)."""
    from kdiag.bundle import limits as bundle_limits

    reading = parser.add_argument_group("reading")
    if merge is not None:
        reading.add_argument("--merge", action="store_true",
                             help="several bundles: one analysis of all their requests, which the findings say, "
                                  "instead of " + merge)
    reading.add_argument("--no-verify", action="store_true",
                         help="analyse a bundle that fails verification (a warning names the files)")
    reading.add_argument("--no-warm", action="store_true",
                         help="analyse in this process (start Spark here) instead of in the warm analysis server "
                              "that a small replay starts on first use and reuses; also KDIAG_WARM=0")
    bundle_limits.add_options(reading)
    add_verbose(parser)


def add_verbose(parser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true",
                       help="let Spark's and the JVM's own output through (default: into ~/.cache/kdiag/logs/); "
                            "also KDIAG_VERBOSE=1")
