"""The Kafka protocol from the bytes of a TCP stream: request and response
headers of every api, Produce requests and responses of every version.

A frame is what follows a message's int32 size field: the bytes a capture
holds of it, possibly fewer than the size says (a short snaplen, a segment
never captured). Layouts come from ``kafka_specs`` (the Kafka project's
message specifications, as data).

Every length and count in a frame is untrusted: each is checked against
what the frame holds, nothing is allocated from one, and the walk follows
the layout (at most four levels deep), never the input, so its cost is
bounded by the frame's length. A frame that ends early gives what it holds,
with ``cut`` True and ``cut_at`` naming the field it ended in; a value that
cannot be (a length below -1, a varint longer than 5 bytes, an unknown
record batch magic) gives what came before it, with ``malformed`` naming the
problem and ``malformed_at`` the field. Nothing here raises on bad input.

Pure functions of bytes; the only imports are the standard library's.
"""
from __future__ import annotations

import struct
import uuid
import zlib
from typing import NamedTuple

from kdiag.parsers.wire import kafka_specs as ks

# The largest message kdiag takes a size field at its word for; the
# brokers' socket.request.max.bytes defaults to 100 MiB.
MAX_MESSAGE = 100 * 1024 * 1024
# The most the gzip wrappers (magic 0/1) of one frame are inflated to, to
# count their messages.
MAX_INFLATE = 16 * 1024 * 1024

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">ihhi")  # size, api key, api version, correlation id
_INTS = {"int8": _I8, "int16": _I16, "int32": _I32, "int64": _I64}


class RequestHeader(NamedTuple):
    """A request's header. ``api_name`` and ``header_version`` are None
    for an api key kdiag does not know; ``body_offset`` (where the body
    starts in the frame) is None when the header is cut or unknown."""
    api_key: int
    api_name: str | None
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int | None
    body_offset: int | None
    cut: bool


class ResponseHeader(NamedTuple):
    """A response's header, read with its request's api key and version
    (a response does not carry them)."""
    api_key: int
    api_version: int
    correlation_id: int
    header_version: int
    body_offset: int | None
    cut: bool


class _Cut(Exception):
    pass


class _Bad(Exception):
    pass


class _Reader:
    """A bounded cursor over ``buf[pos:end]``. ``complete``: the frame is
    whole, so running out of bytes means a length lied (malformed), not
    that the capture lost the rest (cut)."""
    __slots__ = ("buf", "pos", "end", "complete", "path", "inflate_budget")

    def __init__(self, buf: bytes, pos: int, end: int, complete: bool, path: list[str]):
        self.buf, self.pos, self.end, self.complete, self.path = buf, pos, end, complete, path
        # Shared by every gzip wrapper of one frame: see record_batches.
        self.inflate_budget = [MAX_INFLATE]

    def need(self, n: int) -> int:
        at = self.pos
        if at + n > self.end:
            if self.complete:
                raise _Bad("overrun")
            raise _Cut()
        self.pos = at + n
        return at

    def fixed(self, s: struct.Struct) -> int:
        return s.unpack_from(self.buf, self.need(s.size))[0]

    def uvarint(self) -> int:
        # Unsigned varints of the flexible versions hold at most 32 bits: 5 bytes.
        value = 0
        for shift in (0, 7, 14, 21, 28):
            b = self.buf[self.need(1)]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
        raise _Bad("varint")

    def length(self, flexible: bool, wide: bool) -> int:
        """A string's, bytes' or array's length, -1 for null: compact
        (uvarint of length + 1) in flexible versions, else int16 (strings)
        or int32."""
        n = self.uvarint() - 1 if flexible else self.fixed(_I32 if wide else _I16)
        if n < -1:
            raise _Bad("negative_length")
        return n

    def text(self, n: int) -> str:
        at = self.need(n)
        return bytes(self.buf[at:at + n]).decode("utf-8", "replace")


def _fail(out: dict, r: _Reader, e: Exception) -> dict:
    where = ".".join(r.path)
    if isinstance(e, _Cut):
        out["cut"], out["cut_at"] = True, where
    else:
        out["malformed"], out["malformed_at"] = str(e), where
    return out


def _outcome(out: dict) -> dict:
    out.setdefault("cut", False)
    out.setdefault("cut_at", None)
    out.setdefault("malformed", None)
    out.setdefault("malformed_at", None)
    return out


