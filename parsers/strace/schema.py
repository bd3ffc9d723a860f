"""The ``syscalls`` table (columns explained in the package docstring) and
the kinds a line of strace output can be."""
from __future__ import annotations

import pyarrow as pa


def _field(name: str, type_: pa.DataType, doc: str, unit: str | None = None) -> pa.Field:
    meta = {"doc": doc}
    if unit:
        meta["unit"] = unit
    return pa.field(name, type_, metadata=meta)


SCHEMA = pa.schema(
    [
        _field("line_no", pa.int64(), "1-based input line number of the row's first line"),
        _field("pid", pa.int32(), "pid/tid prefix; null when the line has none"),
        _field("ts_us", pa.int64(), "timestamp: epoch (-ttt), since midnight (-tt/-t) or relative (-r); null without one", "us"),
        _field("dur_us", pa.int64(), "time in the call (-T, else between an unfinished line and its resumption); null when unknown", "us"),
        _field("kind", pa.string(), "syscall | signal | exit | killed"),
        _field("syscall", pa.string(), "syscall name; signal name for signal/killed; null for exit"),
        _field("fd", pa.int32(), "first argument when it is an integer fd; null otherwise"),
        _field("fd_info", pa.string(), "-y/-yy annotation of that fd, without brackets; null when absent"),
        _field("args", pa.string(), "arguments as printed (unfinished + resumed parts), at most 4096 chars"),
        _field("ret", pa.int64(), "return value (exit status for exits); null for '?' or none"),
        _field("errno", pa.string(), "error name such as EAGAIN; null when none"),
        _field("unfinished", pa.bool_(), "true when the call never resumed before the end of input or its thread's exit"),
        _field("data", pa.string(), "write-family calls on fd 1/2: first quoted string, unescaped; null otherwise"),
    ],
    metadata={"table": "syscalls", "source": "strace"},
)

# What fd_info starts with for a socket: -yy names the endpoints
# ("TCP:[10.0.0.1:40212->10.0.0.2:9093]"); -y only says "socket:[1033403]".
SOCKET_PREFIXES = ("TCP", "TCPv6", "UDP", "UDPv6", "UNIX", "UNIX-STREAM", "NETLINK", "socket:")

# Per-line classification. Codes up to KILLED are rows.
SYSCALL, UNFINISHED, RESUMED, DETACHED, SIGNAL, EXIT, KILLED = range(7)
CONT = 7  # the end of a line that an strace message or program output cut off
BLANK, MESSAGE, STACK, UNRECOGNISED, TRUNCATED, PROGRAM = 8, 9, 10, 11, 12, 13
# A pasted excerpt's code fences, and its first line when cut inside its head.
MARKUP, CUT_START = 14, 15
# The summary table -C prints after the calls (read as kdiag.parsers.strace_summary
# when given alone).
SUMMARY = 16
SKIP_REASON = {
    BLANK: "blank",
    MESSAGE: "strace_message",
    STACK: "stack_trace",
    UNRECOGNISED: "unrecognised",
    TRUNCATED: "truncated",
    PROGRAM: "program_output",
    MARKUP: "markup",
    CUT_START: "cut_at_start",
    SUMMARY: "summary_table",
}
KIND_NAMES = pa.array(["syscall", "syscall", "syscall", "syscall", "signal", "exit", "killed"])


def empty_table_of_schema() -> pa.Table:
    return SCHEMA.empty_table()
