"""The lab's TLS: a throwaway certificate, the stunnel4 and socat
terminators' configuration, and the checks that a port accepts TCP and
completes a handshake."""
from __future__ import annotations

import os
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Sequence

from kdiag.lab.processes import LabError, one_line

STUNNEL_CONF = "stunnel.conf"
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"


def make_cert(openssl: str, state_dir: Path, ips: Sequence[str] = ("127.0.0.1",),
              names: Sequence[str] = ()) -> tuple[Path, Path]:
    cert, key = state_dir / CERT_FILE, state_dir / KEY_FILE
    san = ",".join([*(f"IP:{ip}" for ip in ips), "DNS:localhost", *(f"DNS:{n}" for n in names)])
    # EC keeps generation to a few milliseconds; the SAN carries every name a
    # client might verify against (librdkafka checks the host by default).
    cmd = [
        openssl, "req", "-x509", "-nodes",
        "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-keyout", str(key), "-out", str(cert),
        "-days", "365", "-subj", "/CN=localhost",
        "-addext", f"subjectAltName={san}",
    ]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"openssl could not make the lab certificate: {e}") from None
    if out.returncode != 0 or not cert.exists() or not key.exists():
        tail = one_line(out.stderr) or f"exit {out.returncode}"
        raise LabError(f"openssl could not make the lab certificate: {tail}")
    os.chmod(key, 0o600)
    return cert, key


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        # All sockets stay bound until every port is known, so the n differ.
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def stunnel_conf(
    state_dir: Path, tls_port: int, broker_port: int, cert: Path, key: Path, accept_host: str = "127.0.0.1"
) -> Path:
    conf = state_dir / STUNNEL_CONF
    conf.write_text(
        "\n".join(
            [
                "foreground = yes",
                "pid =",
                "syslog = no",
                "debug = 5",
                "",
                "[kafka]",
                f"accept = {accept_host}:{tls_port}",
                f"connect = 127.0.0.1:{broker_port}",
                f"cert = {cert}",
                f"key = {key}",
                # Debian's build already sets these; stated so the only Nagle
                # in the path is the client's.
                "socket = a:TCP_NODELAY=1",
                "socket = r:TCP_NODELAY=1",
                "",
            ]
        )
    )
    return conf


def accepts_tcp(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def accepts_tls(port: int, ca: Path) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                return True
    except (OSError, ssl.SSLError):
        return False

# Characters socat gives a meaning inside an address (separators, quoting).
_SOCAT_SPECIAL = set(",:!'\"\\ \t\n")


def socat_cmd(socat: str, tls_port: int, broker_port: int, cert: Path, key: Path, nodelay: bool = False) -> list[str]:
    for path in (cert, key):
        if _SOCAT_SPECIAL & set(str(path)):
            raise LabError(f"socat cannot take the path {str(path)!r}: use a state dir without ,:! quotes or spaces")
    return [
        socat, "-d", "-d",
        f"OPENSSL-LISTEN:{tls_port},bind=127.0.0.1,reuseaddr,fork,cert={cert},key={key},verify=0",
        # Without ",nodelay" this hop runs Nagle: the fault the nagle-proxy
        # variant exists for; proxy-nodelay is its fix.
        f"TCP:127.0.0.1:{broker_port}" + (",nodelay" if nodelay else ""),
    ]
