"""Every ``KDIAG_*`` environment variable kdiag reads, as data: its name,
type, default and what it does. The code reads them through ``get`` and
``raw`` here, ``kdiag --help`` lists them and docs/settings.md is made
from them, so none is read that is not documented.

An empty variable counts as unset. A value that is not one of its type is
taken as unset too (a mistyped timeout must not stop a replay); the
bundle caps, which refuse such a value, read theirs with ``raw``.
"""
from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    type: type              # str, int, float or bool
    default: object         # the value when unset; None: worked out where it is read (``shown``)
    doc: str                # one line: what it does
    shown: str = ""         # the default, said in words, when it is worked out where it is read

    def default_text(self) -> str:
        if self.shown:
            return self.shown
        if self.type is bool:
            return "1" if self.default else "0"
        return "unset" if self.default is None else f"{self.default:g}" if self.type is float else str(self.default)

    def parse(self, text: str):
        if self.type is bool:
            return text != "0"
        try:
            return self.type(text)
        except ValueError:
            return self.default


SETTINGS = (
    Setting("KDIAG_TRACER", str, "auto",
            "the syscall tracer of kdiag trace when --tracer is not given: one of --tracer's choices"),
    Setting("KDIAG_BPFCALLS_RAW", bool, False,
            "1: bpfcalls hooks the raw sys_enter/sys_exit tracepoints, its fallback, not the per-syscall ones"),
    Setting("KDIAG_BPFCALLS_HOOKS", str, "auto",
            "what bpfcalls hooks: uprobes (libc's functions in the traced process, which no other process meets), "
            "tracepoints (the syscalls', which every process pays for), or auto: uprobes for a producer whose "
            "measured calls they would cost under 1% of a core"),
    Setting("KDIAG_VERBOSE", bool, False,
            "1: let Spark's and the JVM's own output through, as --verbose does"),
    Setting("KDIAG_WARM", bool, True,
            "0: analyse in the command's own process, never in the warm analysis server, as --no-warm does"),
    Setting("KDIAG_WARM_DIR", str, None,
            "the warm analysis server's private directory (its socket, lock and log)",
            "$TMPDIR/kdiag-warm-UID"),
    Setting("KDIAG_WARM_IDLE_S", float, 600.0,
            "the warm server stops after this many seconds without a request"),
    Setting("KDIAG_WARM_TIMEOUT_S", float, 120.0,
            "a request that runs longer is given up (the client analyses it itself) and the server stops"),
    Setting("KDIAG_WARM_START_S", float, 60.0,
            "how long a client waits for the warm server it started to answer"),
    Setting("KDIAG_WARM_READ_S", float, 10.0,
            "the warm server answers an error to a request not sent whole within this many seconds"),
    Setting("KDIAG_WARM_KEY", str, None,
            "the warm server's code key instead of the computed one (a server with another key is stale)",
            "a hash of the interpreter and kdiag's modules"),
    Setting("KDIAG_WARM_PRACTICE", int, 10,
            "analyses the warm server practises after an answer, so its JIT is ready for the next; 0: none"),
    Setting("KDIAG_SPARK_MASTER", str, "local[2]",
            "the Spark master of the analysis and of kdiag fleet (--master wins)"),
    Setting("KDIAG_SPARK_MEMORY", str, None,
            "the Spark driver's heap (spark.driver.memory), such as 2g",
            "1g for a small input, else a quarter of the memory, 2 to 8 GiB"),
    Setting("KDIAG_SHUFFLE_PARTITIONS", int, None,
            "Spark's shuffle partitions (spark.sql.shuffle.partitions)",
            "1 for a small input, else 8 a core"),
    Setting("KDIAG_SPARK_CDS", str, "1",
            "the JVM's class-data archive, which starts Spark sooner: 1 use it (the warm server records it when missing), write: write it, 0: none"),
    Setting("KDIAG_LOCAL_TABLE_BYTES", int, 8 << 20,
            "a table up to this size (uncompressed) goes to Spark as rows in the plan, not as a scan"),
    Setting("KDIAG_LAB_DIR", str, "/tmp/kdiag-lab",
            "the lab's state directory (its configuration, logs and pids)"),
    Setting("KDIAG_PROBE_CONFIG", str, None,
            "set by kdiag trace for its probe producer: the producer's properties as JSON"),
    Setting("KDIAG_MAX_UNPACKED_MB", float, 4096.0,
            "refuse a bundle that unpacks to more megabytes (--max-unpacked-mb wins)"),
    Setting("KDIAG_MAX_MEMBERS", int, 10_000,
            "refuse a bundle with more members (--max-members wins)"),
    Setting("KDIAG_MAX_MANIFEST_MB", float, 16.0,
            "refuse a bundle whose manifest is larger, in megabytes (--max-manifest-mb wins)"),
    Setting("KDIAG_MAX_MANIFEST_DEPTH", int, 64,
            "refuse a bundle whose manifest nests deeper (--max-manifest-depth wins)"),
)
BY_NAME = {s.name: s for s in SETTINGS}


def raw(name: str, environ=None) -> str | None:
    """The variable's text, None when unset or empty. A name not declared
    here is a KeyError: every variable read is one documented."""
    BY_NAME[name]
    return (os.environ if environ is None else environ).get(name) or None


def get(name: str, environ=None):
    """The variable's value as its type; its default when unset, empty or
    not of its type."""
    text = raw(name, environ)
    return BY_NAME[name].default if text is None else BY_NAME[name].parse(text)


def help_text() -> str:
    """The settings as ``kdiag --help`` lists them."""
    width = max(len(s.name) for s in SETTINGS)
    lines = ["environment (docs/settings.md):"]
    for s in SETTINGS:
        text = f"{s.doc} (default: {s.default_text()})"
        wrapped = textwrap.wrap(text, 78 - width - 4, break_on_hyphens=False)
        lines.append(f"  {s.name.ljust(width)}  {wrapped[0]}")
        lines += [" " * (width + 4) + more for more in wrapped[1:]]
    return "\n".join(lines) + "\n"


def markdown() -> str:
    """docs/settings.md, whole."""
    intro = (
        "Every `KDIAG_*` environment variable kdiag reads, with its type, its default and what it does.\n"
        "They are declared as data in `kdiag/settings.py`, which the code reads them through; `kdiag --help`\n"
        "lists them too, and the tests check that this page is that module's table and that no other\n"
        "`KDIAG_*` name is used in the tree. An empty variable counts as unset, and so does a value that\n"
        "is not of its type, except for the bundle caps (`KDIAG_MAX_*`), which refuse it. A command-line\n"
        "option, where there is one, wins over its variable. The commands are in\n"
        "[commands.md](commands.md).\n")
    rows = [f"| `{s.name}` | {s.type.__name__} | {s.default_text()} | {s.doc} |" for s in SETTINGS]
    return "\n".join(["# Settings", "", intro, "| variable | type | default | what it does |", "|---|---|---|---|",
                      *rows, ""])
