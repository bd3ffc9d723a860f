"""A fleet of bundles for the fleet benchmarks: N bundles made from a few
real ones (``kdiag lab matrix``, ``kdiag trace --messages 1000``), each a
different host, librdkafka version and time, sealed anew by kdiag's own
bundle writer so that each verifies and has its own bundle_id.

    python -m bench.fleet_bundles -n 1000 -o FLEET_DIR SOURCE.tar.gz...

What is varied is the manifest only: the host's name (``host-0`` ...
``host-{hosts-1}``), ``versions.librdkafka`` (from VERSIONS), and
``created_us`` (spread over a week). The captures are the source's, byte for
byte: the requests, their times and the log's own init line are the run's
that the lab made, so a bundle's verdict is its source's. Bundles are
written round-robin over the sources, so the causes are as mixed as the
sources are.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

# librdkafka versions whose defaults differ where kdiag's fixes look:
# socket.nagle.disable flipped in 2.10.0, the sticky partitioner came in
# 1.6.0, exponential backoff in 2.3.0.
VERSIONS = ("1.9.2", "2.3.0", "2.6.1", "2.8.0", "2.10.0", "2.12.1", "2.16.0")
WEEK_US = 7 * 86_400 * 1_000_000


def generate(sources: list[Path], n: int, out: Path, hosts: int = 50) -> list[Path]:
    from kdiag.bundle import archive

    out.mkdir(parents=True, exist_ok=True)
    made = []
    with tempfile.TemporaryDirectory(prefix="kdiag-fleet-gen-") as tmp:
        unpacked = []
        for i, src in enumerate(sources):
            d = Path(tmp) / f"src{i}"
            with tarfile.open(src) as t:
                t.extractall(d, filter="data")
            unpacked.append((src, d, json.loads((d / archive.MANIFEST).read_text())))
        for i in range(n):
            src, d, manifest = unpacked[i % len(unpacked)]
            m = json.loads(json.dumps(manifest))
            m.pop("files", None)
            m.setdefault("host", {})["hostname"] = f"host-{i % hosts}"
            m.setdefault("versions", {})["librdkafka"] = VERSIONS[(i // len(unpacked)) % len(VERSIONS)]
            m["created_us"] = int(m.get("created_us") or 0) - WEEK_US + (i * WEEK_US) // max(1, n)
            m["generated_from"] = src.name
            staging = Path(tmp) / "staging"
            shutil.copytree(d, staging)
            made.append(archive.write(staging, out / f"b{i:05d}-{src.name.removesuffix('.tar.gz')}.tar.gz", m))
            shutil.rmtree(staging)
    return made


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet_bundles", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", type=Path, metavar="SOURCE.tar.gz")
    ap.add_argument("-n", type=int, required=True, help="bundles to make")
    ap.add_argument("-o", "--output", type=Path, required=True, help="directory for them")
    ap.add_argument("--hosts", type=int, default=50, help="distinct host names (default 50)")
    a = ap.parse_args(argv)
    made = generate(a.sources, a.n, a.output, a.hosts)
    print(f"{len(made)} bundles in {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