# -- headers ------------------------------------------------------------------

def looks_like_request(head: bytes) -> bool:
    """Whether a stream's first bytes (from its int32 size field) read as a
    Kafka request: a size that can be, a known api key, a version that api
    has, and for header v1/v2 a client id length that fits the size."""
    if len(head) < 12:
        return False
    size, api_key, api_version, _ = _HEAD.unpack_from(head)
    api = ks.APIS.get(api_key)
    if api is None or not api[1] <= api_version <= api[2] or not 8 <= size <= MAX_MESSAGE:
        return False
    if ks.request_header_version(api_key, api_version) == 0:
        return True
    if size < 10:
        return False
    if len(head) < 14:
        return True
    client_id_len = _I16.unpack_from(head, 12)[0]
    if client_id_len == -1:
        return True
    if not 0 <= client_id_len <= size - 10:
        return False
    # A response's first bytes can pass the checks above (a small correlation
    # id reads as api key 0, version N); a client id is text, a body is not.
    client_id = head[14:14 + client_id_len]
    return not any(b < 0x20 or b == 0x7F for b in client_id)


def request_header(frame: bytes) -> RequestHeader | None:
    """The header of a request frame; None when fewer than its first 8
    bytes (api key, version, correlation id) were captured."""
    if len(frame) < 8:
        return None
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame)
    name = ks.api_name(api_key)
    if name is None:
        return RequestHeader(api_key, None, api_version, correlation_id, None, None, None, False)
    hv = ks.request_header_version(api_key, api_version)
    r = _Reader(frame, 8, len(frame), False, ["client_id"])
    client_id = None
    try:
        if hv >= 1:
            # RequestHeader.json: ClientId keeps its int16 length even in v2
            # ("flexibleVersions": "none"), so that any broker reads it.
            n = r.length(False, False)
            client_id = None if n < 0 else r.text(n)
        if hv >= 2:
            r.path = ["tagged_fields"]
            _skip_tagged(r)
    except (_Cut, _Bad):
        return RequestHeader(api_key, name, api_version, correlation_id, client_id, hv, None, True)
    return RequestHeader(api_key, name, api_version, correlation_id, client_id, hv, r.pos, False)


def request_of_write(head: bytes) -> RequestHeader | None:
    """The request a client's socket write starts with, from the write's
    first bytes as a tracer keeps them (the size field first, the rest
    possibly cut); None when they do not read as a request. A broker's
    writes are responses, whose first bytes can pass for a request: read
    only a client's."""
    if not looks_like_request(head):
        return None
    return request_header(head[4:])


def response_header(frame: bytes, api_key: int, api_version: int) -> ResponseHeader | None:
    """The header of a response frame to a request of ``api_key`` at
    ``api_version``; None when its correlation id was not captured."""
    if len(frame) < 4:
        return None
    correlation_id = _I32.unpack_from(frame)[0]
    hv = ks.response_header_version(api_key, api_version)
    if hv == 0:
        return ResponseHeader(api_key, api_version, correlation_id, 0, 4, False)
    r = _Reader(frame, 4, len(frame), False, ["tagged_fields"])
    try:
        _skip_tagged(r)
    except (_Cut, _Bad):
        return ResponseHeader(api_key, api_version, correlation_id, hv, None, True)
    return ResponseHeader(api_key, api_version, correlation_id, hv, r.pos, False)


def _skip_tagged(r: _Reader) -> int:
    n = r.uvarint()
    for _ in range(n):
        r.uvarint()
        r.need(r.uvarint())
    return n


# -- bodies -------------------------------------------------------------------

def _value(r: _Reader, f: ks.Field, version: int, flexible: bool):
    t = f.type
    if t in _INTS:
        return r.fixed(_INTS[t])
    if t == "uuid":
        at = r.need(16)
        return str(uuid.UUID(bytes=bytes(r.buf[at:at + 16])))
    if t == "string":
        n = r.length(flexible, False)
        return None if n < 0 else r.text(n)
    if t == "bytes":
        # Only its length: no Produce field of type bytes is read for its content.
        n = r.length(flexible, True)
        if n >= 0:
            r.need(n)
        return None if n < 0 else n
    raise _Bad(f"layout_type_{t}")


