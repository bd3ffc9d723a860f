"""Redaction by protocol: the SASL exchanges a Kafka client has with its
broker, found by their wire format in the buffers strace prints.

A producer on ``sasl_plaintext`` sends its credentials in the clear, inside
a Kafka SaslAuthenticate request (or, before KIP-152, a bare length-framed
token), and strace prints every such buffer escaped. Redacted here:
- PLAIN (RFC 4616): ``authzid NUL authcid NUL passwd``; the password goes,
  found by the token's own 4-byte length before it, so a password with any
  bytes in it goes whole and nothing else is taken;
- SCRAM (RFC 5802): the nonces, salt, proof and server signature of the
  client-first ``n,,n=user,r=...``, server-first ``r=...,s=...,i=N``,
  client-final ``c=...,r=...,p=...`` and server-final ``v=...`` messages;
- OAUTHBEARER (RFC 7628): the token of ``n,,\\x01auth=Bearer TOKEN`` and the
  value of every extension ``\\x01key=value`` after it.
The user name and the SCRAM iteration count stay: they are no secret, and
say who authenticated how.

strace writes a buffer as a C string: printable bytes as they are, ``\\"``
and ``\\\\``, ``\\n``-style escapes and octal (``\\0``, ``\\023``) for the
rest, or hex (``\\x00``) under ``-x``, every byte in hex under ``-xx``. A
string is decoded to its bytes, scrubbed, and written back in its own style
only when something was found. A string strace cut short (``-s 256``) loses
the visible part of its secret.
"""
from __future__ import annotations

import codecs
import re

REDACTED = b"[REDACTED]"

# ---------------------------------------------------------------- the wire formats (on bytes)

_PRINTABLE = rb"\x20-\x7e\x80-\xff"
# authzid NUL authcid NUL passwd; the 4-byte length before it decides.
_PLAIN = re.compile(rb"([" + _PRINTABLE + rb"]{0,255})\x00([" + _PRINTABLE + rb"]{1,255})\x00")
_MAX_TOKEN_BYTES = 1 << 16
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")
# A SCRAM message, found by how each of the four begins; it runs to the
# first byte that cannot be in one. No boundary before it: the byte there is
# often the last of its 4-byte length, which may be printable.
_SCRAM_START = re.compile(
    rb"(?:[nyp][\x21-\x2b\x2d-\x7e]{0,64},(?:a=[\x21-\x2b\x2d-\x7e]*)?,n=[\x21-\x2b\x2d-\x7e]*,r="
    rb"|c=[A-Za-z0-9+/=]{1,128},r="
    rb"|r=[\x21-\x2b\x2d-\x7e]{8,},s="
    rb"|v=[A-Za-z0-9+/]{24,}=*(?![\x20-\x7e]))")
_SCRAM_BODY = re.compile(rb"[\x20-\x7e]*")
# The attributes that are secret, or derived from the password: nonces,
# salt, proof, server signature.
_SCRAM_SECRET_ATTR = re.compile(rb"(?:^|(?<=,))([rspv])=([^,]*)")
# The token to the next \x01 (wire) or to a space or quote (text); then
# each extension's value.
_OAUTH = re.compile(rb"(?i)\bauth=Bearer ?([^\x01\s\"'\\]*)((?:\x01[^\x01=\s]{1,64}=[^\x01]*)*)")
_OAUTH_EXT = re.compile(rb"(\x01[^\x01=]+=)([^\x01]*)")


def _plain(data: bytes, counts: dict[str, int]) -> bytes:
    """The password of every PLAIN token in ``data`` replaced."""
    out, last, pos = [], 0, 0
    while (m := _PLAIN.search(data, pos)) is not None:
        start = m.start()
        pass_start = m.end()
        if start >= 4:
            declared = int.from_bytes(data[start - 4:start], "big")
            ok = pass_start - start <= declared <= _MAX_TOKEN_BYTES
            pass_end = min(start + declared, len(data))
        else:
            # A token in a buffer of its own (a separate iovec): all of it.
            ok = start == 0 and m.group(1) == b""
            pass_end = len(data)
        # A password is text: a control byte means this was a Kafka frame
        # that only looked like a token (its api key 36 is "\0$\0").
        if not ok or pass_end <= pass_start or _CONTROL.search(data, pass_start, pass_end):
            pos = start + 1
            continue
        out += [data[last:pass_start], REDACTED]
        last = pos = max(pass_end, pass_start + 1)
        counts["sasl_plain"] = counts.get("sasl_plain", 0) + 1
    return b"".join(out) + data[last:] if out else data


def _scram(data: bytes, counts: dict[str, int]) -> bytes:
    out, last, pos = [], 0, 0
    while (m := _SCRAM_START.search(data, pos)) is not None:
        end = _SCRAM_BODY.match(data, m.end()).end()
        message = data[m.start():end]
        scrubbed = _SCRAM_SECRET_ATTR.sub(lambda a: a.group(1) + b"=" + REDACTED if a.group(2) != REDACTED
                                          else a.group(0), message)
        if scrubbed != message:
            out += [data[last:m.start()], scrubbed]
            last = end
            counts["sasl_scram"] = counts.get("sasl_scram", 0) + 1
        pos = max(end, m.start() + 1)
    return b"".join(out) + data[last:] if out else data


