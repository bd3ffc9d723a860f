"""The README's "Which clients set TCP_NODELAY", measured again: each client
produces with its defaults to Tansu, plaintext and over TLS, and its live
broker sockets must say what the README's row says; kdiag's reading of the
same run's capture may say nothing, never the opposite.

librdkafka (confluent-kafka, the project's own client) always runs. The
other clients are not kdiag's dependencies: the test extra installs
kafka-python and aiokafka, setup.sh kafkajs under build/clients (or
$NODE_PATH); a row whose client is missing skips saying so, and fails in
CI."""
from __future__ import annotations

import importlib.util

import pytest

from conftest import NODE_MODULES, ROOT, need, need_tansu, require

# The script's client name -> the README row's first cell.
ROWS = {
    "confluent-kafka": "librdkafka (confluent-kafka)",
    "confluent-kafka, socket.nagle.disable=false": "librdkafka, `socket.nagle.disable=false`",
    "kafka-python": "kafka-python",
    "aiokafka": "aiokafka",
    "kafkajs": "kafkajs (Node v20.20.2)",
}


def _script():
    spec = importlib.util.spec_from_file_location("clients_nodelay", ROOT / "fixtures" / "clients_nodelay.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _readme_row(label: str) -> tuple[bool, bool]:
    """(plaintext, TLS) as the README's table states them."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Which clients set TCP_NODELAY", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == label:
            return cells[2] == "on", cells[3] == "on"
    raise AssertionError(f"no README row {label!r}")


@pytest.fixture(scope="module")
def brokers():
    need("tcpdump", root=True)
    need("stunnel4")
    need_tansu()
    script = _script()
    with script.brokers() as ports:
        yield script, ports


@pytest.mark.parametrize("name", list(ROWS))
def test_client_default_nodelay_is_the_readmes(brokers, name, tmp_path):
    script, (plain_port, tls_port, ca) = brokers
    assert set(ROWS) == set(script.PRODUCERS)
    why = script.available(name, str(NODE_MODULES) if NODE_MODULES.is_dir() else None)
    require(f"{name} not installed: {why}" if why else None)
    expected = _readme_row(ROWS[name])
    for port, ca_file, want in ((plain_port, "", expected[0]), (tls_port, ca, expected[1])):
        version, sock, wire = script.measure(name, port, ca_file, str(NODE_MODULES) if NODE_MODULES.is_dir() else None,
                                             tmp_path)
        assert sock and all(s is want for s in sock), (name, version, port, sock)
        assert all(w in (None, want) for w in wire), (name, version, port, wire)