def _records(r: _Reader, f: ks.Field, flexible: bool, out: dict) -> None:
    n = r.length(flexible, True)
    out[f.name + "_bytes"] = None if n < 0 else n
    out[f.name] = None if n < 0 else []
    if n <= 0:
        return
    avail = min(n, r.end - r.pos)
    batches, problem = record_batches(r.buf, r.pos, r.pos + avail, r.inflate_budget)
    out[f.name] = batches
    if problem:
        raise _Bad(problem)
    if avail < n:
        r.pos = r.end
        raise _Bad("overrun") if r.complete else _Cut()
    if any(b["cut"] for b in batches):
        raise _Bad("batch_overrun")
    r.pos += n


def _struct(r: _Reader, fields: tuple, version: int, flexible: bool, out: dict) -> None:
    """Fills ``out`` field by field, so that a frame cut short leaves what
    came before the cut. Recursion follows the layout's nesting only."""
    for f in fields:
        if f.tag is None:
            out[f.name] = None
    for f in fields:
        if f.tag is None and f.present(version):
            _field(r, f, version, flexible, out)
    if flexible:
        _tagged(r, fields, version, out)


def _field(r: _Reader, f: ks.Field, version: int, flexible: bool, out: dict) -> None:
    r.path.append(f.name)
    if f.type == "records":
        _records(r, f, flexible, out)
    elif f.type == "array":
        n = r.length(flexible, True)
        if n >= 0:
            items: list[dict] = []
            out[f.name] = items
            # Every element takes at least one byte: the loop ends with the frame.
            for i in range(n):
                item: dict = {}
                items.append(item)
                r.path.append(str(i))
                _struct(r, f.fields, version, flexible, item)
                r.path.pop()
    elif f.type == "struct":
        value: dict = {}
        out[f.name] = value
        _struct(r, f.fields, version, flexible, value)
    else:
        out[f.name] = _value(r, f, version, flexible)
    r.path.pop()


def _tagged(r: _Reader, fields: tuple, version: int, out: dict) -> None:
    tagged = {f.tag: f for f in fields if f.tag is not None and f.present(version)}
    for f in tagged.values():
        out[f.name] = None
    r.path.append("tagged_fields")
    n = r.uvarint()
    for _ in range(n):
        tag = r.uvarint()
        size = r.uvarint()
        at = r.need(size)
        f = tagged.get(tag)
        if f is None:
            out["unknown_tags"] = out.get("unknown_tags", 0) + 1
            continue
        # A tagged field's size is known up front: read it as a whole frame.
        _field(_Reader(r.buf, at, at + size, True, r.path), f, version, True, out)
    r.path.pop()


def _body(frame: bytes, header, layout: tuple, api_key: int, complete: bool) -> dict:
    out: dict = {}
    start, version = header.body_offset, header.api_version
    if header.api_key != api_key:
        out["malformed"], out["malformed_at"] = "other_api", "header"
        return _outcome(out)
    if start is None:
        out["cut"], out["cut_at"] = True, "header"
        return _outcome(out)
    api = ks.APIS[api_key]
    if not api[1] <= version <= api[2]:
        out["malformed"], out["malformed_at"] = "unknown_version", "header"
        return _outcome(out)
    r = _Reader(frame, start, len(frame), complete, [])
    try:
        _struct(r, layout, version, ks.is_flexible(api_key, version), out)
        if r.pos < r.end:
            out["trailing_bytes"] = r.end - r.pos
    except (_Cut, _Bad) as e:
        _fail(out, r, e)
    return _outcome(out)


def produce_request(frame: bytes, header: RequestHeader, complete: bool = False) -> dict:
    """A Produce request's body: ``transactional_id``, ``acks``,
    ``timeout_ms``, ``topics`` [{``name`` (None from v13), ``topic_id``
    (None before v13), ``partitions`` [{``index``, ``records_bytes``,
    ``records``: the batches, see ``record_batches``}]}], and the outcome
    keys ``cut``, ``cut_at``, ``malformed``, ``malformed_at``.

    ``complete``: the frame holds the whole message (its size field's
    worth), so a length past its end is malformed rather than cut. A
    request with ``acks`` 0 gets no response."""
    return _body(frame, header, ks.PRODUCE_REQUEST, ks.PRODUCE, complete)