def _oauth(data: bytes, counts: dict[str, int]) -> bytes:
    def one(m: re.Match) -> bytes:
        token, exts = m.group(1), m.group(2)
        if (not token or token == REDACTED) and not exts:
            return m.group(0)
        counts["sasl_oauthbearer"] = counts.get("sasl_oauthbearer", 0) + 1
        exts = _OAUTH_EXT.sub(lambda e: e.group(1) + (REDACTED if e.group(2) else b""), exts)
        return data[m.start():m.start(1)] + (REDACTED if token else b"") + exts
    return _OAUTH.sub(one, data)


def scrub_bytes(data: bytes, counts: dict[str, int]) -> bytes:
    """``data`` (a buffer's real bytes, or a line of text) with every SASL
    secret replaced."""
    if b"\x00" in data:
        data = _plain(data, counts)
    return _oauth(_scram(data, counts), counts)


# ---------------------------------------------------------------- strace strings

_STRING = re.compile(rb'"((?:[^"\\\n]|\\.)*)"')
_ALL_HEX = re.compile(rb"(?:\\x[0-9a-fA-F]{2})*")
_LETTER = {10: b"n", 9: b"t", 13: b"r", 11: b"v", 12: b"f"}


def decode(escaped: bytes) -> bytes:
    """A C string as strace prints it -> its bytes."""
    return codecs.escape_decode(escaped)[0] if b"\\" in escaped else escaped


def _style(escaped: bytes) -> str:
    if b"\\x" not in escaped:
        return "octal"
    return "xx" if _ALL_HEX.fullmatch(escaped) else "x"


def encode(data: bytes, style: str = "octal") -> bytes:
    """Bytes -> a C string as strace prints it in ``style`` (``octal``,
    ``x`` for ``-x``, ``xx`` for ``-xx``)."""
    if style == "xx":
        return b"".join(b"\\x%02x" % c for c in data)
    out = []
    for i, c in enumerate(data):
        if c in (0x22, 0x5C):
            out.append(b"\\" + bytes([c]))
        elif 0x20 <= c < 0x7F:
            out.append(bytes([c]))
        elif style == "x":
            out.append(b"\\x%02x" % c)
        elif c in _LETTER:
            out.append(b"\\" + _LETTER[c])
        elif i + 1 < len(data) and 0x30 <= data[i + 1] <= 0x37:
            out.append(b"\\%03o" % c)
        else:
            out.append(b"\\%o" % c)
    return b"".join(out)


def _string(m: re.Match, counts: dict[str, int]) -> bytes:
    """One quoted buffer of an strace line with its SASL secrets replaced,
    written back in strace's own escaping."""
    escaped = m.group(1)
    if not may_hold_sasl(b'"' + escaped.lower()):
        return m.group(0)
    data = decode(escaped)
    scrubbed = scrub_bytes(data, counts)
    return m.group(0) if scrubbed == data else b'"' + encode(scrubbed, _style(escaped)) + b'"'


def scrub_line(line: bytes, counts: dict[str, int]) -> bytes:
    """A line of a capture, strace's or any text, with its SASL secrets
    replaced: in its strace strings, and as plain text around them."""
    if b'"' not in line:
        return _text(line, counts)
    out, last = [], 0
    for m in _STRING.finditer(line):
        out += [_text(line[last:m.start()], counts), _string(m, counts)]
        last = m.end()
    out.append(_text(line[last:], counts))
    return b"".join(out)


def _text(text: bytes, counts: dict[str, int]) -> bytes:
    return _oauth(_scram(text, counts), counts) if text else text


# ---------------------------------------------------------------- which lines to look at

# On the lowercased escaped text, each form as strace may print it: as it
# is, or every byte in hex (-xx). A PLAIN token is NUL, a printable run,
# NUL, a printable byte; the other mechanisms have their literals.
_NUL = rb"\\(?:x00|0{1,3})"
_PRINT = rb"(?:[ !#-\[\]-~]|\\[\\\"]|\\x[2-7][0-9a-f])"


def _hex(literal: bytes) -> bytes:
    return b"".join(rb"\\x%02x" % c for c in literal)


# One byte, escaped in any of strace's ways.
_BYTE = rb'(?:[^\\"]|\\(?:x[0-9a-f]{2}|[0-7]{1,3}|.))'
# A PLAIN token: after its 4-byte length (under 512), or at a buffer's
# start; a password of at least 3 characters, or the 1 or 2 a string cut
# short shows before its end (bpfcalls keeps a socket write's first 64
# bytes: a long client id leaves little of the token). Without these, every
# read of a binary file would be looked at.
_PLAIN_TOKEN = _NUL + _PRINT + rb"{1,255}?" + _NUL + _PRINT + rb'{1,2}(?:' + _PRINT + rb'|"|\Z)'

# Each starts with a literal, which the re module finds at hundreds of MB/s;
# an alternation in front runs at 20-40 MB/s.
PREFILTERS = (
    re.compile(rb"\\0\\0(?:\\0|\\000|\\1|\\001)" + _BYTE + _PLAIN_TOKEN),
    re.compile(rb"\\x00\\x00\\x0[01]" + _BYTE + _PLAIN_TOKEN),
    re.compile(rb'"\\(?:0|x00)' + _PRINT + rb"{1,255}?" + _NUL + _PRINT + rb"{3}"),
    re.compile(rb"n,,"),
    re.compile(rb",[rs]="),
    re.compile(rb"auth="),
    re.compile(rb"v=[a-z0-9+/]{24}"),
    re.compile(b"|".join(_hex(lit) for lit in (b"n,,", b",r=", b",s=", b"auth=", b"v="))),
)


def may_hold_sasl(low: bytes) -> bool:
    """Whether lowercased escaped text may hold a SASL exchange."""
    return any(rx.search(low) for rx in PREFILTERS)
