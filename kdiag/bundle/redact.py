"""Redaction of secrets from what kdiag writes. Kept apart from collection:
collectors capture verbatim, and this runs on what goes into a bundle.

Two passes over every raw file before it is parsed or bundled:
- by value: the secrets kdiag itself was given (``-X sasl.password=...``),
  wherever they appear, in the forms strace and JSON escape them to;
- by pattern: secrets kdiag was never told about, in a producer it only
  attached to (a properties file it read, a JAAS line it logged, a private
  key strace saw go by). The patterns are in ``PATTERNS``; each counts its
  replacements for the manifest;
- by protocol: the SASL exchanges (PLAIN, SCRAM, OAUTHBEARER) strace saw
  on the producer's sockets, by their wire format (``kdiag.bundle.sasl``).

The rules (what a secret looks like) come first, as data; the code that
applies them follows."""
from __future__ import annotations

import heapq
import os
import re
from pathlib import Path

from kdiag.bundle import sasl
from kdiag.parsers.strace.schema import SOCKET_PREFIXES

REDACTED = "[REDACTED]"
_REDACTED_BYTES = REDACTED.encode()

# ---------------------------------------------------------------- the rules

# librdkafka/Kafka property names that hold secrets.
# sasl.oauthbearer.config holds the unsecured token's extensions.
_SECRET_PROPERTY = re.compile(r"(password|passwd|secret|token|jaas|\.key\.pem|private|credential"
                              r"|oauthbearer\.config|api[_.\-]?key)", re.I)
# The words of an option's or a property's name that say its value is a
# secret: ``--sasl-pass``, ``--pw``, ``basic.auth.user.info``, ``apiKey``.
# Whole words, or their starts for the longer ones, so that "keepalive"
# or "topic" say nothing.
_SECRET_WORDS = {"pw", "pwd", "key", "keys", "apikey", "cred", "creds", "private", "privatekey", "cookie"}
_SECRET_WORD_STARTS = ("pass", "secret", "token", "credential", "auth")
_NAME_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])")
# Shorter values would match by chance in binary captures.
MIN_SECRET_LEN = 4

# A secret-looking key: Kafka/librdkafka property names and the usual
# spellings elsewhere (client_secret, apiKey, X-Auth-Token). Found by its
# keyword, never by the key's free prefix: a pattern starting with that
# backtracks over every start position of a megabyte-long word (quadratic).
_SECRET_KEYWORD = re.compile(
    rb"(?i)password|passwd|secret|token|credential|jaas\.config|api[_.\-]?key|private[_.\-]?key"
    rb"|user[_.\-]?info")
# After the key: the rest of its name (possessive: no backtracking into
# it), then '=', ':' or a JSON '": "' (with
# strace's \" escapes), then the value, quoted or not.
_QUOTED_VALUE = re.compile(rb"""[\w.\-]{0,64}+(?:\\?["'])?\s*[=:]\s*(\\?["'])(.*?)(?=\1|$)""")
# Numbers and JSON literals are left: statistics counters named like keys
# must stay valid JSON, and they are not secrets.
_BARE_VALUE = re.compile(rb"""[\w.\-]{0,64}+(?:\\?["'])?\s*[=:]\s*(?![\\"'\[])"""
                         rb"""(?!(?:-?\d+(?:\.\d+)?|true|false|null)(?![^\s"'\\,;&}]))([^\s"'\\,;&}]+)""")