def produce_response(frame: bytes, header: ResponseHeader, complete: bool = False) -> dict:
    """A Produce response's body: ``throttle_time_ms`` (None before v1),
    ``topics`` [{``name``, ``topic_id``, ``partitions`` [{``index``,
    ``error_code``, ``base_offset``, ``log_append_time_ms``,
    ``log_start_offset``, ``record_errors`` [{``batch_index``,
    ``batch_index_error_message``}], ``error_message``, ``current_leader``
    {``leader_id``, ``leader_epoch``}}]}], ``node_endpoints``; a field the
    version lacks is None. Outcome keys as ``produce_request``."""
    return _body(frame, header, ks.PRODUCE_RESPONSE, ks.PRODUCE, complete)


def produce_totals(request: dict) -> dict:
    """One row's worth of a decoded Produce request: ``partitions``,
    ``batches``, ``record_count`` (None when a batch's count is unknown or
    cut), ``records_bytes`` (as the request states them) and ``codecs``
    (sorted, distinct)."""
    partitions = batches = records_bytes = 0
    record_count: int | None = 0
    codecs: set[str] = set()
    for topic in request.get("topics") or ():
        for p in topic.get("partitions") or ():
            partitions += 1
            records_bytes += p.get("records_bytes") or 0
            for b in p.get("records") or ():
                batches += 1
                if b.get("codec"):
                    codecs.add(b["codec"])
                n = b.get("record_count")
                record_count = None if n is None or record_count is None or b.get("cut") else record_count + n
    return {"partitions": partitions, "batches": batches, "record_count": record_count,
            "records_bytes": records_bytes, "codecs": sorted(codecs)}


def response_totals(response: dict) -> dict:
    """One row's worth of a decoded Produce response: ``partitions``,
    ``error_codes`` (sorted, distinct, 0 left out), ``throttle_time_ms``."""
    partitions = 0
    errors: set[int] = set()
    for topic in response.get("topics") or ():
        for p in topic.get("partitions") or ():
            partitions += 1
            if p.get("error_code"):
                errors.add(p["error_code"])
    return {"partitions": partitions, "error_codes": sorted(errors),
            "throttle_time_ms": response.get("throttle_time_ms")}


# -- record batches -----------------------------------------------------------

def record_batches(buf: bytes, start: int, end: int, inflate_budget: list[int] | None = None,
                   ) -> tuple[list[dict], str | None]:
    """The record batches in ``buf[start:end]`` (a Produce partition's
    Records), and a problem or None.

    Magic 2 (DefaultRecordBatch): one dict per batch with ``magic``,
    ``base_offset``, ``size_bytes``, ``record_count``, ``codec``,
    ``base_timestamp_ms``, ``max_timestamp_ms``, ``producer_id``,
    ``producer_epoch``, ``base_sequence``, ``transactional``, ``control``,
    ``cut`` (the batch runs past ``end``). Magic 0 and 1 (message sets):
    one dict per run of entries of one magic, ``record_count`` the entries
    (None when one is a compressed wrapper, whose inner messages are not
    decompressed), ``codec`` of the first compressed entry or "none".

    ``inflate_budget``: ``[bytes]`` that gzip wrappers may still inflate to,
    shared by the caller across a frame so that a frame of many small,
    highly compressed wrappers costs at most ``MAX_INFLATE`` of inflating."""
    budget = inflate_budget if inflate_budget is not None else [MAX_INFLATE]
    batches: list[dict] = []
    pos = start
    while pos < end:
        if end - pos <= ks.MAGIC_AT:
            batches.append(_batch_stub(buf, pos, end))
            break
        magic = buf[pos + ks.MAGIC_AT]
        if magic == 2:
            batch = _batch_v2(buf, pos, end)
        elif magic in (0, 1):
            batch = _message_set(buf, pos, end, magic, budget)
        else:
            return batches, "record_magic"
        if batch["size_bytes"] <= 0:
            return batches, "record_batch_length"
        batches.append(batch)
        pos += batch["size_bytes"]
    return batches, None


def _batch_stub(buf: bytes, pos: int, end: int) -> dict:
    size = _I32.unpack_from(buf, pos + 8)[0] + 12 if end - pos >= 12 else None
    return {"magic": None, "base_offset": None, "size_bytes": size, "record_count": None, "codec": None, "cut": True}


