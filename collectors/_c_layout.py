"""A C struct's layout read from its header, so that a record written by C
code is typed once, in C. It knows what kdiag's headers use: the fixed-width
kernel types (``__u8`` .. ``__s64``), ``char``, nested structs, arrays sized
by a number or a ``#define``, integer ``#define``s and ``enum``s; and it lays
fields out as C does on the ABIs kdiag's compiled parts build for (every
type aligned to its size, a struct to its widest member, padded to a
multiple of that). Anything else in a struct is an error, never a guess."""
from __future__ import annotations

import operator
import re
import struct
from collections import namedtuple
from dataclasses import dataclass

# C type -> (struct format, size); alignment is the size on x86-64 and arm64.
SCALARS = {
    "char": ("c", 1), "__u8": ("B", 1), "__s8": ("b", 1),
    "__u16": ("H", 2), "__s16": ("h", 2),
    "__u32": ("I", 4), "__s32": ("i", 4),
    "__u64": ("Q", 8), "__s64": ("q", 8),
}
BYTE_TYPES = {"char", "__u8", "__s8"}

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+(\d+|0x[0-9a-fA-F]+)[ \t]*$", re.M)
_ENUM = re.compile(r"\benum\s*\w*\s*\{([^}]*)\}\s*;")
_STRUCT = re.compile(r"\bstruct\s+(\w+)\s*\{([^}]*)\}\s*;")
_MEMBER = re.compile(r"^\s*(struct\s+\w+|\w+)\s+(.+?)\s*$", re.S)
_DECLARATOR = re.compile(r"^(\w+)\s*(?:\[\s*(\w+)\s*\])?$")


class LayoutError(ValueError):
    pass


@dataclass(frozen=True)
class _Member:
    name: str
    ctype: str
    count: int | None   # None: not an array


class Layout:
    """A struct (or its first fields) as Python's struct module reads it: a
    named tuple of its fields. Field names are C's; a nested struct's are
    joined with an underscore (``id_ino``); an array of numbers is a tuple, a
    char or byte array one bytes value."""

    def __init__(self, fmt: str, values: list[tuple[str, int | None, bool]], offsets: dict[str, int]):
        self.struct = struct.Struct("<" + fmt)
        # offsetof() of each field, by its C designator (``id.ino``).
        self.offsets = offsets
        names = [name.replace(".", "_") for name, _, _ in values]
        self.Record = namedtuple("Record", names)
        at: list[int | slice] = []
        i = 0
        for _, count, _ in values:
            at.append(i if count is None else slice(i, i + count))
            i += count or 1
        self._lengths = {n: count for n, (_, count, _) in zip(names, values) if count is not None}
        self._bytes = {n for n, (_, _, is_bytes) in zip(names, values) if is_bytes}
        # One C call picks and groups the values: unpacking is the hot path
        # of converting a capture. (itemgetter of one item gives the item.)
        self._group = operator.itemgetter(*at) if len(at) > 1 else lambda v: (v[at[0]],)

    @property
    def size(self) -> int:
        return self.struct.size

    def unpack_from(self, buf, offset: int = 0):
        return self.Record._make(self._group(self.struct.unpack_from(buf, offset)))

    def pack(self, **values) -> bytes:
        """The bytes of ``values`` (a field left out is zero; padding is zero)."""
        unknown = set(values) - set(self.Record._fields)
        if unknown:
            raise LayoutError(f"no such fields: {sorted(unknown)}")
        flat: list = []
        for name in self.Record._fields:
            if name in self._lengths:
                given = list(values.get(name, ()))
                flat += given + [0] * (self._lengths[name] - len(given))
            else:
                flat.append(values.get(name, b"\0" if name in self._bytes else 0))
        return self.struct.pack(*flat)