PATTERNS: dict[str, re.Pattern[bytes]] = {
    # -----BEGIN RSA PRIVATE KEY----- ... to its END line, or to the end of a
    # string strace cut short (-s 256), where \n is two characters.
    "pem_private_key": re.compile(
        rb'(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----)(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|[^"\n]*)'),
    # A PEM body line written on its own (a key file read or echoed line by
    # line): a whole line, or a whole strace string, of 40+ base64
    # characters. Nothing kdiag analyses looks like that.
    "base64_blob": re.compile(rb'(?m)(^|(?<=[(,] )")[A-Za-z0-9+/]{40,}={0,2}(?=(?:\\n)?"|\r?$)'),
    # scheme://user:password@host: the whole userinfo (librdkafka's
    # schemes have a '_': sasl_ssl://).
    "url_userinfo": re.compile(rb"""([A-Za-z][A-Za-z0-9+.\-_]{0,31}://)([^\s/?#@"'<>\\]{1,256}+)@"""),
    "jwt": re.compile(rb"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"),
    "bearer": re.compile(rb"(?i)(\b(?:bearer|basic)\s+)([A-Za-z0-9._~+/=\-]{8,})"),
    # sasl.oauthbearer.config=principal=x extension_k=v scope=...: its whole
    # value, spaces and all, to the end of its quotes or line.
    "oauthbearer_config": re.compile(
        rb"""(?i)(oauthbearer[._]config(?:\\?["'])?\s*[=:]\s*(?:\\?["'])?)((?:[^"'\\\r\n]|\\[^"'nr])+)"""),
}
_PEM_BEGIN = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_PEM_END = re.compile(rb"-----END [A-Z0-9 ]*PRIVATE KEY-----")

# Every line that can hold a secret holds one of these (searched in the
# lowercased block: a case-insensitive alternation is several times
# slower); the rest of a capture, nearly all of it, is copied without a
# look at each line. "private key", not "private": strace prints
# MAP_PRIVATE on every mmap().
_LINE_MAY_HOLD_SECRET = (
    re.compile(rb"passw|secret|token|credential|jaas|api[_.\-]?key|private[ _.\-]?key|eyj|bearer|basic"
               rb"|oauthbearer|user[_.\-]?info"),
    re.compile(rb"""://[^\s/?#@"'<>\\]{1,256}+@"""),
    re.compile(rb'["\n][a-z0-9+/]{40}'),
    *sasl.PREFILTERS,
)
_BASE64_AT_BLOCK_START = re.compile(rb"[a-z0-9+/]{40}")
# Binary captures: a SYN probe carries no payload, and a pattern matched by
# chance inside packet bytes would corrupt the file.
_BINARY_SUFFIXES = (".pcap", ".pcapng", ".parquet")

BLOCK = 8 << 20
# A line longer than this is scrubbed in pieces of this size; a secret cut
# by a piece's end can then survive.
MAX_LINE = 64 << 20

# ---------------------------------------------------------------- by kind: what the analysis never reads

# The calls whose string arguments are the bytes read or written (pread64
# and preadv2 found by their "read"), and their resumptions. Each pattern
# starts with a literal, which the regex engine finds several times faster
# than an alternation; the line's head (pid, time) is checked after.
_BUFFER_CALLS = (re.compile(rb"(read)(?:v2?|64)?\((\d+)"), re.compile(rb"(write)(?:v2?|64)?\((\d+)"),
                 re.compile(rb"<\.\.\. p?(read|write)(?:v2?|64)? resumed>"))
_HEAD = re.compile(rb"(?:\[pid +(\d+)\] |(\d+) +)?(?: *\d+\.\d+ |\d\d:\d\d:\d\d(?:\.\d+)? )?(?:\(\+ *\d+\.\d+\) )?")
_FD_INFO = re.compile(rb"<([^\n]*?)>, ")
_C_STRING = re.compile(rb'"(?:[^"\\\n]|\\.)*"(?:\.\.\.)?')
_DROPPED = b'"' + _REDACTED_BYTES + b'"...'
# The pseudonymiser learns host names from a read of /etc/hosts (and
# rewrites them): those bytes are read, so they stay.
_KEPT_FILES = (b"/etc/hosts",)
# -yy's names of a socket, as the analysis tells a socket's calls apart.
_SOCKET_INFO = tuple(p.encode() for p in SOCKET_PREFIXES)


def _buffer_kept(name: bytes, fd: int, info: bytes | None) -> bool:
    """What of the bytes a call moved is read afterwards: librdkafka's log
    lines written to stdout/stderr (the ``data`` column), the first bytes of
    socket I/O (SASL exchanges, DNS names), and the files the pseudonymiser
    reads. Not a file's contents, nor what went through a pipe."""
    if b"write" in name and fd in (1, 2):
        return True
    if info is None:
        return False
    return info.startswith(_SOCKET_INFO) or (b"read" in name and info in _KEPT_FILES)