def _batch_v2(buf: bytes, pos: int, end: int) -> dict:
    length = _I32.unpack_from(buf, pos + ks.BATCH_LENGTH_AT)[0]
    size = length + 12
    batch = {"magic": 2, "base_offset": _I64.unpack_from(buf, pos)[0],
             "size_bytes": size if length >= ks.BATCH_HEADER_V2 - 12 else -1,
             "record_count": None, "codec": None, "base_timestamp_ms": None, "max_timestamp_ms": None,
             "producer_id": None, "producer_epoch": None, "base_sequence": None,
             "transactional": None, "control": None, "cut": pos + size > end}
    if end - pos >= ks.BATCH_HEADER_V2:
        attributes, _, base_ts, max_ts, pid, epoch, seq, count = struct.unpack_from(">hiqqqhii", buf, pos + 21)
        batch.update(codec=ks.CODECS.get(attributes & 0x07, "unknown"), base_timestamp_ms=base_ts,
                     max_timestamp_ms=max_ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     record_count=count, transactional=bool(attributes & 0x10), control=bool(attributes & 0x20))
    return batch


def _message_set(buf: bytes, pos: int, end: int, magic: int, budget: list[int]) -> dict:
    """A run of magic 0/1 entries: offset int64, message_size int32, crc
    int32, magic int8, attributes int8, [timestamp int64], key, value."""
    first = pos
    batch = {"magic": magic, "base_offset": _I64.unpack_from(buf, pos)[0], "size_bytes": 0, "record_count": 0,
             "codec": "none", "base_timestamp_ms": None, "cut": False}
    count: int | None = 0
    while pos < end:
        if end - pos <= ks.MAGIC_AT + 1:
            batch["cut"] = True
            pos = end
            break
        if buf[pos + ks.MAGIC_AT] != magic:
            break
        msize = _I32.unpack_from(buf, pos + 8)[0]
        if msize < ks.MESSAGE_MIN[magic]:
            batch["size_bytes"] = -1
            return batch
        codec = buf[pos + ks.MAGIC_AT + 1] & 0x07
        if codec:
            batch["codec"] = ks.CODECS.get(codec, "unknown")
            inner = _gzip_count(buf, pos, msize, end, magic, budget) if codec == 1 else None
            count = None if count is None or inner is None else count + inner
        elif count is not None:
            count += 1
        if magic == 1 and batch["base_timestamp_ms"] is None and end - pos >= 26:
            batch["base_timestamp_ms"] = _I64.unpack_from(buf, pos + 18)[0]
        pos += 12 + msize
        if pos > end:
            batch["cut"] = True
    batch["size_bytes"] = pos - first
    batch["record_count"] = count
    return batch


def _gzip_count(buf: bytes, pos: int, msize: int, end: int, magic: int, budget: list[int]) -> int | None:
    """The messages inside a gzip wrapper, its value inflated within what
    is left of ``budget``; None when the wrapper is cut, inflates to more
    or to something other than whole messages. Other codecs are not in the
    standard library: their counts stay unknown."""
    entry_end = pos + 12 + msize
    if entry_end > end:
        return None
    # The key's length: after offset, size, crc, magic, attributes, [timestamp].
    at = pos + 18 + (8 if magic else 0)
    key_len = _I32.unpack_from(buf, at)[0]
    at += 4 + max(key_len, 0)
    if at + 4 > entry_end:
        return None
    value_len = _I32.unpack_from(buf, at)[0]
    at += 4
    if value_len < 0 or at + value_len > entry_end:
        return None
    inflate = zlib.decompressobj(32 + zlib.MAX_WBITS)  # gzip or zlib header, told apart by zlib
    try:
        inner = inflate.decompress(bytes(buf[at:at + value_len]), max(budget[0], 1))
    except zlib.error:
        return None
    budget[0] -= len(inner)
    if inflate.unconsumed_tail or budget[0] < 0:
        return None
    n = p = 0
    while p + 12 <= len(inner):
        size = _I32.unpack_from(inner, p + 8)[0]
        if size < ks.MESSAGE_MIN[0]:
            return None
        p += 12 + size
        n += 1
    return n if p == len(inner) else None
