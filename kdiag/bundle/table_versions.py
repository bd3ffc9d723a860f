"""The tables a bundle holds, by version: which schema_version this kdiag
writes for each table, the versions it reads, and the Arrow schema at each.
The formats that fill the tables declare them (kdiag.parsers.registry); both
writing a bundle (archive) and checking one (verify) ask here.
"""
from __future__ import annotations


def table_versions() -> dict:
    """Each table -> the schema_version this kdiag writes: its format's."""
    from kdiag.parsers.registry import formats

    return {name: fmt.schema_version for fmt in formats() for name in fmt.tables}


def table_schemas(versions: dict | None = None) -> dict:
    """Each table's Arrow schema, as the formats that fill it declare it
    (kdiag.parsers.registry): at the version this kdiag writes, or at the
    one ``versions`` gives a table (absent: a version it never had)."""
    from kdiag.parsers.registry import formats

    out = {}
    for fmt in formats():
        for name in fmt.tables:
            v = fmt.schema_version if versions is None else versions.get(name, fmt.schema_version)
            schema = fmt.schema_at(name, v)
            if schema is not None:
                out[name] = schema
    return out


def known_versions(table: str) -> tuple[int, ...]:
    """The schema_versions of a table this kdiag reads."""
    from kdiag.parsers.registry import formats

    for fmt in formats():
        if table in fmt.tables:
            return tuple(sorted({fmt.schema_version, *fmt.older}))
    return ()
