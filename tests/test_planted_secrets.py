"""Secrets planted in a real traced run, searched for in every member of
the bundle decoded: gunzipped, Parquet columns read as text, JSON and HTML
unescaped, strace's and bpftrace's escapes turned back into bytes."""
import io
import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT, bundle_bytes, need, require
from kdiag.cli import Environment, main

pytestmark = pytest.mark.e2e
PRODUCER = ROOT / "tests" / "producers" / "planted_secrets.py"

PW = "Pl4ntedCmdPw"
SASL_PASS = "Pl4ntedCmdSaslPass"
URL_PW = "Pl4ntedUrlPw"
SR_INFO_PW = "Pl4ntedSrInfoPw"
SR_URL_PW = "Pl4ntedSrUrlPw"
SOURCE_LITERAL = "Pl4ntedSourceLiteral"
# Written to stderr by the producer: the log keeps them, the patterns take them.
LOGGED = {
    "sasl.password": "Pl4ntedLogSaslPw",
    "ssl.key.password": "Pl4ntedLogKeyPw",
    "sasl.oauthbearer.client.secret": "Pl4ntedLogOidcSecret",
    "ssl.keystore.password": "Pl4ntedLogKeystorePw",
    "ssl.truststore.password": "Pl4ntedLogTruststorePw",
}
LOGGED_URL_PW = "Pl4ntedLogUrlPw"
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJQbDRudGVkLWp3dCJ9.Pl4ntedSignatureXyz"
JAAS_PW = "Pl4nted jaas pw"
FQDN, SHORT = "kafka-prod-7.corp.example.com", "kafka-prod-7"


def leaks(members: dict[str, bytes], needles: dict[str, bytes]) -> list[str]:
    return sorted(f"{what} in {name}" for name, data in members.items() for what, n in needles.items() if n in data)


def pieces(what: str, secret: bytes, width: int, step: int) -> dict[str, bytes]:
    """Overlapping slices: a secret read in small chunks is never whole in one string."""
    return {f"{what}[{i}:]": secret[i:i + width] for i in range(0, max(1, len(secret) - width + 1), step)}


@pytest.fixture(scope="module")
def the_lab():
    need("strace", root=True)
    from kdiag.lab import broker as lab

    with lab.running() as L:
        yield L


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The key files and the registry config, and the needles to search for."""
    d = tmp_path_factory.mktemp("planted")
    pem, der = d / "client.key", d / "client.der"
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-out", str(pem)],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-outform", "DER",
                    "-out", str(der)], check=True, capture_output=True)
    from cryptography.hazmat.primitives.serialization import load_der_private_key

    scalar = load_der_private_key(der.read_bytes(), None).private_numbers().private_value.to_bytes(32, "big")
    assert scalar in der.read_bytes()
    body = b"".join(ln for ln in pem.read_bytes().splitlines() if not ln.startswith(b"-----"))
    registry = d / "registry.properties"
    registry.write_text(f"basic.auth.user.info=alice:{SR_INFO_PW}\n"
                        f"schema.registry.url=https://bob:{SR_URL_PW}@registry.corp.example.com:8081\n")
    needles = {s: s.encode() for s in (PW, SASL_PASS, URL_PW, SR_INFO_PW, SR_URL_PW, SOURCE_LITERAL, LOGGED_URL_PW,
                                       JWT, JAAS_PW, *LOGGED.values())}
    needles.update(pieces("pem body", body, 24, 12))
    needles.update(pieces("der scalar", scalar, 12, 4))
    return {"pem": pem, "der": der, "registry": registry, "needles": needles}


def run(lab, planted, tmp_path, monkeypatch, tracer) -> tuple[int, str, str, object]:
    monkeypatch.setenv("KDIAG_TRACER", tracer)
    host, port = lab.bootstrap.rsplit(":", 1)
    said = " ".join(f"{k}={v}" for k, v in LOGGED.items()) + (
        f' sasl.jaas.config=PlainLoginModule required username="alice" password="{JAAS_PW}";'
        f" Authorization: Bearer {JWT} registry https://carol:{LOGGED_URL_PW}@sr.corp.example.com"
        f" dialing {FQDN} then {SHORT}:9093")
    bundle = tmp_path / f"{tracer}.tar.gz"
    out, err = io.StringIO(), io.StringIO()
    rc = main(["trace", "--json", "-o", str(bundle), "--pseudonymise", str(tmp_path / "map.json"), "--",
               sys.executable, str(PRODUCER), "--bootstrap", f"sasl_ssl://alice:{URL_PW}@{host}:{port}",
               "--ca", str(lab.ca_path), "--pw", PW, f"--sasl-pass={SASL_PASS}",
               "--registry-config", str(planted["registry"]), "--pem", str(planted["pem"]),
               "--der", str(planted["der"]), "--say", said], Environment(stdout=out, stderr=err))
    return rc, out.getvalue(), err.getvalue(), bundle


@pytest.mark.parametrize("tracer", ["strace", "bpfcalls"])
def test_planted_secrets_are_in_no_member(the_lab, planted, spark, tmp_path, monkeypatch, tracer):
    if tracer == "bpfcalls":
        from kdiag.collectors import bpfcalls

        require(bpfcalls.check())
    rc, out, err, bundle = run(the_lab, planted, tmp_path, monkeypatch, tracer)
    assert rc == 0, err
    members = bundle_bytes(bundle)
    needles = {**planted["needles"], "fqdn": FQDN.encode(), "short host": SHORT.encode()}
    found = leaks(members, needles)
    assert not found, "\n".join(found)
    man = json.loads(members["manifest.json"])
    assert man["tracer"]["tool"] == tracer
    # the secrets went by where the capture looks: the log lines were there
    # for the patterns, and the analysis still read the producer's requests
    by = man["redaction"]["by_pattern"]
    assert by.get("key_value", 0) >= len(LOGGED) and by.get("jwt") and by.get("url_userinfo"), by
    assert json.loads(out)["verdict"] == "nagle_delayed_ack"
    if tracer == "strace":
        raw = members["raw/strace/strace.txt"]
        # the file reads stay, with their sizes: nothing silently vanishes
        for f in (planted["pem"], planted["der"], planted["registry"], PRODUCER):
            assert re.search(rb"read\(\d+<" + re.escape(str(f).encode()) + rb">, \S+, \d+\) = \d+", raw), f
