"""Text from outside kdiag, shown as data.

A bundle, a paste or a file name is someone else's text. Written raw to a
terminal, an ESC starts a control sequence (move the cursor, erase a line,
plant an OSC 8 link), a carriage return overwrites the line it is on, a
newline starts a row kdiag did not write, and a bidirectional override
reorders what follows. ``visible`` writes every such character as an escape
a person can read, so the text shows what it holds and can do nothing else.

What is escaped, by Unicode category:
- Cc, the C0 and C1 controls and DEL (ESC, CR, LF, the 8-bit CSI U+009B);
- Cf, format characters: bidirectional overrides and isolates, zero-width
  characters, the byte-order mark, tag characters;
- Zl and Zp, the line and paragraph separators, which some renderers break on;
- Cs, lone surrogates: a name read with ``surrogateescape`` keeps a byte
  that is not UTF-8 as U+DC80..U+DCFF, shown as the ``\\xNN`` it was, since
  writing it raw raises UnicodeEncodeError.

The backslash itself is left alone: escaping it would make every Windows
path unreadable, and a literal ``\\x1b`` in the input is inert text anyway.
"""
from __future__ import annotations

import unicodedata

_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:        # a byte surrogateescape kept
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text) -> str:
    """``text`` (str, bytes or anything ``str()`` takes) with every control,
    format and separator character written as an escape. Bytes are read as
    UTF-8, a byte that is not shown as ``\\xNN``. Never raises."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8", "surrogateescape")
    elif not isinstance(text, str):
        text = str(text)
    # isprintable() is False for every category escaped here (and for a few
    # harmless ones, such as no-break space, which the loop leaves as they are).
    if text.isprintable():
        return text
    return "".join(_escape(ch) if unicodedata.category(ch) in _HIDDEN else ch for ch in text)


def visible_text(lines) -> str:
    """The text of ``lines`` (strings kdiag composed, one a line), each
    shown by ``visible`` and ended by a newline: a field's newline cannot
    start a row of its own. How a renderer joins its lines."""
    return "".join(visible(ln) + "\n" for ln in lines)


def visible_lines(text) -> str:
    """``text`` that kdiag composed, its line breaks kept and everything else
    shown by ``visible``. A sink's guard: whatever field a renderer forgot,
    no escape in it can act. A newline inside such a field cannot be told
    from kdiag's own here, so renderers still show each field, or each whole
    line, with ``visible`` before joining."""
    return "\n".join(map(visible, str(text).split("\n")))


class VisibleStream:
    """A text stream for people (a terminal, or a pipe to one): what is
    written is shown by ``visible_lines``, and a character the stream's
    encoding lacks (an ASCII or Latin-1 locale) is written as its escape;
    writing never raises UnicodeEncodeError. Everything else is the
    stream's own."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text) -> int:
        shown = visible_lines(text)
        try:
            return self._stream.write(shown)
        except UnicodeEncodeError:
            # A TextIOWrapper encodes the whole text before writing any of it.
            encoding = getattr(self._stream, "encoding", None) or "ascii"
            return self._stream.write(shown.encode(encoding, "backslashreplace").decode(encoding))

    def __getattr__(self, name):
        return getattr(self._stream, name)
