"""Text from outside reaches a screen as data: kdiag.visible."""
import pytest

from kdiag.visible import visible


@pytest.mark.parametrize("raw, shown", [
    ("plain broker-1:9092", "plain broker-1:9092"),
    ("\x1b[2K\x1b[1AVERDICT: healthy", "\\x1b[2K\\x1b[1AVERDICT: healthy"),
    ("\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\", "\\x1b]8;;http://evil/\\x1b\\link\\x1b]8;;\\x1b\\"),
    ("a\r\nVERDICT: healthy", "a\\r\\nVERDICT: healthy"),
    ("\x9b2J", "\\x9b2J"),                       # the 8-bit CSI
    ("\x07\x08\x7f", "\\x07\\x08\\x7f"),
    ("abc\u202edcba", "abc\\u202edcba"),          # right-to-left override
    ("a\u2028b\u2029c", "a\\u2028b\\u2029c"),
    ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
    ("tag\U000e0041", "tag\\U000e0041"),
    ("caf\u00e9 \u4e2d\u6587 \u00a0", "caf\u00e9 \u4e2d\u6587 \u00a0"),   # letters and spaces stay
    (b"name-\xff\xfe.log", "name-\\xff\\xfe.log"),  # bytes that are not UTF-8
    ("name-\udcff.log", "name-\\xff.log"),          # the same, read with surrogateescape
    ("lone \ud800", "lone \\ud800"),
    (42, "42"),
])
def test_every_control_and_format_character_is_shown_as_an_escape(raw, shown):
    assert visible(raw) == shown


def test_what_visible_returns_writes_to_any_terminal_encoding_and_holds_no_control():
    import unicodedata
    every = "".join(map(chr, range(0, 0x3000))) + "\udc80\udcff\ud800"
    out = visible(every)
    out.encode("utf-8")                          # no lone surrogate left
    assert not [c for c in out if unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"}]
    assert "\n" not in out and "\x1b" not in out
