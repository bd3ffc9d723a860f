"""Lines of a tool's output as users paste them into tickets and chats.

A pasted listing reaches kdiag with what the chat or the markdown did to
it: CRLF line ends, trailing spaces, a quote marker (``> ``) in front,
code fences around it, the shell prompt line that ran the command, and
addresses made into links (``<10.0.0.1>``, ``[10.0.0.1](http://10.0.0.1)``,
Slack's ``<http://host|host>``). ``clean`` undoes that; the parsers of the
user's own tools (traceroute, mtr, ping, ss) and of tool output (strace -c,
uniq -c counts, rdkafka_performance) read what ``pasted_lines`` yields.
"""
from __future__ import annotations

import functools
import re

_QUOTE = re.compile(r"^\s{0,3}(?:>\s?)+")
_FENCE = re.compile(r"^\s*(?:```|~~~)")
# A shell prompt before a command: "$ mtr ...", "root@host:~# ping ...",
# "[user@host ~]$ ss -tin", "PS C:\\> tcping ...". Bounded: a long line of
# colons must not cost quadratic time.
_PROMPT = re.compile(r"^\s*(?:\[[^\]]{0,128}\]|[\w.-]{1,64}@[\w.-]{1,64}(?::[^\s$#%]{0,128})?)?"
                     r"\s*(?:[$#%]|PS [^>]{0,128}>)\s+\S")
# Bounded, and none of them spans its own opening character, so that a
# line of a thousand "[" or "<" costs linear time, not quadratic.
_SLACK_LINK = re.compile(r"<(?:https?|mailto)://[^<|>\s]{0,2048}\|([^<>\s]{1,255})>")
_MD_LINK = re.compile(r"\[([^\[\]\s]{1,255})\]\((?:https?|mailto):[^()\s]{0,2048}\)")
_ANGLE_LINK = re.compile(r"<(?:https?://)?([A-Za-z0-9][\w.:%-]{0,254}?)/?>")
_BARE_SCHEME = re.compile(r"\bhttps?://([A-Za-z0-9][\w.-]{0,254})/?(?=[\s)]|$)")

# A character every rule above needs: a line without any is the tool's own
# as it is (a table of a million rows is read without the seven passes).
_SOMETHING_TO_CLEAN = re.compile(r"[<>\[$#%`~\r]|https?:")

# What a cleaned line is, beside a line to read.
MARKUP = "markup"     # a code fence or a blank line between quoted blocks
PROMPT = "prompt"     # the command line the user ran


def clean(raw) -> tuple[str, str | None]:
    """(text, what): the line as the tool printed it, and ``None``; or
    ``("", MARKUP)`` / ``(text, PROMPT)`` for lines that are the paste's
    own. Never raises on any string."""
    if not isinstance(raw, str):
        return "", MARKUP
    if not _SOMETHING_TO_CLEAN.search(raw):
        return raw.rstrip(), None
    text = raw.replace("\r", "").rstrip()
    text = _QUOTE.sub("", text, count=1)
    if _FENCE.match(text):
        return "", MARKUP
    text = _SLACK_LINK.sub(r"\1", text)
    text = _MD_LINK.sub(r"\1", text)
    text = _ANGLE_LINK.sub(r"\1", text)
    text = _BARE_SCHEME.sub(r"\1", text)
    if _PROMPT.match(text):
        return text, PROMPT
    return text, None


def pasted_lines(lines, counts, first_line_no: int = 1):
    """(line number, raw line, cleaned text, what) of each line of a paste
    worth reading, every line counted in ``counts.lines``: the paste's
    markup and blank lines are skipped there (``markup``, ``empty``) and not
    yielded. ``what`` is ``None`` or PROMPT, as ``clean`` says."""
    for no, raw in enumerate(lines, first_line_no):
        counts.lines += 1
        text, what = clean(raw)
        if what == MARKUP:
            counts.skip("markup")
        elif not text.strip():
            counts.skip("empty")
        else:
            yield no, raw, text, what


def cleaned(sample: list[str]) -> list[str]:
    """The sample's lines that are the tool's own, cleaned, for scoring.
    Each path tool's recogniser asks for the same sample in turn: the last
    few answers are kept (a file's detection cleaned its sample four times,
    11% of parsing a lab bundle)."""
    return list(_cleaned(tuple(sample)))


@functools.lru_cache(maxsize=4)
def _cleaned(sample: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for s in sample:
        text, what = clean(s)
        if what is None and text.strip():
            out.append(text)
    return tuple(out)