def _drop_strings(args: bytes) -> tuple[bytes, int, int]:
    """The arguments with every non-empty string dropped; how many strings
    were dropped here, and how many are dropped in all (a capture the tracer
    already cleaned, or a bundle sealed again, holds them dropped)."""
    spans = [(s.start(), s.end(), s.group() == _DROPPED) for s in _C_STRING.finditer(args)
             if s.end() - s.start() > 2]
    new = [(a, b) for a, b, was in spans if not was]
    if not new:
        return args, 0, len(spans)
    out, last = [], 0
    for a, b in new:
        out += [args[last:a], _DROPPED]
        last = b
    return b"".join(out) + args[last:], len(new), len(spans)


def _drop_buffers(buf: bytes, counts: dict[str, int], pending: dict[bytes, bool]) -> tuple[bytes, bool]:
    """The block with the strings of every read and write whose bytes are
    not kept replaced; the line stays, with its size and return value.
    ``pending``: per thread, whether its call left unfinished keeps its
    bytes (a read's come with its resumption). ``counts["file_buffer"]``
    counts the strings dropped, now or before."""
    out, last, total = [], 0, 0
    for m in heapq.merge(*(rx.finditer(buf) for rx in _BUFFER_CALLS), key=lambda m: m.start()):
        start = m.start() - (m.start() > 0 and buf[m.start() - 1] == 0x70)      # the p of pread64
        ls = buf.rfind(b"\n", 0, start) + 1
        head = _HEAD.fullmatch(buf, ls, start)
        if head is None:            # inside another call's arguments
            continue
        le = buf.find(b"\n", m.end())
        le = len(buf) if le < 0 else le
        pid = head.group(1) or head.group(2) or b""
        args = m.end()
        if m.lastindex == 1:          # <... read resumed>
            keep = pending.pop(pid, False)
        else:
            info = _FD_INFO.match(buf, m.end(), le)
            if info is not None:
                args = info.end()
            keep = _buffer_kept(m.group(1), int(m.group(2)), info and info.group(1))
            if buf[args:le].rstrip().endswith(b"<unfinished ...>"):
                pending[pid] = keep
        if keep:
            continue
        dropped, now, in_all = _drop_strings(buf[args:le])
        total += in_all
        if now:
            out += [buf[last:args], dropped]
            last = le
    if total:
        counts["file_buffer"] = counts.get("file_buffer", 0) + total
    return (b"".join(out) + buf[last:], True) if out else (buf, False)


def drop_buffers_file(path, counts: dict[str, int]) -> int:
    """``_drop_buffers`` over a capture, streaming; the strings it holds
    dropped."""
    pending: dict[bytes, bool] = {}
    return _rewrite_blocks(path, counts, lambda buf: _drop_buffers(buf, counts, pending))


def _rewrite_blocks(path, counts: dict[str, int], step) -> int:
    """The file rewritten block by block of whole lines through ``step``
    (a block -> the block to write, whether it changed), and replaced only if
    a block changed. Returns the replacements ``step`` counted."""
    # Lazy: the line reader brings numpy and pyarrow.
    from kdiag.ingest.lines import line_blocks

    before = sum(counts.values())
    tmp = f"{path}.scrub"
    changed = False
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        for buf in line_blocks(src, BLOCK, MAX_LINE):
            out, c = step(buf)
            changed |= c
            dst.write(out)
    if changed:
        os.replace(tmp, path)
    else:
        os.unlink(tmp)
    return sum(counts.values()) - before


# ---------------------------------------------------------------- by key: configs and argv


def is_secret_key(key: str) -> bool:
    """Whether an option's or a property's value is a secret, by its name."""
    if _SECRET_PROPERTY.search(key):
        return True
    words = [w.lower() for w in _NAME_WORD.findall(key)]
    return any(w in _SECRET_WORDS or w.startswith(_SECRET_WORD_STARTS) for w in words)


def config(cfg: dict) -> dict:
    return {k: (REDACTED if is_secret_key(k) else v) for k, v in cfg.items()}


