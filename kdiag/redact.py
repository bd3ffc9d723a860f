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
