"""The fleet generator's bundles verify, each with its own id, host,
version and time; the fleet benchmark runs at a smoke size."""
from __future__ import annotations

import hashlib
import json
import tarfile

from conftest import need
from made_bundles import ON, healthy_bundle

from bench.fleet_bundles import VERSIONS, generate


def test_generated_bundles_verify_and_vary_their_manifest(tmp_path):
    from kdiag.bundle.verify import verify

    off = healthy_bundle(tmp_path)
    made = generate([ON, off], 4, tmp_path / "fleet", hosts=3)
    assert len(made) == 4 and len({hashlib.sha256(p.read_bytes()).hexdigest() for p in made}) == 4
    manifests = []
    for p in made:
        v = verify(p)
        assert v.ok, (p, [str(x) for x in v.problems])
        with tarfile.open(p) as t:
            manifests.append(json.load(t.extractfile("manifest.json")))
    assert [m["host"]["hostname"] for m in manifests] == ["host-0", "host-1", "host-2", "host-0"]
    assert [m["generated_from"] for m in manifests] == [ON.name, off.name] * 2
    assert [m["versions"]["librdkafka"] for m in manifests] == [VERSIONS[0]] * 2 + [VERSIONS[1]] * 2
    assert manifests[0]["created_us"] < manifests[3]["created_us"]


def test_fleet_bench_smoke(tmp_path):
    need("java")
    from bench.fleet import bench

    figs = bench([ON, healthy_bundle(tmp_path)], [3], tmp_path / "work", cluster=False)
    assert len(figs) == 1 and figs[0].value > 0
    assert "'parsed': 3" in figs[0].note and "peak memory" in figs[0].note and "3 judged" in figs[0].note
    assert "more than one verdict: 0" in figs[0].note
