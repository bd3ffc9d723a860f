"""Arrow column helpers: typed captures, optional groups, quoted strings,
printed dates and times."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers.rdkafka_log.patterns import ONE_PASS


def extract_event(text: pa.Array, name: str, pattern: str, fast: bool) -> tuple[pa.StructArray, np.ndarray]:
    """The pattern's groups for each line (null where it does not match),
    and where it matched."""
    if not fast or name not in ONE_PASS:
        got = pc.extract_regex(text, pattern)
        return got, pc.is_valid(got).to_numpy(zero_copy_only=False)
    one_pass, suffix = ONE_PASS[name]
    got = pc.extract_regex(text, one_pass)
    api = pc.struct_field(got, "request")
    ok = pc.and_(pc.ends_with(api, suffix), pc.greater(pc.utf8_length(api), len(suffix)))
    hit = null_as_false(ok)
    fields = [pc.utf8_slice_codeunits(api, 0, -len(suffix)) if f == "request" else pc.struct_field(got, f)
              for f in got.type.names]
    return pa.StructArray.from_arrays(fields, names=got.type.names, mask=pa.array(~hit)), hit


def typed_or_null(vals: pa.Array, typ: pa.DataType) -> pa.Array:
    """Cast matched digits; a value out of the type's range becomes null
    instead of raising (a corrupt line must not stop the run)."""
    if pa.types.is_string(typ):
        return vals
    if pa.types.is_floating(typ):
        return pc.cast(vals, typ)
    wide = pc.cast(vals, pa.int64())
    limit = {8: 2**7, 16: 2**15, 32: 2**31, 64: None}[typ.bit_width]
    if limit is not None:
        inside = pc.and_(pc.greater_equal(wide, -limit), pc.less(wide, limit))
        wide = pc.if_else(inside, wide, pa.scalar(None, pa.int64()))
    return pc.cast(wide, typ)


def null_as_false(arr) -> np.ndarray:
    return pc.fill_null(arr, False).to_numpy(zero_copy_only=False)


def match_group(got: pa.StructArray, name: str) -> pa.Array:
    return pc.struct_field(got, name)


def optional_group(got: pa.StructArray, name: str) -> pa.Array:
    """An optional group: RE2 gives "" when it did not take part."""
    v = pc.struct_field(got, name)
    return pc.if_else(pc.equal(v, ""), pa.scalar(None, v.type), v)


def unquote(got: pa.StructArray, group: str) -> pa.Array:
    """A quoted JavaScript string without its quotes."""
    return pc.utf8_slice_codeunits(match_group(got, group), 1, -1)


def unescape(vals: pa.Array, chars: str) -> pa.Array:
    """Only the escapes of the quote and the backslash themselves; any other
    escape (\\n, \\uXXXX: not in librdkafka's own messages) is kept as
    printed."""
    if not pc.any(pc.match_substring(vals, "\\")).as_py():
        return vals
    return pc.replace_substring_regex(vals, r"\\([" + chars + r"])", r"\1")


def local_ts(date, time, frac, tz) -> pa.Array:
    """Epoch microseconds of a printed date and time, as if UTC unless a
    zone is printed. Whole seconds or minutes are kept: their resolution
    (frac_resolution) says what they cannot time. No date: the time of day
    from 1970-01-01. A time of "HH:MM" is that minute's start."""
    day = pc.coalesce(date, pa.scalar("1970-01-01"))
    time = pc.if_else(pc.equal(pc.utf8_length(time), 5), pc.binary_join_element_wise(time, "00", ":"), time)
    secs = pc.strptime(pc.binary_join_element_wise(day, time, "T"), format="%Y-%m-%dT%H:%M:%S",
                       unit="s", error_is_null=True)
    us = pc.multiply(pc.cast(secs, pa.int64()), 1_000_000)
    us = pc.add(us, pc.cast(pc.utf8_rpad(pc.fill_null(frac, ""), 6, "0"), pa.int64()))
    if tz is not None and pc.any(pc.is_valid(tz)).as_py():
        z = pc.utf8_trim_whitespace(pc.replace_substring(tz, ":", ""))
        z = pc.if_else(pc.equal(z, "Z"), "+0000", z)
        hh = pc.cast(pc.utf8_slice_codeunits(z, 1, 3), pa.int64())
        mm = pc.cast(pc.utf8_slice_codeunits(z, 3, 5), pa.int64())
        off = pc.multiply(pc.add(pc.multiply(hh, 3600), pc.multiply(mm, 60)), 1_000_000)
        off = pc.if_else(pc.starts_with(z, "-"), pc.negate(off), off)
        us = pc.subtract(us, pc.fill_null(off, 0))
    return us


def cast_to(arr, typ: pa.DataType) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr if arr.type == typ else pc.cast(arr, typ)


def resolution_where_stamped(ts: pa.Array, us: int) -> pa.Array:
    """``us`` where the line has a timestamp, else null."""
    return pc.if_else(pc.is_valid(ts), pa.scalar(us, pa.int32()), pa.scalar(None, pa.int32()))


def frac_resolution(ts: pa.Array, frac: pa.Array, time: pa.Array | None = None) -> pa.Array:
    """A printed time's resolution: 3 digits of a second, 1000 us; none,
    1 s; a time of day without seconds ("HH:MM", ``time``), a minute."""
    digits = pc.min_element_wise(pc.utf8_length(pc.fill_null(frac, "")), 6)
    us = pc.cast(pc.power(pa.scalar(10, pa.int32()), pc.subtract(pa.scalar(6, pa.int32()), pc.cast(digits, pa.int32()))),
                 pa.int32())
    if time is not None:
        minutes = pc.fill_null(pc.equal(pc.utf8_length(time), 5), False)
        us = pc.if_else(minutes, pa.scalar(60_000_000, pa.int32()), us)
    return pc.if_else(pc.is_valid(ts), us, pa.scalar(None, pa.int32()))
