"""Redaction of secrets from what kdiag writes. Kept apart from collection:
collectors capture verbatim, and this runs on what goes into a bundle."""
from __future__ import annotations

import re

REDACTED = "[REDACTED]"
# librdkafka/Kafka property names that hold secrets.
_SECRET_KEY = re.compile(r"(password|secret|token|jaas|\.key\.pem|private|credential)", re.I)


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def config(cfg: dict) -> dict:
    return {k: (REDACTED if is_secret_key(k) else v) for k, v in cfg.items()}


def argv(args: list[str]) -> list[str]:
    """``-X sasl.password=s3cret`` and ``sasl.password=s3cret`` lose the value."""
    out = []
    for a in args:
        if "=" in a:
            k, _, _v = a.partition("=")
            if is_secret_key(k):
                a = f"{k}={REDACTED}"
        out.append(a)
    return out


# Shorter values would match by chance in binary captures.
MIN_SECRET_LEN = 4


def secret_values(cfg: dict) -> list[str]:
    return sorted({str(v) for k, v in cfg.items() if is_secret_key(k) and len(str(v)) >= MIN_SECRET_LEN},
                  key=len, reverse=True)


def _forms(value: str) -> list[bytes]:
    """The value as written, and as strace and JSON escape it."""
    raw = value.encode()
    forms = {raw, value.replace("\\", "\\\\").replace('"', '\\"').encode()}
    return sorted(forms, key=len, reverse=True)


def scrub_file(path, forms: list[bytes], block: int = 8 << 20) -> int:
    """Replace each form in the file, streaming; memory stays at one block."""
    import os

    # A secret cut by the block's end starts within its last keep bytes:
    # those wait for the next block.
    keep = max(len(f) for f in forms) - 1
    total = 0
    tmp = f"{path}.scrub"
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        tail = b""
        while True:
            data = src.read(block)
            buf = tail + data
            total += _replace_count(buf, forms)
            out = _replace(buf, forms)
            if not data or keep == 0:
                dst.write(out)
                tail = b""
                if not data:
                    break
                continue
            dst.write(out[:-keep])
            tail = out[-keep:]
    if total:
        os.replace(tmp, path)
    else:
        os.unlink(tmp)
    return total


def _replace(data: bytes, forms: list[bytes]) -> bytes:
    for f in forms:
        data = data.replace(f, REDACTED.encode())
    return data


def _replace_count(data: bytes, forms: list[bytes]) -> int:
    return sum(data.count(f) for f in forms)


def scrub_tree(root, values: list[str]) -> int:
    """Replace every known secret value in every file under ``root``;
    returns the number of replacements."""
    from pathlib import Path

    if not values:
        return 0
    forms = [f for v in values for f in _forms(v)]
    return sum(scrub_file(p, forms) for p in sorted(Path(root).rglob("*")) if p.is_file())