def argv(args: list[str]) -> list[str]:
    """A command line by its structure: ``--pw s3cret``, ``--sasl-pass=s3cret``,
    ``-X sasl.password=s3cret`` and ``sasl.password=s3cret`` lose the value
    (an option whose name says it holds a secret); so does a secret by
    pattern inside an argument (a URL's userinfo, a JSON config, a JAAS
    line)."""
    out: list[str] = []
    value_next = False
    for a in args:
        if not isinstance(a, str):
            out.append(a)
            continue
        # The value, though it starts with '-'; a long option after a flag that takes none stays.
        if value_next and not a.startswith("--"):
            out.append(REDACTED)
            value_next = False
            continue
        value_next = False
        k, eq, _v = a.partition("=")
        if eq and not any(c.isspace() for c in k):
            if is_secret_key(k):
                a = f"{k}={REDACTED}"
        elif a.startswith("-") and is_secret_key(a):
            value_next = True
        out.append(_scrub_text(a))
    return out


def _scrub_text(text: str) -> str:
    raw = text.encode("utf-8", "surrogateescape")
    out = scrub_line(raw, {})
    return text if out == raw else out.decode("utf-8", "surrogateescape")


# ---------------------------------------------------------------- by value

def secret_values(cfg: dict) -> list[str]:
    """Every secret the config holds, longest first: each secret property's
    value, and each value inside ``sasl.oauthbearer.config`` (its
    extensions travel on the wire one by one)."""
    values = set()
    for k, v in cfg.items():
        # Not every name is_secret_key takes: a path such as ssl.key.location
        # is no secret to replace wherever it appears.
        if not _SECRET_PROPERTY.search(k):
            continue
        values.add(str(v))
        if "oauthbearer.config" in k.lower():
            values.update(part.partition("=")[2] for part in str(v).split() if part.startswith("extension_"))
    return sorted((v for v in values if len(v) >= MIN_SECRET_LEN), key=len, reverse=True)


def _escaped_forms(value: str) -> list[bytes]:
    """The value as written, and as strace and JSON escape it."""
    raw = value.encode()
    forms = {raw, value.replace("\\", "\\\\").replace('"', '\\"').encode()}
    return sorted(forms, key=len, reverse=True)


def scrub_file(path, forms: list[bytes], block: int = 8 << 20) -> int:
    """Replace each form in the file, streaming; memory stays at one block."""
    # A secret cut by the block's end starts within its last keep bytes:
    # those wait for the next block.
    keep = max(len(f) for f in forms) - 1
    total = 0
    tmp = f"{path}.scrub"
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        tail = b""
        while True:
            data = src.read(block)
            buf = tail + data
            total += _count_forms(buf, forms)
            out = _replace_forms(buf, forms)
            if not data or keep == 0:
                dst.write(out)
                tail = b""
                if not data:
                    break
                continue
            dst.write(out[:-keep])
            tail = out[-keep:]
    if total:
        os.replace(tmp, path)
    else:
        os.unlink(tmp)
    return total


def _replace_forms(data: bytes, forms: list[bytes]) -> bytes:
    for f in forms:
        data = data.replace(f, _REDACTED_BYTES)
    return data


def _count_forms(data: bytes, forms: list[bytes]) -> int:
    return sum(data.count(f) for f in forms)


def scrub_tree(root, values: list[str]) -> int:
    """Replace every known secret value in every file under ``root``;
    returns the number of replacements."""
    if not values:
        return 0
    forms = [f for v in values for f in _escaped_forms(v)]
    # Never through a link: scrubbing rewrites the file in place.
    return sum(scrub_file(p, forms) for p in sorted(Path(root).rglob("*")) if p.is_file() and not p.is_symlink())


# ---------------------------------------------------------------- by pattern

