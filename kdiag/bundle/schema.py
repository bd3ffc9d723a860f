"""What a manifest's fields (and the probe's summary.json) may hold.

Everything kdiag reads from a bundle's JSON is typed in JSON Schema, in
manifest.schema.json and probe_summary.schema.json beside this module, so a
bundle whose manifest says ``"versions": "x"`` fails verification with the
field named instead of crashing replay. Fields kdiag does not know are
allowed: a newer kdiag may add some.
"""
from __future__ import annotations

import functools
import itertools
import json
from importlib import resources

# Which schema to check against: a schema's $id, or a pointer into one.
MANIFEST = "urn:kdiag:manifest"
FILE_ENTRY = "urn:kdiag:manifest#/$defs/file_entry"
PROBE_SUMMARY = "urn:kdiag:probe-summary"

_FILES = ("manifest.schema.json", "probe_summary.schema.json")
_JSON_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}
_TYPE_NAMES = {"array": "list"}
_COUNTED = 1000


@functools.cache
def _validator(ref: str):
    # jsonschema costs ~0.1 s to import: only a bundle being read pays it.
    import jsonschema
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    registry = Registry()
    for name in _FILES:
        doc = json.loads(resources.files(__package__).joinpath(name).read_text())
        # A subschema that names its dialect is checked by that dialect's
        # stock validator, which would drop the integer rule below.
        doc.pop("$schema")
        registry = registry.with_resource(doc["$id"], DRAFT202012.create_resource(doc))
    base = jsonschema.Draft202012Validator
    # JSON Schema counts 3.0 as an integer; the code that reads these fields
    # indexes and compares sizes with them, so an integer is a Python int.
    strict = base.TYPE_CHECKER.redefine(
        "integer", lambda _, v: isinstance(v, int) and not isinstance(v, bool))
    keywords = {"additionalProperties": functools.partial(_in_file_order, base.VALIDATORS["additionalProperties"])}
    validator = jsonschema.validators.extend(base, validators=keywords, type_checker=strict)
    return validator({"$ref": ref}, registry=registry)


def _in_file_order(stock, validator, extra, instance, schema):
    """additionalProperties, reporting a map's keys in the file's order
    (jsonschema's own goes through a set, a different order each run)."""
    if "patternProperties" in schema or not (validator.is_type(instance, "object")
                                             and validator.is_type(extra, "object")):
        yield from stock(validator, extra, instance, schema)
        return
    known = schema.get("properties", {})
    for key, value in instance.items():
        if key not in known:
            yield from validator.descend(value, extra, path=key)


def problems(value, schema: str, where: str = "", limit: int = 10) -> list[str]:
    """Where ``value`` differs from ``schema`` (one of the names above): one
    line each, the field's path then what is wrong with it, at most ``limit``
    (then a line saying how many more). The validator descends only where
    the schemas spell out what a field holds, a few levels, however deep the
    value nests."""
    errors = _validator(schema).iter_errors(value)
    # Each error costs the validator ~0.2 ms, and a 16 MiB manifest can hold
    # millions: past _COUNTED the rest go uncounted.
    out = list(itertools.islice(itertools.chain.from_iterable(_lines(e, where) for e in errors), _COUNTED + 1))
    if len(out) > limit:
        more = f"at least {_COUNTED - limit}" if len(out) > _COUNTED else f"{len(out) - limit}"
        out = out[:limit] + [f"and {more} more fields of the wrong type"]
    return out


def _lines(error, where: str) -> list[str]:
    path = where
    for step in error.absolute_path:
        path = f"{path}[{step}]" if isinstance(step, int) else _key(path, step)
    if error.validator == "required":
        return [f"{_key(path, k)} missing" for k in error.validator_value
                if k not in error.instance and f"{k!r} is a required" in error.message]
    if error.validator == "type":
        kinds = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        want = " or ".join(_TYPE_NAMES.get(k, k) for k in kinds if k != "null")
        return [_wrong(path, error.instance, want)]
    return [f"{path or 'the value'}: {error.message}"]


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
