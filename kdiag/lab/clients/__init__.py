"""The producer libraries the lab runs besides kdiag's own probe (librdkafka,
through confluent-kafka): one module each, ``ORDER`` naming them.

A client module declares, as data:

    NAME     what the lab's scenarios and the README's tables call it
    RUNTIME  "python" (this interpreter) or "node" (``node`` on PATH)
    MODULE   what its program imports (python) or requires (node)
    INSTALL  how a user gets it, for the reason a run cannot start
    PROGRAM  its producer, a file in ``programs/``

Every program keeps its library's defaults and takes the same arguments,
``BOOTSTRAP TOPIC CA MESSAGES MODE`` (CA empty: plaintext), and produces
MESSAGES messages of 100 bytes:

    each  one message at a time, each acknowledged before the next is sent
          (a request per message: what ``kdiag trace -- CMD`` splits)
    hold  all at once; once every one is acknowledged it prints
          ``READY <library> <version>`` and keeps its connections open until
          its stdin closes (what fixtures/clients_nodelay.py reads sockets of)
    steady one message at a time, each acknowledged, MESSAGES ms apart, until
          its stdin closes: a producer that runs on, for ``kdiag trace --pid``

Node finds kafkajs through ``NODE_PATH``, as node itself does.
"""
from __future__ import annotations

import functools
import importlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ORDER = ("kafka_python", "aiokafka", "kafkajs")
REQUIRED = ("NAME", "RUNTIME", "MODULE", "INSTALL", "PROGRAM")
RUNTIMES = ("python", "node")
PROGRAMS = Path(__file__).resolve().parent / "programs"
MODES = ("each", "hold", "steady")


class ClientError(Exception):
    """A client module that does not declare what the registry needs."""


@dataclass(frozen=True)
class Client:
    name: str
    runtime: str
    module: str
    install: str
    program: Path

    def missing(self) -> str | None:
        """Why this client cannot run here, or None."""
        if self.runtime == "node":
            if shutil.which("node") is None:
                return "node is not on PATH"
            paths = [p for p in os.environ.get("NODE_PATH", "").split(os.pathsep) if p]
            if not any((Path(p) / self.module).is_dir() for p in paths):
                return f"{self.module} is not found under NODE_PATH: {self.install}"
            return None
        probe = subprocess.run([sys.executable, "-c", f"import {self.module}"], capture_output=True, text=True)
        return None if probe.returncode == 0 else f"{self.module} does not import: {self.install}"

    def command(self, config: dict[str, str], topic: str, messages: int, mode: str = "each") -> list[str]:
        """The program's command line for a lab's producer ``config``
        (librdkafka's property names, as ``LabTarget.config`` holds them)."""
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        tls = config.get("security.protocol", "plaintext").lower() == "ssl"
        ca = config.get("ssl.ca.location", "") if tls else ""
        runtime = sys.executable if self.runtime == "python" else "node"
        return [runtime, str(self.program), config["bootstrap.servers"], topic, ca, str(int(messages)), mode]

    def version(self) -> str | None:
        """The installed library's version, asked of the runtime that runs it."""
        if self.runtime == "node":
            cmd = ["node", "-e", f"console.log(require('{self.module}/package.json').version)"]
        else:
            cmd = [sys.executable, "-c", f"import {self.module}; print({self.module}.__version__)"]
        try:
            got = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return (got.stdout.strip() or None) if got.returncode == 0 else None


def from_module(module) -> Client:
    missing = [a for a in REQUIRED if not hasattr(module, a)]
    if missing:
        raise ClientError(f"client module {module.__name__} does not declare {', '.join(missing)}")
    if module.RUNTIME not in RUNTIMES:
        raise ClientError(f"{module.__name__}.RUNTIME {module.RUNTIME!r} is not one of {', '.join(RUNTIMES)}")
    program = PROGRAMS / module.PROGRAM
    if not program.is_file():
        raise ClientError(f"{module.__name__}.PROGRAM: no {program}")
    return Client(module.NAME, module.RUNTIME, module.MODULE, module.INSTALL, program)


@functools.cache
def all_clients() -> tuple[Client, ...]:
    return tuple(from_module(importlib.import_module(f"{__name__}.{m}")) for m in ORDER)


def names() -> list[str]:
    return [c.name for c in all_clients()]


def get(name: str) -> Client:
    found = next((c for c in all_clients() if c.name == name), None)
    if found is None:
        raise ClientError(f"unknown client {name!r}; known: {', '.join(names())}")
    return found
