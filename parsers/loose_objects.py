"""Objects found in pasted text: JSON, or Python's repr of it, however a
paste or a logger left it.

A user brings librdkafka's statistics as text: one JSON object a line, or
pretty-printed over many lines, several on one line, behind a logger's
prefix, escaped inside another JSON string (``"msg": "{\\"name\\": ...``),
printed as a Python dict (``{u'name': u'rdkafka#producer-1', 'x': True}``),
Rust's Debug print of rust-rdkafka's ``Statistics`` (``Statistics { name:
"...", rtt: Some(Window { ... }) }``), broken by a terminal or an editor
anywhere (inside a key or a number), cut at either end. ``Scanner`` is fed the text line by line and hands back each
object it could read, with the fields it could read of it:

- a line whose object is still open goes on into the next line: a string or
  a word still open at the end of a line is joined to the next line without
  a break (JSON has no line break inside a token), as is a number the next
  line goes on with (two numbers in a row are never JSON);
- a token that does not fit where it stands ends the object there: the
  fields read so far are kept, each dict left open carries ``CUT``, and the
  text from that token on is read again for a new object. A value is kept
  only once a ``,`` or a closing bracket follows it: a number at a cut may
  be part of one;
- text that starts inside an object (``"tx": 5, "rtt": {...} } }, ...``)
  is read as the rest of one: each unmatched ``}`` closes a dict whose key
  was cut off (an ``Unnamed`` key in a dict made for it).

Cost is linear in the text: each character is read by one regular
expression at a time, once in search of an object and once as a token, and
a token carried to the next line is bounded (``CARRY_MAX``). Nesting is
bounded (``DEPTH_MAX``) and walked without recursion, except by Python's own
``json`` decoder, which raises RecursionError on deep nesting, caught here.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

# The key a dict that was never closed carries: not a string, so that no
# JSON key can be it.
CUT = object()
DEPTH_MAX = 48
# A string or a number carried on to the next line: a few joins of a
# terminal's width, never a whole file.
CARRY_MAX = 64 << 10
JOINS_MAX = 16

# Forms, in the order ``form`` names them.
PREFIXED, CONCATENATED, ESCAPED, PYTHON_REPR, RUST_DEBUG, PRETTY, WRAPPED = (
    "prefixed", "concatenated", "escaped", "python_repr", "rust_debug", "pretty", "wrapped")
FORM_ORDER = (PREFIXED, CONCATENATED, ESCAPED, PYTHON_REPR, RUST_DEBUG, PRETTY, WRAPPED)


class Unnamed(int):
    """The key of a dict whose own key was cut off before it."""


class Leading(int):
    """The key of a flat object read whole just before the rest of a dict
    whose start was cut off, with only a comma between
    (``{ "min":1, "avg":2 }, "rtt": {...}``): a field of that dict, its own
    key cut off. Its name is for the reader to tell, by the keys after it."""


@dataclass
class Found:
    value: object
    first: int            # line of its first token
    last: int             # line of its last token read
    cut: bool             # not closed, or its start was cut off
    forms: set = field(default_factory=set)

    @property
    def form(self) -> str:
        return "+".join(f for f in FORM_ORDER if f in self.forms) or "json"


# Where an object starts: a brace before a key, a closing brace or the
# line's end (pretty-printed), or a key ("name": / 'name':) of an object
# whose start was cut off. Any other brace is passed over at the regex's
# pace; bounded, so a line of quotes costs linear time.
_BRACE = r"""\{(?=[ \t]*(?:[uU]?["'}]|\\"|$|[A-Za-z_]\w{0,127}[ \t]*:(?!:)))"""
_START = re.compile(_BRACE + r"""|[uU]?(?:"[^"\\\n]{1,200}"|'[^'\\\n]{1,200}')[ \t]*:""")
# Where one may start, found by sre's fast scan (the whole of _START is
# tried at every character: 0.2-0.7 us each).
_START_CHAR = re.compile(_BRACE + r"""|["']""")
_ESCAPED_OPEN = re.compile(r'\{\s{0,8}\\"')
# An object written into a string: an escaped quote or a Python repr's
# quote after a brace.
_IN_A_STRING = re.compile(r"""\{\s{0,8}(?:\\"|[uU]?')""")

_UNESCAPE = re.compile(r'\\(["\\/])')
_TOKEN = re.compile(r"""[ \t\f\v]*(?:
   (?P<p>[{}\[\]:,])
  |(?P<s>[uU]?"[^"\\]*+(?:\\.[^"\\]*+)*+")
  |(?P<q>[uUbB]?'[^'\\]*+(?:\\.[^'\\]*+)*+')
  |(?P<n>-?\d+(?:\.\d*)?(?:[eE][+-]?\d*)?)L?
  |(?P<w>(?:true|false|null|True|False|None|NaN|-?Infinity)\b)
  |(?P<ident>[A-Za-z_]\w{0,127})(?=[ \t]*:(?!:))
  |(?P<ctor>(?:[A-Z]\w{0,127}[ \t]*(?=\{)|Some\(|\)))
  |(?P<open>(?:[uUbB]?["'].*|-|[A-Za-z]+)$)
  |(?P<end>$)
)""", re.X)
_ELISION = re.compile(r"\s*(?:\.{2,}|\u2026)[\s.,\u2026]*")
# A key and a plain value and its comma: what most of a pretty-printed
# object's lines hold.
_PAIR = re.compile(r"""[ \t]*"([^"\\]*)"[ \t]*:[ \t]*(?:(-?\d+)|"([^"\\]*)"|(true|false|null)\b)[ \t]*,""")
_GOES_ON = re.compile(r"[0-9A-Za-z.+\-]")
_COMMA_ONLY = re.compile(r"\s*,\s*")
_WORDS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None,
          "NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_PY_WORDS = {"True", "False"}   # None is Rust's Debug print's too
_DECODER = json.JSONDecoder()

# What a container expects next.
_KEY, _KEY_AFTER_COMMA, _COLON, _VALUE, _AFTER = range(5)


class _Frame:
    __slots__ = ("box", "key", "want", "pending", "has_pending")

    def __init__(self, box, want):
        self.box, self.key, self.want = box, None, want
        self.pending, self.has_pending = None, False


class _Break(Exception):
    """The token at the position does not fit: the object ends before it."""


def _string(tok: str, forms: set):
    if tok[0] in "uUbB":
        tok = tok[1:]
        forms.add(PYTHON_REPR)
    if "\\" not in tok:
        return tok[1:-1]
    if tok[0] == '"':
        try:
            return json.loads(tok)
        except ValueError:
            pass
    try:
        v = ast.literal_eval(tok)   # one string literal: nothing is run
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise _Break from None
    if not isinstance(v, str):
        raise _Break
    return v


def _number(tok: str):
    try:
        return int(tok) if tok.lstrip("-").isdigit() else float(tok)
    except ValueError:
        raise _Break from None


class Scanner:
    """Feed ``line(no, text)`` each line in order, then ``end()``; each
    returns the objects that ended there (``Found``)."""

    def __init__(self, inner: bool = False) -> None:
        self.inner = inner        # reading a string of an object: no deeper
        self.frames: list[_Frame] = []
        self.root = None
        self.headless = False
        self.forms: set = set()
        self.first = self.last = 0
        self.carry = ""             # a token the next line may go on with
        self.carry_string = False   # it is a string still open: always joined
        self.joins = 0
        self.wraps = 0
        self.deep_line = 0      # a line Python's decoder found too deep
        self.elided = False     # fields were left out just before
        self.alone = False      # a carried token read on its own: not carried again
        self.escaped = False
        self.out: list[Found] = []

    @property
    def open_since(self) -> int | None:
        """The first line of the object still open, if one is."""
        return self.first if self.frames or self.carry else None

    def line(self, no: int, text: str) -> list[Found]:
        self.out = []
        if self.escaped and (self.frames or self.carry):
            text = _UNESCAPE.sub(r"\1", text)
        if self.frames and not self.carry:
            # "..." or "...." where the user left fields out, alone or
            # before a brace: what stands around it is still read.
            m = _ELISION.match(text)
            if m:
                text, self.elided = text[m.end():], True
        if self.carry:
            text = self._joined(no, text)
        pos = 0
        if self.frames:
            pos = self._run(no, text, 0)
        self._top(no, text, pos)
        return self.out

    def end(self) -> list[Found]:
        self.out = []
        if self.carry and self.frames:
            text, self.carry = self.carry, ""
            self._alone(text)
        self.carry = ""
        if self.frames:
            self._close_cut()
        return self.out

    def _joined(self, no: int, text: str) -> str:
        carry, self.carry = self.carry, ""
        # A word may be a string's prefix (u'...'), cut before its quote.
        goes_on = text[:1] and (_GOES_ON.match(text) or carry[-1:].isalpha() and text[0] in "'\"")
        # No key or name in statistics holds a brace: a line that opens with
        # one starts an object, after a paste cut inside a string.
        string_goes_on = self.carry_string and not text.lstrip().startswith("{")
        if (string_goes_on or goes_on) and len(carry) + len(text) <= CARRY_MAX:
            self.joins += 1
            if self.joins <= JOINS_MAX:
                self.forms.add(WRAPPED)
                return carry + text
        # Not a token cut in two: the carried one stands alone. Read it
        # first, then the line.
        self.joins = 0
        if self.frames:
            self._alone(carry)
        return text

    def _alone(self, carry: str) -> None:
        """A carried token the next line does not go on with."""
        self.alone = True
        try:
            pos = self._run(self.last, carry, 0)
        finally:
            self.alone = False
        if pos < len(carry):
            self._top(self.last, carry, pos)

    # -- outside any object: look for one

    def _top(self, no: int, text: str, pos: int) -> None:
        seg = pos
        ended = None   # a flat object read whole on this line, and where it ended
        while pos < len(text):
            m = self._start(text, pos)
            if m is None:
                return
            start = m.start()
            if text[seg:start].strip():
                forms = {PREFIXED}
            else:
                forms = {CONCATENATED} if any(f.last == no for f in self.out) else set()
            if m.group() == "{":
                esc = _ESCAPED_OPEN.match(text, start)
                if esc:
                    text, pos = _UNESCAPE.sub(r"\1", text[start:]), 0
                    self.escaped = True
                    forms.add(ESCAPED)
                    pos = self._object(no, text, 0, forms)
                    seg = pos
                    continue
                self.escaped = False
                pos = self._fast(no, text, start, forms)
                if pos is None:
                    pos = self._object(no, text, start, forms)
                last = self.out[-1] if self.out and not self.frames else None
                ended = (last, pos) if last is not None and last.last == no and _flat(last.value) else None
            else:
                self.escaped = False
                lead = None
                if ended is not None and ended[1] == seg and ended[0] is self.out[-1] \
                        and _COMMA_ONLY.fullmatch(text, seg, start):
                    lead = self.out.pop()
                    forms = set(lead.forms)   # the comma before the rest is no prefix
                pos = self._headless(no, text, start, forms, lead)
                ended = None
            seg = pos

    @staticmethod
    def _start(text: str, pos: int):
        """The next _START from pos, tried only where _START_CHAR is."""
        while True:
            c = _START_CHAR.search(text, pos)
            if c is None:
                return None
            at = c.start()
            if at > pos and text[at] != "{" and text[at - 1] in "uU":
                m = _START.match(text, at - 1)
                if m:
                    return m
            m = _START.match(text, at)
            if m:
                return m
            pos = at + 1

    def _fast(self, no: int, text: str, start: int, forms: set) -> int | None:
        """An object whole on this line, read by Python's decoder."""
        if self.deep_line == no:
            return None
        try:
            value, end = _DECODER.raw_decode(text, start)
        except ValueError:
            return None
        except RecursionError:
            # Nesting past Python's limit: the decoder would read as deep
            # again at each object the scanner ends at DEPTH_MAX.
            self.deep_line = no
            return None
        if value:
            self.out.append(Found(value, no, no, False, forms))
            if not self.inner and _IN_A_STRING.search(text, start, end):
                self._inside_strings(no, value)
        return end

    def _inside_strings(self, no: int, value) -> None:
        """Objects written into a string of a decoded one: a JSON log
        record's message (``"msg": "stats: {\"name\": ...}"``). One level
        down only, and only a few levels into the record."""
        stack = [(value, 0)]
        while stack:
            v, depth = stack.pop()
            if isinstance(v, str):
                if "{" in v and ":" in v:
                    inner = Scanner(inner=True)
                    for f in inner.line(no, v) + inner.end():
                        f.first = f.last = no
                        f.forms.add(ESCAPED)
                        self.out.append(f)
            elif depth < 4 and isinstance(v, (dict, list)):
                stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))

    def _object(self, no: int, text: str, start: int, forms: set) -> int:
        self.root, self.headless = {}, False
        self.frames = [_Frame(self.root, _KEY)]
        self.forms, self.first, self.last, self.joins, self.wraps = set(forms), no, no, 0, 0
        m = _TOKEN.match(text, start)   # the brace itself
        return self._run(no, text, m.end())

    def _headless(self, no: int, text: str, start: int, forms: set, lead: Found | None = None) -> int:
        self.root, self.headless = {CUT: True}, True
        self.frames = [_Frame(self.root, _KEY)]
        self.forms, self.first, self.last, self.joins, self.wraps = set(forms), no, no, 0, 0
        if lead is not None:
            self.root[Leading(0)] = lead.value
            self.first = lead.first
        return self._run(no, text, start)

    # -- inside an object: one token at a time

    def _run(self, no: int, text: str, pos: int) -> int:
        """Tokens from pos until the object ends (its end returned) or the
        line does (len(text))."""
        n = len(text)
        while self.frames:
            top = self.frames[-1]
            if top.want in (_KEY, _KEY_AFTER_COMMA) and isinstance(top.box, dict):
                pair = _PAIR.match(text, pos)
                if pair:
                    # The commonest run, '"key": scalar,', in one match.
                    num, string, word = pair.group(2, 3, 4)
                    top.box[pair.group(1)] = int(num) if num else string if string is not None else _WORDS[word]
                    top.want, self.last, self.joins, self.elided = _KEY_AFTER_COMMA, no, 0, False
                    pos = pair.end()
                    continue
            m = _TOKEN.match(text, pos)
            if m is None:      # no token here: the object ends before it
                self._close_cut()
                return pos
            kind = m.lastgroup
            if kind == "end":
                return n
            if kind == "open" and self.alone:
                self._close_cut()
                return m.start(kind)
            if (kind == "open" or kind in ("n", "w") and m.end() == n) and not self.alone:
                # Maybe cut by a line break: carried to the next line.
                tok_start = m.start(kind)
                self.carry = text[tok_start:]
                self.carry_string = kind == "open" and self.carry.lstrip("uUbB")[:1] in ("'", '"')
                if len(self.carry) > CARRY_MAX or self.joins >= JOINS_MAX:
                    self.carry = ""
                    self._close_cut()
                    return tok_start
                return n
            before, self.last = self.last, no
            try:
                self._token(kind, m)
            except _Break:
                self.last = before
                self._close_cut()
                return m.start(kind)
            self.joins = 0
            self.elided = False
            pos = m.end()
            if not self.frames:
                return pos
        return pos

    def _token(self, kind: str, m) -> None:
        top = self.frames[-1]
        if kind == "p":
            self._punct(top, m.group("p"))
            return
        if kind == "ctor":
            # Rust's Debug print (rust-rdkafka's Statistics): a struct's
            # name before its brace, Some( and its ) around a value.
            if top.want != _VALUE and not (m.group() == ")" and top.want == _AFTER):
                raise _Break
            self.forms.add(RUST_DEBUG)
            return
        if kind == "ident":
            if top.want not in (_KEY, _KEY_AFTER_COMMA) or not isinstance(top.box, dict):
                raise _Break
            self.forms.add(RUST_DEBUG)
            top.key, top.want = m.group("ident"), _COLON
            return
        if kind == "s" or kind == "q":
            if kind == "q":
                self.forms.add(PYTHON_REPR)
            v = _string(m.group(kind), self.forms)
            if self.elided and top.want == _AFTER and isinstance(top.box, dict):
                self._commit(top)   # the comma went with the fields left out
                top.want = _KEY_AFTER_COMMA
            if top.want in (_KEY, _KEY_AFTER_COMMA) and isinstance(top.box, dict):
                top.key, top.want = v, _COLON
                return
        elif kind == "n":
            if m.group().endswith("L"):
                self.forms.add(PYTHON_REPR)
            v = _number(m.group("n"))
        else:
            w = m.group("w")
            if w in _PY_WORDS:
                self.forms.add(PYTHON_REPR)
            v = _WORDS[w]
        if top.want != _VALUE:
            raise _Break
        top.pending, top.has_pending, top.want = v, True, _AFTER

    def _punct(self, top: _Frame, p: str) -> None:
        if p == ":":
            if top.want != _COLON:
                raise _Break
            top.want = _VALUE
        elif p == ",":
            if top.want != _AFTER:
                raise _Break
            self._commit(top)
            top.want = _KEY_AFTER_COMMA if isinstance(top.box, dict) else _VALUE
        elif p in "{[":
            if top.want != _VALUE or len(self.frames) >= DEPTH_MAX:
                raise _Break
            child = {} if p == "{" else []
            self._put(top, child)
            top.want = _AFTER
            self.frames.append(_Frame(child, _KEY if p == "{" else _VALUE))
        else:
            self._close(top, p)

    def _close(self, top: _Frame, p: str) -> None:
        is_dict = isinstance(top.box, dict)
        if (p == "}") != is_dict:
            raise _Break
        # An empty container, one after a value, or one after a trailing comma.
        if not (top.want == _AFTER or top.want in (_KEY, _KEY_AFTER_COMMA) and is_dict
                or top.want == _VALUE and not is_dict):
            raise _Break
        self._commit(top)
        self.frames.pop()
        if self.frames:
            return
        if self.headless and p == "}":
            if self.wraps >= DEPTH_MAX:
                raise _Break
            # The rest of a dict whose key was cut off: it becomes a value in
            # the dict it sat in, whose start was cut off as well.
            self.wraps += 1
            self.root = {CUT: True, Unnamed(0): self.root}
            self.frames.append(_Frame(self.root, _AFTER))
            return
        self._found(False)

    def _put(self, top: _Frame, v) -> None:
        if isinstance(top.box, dict):
            top.box[top.key] = v
        else:
            top.box.append(v)

    def _commit(self, top: _Frame) -> None:
        if top.has_pending:
            self._put(top, top.pending)
            top.pending, top.has_pending = None, False

    def _close_cut(self) -> None:
        """The object ends here, not closed: what was read of it is kept."""
        for f in self.frames:
            if isinstance(f.box, dict):
                f.box[CUT] = True
        self.frames = []
        self.carry = ""
        self._found(True)

    def _found(self, cut: bool) -> None:
        # A brace and nothing readable after it is no object: a line of a
        # million braces must not make a million of them.
        if self.root is not None and len(self.root) > (CUT in self.root):
            if self.last > self.first and WRAPPED not in self.forms:
                self.forms.add(PRETTY)
            self.out.append(Found(self.root, self.first, self.last, cut or self.headless, self.forms))
        self.root = None


def _flat(value) -> bool:
    """A dict of scalars only: a leaf of an object, never a whole one."""
    return isinstance(value, dict) and bool(value) and not any(isinstance(v, (dict, list)) for v in value.values())