class Header:
    """The constants and structs of one header's text."""

    def __init__(self, text: str):
        text = _COMMENT.sub("", text)
        self.constants: dict[str, int] = {name: int(value, 0) for name, value in _DEFINE.findall(text)}
        for body in _ENUM.findall(text):
            self._enum(body)
        self.structs: dict[str, list[_Member]] = {
            name: self._members(name, body) for name, body in _STRUCT.findall(text)}

    def _enum(self, body: str) -> None:
        value = -1
        for item in filter(None, (s.strip() for s in body.split(","))):
            name, _, given = (s.strip() for s in item.partition("="))
            value = self._number(given) if given else value + 1
            self.constants[name] = value

    def _number(self, word: str) -> int:
        if word in self.constants:
            return self.constants[word]
        try:
            return int(word, 0)
        except ValueError:
            raise LayoutError(f"{word!r} is neither a number nor a constant of the header") from None

    def _members(self, struct_name: str, body: str) -> list[_Member]:
        members = []
        for decl in filter(None, (s.strip() for s in body.split(";"))):
            m = _MEMBER.match(decl)
            if not m:
                raise LayoutError(f"struct {struct_name}: cannot read {decl!r}")
            ctype = " ".join(m.group(1).split())
            for declarator in m.group(2).split(","):
                d = _DECLARATOR.match(declarator.strip())
                if not d:
                    raise LayoutError(f"struct {struct_name}: cannot read {declarator.strip()!r}")
                members.append(_Member(d.group(1), ctype, None if d.group(2) is None else self._number(d.group(2))))
        return members

    def _size_align(self, ctype: str) -> tuple[int, int]:
        if ctype in SCALARS:
            size = SCALARS[ctype][1]
            return size, size
        if ctype.startswith("struct ") and ctype[7:] in self.structs:
            fmt, _, _ = self._fields(ctype[7:], None)
            align = max(self._size_align(m.ctype)[1] for m in self.structs[ctype[7:]])
            return struct.calcsize("<" + fmt), align
        raise LayoutError(f"unknown type {ctype!r}")

    def _fields(self, name: str, up_to: str | None) -> tuple[str, list[tuple[str, int | None, bool]], dict]:
        """Format, (name, array length or None, is bytes) per value, offsets."""
        if name not in self.structs:
            raise LayoutError(f"no struct {name} in the header")
        fmt, values, offsets, pos, widest = "", [], {}, 0, 1
        for m in self.structs[name]:
            size, align = self._size_align(m.ctype)
            widest = max(widest, align)
            pad = -pos % align
            if pad:
                fmt += f"{pad}x"
                pos += pad
            if m.name == up_to:
                return fmt, values, {**offsets, m.name: pos}
            offsets[m.name] = pos
            fmt_m, values_m = self._member(m)
            fmt += fmt_m
            values += values_m
            if m.ctype.startswith("struct "):
                _, _, inner = self._fields(m.ctype[7:], None)
                offsets.update({f"{m.name}.{k}": pos + v for k, v in inner.items()})
            pos += size * (m.count or 1)
        if up_to is not None:
            raise LayoutError(f"struct {name} has no field {up_to}")
        if -pos % widest:
            fmt += f"{-pos % widest}x"
        return fmt, values, offsets

    def _member(self, m: _Member) -> tuple[str, list[tuple[str, int | None, bool]]]:
        if m.ctype in SCALARS:
            if m.count is None:
                return SCALARS[m.ctype][0], [(m.name, None, m.ctype == "char")]
            if m.ctype in BYTE_TYPES:
                return f"{m.count}s", [(m.name, None, True)]
            return f"{m.count}{SCALARS[m.ctype][0]}", [(m.name, m.count, False)]
        if m.count is not None:
            raise LayoutError(f"{m.name}: arrays of structs are not supported")
        fmt, inner, _ = self._fields(m.ctype[7:], None)
        return fmt, [(f"{m.name}.{n}", c, b) for n, c, b in inner]

    def layout(self, name: str, up_to: str | None = None) -> Layout:
        """struct ``name``, or its fields before ``up_to`` (``offsetof(name,
        up_to)`` bytes: the padding before that field included)."""
        return Layout(*self._fields(name, up_to))