def _key_values(line: bytes, counts: dict[str, int]) -> bytes:
    """``key=value``, ``key: value``, ``"key": "value"`` and JAAS
    ``password="..."`` with a secret-looking key lose the value."""
    out, last, pos = [], 0, 0
    while (m := _SECRET_KEYWORD.search(line, pos)) is not None:
        q = _QUOTED_VALUE.match(line, m.end())
        if q is not None and q.group(2):
            kind, vs, ve = "quoted_value", q.start(2), q.end(2)
        elif q is None and (u := _BARE_VALUE.match(line, m.end())) is not None:
            kind, vs, ve = "key_value", u.start(1), u.end(1)
        else:
            pos = m.end()
            continue
        if line[vs:ve] != _REDACTED_BYTES:
            out += [line[last:vs], _REDACTED_BYTES]
            last = ve
            counts[kind] = counts.get(kind, 0) + 1
        pos = max(ve, m.end())
    return b"".join(out) + line[last:] if out else line


def scrub_line(line: bytes, counts: dict[str, int]) -> bytes:
    """One line with every pattern's secret replaced."""
    def sub(name, repl, text):
        text, n = PATTERNS[name].subn(repl, text)
        if n:
            counts[name] = counts.get(name, 0) + n
        return text

    line = sasl.scrub_line(line, counts)
    line = sub("url_userinfo", lambda m: m.group(1) + _REDACTED_BYTES + b"@", line)
    line = sub("pem_private_key", lambda m: m.group(1) + _REDACTED_BYTES, line)
    line = sub("oauthbearer_config", lambda m: m.group(1) + _REDACTED_BYTES, line)
    line = _key_values(line, counts)
    line = sub("jwt", _REDACTED_BYTES, line)
    line = sub("base64_blob", lambda m: m.group(1) + _REDACTED_BYTES, line)
    line = sub("bearer", lambda m: m.group(1) + _REDACTED_BYTES, line)
    return line


def _scrub_block(buf: bytes, counts: dict[str, int], in_pem: bool) -> tuple[bytes, bool, bool]:
    """(scrubbed block, whether anything changed, whether it ends inside a
    PEM block). ``buf`` ends at a line end, or is the file's last piece."""
    low = buf.lower()
    found = {buf.rfind(b"\n", 0, m.start()) + 1 for rx in _LINE_MAY_HOLD_SECRET for m in rx.finditer(low)}
    if _BASE64_AT_BLOCK_START.match(low):
        found.add(0)
    starts = sorted(found)
    parts: list[bytes] = []
    pos, n, i, changed = 0, len(buf), 0, False
    while True:
        if in_pem:
            end = _PEM_END.search(buf, pos)
            if end is None:
                return b"".join(parts), True, True
            # Dropped up to the END marker; its line is scrubbed from there.
            pos, in_pem, changed = end.start(), False, True
            ls = pos
        else:
            while i < len(starts) and starts[i] < pos:
                i += 1
            if i == len(starts):
                parts.append(buf[pos:])
                break
            ls = starts[i]
        le = buf.find(b"\n", ls)
        le = n if le < 0 else le + 1
        parts.append(buf[pos:ls])
        line = buf[ls:le]
        out = scrub_line(line, counts)
        changed |= out != line
        parts.append(out)
        b = _PEM_BEGIN.search(out)
        if b is not None and not _PEM_END.search(out, b.end()) and out.rstrip(b"\r\n").endswith(_REDACTED_BYTES):
            in_pem = True
        pos = le
        if pos >= n and not in_pem:
            break
    return b"".join(parts), changed, in_pem


def scrub_patterns_file(path, counts: dict[str, int]) -> int:
    """Every line of the file that may hold a secret through ``scrub_line``,
    streaming in blocks; a PEM block written with real newlines is dropped
    from its BEGIN line to its END line. Returns the replacements made in
    this file."""
    in_pem = False

    def step(buf: bytes) -> tuple[bytes, bool]:
        nonlocal in_pem
        out, changed, in_pem = _scrub_block(buf, counts, in_pem)
        return out, changed

    return _rewrite_blocks(path, counts, step)


def scrub_tree_patterns(root) -> dict[str, int]:
    """``drop_buffers_file`` then ``scrub_patterns_file`` on every text file
    under ``root``; the replacement counts by pattern."""
    counts: dict[str, int] = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_file() and not p.is_symlink() and not p.name.endswith(_BINARY_SUFFIXES):
            drop_buffers_file(p, counts)
            scrub_patterns_file(p, counts)
    return counts
