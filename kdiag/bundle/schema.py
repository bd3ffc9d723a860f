"""What a manifest's fields (and the probe's summary.json) may hold.

Everything kdiag reads from a bundle's JSON is typed here, as data, so a
bundle whose manifest says ``"versions": "x"`` fails verification with the
field named instead of crashing replay. Fields kdiag does not know are
allowed: a newer kdiag may add some.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Opt:
    of: object            # null, or this


@dataclass(frozen=True)
class ListOf:
    of: object


@dataclass(frozen=True)
class MapOf:
    of: object            # an object with any keys, every value this


@dataclass(frozen=True)
class Obj:
    fields: dict          # known keys -> their schema; others may be anything
    required: tuple = field(default=())


STR, INT, NUM, BOOL, ANY = "string", "integer", "number", "boolean", "anything"
SCALAR = (STR, NUM, BOOL)

FILE_ENTRY = Obj({"bytes": INT, "sha256": STR}, required=("bytes", "sha256"))
# schema_version's own check names the versions this kdiag reads.
TABLE_ENTRY = Obj({"rows": INT, "schema_version": ANY}, required=("schema_version",))

PARSE_COUNTS = Obj({"source": Opt(STR), "lines": INT, "parsed": INT, "skipped": MapOf(INT),
                    "skipped_total": INT, "examples": ListOf(ANY), "long_lines_cut": INT})

MANIFEST = Obj({
    "bundle_format": ANY,             # checked against FORMATS with its own message
    "sealed": BOOL,
    "partial": BOOL,
    "partial_reasons": ListOf(STR),
    "kdiag_version": STR,
    "created_us": NUM,
    "argv": ListOf(STR),
    "mode": STR,
    "producer_config": MapOf(Opt(SCALAR)),
    "versions": MapOf(Opt(STR)),
    "lab": Opt(MapOf(ANY)),
    "target": Opt(MapOf(ANY)),
    "tracer": Opt(MapOf(ANY)),
    "overhead": Opt(MapOf(ANY)),
    "collectors": ListOf(Obj({"name": STR, "state": STR, "reason": Opt(STR), "files": Opt(ListOf(STR)),
                              "bytes": Opt(NUM)})),
    "redaction": Opt(MapOf(ANY)),
    "host": Opt(MapOf(Opt(SCALAR))),
    "pseudonyms": Opt(MapOf(ANY)),
    "parse": ListOf(Obj({"path": STR, "kind": Opt(STR), "bytes": Opt(INT), "counts": Opt(PARSE_COUNTS),
                         "error": Opt(STR)})),
    "input_checks": ListOf(MapOf(ANY)),
    # the listings: their entries are checked one by one (FILE_ENTRY, TABLE_ENTRY)
    "files": MapOf(ANY),
    "tables": MapOf(ANY),
})

# raw/probe/summary.json, as the probe producer writes it; the report and
# the retransmission count read these.
COUNTERS = MapOf(Opt(NUM))
PROBE_SUMMARY = Obj({
    "messages": NUM, "delivered": NUM, "failed": NUM, "first_error": Opt(STR), "gave_up": Opt(BOOL),
    "elapsed_s": Opt(NUM), "msgs_per_s": Opt(NUM), "p50_delivery_ms": Opt(NUM), "size_bytes": Opt(NUM),
    "rate": Opt(NUM), "brokers": Opt(ListOf(MapOf(ANY))),
    "tcp_counters_before": Opt(COUNTERS), "tcp_counters_after": Opt(COUNTERS),
})

_PYTHON = {STR: (str,), INT: (int,), NUM: (int, float), BOOL: (bool,)}
_JSON_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}


def problems(value, schema, where: str = "", limit: int = 10) -> list[str]:
    """Where ``value`` differs from ``schema``: one line each, at most ``limit``
    (then a line saying how many more). The value's nesting is capped before
    it gets here, so recursing is safe."""
    out: list[str] = []
    _check(value, schema, where, out)
    if len(out) > limit:
        out = out[:limit] + [f"and {len(out) - limit} more fields of the wrong type"]
    return out


def _check(value, schema, where: str, out: list[str]) -> None:
    if schema == ANY:
        return
    if isinstance(schema, Opt):
        if value is not None:
            _check(value, schema.of, where, out)
        return
    if isinstance(schema, tuple):       # any one of these scalars
        if not any(_is(value, s) for s in schema):
            out.append(_wrong(where, value, " or ".join(schema)))
        return
    if isinstance(schema, str):
        if not _is(value, schema):
            out.append(_wrong(where, value, schema))
        return
    if isinstance(schema, ListOf):
        if not isinstance(value, list):
            out.append(_wrong(where, value, "list"))
            return
        for i, item in enumerate(value):
            _check(item, schema.of, f"{where}[{i}]", out)
        return
    if not isinstance(value, dict):
        out.append(_wrong(where, value, "object"))
        return
    if isinstance(schema, MapOf):
        for k, v in value.items():
            _check(v, schema.of, _key(where, k), out)
        return
    for k in schema.required:
        if k not in value:
            out.append(f"{_key(where, k)} missing")
    for k, sub in schema.fields.items():
        if k in value:
            _check(value[k], sub, _key(where, k), out)


def _is(value, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == BOOL
    return isinstance(value, _PYTHON[kind])


def _key(where: str, key: str) -> str:
    shown = json.dumps(key)                 # one line whatever the key holds
    shown = shown if len(shown) <= 42 else shown[:40] + '…"'
    return f"{where}[{shown}]" if where else shown


def _wrong(where: str, value, want: str) -> str:
    article = "an" if want[0] in "aeiou" else "a"
    return f"{where or 'the value'} is {_JSON_NAMES.get(type(value), 'something else')}, not {article} {want}"


def depth(value) -> int:
    """How deep lists and objects nest in a decoded JSON value (a scalar: 0),
    without recursing."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if children is None:
            continue
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in children)
    return deepest
