"""strace text output -> the ``syscalls`` table.

Reads what ``strace`` writes with any mix of -f/-ff, -t/-tt/-ttt/-r, -T,
-y/-yy and -s, whether it went to a file (-o) or to stderr, one row per
syscall, signal and process exit. The table:

  line_no     int64   1-based line number in the input of the row's first
                      line (the ``<unfinished ...>`` line for a resumed call).
  pid         int32   the pid/tid prefix: ``12345  `` (-f with -o) or
                      ``[pid 12345] `` (-f on stderr). Null when the line has
                      none (no -f, -ff files, or stderr while one process ran).
  ts_us       int64   the line's timestamp in microseconds: -ttt -> since the
                      epoch; -tt -> since midnight; -t -> since midnight, whole
                      seconds; -r -> since the input's first line: the running
                      sum of the printed deltas (each line's time since the
                      previous line, whatever its thread), resumed lines and
                      signals included, plus half a microsecond a line for
                      what strace's truncation to microseconds lost. Finer
                      digits (--timestamps=ns) are cut to microseconds. Null
                      when the line has no timestamp. (kdiag.ingest.tables puts
                      -tt/-t/-r times on the epoch clock from librdkafka's
                      own timestamps; with -ff, -r deltas span files and one
                      file's sum is not a clock.)
  dur_us      int64   time spent in the call, -T ``<0.000123>``, microseconds.
                      Null when not printed (no -T, calls that never returned,
                      signals, exits).
  kind        string  "syscall", "signal" (``--- SIGCHLD {...} ---``), "exit"
                      (``+++ exited with 0 +++``, ``+++ superseded by execve
                      ... +++``) or "killed" (``+++ killed by SIGKILL +++``).
  syscall     string  the syscall name (``???`` when strace could not tell);
                      for signals and killed, the signal name (``SIGCHLD``);
                      null for exits.
  fd          int32   the first argument when it is an integer file
                      descriptor: annotated by -y/-yy (``7<TCP:[...]>``), or
                      an integer first argument of a call whose first
                      parameter is an fd (read, write, close, sendto, ...).
                      Null otherwise (``poll([...``, ``openat(AT_FDCWD...``).
  fd_info     string  the -y/-yy annotation of that fd without the brackets:
                      ``TCP:[127.0.0.1:42018->127.0.0.1:19093]``,
                      ``pipe:[4254]``, ``/tmp/x.log``. Null when absent.
  args        string  the arguments as printed, without the call's
                      parentheses; for a resumed call the unfinished part
                      followed by the resumed part. Signals and exits: the
                      text between ``---``/``+++`` markers. At most 4096
                      characters.
  ret         int64   the return value, decimal or 0x hex (hex is read as a
                      64-bit two's complement value); for exits the exit
                      status. Null for ``= ?``, calls that never returned,
                      signals, killed processes.
  errno       string  the error name after the return value (``EAGAIN``,
                      ``ERESTARTSYS``); null when none.
  unfinished  bool    true only for a call that never resumed: still
                      ``<unfinished ...>`` at the end of the input, followed
                      by its thread's exit, or ``<detached ...>``.
  data        string  for write, writev, pwrite64, sendto and sendmsg on fd 1
                      or 2 only: the first quoted string argument, unescaped
                      (log lines a program wrote to stdout/stderr; cut where
                      strace's -s cut it). Null otherwise.

Row order: feed() returns a chunk's rows sorted by line_no, but a call left
``<unfinished ...>`` is held back until its ``<... resumed>`` line arrives,
so across feeds rows are not globally in line order; sort on line_no when
that matters.

Lines that give no row are counted in ``counts.skipped`` by reason:
``blank``, ``strace_message`` (``strace: Process 123 attached``,
``[ Process PID=123 runs in x32 mode. ]``), ``stack_trace`` (the
`` > /lib/...`` lines of -k), ``unrecognised`` (not strace output), ``truncated`` (starts like strace output but the end is missing or
unreadable), ``program_output`` (without -o, strace shares stderr with the
traced program, whose text lands inside strace's lines: the text is cut
out, the line's rest on the next line joined back to it, and text lines of
their own are counted here; see _join_program_output). A ``<... resumed>``
line with no pending call on its pid still
gives a row (what it knows: its own time, the resumed arguments, ret, errno,
dur) but is counted as skipped ``orphan_resumed`` rather than parsed.

Parsing is vectorised: a few RE2 passes over whole Arrow arrays, numpy
index arithmetic for cutting strings and for pairing unfinished calls with
their resumption (a stable sort by pid puts each thread's lines together).
Nothing loops over lines in Python except the unescaping of unusual
``data`` strings, the pairing of the rare call whose pid prefix changed
between its two lines (stderr output), the few last lines of each block
(is a line there still waiting for its end?) and, only in blocks with lines
that did not parse, the search for program output in them.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .base import EXAMPLES_KEPT, ParseCounts
from .strings import cut as _cut
from .strings import data_buffer as _data_buffer
from .strings import first_last as _first_last
from .strings import gather as _gather
from .strings import lengths as _lengths
from .strings import offsets_data as _offsets_data
from .strings import take_str as _take_str
from .strings import views as _views

ARGS_CAP = 4096
# Lines are parsed in blocks so that intermediate arrays stay a bounded size
# whatever one feed() is given.
BLOCK_LINES = 1 << 17
# The end of a completed call is parsed from the line's last TAIL_WINDOW
# bytes; only lines whose end is longer than that are parsed again in full.
TAIL_WINDOW = 192
# How many leading lines decide the line format (see _learn_format).
SAMPLE_LINES = 256
# Bounds on the search for a resumed call's start across pid prefixes
# (see _adopt_orphans): orphans tried per block, candidates per orphan.
ADOPT_MAX = 1000
ADOPT_LOOKBACK = 64


def _field(name: str, type_: pa.DataType, doc: str, unit: str | None = None) -> pa.Field:
    meta = {"doc": doc}
    if unit:
        meta["unit"] = unit
    return pa.field(name, type_, metadata=meta)


SCHEMA = pa.schema(
    [
        _field("line_no", pa.int64(), "1-based input line number of the row's first line"),
        _field("pid", pa.int32(), "pid/tid prefix; null when the line has none"),
        _field("ts_us", pa.int64(), "timestamp: epoch (-ttt), since midnight (-tt/-t) or relative (-r); null without one", "us"),
        _field("dur_us", pa.int64(), "time in the call (-T); null when not printed", "us"),
        _field("kind", pa.string(), "syscall | signal | exit | killed"),
        _field("syscall", pa.string(), "syscall name; signal name for signal/killed; null for exit"),
        _field("fd", pa.int32(), "first argument when it is an integer fd; null otherwise"),
        _field("fd_info", pa.string(), "-y/-yy annotation of that fd, without brackets; null when absent"),
        _field("args", pa.string(), "arguments as printed (unfinished + resumed parts), at most 4096 chars"),
        _field("ret", pa.int64(), "return value (exit status for exits); null for '?' or none"),
        _field("errno", pa.string(), "error name such as EAGAIN; null when none"),
        _field("unfinished", pa.bool_(), "true when the call never resumed before the end of input or its thread's exit"),
        _field("data", pa.string(), "write-family calls on fd 1/2: first quoted string, unescaped; null otherwise"),
    ],
    metadata={"table": "syscalls", "source": "strace"},
)

# Per-line classification. Codes up to _KILLED are rows.
_SYSCALL, _UNFINISHED, _RESUMED, _DETACHED, _SIGNAL, _EXIT, _KILLED = range(7)
_CONT = 7  # the end of a line that an strace message or program output cut off
_BLANK, _MESSAGE, _STACK, _UNRECOGNISED, _TRUNCATED, _PROGRAM = 8, 9, 10, 11, 12, 13
_SKIP_REASON = {
    _BLANK: "blank",
    _MESSAGE: "strace_message",
    _STACK: "stack_trace",
    _UNRECOGNISED: "unrecognised",
    _TRUNCATED: "truncated",
    _PROGRAM: "program_output",
}
_KIND_NAMES = pa.array(["syscall", "syscall", "syscall", "syscall", "signal", "exit", "killed"])

# Calls whose first parameter is a file descriptor (or a directory fd), so an
# integer there is an fd even when -y did not annotate it.
_FD_FIRST = pa.array(sorted({
    "read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev",
    "preadv2", "pwritev2", "close", "fstat", "fstat64", "newfstatat", "fstatat64",
    "fstatfs", "fstatfs64", "statx", "lseek", "_llseek", "ioctl", "fcntl", "fcntl64",
    "fsync", "fdatasync", "ftruncate", "ftruncate64", "fchmod", "fchown", "flock",
    "dup", "dup2", "dup3", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg",
    "recvmmsg", "send", "recv", "connect", "accept", "accept4", "bind", "listen",
    "shutdown", "getsockname", "getpeername", "setsockopt", "getsockopt",
    "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "sendfile", "sendfile64",
    "splice", "tee", "getdents", "getdents64", "fadvise64", "fallocate", "openat",
    "openat2", "mkdirat", "mknodat", "unlinkat", "renameat", "renameat2",
    "faccessat", "faccessat2", "readlinkat", "fchmodat", "fchownat", "utimensat",
    "futimesat", "linkat", "name_to_handle_at", "execveat", "inotify_add_watch",
    "inotify_rm_watch", "timerfd_settime", "timerfd_gettime", "fanotify_mark",
    "syncfs", "fchdir", "sync_file_range", "copy_file_range", "close_range",
    "fgetxattr", "fsetxattr", "flistxattr", "fremovexattr", "io_uring_enter",
    "io_uring_register", "signalfd", "signalfd4", "readahead",
}))
_WRITE_FAMILY = pa.array(["pwrite64", "sendmsg", "sendto", "write", "writev"])

# --- Regular expressions (RE2) ---------------------------------------------
#
# The start of a line, in every layout strace prints:
#   "2482  1795314016.121249 write("          -f -o, -ttt
#   "[pid  5940] 02:24:05.260276 clone("      -f on stderr, -tt
#   "     0.000288 brk("                      -r
#   "1795314242.769242 (+     0.000318) brk(" -ttt -r
#   "02:24:02 execve(" / "execve("            -t / no timestamps
# then a token saying what the line is: "write(" or "???(" (a call),
# "<... read resumed>", "--- " (signal), "+++ " (exit), "strace: " or
# "[ Process PID=" (strace talking about itself). The groups are contiguous,
# so the head's length (where the arguments start) is the sum of theirs.
_TOKEN = r"(?P<tok>[A-Za-z_?][A-Za-z0-9_?]*\(|<\.\.\. [^>]*>|--- |\+\+\+ {0})"
_HEAD_ANY = (
    r"^(?P<p>(?:\[pid +\d{1,9}\] |\d{1,9} +)?)"
    r"(?P<ts>(?: *\d{1,10}\.\d{1,9}|\d\d:\d\d:\d\d(?:\.\d{1,9})?) )?"
    r"(?P<rel>(?:\(\+ *\d{1,10}\.\d{1,9}\) )?)"
    + _TOKEN.format(r"|strace: |\[ Process PID=")
)
# The same for the one layout a file was found to use, written so that no two
# branches can start on the same character: RE2 then matches it one-pass,
# about twice as fast. Lines it misses go through _HEAD_ANY.
_FAST_PID = {"o": r"(?P<p>\d{1,9} +)", "b": r"(?P<p>(?:\[pid +\d{1,9}\] )?)"}
_FAST_TS = {
    # After "2482  " the padding is the pid's; -r pads its own otherwise.
    "num_o": r"(?P<ts>\d{1,10}\.\d{1,9} )",
    "num": r"(?P<ts> *\d{1,10}\.\d{1,9} )",
    "tod": r"(?P<ts>\d\d:\d\d:\d\d(?:\.\d{1,9})? )",
    "none": r"(?P<ts>)",
}
_FAST_TOKEN = _TOKEN.format("")

# The end of a completed call. Forwards it reads
#   ") = 137 <0.000011>"                 ")       = ?"
#   ") = 3</etc/ld.so.cache> <0.000027>" ") = 0x7f7c8b3fc000"
#   ") = -1 EAGAIN (Resource temporarily unavailable) <0.000069>"
#   ") = 1 ([{fd=7, revents=POLLIN}]) <0.042753>"
# i.e. ')' + padding + '= ' + value[<fd annotation>] + [' ' errno]
# + [' (' detail ')'] + [' <' duration '>']. It is matched on the line's
# last bytes reversed, so that the pattern is anchored at its start and
# one-pass; groups d, x, v are contiguous and hold (reversed) the duration,
# errno-and-detail, and value-to-')'. The value is the run of non-blanks
# before " = )", annotation included; annotations with blanks
# ("3</dev/null<char 1:3>>") fall through to _TAIL_ANY.
_TAIL_REV = (
    r"^(?P<d>{0})(?P<x>(?:\)[^()]*\( )?(?:[A-Z_][A-Z0-9_]* )?)"
    r"(?P<v>[0-9?>][^ ]* = +\))"
)
_TAIL_REV_DUR = _TAIL_REV.format(r">\d{1,9}\.\d{1,9}< ")
_TAIL_REV_NODUR = _TAIL_REV.format("")
# Forwards and on the whole line, for what the reversed patterns miss:
#   ") = 3</dev/null<char 1:3>> <0.000014>", ") = -1 512 (Unknown error 512)",
# tails longer than the window. Leftmost match, like the reversed one.
_TAIL_ANY = (
    r"(?P<t>\) += (?P<v>(?:-?\d+|0x[0-9a-fA-F]+|\?)(?:<(?:[^<>]|->|<[^<>]*>)*>)?)"
    r"(?: (?P<err>E[A-Z0-9_]+|\d+))?(?: \([^\"]*\))?"
    r"(?: <(?P<d>\d{1,9}\.\d{1,9})>)?)$"
)
# " ENOENT (No such file or directory)": the errno part of a tail.
_ERRNO = r"^ (?P<e>E[A-Z0-9_]+)"
# "wait4(-1, strace: Process 5940 attached" then " <unfinished ...>": on
# stderr strace's own messages can cut a line in two.
_SPLIT_MSG = r"^(?P<pre>.+?)strace: Process \d+ (?:attached|detached)$"
# Between "--- " and " ---": "SIGCHLD {si_signo=SIGCHLD, ...}", "stopped by SIGSTOP".
_SIGNAL_BODY = r"^(?:stopped by )?(?P<sig>SIG[A-Z0-9_+-]+|\d+)"
# Between "+++ " and " +++": "exited with 0", "killed by SIGKILL (core dumped)".
_EXIT_BODY = r"^(?:exited with (?P<st>\d{1,9})|killed by (?P<sig>SIG[A-Z0-9_+-]+|\d+))"
# The first C string of the arguments: '2</tmp/x.log>, "%7|...CorrId 20)\n", 157'
# or 'writev(2, [{iov_base="...", iov_len=5}], 1'.
_QUOTED = r'^[^"]*"(?P<q>(?:[^"\\]|\\.)*)"'
_UNUSUAL_ESCAPE = r'\\[^ntr"]'


# --- Arrow/numpy plumbing ----------------------------------------------------
#
def _scatter_str(n: int, parts: list[tuple[np.ndarray, pa.Array]]) -> pa.Array:
    """Length-n string array with parts[k][1][j] at parts[k][0][j], null elsewhere."""
    parts = [(i, a) for i, a in parts if len(i)]
    if not parts:
        return pa.nulls(n, pa.string())
    if len(parts) == 1 and len(parts[0][0]) == n:  # already in place
        return parts[0][1].cast(pa.string())
    allv = pa.concat_arrays([a.cast(pa.string()) for _, a in parts])
    pos = np.full(n, -1, dtype=np.int64)
    start = 0
    for idx, a in parts:
        pos[idx] = np.arange(start, start + len(a))
        start += len(a)
    return allv.take(pa.array(pos, mask=pos < 0))


def _ints(digits: pa.Array) -> np.ndarray:
    """int64 of strings already known to be 1-18 ASCII digits."""
    if len(digits) == 0:
        return np.zeros(0, dtype=np.int64)
    return pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False)


def _seconds_us(s: pa.Array, tod: np.ndarray) -> np.ndarray:
    """Microseconds of "1795314016.121249" / "0.000011" (seconds, any number
    of fraction digits, cut to 6) or, where tod, of "02:24:05[.260276]"
    (time of day). Strings are known to match those shapes."""
    n = len(s)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    dot = pc.find_substring(s, ".").to_numpy()
    frac_digits = np.where(dot >= 0, _lengths(s) - dot - 1, 0)
    # A double holds 10 integer and 6 fraction digits exactly enough for
    # rint(x * 1e6) to give the exact microsecond; the rest are done in
    # integers.
    simple = ~tod & (dot >= 0) & (dot <= 10) & (frac_digits <= 6)
    out = np.empty(n, dtype=np.int64)
    if simple.any():
        sub = s if simple.all() else s.filter(pa.array(simple))
        us = np.rint(pc.cast(sub, pa.float64()).to_numpy(zero_copy_only=False) * 1e6)
        exact = us < 2.0**53
        out[simple] = np.where(exact, us, 0).astype(np.int64)
        simple[np.flatnonzero(simple)[~exact]] = False
        if simple.all():
            return out
    hard = ~simple
    sub = s.filter(pa.array(hard))
    digits = pc.replace_substring(pc.replace_substring(sub, ".", ""), ":", "")
    # Up to 10 + 9 digits: past int64, not past uint64.
    v = pc.cast(digits, pa.uint64()).to_numpy(zero_copy_only=False)
    fdig = frac_digits[hard].astype(np.uint64)
    scale = np.uint64(10) ** fdig
    whole = (v // scale).astype(np.int64)
    frac = v % scale
    frac_us = np.where(fdig <= 6, frac * np.uint64(10) ** (6 - np.minimum(fdig, 6)),
                       frac // np.uint64(10) ** (np.maximum(fdig, 6) - 6))
    whole = np.where(tod[hard], whole // 10000 * 3600 + whole // 100 % 100 * 60 + whole % 100, whole)
    out[hard] = whole * 1_000_000 + frac_us.astype(np.int64)
    return out


def _hex_values(hexdigits: pa.Array) -> np.ndarray:
    """int64 (two's complement) of strings of 1-16 hex digits."""
    if len(hexdigits) == 0:
        return np.zeros(0, dtype=np.int64)
    padded = pc.utf8_lpad(hexdigits, 16, "0")
    off, data = _offsets_data(padded)
    nib = _HEX[data[off[0]: off[-1]].reshape(-1, 16)].astype(np.uint64)
    acc = np.zeros(len(hexdigits), dtype=np.uint64)
    for k in range(16):
        acc = (acc << np.uint64(4)) | nib[:, k]
    return acc.view(np.int64)


_HEX = np.zeros(256, dtype=np.int64)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def _parse_ret(v: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Return values "137", "-1", "0x7f1a34009ba3", "?", "3</etc/ld.so.cache>"
    -> (int64, valid). Hex is read as 64-bit two's complement."""
    n = len(v)
    out = np.zeros(n, dtype=np.int64)
    ok = np.zeros(n, dtype=bool)
    if n == 0:
        return out, ok
    v = v.cast(pa.string())
    lt = pc.find_substring(v, "<").to_numpy()
    if (lt >= 0).any():  # drop the fd annotation
        v = _cut(v, np.arange(n), np.zeros(n, np.int64), np.where(lt >= 0, lt, _lengths(v)))
    L = _lengths(v)
    first, _ = _first_last(v)
    # Most values are plain digits; "-1" and "0x..." are the few others.
    dec = np.asarray(pc.ascii_is_decimal(v)) & (L <= 18)
    neg = np.flatnonzero((first == ord("-")) & (L >= 2) & (L <= 19))
    if len(neg):
        tail = pc.utf8_slice_codeunits(v.take(pa.array(neg)), 1)
        digits = np.asarray(pc.ascii_is_decimal(tail))
        out[neg[digits]] = -_ints(tail.filter(pa.array(digits)))
        ok[neg[digits]] = True
    hx = np.flatnonzero((first == ord("0")) & (L > 2) & (L <= 18) & ~dec)
    if len(hx):
        h = v.take(pa.array(hx))
        good = np.asarray(pc.match_substring_regex(h, r"^0[xX][0-9a-fA-F]{1,16}$"))
        out[hx[good]] = _hex_values(pc.utf8_slice_codeunits(h.filter(pa.array(good)), 2))
        ok[hx[good]] = True
    ok |= dec
    if dec.any():
        out[dec] = _ints(v.filter(pa.array(dec)))
    return out, ok


# --- unescape ---------------------------------------------------------------

_ESCAPE_RE = re.compile(rb"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)", re.S)
_SIMPLE_ESCAPES = {
    b"n": b"\n", b"t": b"\t", b"v": b"\v", b"f": b"\f", b"r": b"\r", b"a": b"\a",
    b"b": b"\b", b"e": b"\x1b", b'"': b'"', b"\\": b"\\", b"'": b"'",
}


def _unescape_one(m: re.Match) -> bytes:
    e = m.group(1)
    if e[:1] == b"x" and len(e) > 1:  # a bare "\\x" is an unknown escape
        return bytes([int(e[1:], 16)])
    if b"0" <= e[:1] <= b"7":
        return bytes([int(e, 8) & 0xFF])
    return _SIMPLE_ESCAPES.get(e, b"\\" + e)


def unescape(s: str) -> str:
    """Decode strace's C-style escapes: \\n \\t \\" \\\\ \\xNN and octal \\NNN.

    Escaped bytes are reassembled and decoded as UTF-8 (invalid sequences
    become U+FFFD), so a multi-byte character strace printed as octal comes
    back whole. Unknown escapes are kept as written.
    """
    if "\\" not in s:
        return s
    raw = s.encode("utf-8", "surrogatepass")
    return _ESCAPE_RE.sub(_unescape_one, raw).decode("utf-8", "replace")


# --- Event rows ----------------------------------------------------------------


@dataclass
class _Events:
    """Rows before resumed calls are joined to their start. args are
    references (start, length, buffer index) into `buffers`."""

    line_no: np.ndarray
    pid: np.ndarray
    pid_ok: np.ndarray
    ts: np.ndarray
    ts_ok: np.ndarray
    kind: np.ndarray
    ret: np.ndarray
    ret_ok: np.ndarray
    dur: np.ndarray
    dur_ok: np.ndarray
    name: pa.Array
    errno: pa.Array
    a_start: np.ndarray
    a_len: np.ndarray
    a_buf: np.ndarray
    buffers: list

    _NUMERIC = ("line_no", "pid", "pid_ok", "ts", "ts_ok", "kind", "ret", "ret_ok",
                "dur", "dur_ok", "a_start", "a_len", "a_buf")

    def __len__(self) -> int:
        return len(self.line_no)

    @classmethod
    def empty(cls) -> "_Events":
        z = np.zeros(0, dtype=np.int64)
        b = np.zeros(0, dtype=bool)
        return cls(z, z, b, z, b, z, z, b, z, b, pa.nulls(0, pa.string()), pa.nulls(0, pa.string()),
                   z, z, z, [])

    def select(self, idx: np.ndarray) -> "_Events":
        ia = pa.array(idx, pa.int64())
        kw = {k: getattr(self, k)[idx] for k in self._NUMERIC}
        return _Events(name=self.name.take(ia), errno=self.errno.take(ia), buffers=self.buffers, **kw)

    def args(self, idx: np.ndarray) -> pa.Array:
        return _views(self.a_start[idx], self.a_len[idx], self.a_buf[idx], self.buffers)

    def detached(self) -> "_Events":
        """A copy whose args no longer point into the block's line buffer, so
        that a few rows can be kept across feeds without pinning it."""
        a = self.args(np.arange(len(self)))
        off, _ = _offsets_data(a)
        kw = {k: getattr(self, k) for k in self._NUMERIC}
        kw.update(a_start=off[:-1], a_len=np.diff(off), a_buf=np.zeros(len(self), np.int64))
        return _Events(name=self.name, errno=self.errno, buffers=[_data_buffer(a)], **kw)

    @staticmethod
    def concat(a: "_Events", b: "_Events") -> "_Events":
        if not len(a):
            return b
        kw = {k: np.concatenate([getattr(a, k), getattr(b, k)]) for k in _Events._NUMERIC}
        kw["a_buf"] = np.concatenate([a.a_buf, b.a_buf + len(a.buffers)])
        return _Events(name=pa.concat_arrays([a.name, b.name]), errno=pa.concat_arrays([a.errno, b.errno]),
                       buffers=a.buffers + b.buffers, **kw)


def _empty_table() -> pa.Table:
    return SCHEMA.empty_table()


# --- The parser -----------------------------------------------------------------


class StraceParser:
    """Incremental strace parser: feed() chunks of lines, then finish()."""

    source = "strace"

    def __init__(self) -> None:
        self.counts = ParseCounts(self.source)
        self.clock: str | None = None
        self._clock_set = False
        self._fast_head: str | None = None
        self._fast_tod = False
        self._has_dur: bool | None = None
        # Calls still <unfinished ...>, at most one per pid.
        self._pending = _Events.empty()
        # Lines held back from the end of the last feed (see _held_tail),
        # and the line number of the first.
        self._carry: tuple[pa.Array, int] | None = None
        # The last lines of the previous block once program output was seen
        # (see _join_program_output).
        self._context: list[str] = []
        # -r: the running sum of the deltas so far, in half microseconds
        # (see _run_relative; the first line's delta is not corrected).
        self._rel_half_us = -1
        # What prepare() did ahead for the next block.
        self._ahead = None

    # -- public ---------------------------------------------------------------

    def feed(self, lines: pa.Array, first_line_no: int) -> pa.Table:
        lines = _as_string_array(lines)
        first = int(first_line_no)
        out = []
        if self._carry is not None and len(lines):
            held, no = self._carry
            self._carry = None
            if no + len(held) == first:
                lines = pa.concat_arrays([held, lines])
                first = no
            else:  # what they waited for is not next: they stay cut
                out.append(self._feed_block(held, no))
        n = len(lines)
        s = 0
        while s < n:
            block = lines.slice(s, BLOCK_LINES)
            k = len(block)
            # A line whose end may be in the next block (cut by an strace
            # message or by the program's own output) is held back, with
            # what follows it, so that both halves meet in one block.
            hold = _held_tail(block)
            if s + k < n:
                hold = min(hold, k - 1)
            elif hold:
                self._carry = (pa.array(block.slice(k - hold).to_pylist(), pa.string()), first + s + k - hold)
            if k - hold:
                out.append(self._feed_block(block.slice(0, k - hold), first + s))
            s += k if s + k >= n else k - hold
        return _concat(out)

    def prepare(self, lines: pa.Array, first_line_no: int):
        """The per-line work of the first block that feed(lines,
        first_line_no) will cut, done ahead: pure, so a second thread can do
        it while this one feeds the lines before. Hand the result to
        use_prepared() before that feed(); it is used only if the block
        turns out the same (no lines held back from the feed before), else
        redone. None until the line format is known."""
        if self._fast_head is None:
            return None
        lines = _as_string_array(lines)
        block = lines.slice(0, BLOCK_LINES)
        hold = _held_tail(block)
        if len(lines) > len(block):
            hold = min(hold, len(block) - 1)
        block = block.slice(0, len(block) - hold)
        if not len(block):
            return None
        joined, joined_to = _join_cut_lines(block)
        return (int(first_line_no), len(block)), joined, joined_to, self._parse(joined)

    def use_prepared(self, prepared) -> None:
        self._ahead = prepared

    def finish(self) -> pa.Table:
        out = []
        if self._carry is not None:
            held, no = self._carry
            self._carry = None
            out.append(self._feed_block(held, no))
        pend, self._pending = self._pending, _Events.empty()
        if len(pend):
            m = len(pend)
            out.append(self._emit(pend, np.arange(m), np.full(m, -1), np.ones(m, dtype=bool)))
        return _concat(out)

    # -- line layout ------------------------------------------------------------

    def _learn_format(self, lines: pa.Array) -> None:
        """Pick the one-pass head pattern, and which tail pattern to try
        first, from the first lines that parse."""
        sample = lines.slice(0, SAMPLE_LINES)
        head = pc.extract_regex(sample, pattern=_HEAD_ANY)
        valid = np.asarray(head.is_valid())
        # strace's own messages ("strace: Process 1 attached") have no prefix.
        tok = head.field("tok").fill_null("")
        valid &= ~np.asarray(pc.or_(pc.starts_with(tok, "strace"), pc.starts_with(tok, "[")))
        if not valid.any():
            return
        row = head[int(np.flatnonzero(valid)[0])].as_py()
        ts = row["ts"] or ""
        pid_kind = "o" if row["p"] and not row["p"].startswith("[") else "b"
        ts_kind = "tod" if ":" in ts else ("num" if ts else "none")
        ts_pat = _FAST_TS["num_o" if ts_kind == "num" and pid_kind == "o" else ts_kind]
        self._fast_tod = ts_kind == "tod"
        tail = pc.extract_regex(sample, pattern=_TAIL_ANY)
        durs = tail.filter(tail.is_valid()).field("d")
        self._has_dur = bool(len(durs)) and bool(pc.any(pc.not_equal(durs, "")).as_py())
        # Last: prepare(), in another thread, starts once this is set.
        self._fast_head = "^" + _FAST_PID[pid_kind] + ts_pat + _FAST_TOKEN

    # -- one block --------------------------------------------------------------

    def _feed_block(self, lines: pa.Array, first: int) -> pa.Table:
        n = len(lines)
        if n == 0:
            return _empty_table()
        if self._fast_head is None:
            self._learn_format(lines)
        line_no = np.arange(first, first + n, dtype=np.int64)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == (first, n):
            _, lines, joined_to, p = ahead
        else:
            lines, joined_to = _join_cut_lines(lines)
            p = self._parse(lines)
        joined, program = _join_program_output(lines, p["kind"], joined_to, self._context)
        if joined is not None:
            lines = joined
            p = self._parse(lines)
        keep = 2 * OUTPUT_LOOKBACK
        self._context = (self._context + [x or "" for x in lines.slice(max(0, n - keep)).to_pylist()])[-keep:]
        kind = p["kind"]
        # The end that was joined to its line shares that line's fate.
        ci = np.flatnonzero(joined_to >= 0)
        if len(ci):
            to = kind[joined_to[ci]]
            kind[ci] = np.where(to <= _KILLED, _CONT, to)
        if program.any():
            kind[program] = _PROGRAM
            p["ts_ok"][program] = False

        if not self._clock_set:
            self._set_clock(p, kind)
        if self.clock == "relative":
            self._run_relative(p)

        ev = np.flatnonzero(kind <= _KILLED)
        off, _ = _offsets_data(lines)
        evs = _Events(
            line_no=line_no, pid=p["pid"], pid_ok=p["pid_ok"], ts=p["ts"], ts_ok=p["ts_ok"], kind=kind,
            ret=p["ret"], ret_ok=p["ret_ok"], dur=p["dur"], dur_ok=p["dur_ok"], name=p["name"],
            errno=p["errno"], a_start=off[:-1] + p["a_start"], a_len=np.maximum(p["a_stop"] - p["a_start"], 0),
            a_buf=np.zeros(n, dtype=np.int64), buffers=[_data_buffer(lines)],
        )
        if len(ev) < n:
            evs = evs.select(ev)
        table, orphans = self._pair(evs)
        self._count(lines, line_no, kind, orphans)
        return table

    def _count(self, lines: pa.Array, line_no: np.ndarray, kind: np.ndarray, orphans: np.ndarray) -> None:
        c = self.counts
        n = len(kind)
        c.lines += n
        skipped = 0
        for code, reason in _SKIP_REASON.items():
            k = int(np.count_nonzero(kind == code))
            c.skip(reason, k)
            skipped += k
        c.skip("orphan_resumed", len(orphans))
        c.parsed += n - skipped - len(orphans)
        if len(c.examples) < EXAMPLES_KEPT:
            bad = [(int(i), _SKIP_REASON[int(kind[i])]) for i in np.flatnonzero(kind >= _BLANK)[:EXAMPLES_KEPT]]
            bad += [(int(np.searchsorted(line_no, no)), "orphan_resumed") for no in orphans[:EXAMPLES_KEPT]]
            for i, reason in sorted(bad)[: EXAMPLES_KEPT - len(c.examples)]:
                c.example(int(line_no[i]), reason, lines[i].as_py() or "")

    def _run_relative(self, p: dict) -> None:
        """-r prints each line's time since the previous line's; ts_us
        becomes their running sum, in line order. Every timestamped line
        counts, resumed halves and signals included, because strace measures
        from whichever line it printed last. strace cuts each delta to the
        microsecond (``%06ld`` of nanoseconds / 1000), losing half a
        microsecond a line on average: adding that back keeps a million-line
        capture from drifting half a second."""
        ok = p["ts_ok"]
        if not ok.any():
            return
        half = np.cumsum(np.where(ok, 2 * p["ts"] + 1, 0)) + self._rel_half_us
        self._rel_half_us = int(half[-1])
        p["ts"] = np.where(ok, half // 2, p["ts"])

    def _set_clock(self, p: dict, kind: np.ndarray) -> None:
        parsed = np.flatnonzero(kind <= _KILLED)
        if not len(parsed):
            return
        i = parsed[0]
        self._clock_set = True
        if not p["ts_ok"][i]:
            self.clock = None
        elif p["tod"][i]:
            self.clock = "time_of_day"
        elif p["ts"][i] >= 10**15:  # 2001 onwards: -ttt; -r prints small deltas
            self.clock = "epoch"
        else:
            self.clock = "relative"

    def _parse(self, lines: pa.Array) -> dict:
        """Per-line fields of a block: kind code, pid, ts, name, args range
        and what follows the arguments."""
        n = len(lines)
        off, _ = _offsets_data(lines)
        L = np.diff(off)

        # Head.
        hlen = np.zeros(n, dtype=np.int64)
        ok = np.zeros(n, dtype=bool)
        pid = np.zeros(n, dtype=np.int64)
        pid_ok = np.zeros(n, dtype=bool)
        ts = np.zeros(n, dtype=np.int64)
        ts_ok = np.zeros(n, dtype=bool)
        tod = np.zeros(n, dtype=bool)
        toks = []
        rest = np.arange(n)
        passes = []
        if self._fast_head is not None:
            passes.append((self._fast_head, False))
        passes.append((_HEAD_ANY, True))
        for pattern, general in passes:
            if not len(rest):
                break
            sub = lines if len(rest) == n else _take_str(lines, rest)
            m = pc.extract_regex(sub, pattern=pattern)
            v = np.asarray(m.is_valid())
            idx = rest[v]
            rest = rest[~v]
            if not len(idx):
                continue
            mv = m if v.all() else m.filter(pa.array(v))
            p_s, ts_s, tok = mv.field("p"), mv.field("ts"), mv.field("tok")
            hl = _lengths(p_s) + _lengths(ts_s) + _lengths(tok)
            if general:
                hl += _lengths(mv.field("rel"))
                is_tod = np.asarray(pc.match_substring(ts_s, ":"))
            else:
                is_tod = np.full(len(idx), self._fast_tod)
            hlen[idx] = hl
            ok[idx] = True
            toks.append((idx, tok))
            has = _lengths(p_s) > 0
            if has.any():
                # "2482  " or "[pid  5940] "
                pid[idx[has]] = _ints(pc.utf8_trim(p_s.filter(pa.array(has)), " []pid"))
                pid_ok[idx[has]] = True
            has = _lengths(ts_s) > 0
            if has.any():
                hm = pa.array(has)
                ts[idx[has]] = _seconds_us(pc.utf8_trim(ts_s.filter(hm), " "), is_tod[has])
                ts_ok[idx[has]] = True
            tod[idx] = is_tod
        tok = _scatter_str(n, toks).fill_null("")

        # What the line is, from the token that ends the head.
        first, last = _first_last(tok)
        kind = np.full(n, _UNRECOGNISED, dtype=np.int64)
        kind[L == 0] = _BLANK
        is_call = ok & (last == ord("("))
        is_res = ok & (first == ord("<"))
        is_sig = ok & (first == ord("-"))
        is_exit = ok & (first == ord("+"))
        kind[ok & ~is_call & ((first == ord("s")) | (first == ord("[")))] = _MESSAGE
        # -k prints the stack of each call on its own lines: " > /lib/...(fn+0x26) [0x1ab70]".
        other = np.flatnonzero(~ok & (L > 3))
        if len(other):
            stack = np.asarray(pc.starts_with(_take_str(lines, other), " > "))
            kind[other[stack]] = _STACK

        a_start = hlen
        a_stop = hlen.copy()
        unf = np.asarray(pc.ends_with(lines, "<unfinished ...>"))
        unf_sp = np.asarray(pc.ends_with(lines, " <unfinished ...>"))
        det = np.asarray(pc.ends_with(lines, " <detached ...>"))
        u = is_call & unf & (L - 16 >= hlen)
        kind[u] = _UNFINISHED
        a_stop[u] = np.maximum(L[u] - np.where(unf_sp[u], 17, 16), hlen[u])
        d = is_call & ~unf & det
        kind[d] = _DETACHED
        a_stop[d] = np.maximum(L[d] - 15, hlen[d])

        # "<... read resumed>" or "<... resumed>"; anything else is not strace.
        res_ok = is_res & np.asarray(pc.ends_with(tok, "resumed>"))

        ret = np.zeros(n, dtype=np.int64)
        ret_ok = np.zeros(n, dtype=bool)
        dur = np.zeros(n, dtype=np.int64)
        dur_ok = np.zeros(n, dtype=bool)
        errno = pa.nulls(n, pa.string())
        ti = np.flatnonzero((is_call & ~unf & ~det) | res_ok)
        if len(ti):
            tl, r, rok, du, dok, err = self._tails(lines, ti)
            good = (tl >= 0) & (L[ti] - tl >= hlen[ti])
            gi = ti[good]
            kind[ti[~good]] = _TRUNCATED
            kind[gi] = np.where(is_res[gi], _RESUMED, _SYSCALL)
            a_stop[gi] = L[gi] - tl[good]
            ret[gi], ret_ok[gi] = r[good], rok[good]
            dur[gi], dur_ok[gi] = du[good], dok[good]
            errno = _scatter_str(n, [(gi, err.filter(pa.array(good)))])
        kind[is_call & (kind == _UNRECOGNISED)] = _TRUNCATED

        # Signals "--- SIGCHLD {...} ---" and exits "+++ exited with 0 +++":
        # the text between the markers becomes args.
        marked = []
        for mask, suffix in ((is_sig, " ---"), (is_exit, " +++")):
            good = mask & np.asarray(pc.ends_with(lines, suffix)) & (L - 4 >= hlen)
            kind[mask & ~good] = _TRUNCATED
            a_stop[good] = L[good] - 4
            marked.append(np.flatnonzero(good))
        sig_i, exit_i = marked

        names = []
        ci = np.flatnonzero(is_call & (kind <= _DETACHED))
        if len(ci):
            names.append((ci, pc.utf8_slice_codeunits(tok.take(pa.array(ci)), 0, -1)))
        ri = np.flatnonzero(kind == _RESUMED)
        if len(ri):
            names.append((ri, pc.utf8_slice_codeunits(tok.take(pa.array(ri)), 5, -9)))
        if len(sig_i):
            m = pc.extract_regex(_cut(lines, sig_i, a_start[sig_i], a_stop[sig_i]), pattern=_SIGNAL_BODY)
            v = np.asarray(m.is_valid())
            kind[sig_i[v]] = _SIGNAL
            kind[sig_i[~v]] = _TRUNCATED
            names.append((sig_i[v], m.field("sig").filter(pa.array(v))))
        if len(exit_i):
            m = pc.extract_regex(_cut(lines, exit_i, a_start[exit_i], a_stop[exit_i]), pattern=_EXIT_BODY)
            v = np.asarray(m.is_valid())
            # "+++ superseded by execve in pid 123 +++" is an exit too.
            kind[exit_i] = _EXIT
            if v.any():
                mv = m.filter(pa.array(v))
                vi = exit_i[v]
                killed = np.asarray(pc.not_equal(mv.field("sig"), ""))
                kind[vi[killed]] = _KILLED
                names.append((vi[killed], mv.field("sig").filter(pa.array(killed))))
                ret[vi[~killed]] = _ints(mv.field("st").filter(pa.array(~killed)))
                ret_ok[vi[~killed]] = True

        return {
            "kind": kind, "pid": pid, "pid_ok": pid_ok, "ts": ts, "ts_ok": ts_ok, "tod": tod,
            "name": _scatter_str(n, names), "a_start": a_start, "a_stop": a_stop,
            "ret": ret, "ret_ok": ret_ok, "errno": errno, "dur": dur, "dur_ok": dur_ok,
        }

    def _tails(self, lines: pa.Array, ti: np.ndarray):
        """For lines ti: (tail byte length or -1, ret, ret valid, dur_us,
        dur valid, errno string or null), each aligned with ti."""
        m = len(ti)
        off, _ = _offsets_data(lines)
        L = off[ti + 1] - off[ti]
        w = np.minimum(L, TAIL_WINDOW)
        window = _views(off[ti + 1] - w, w, np.zeros(m, np.int64), [_data_buffer(lines)], pa.binary())
        rev = pc.binary_reverse(window)

        tl = np.full(m, -1, dtype=np.int64)
        ret = np.zeros(m, dtype=np.int64)
        ret_ok = np.zeros(m, dtype=bool)
        dur = np.zeros(m, dtype=np.int64)
        dur_ok = np.zeros(m, dtype=bool)
        errs = []

        def take_dur(idx, d):
            has = _lengths(d) > 0
            if has.any():
                secs = pc.utf8_trim(d.filter(pa.array(has)).cast(pa.string()), " <>")
                dur[idx[has]] = _seconds_us(secs, np.zeros(int(has.sum()), dtype=bool))
                dur_ok[idx[has]] = True

        rest = np.arange(m)
        order = (_TAIL_REV_DUR, _TAIL_REV_NODUR) if self._has_dur is not False else (_TAIL_REV_NODUR, _TAIL_REV_DUR)
        for pattern in order:
            if not len(rest):
                break
            sub = rev if len(rest) == m else rev.take(pa.array(rest))
            r = pc.extract_regex(sub, pattern=pattern)
            v = np.asarray(r.is_valid())
            idx = rest[v]
            rest = rest[~v]
            if not len(idx):
                continue
            rv = r if v.all() else r.filter(pa.array(v))
            d, x, val = rv.field("d"), rv.field("x"), rv.field("v")
            tl[idx] = _lengths(d) + _lengths(x) + _lengths(val)
            take_dur(idx, pc.binary_reverse(d))
            # v is ") = 137" once turned round; the value starts after "= ".
            val = pc.binary_reverse(val).cast(pa.string())
            eq = pc.find_substring(val, "= ")
            vs = _cut(val, np.arange(len(val)), eq.to_numpy() + 2, _lengths(val))
            ret[idx], ret_ok[idx] = _parse_ret(vs)
            hx = np.flatnonzero(_lengths(x) > 0)
            if len(hx):
                xs = pc.binary_reverse(x.take(pa.array(hx))).cast(pa.string())
                e = pc.extract_regex(xs, pattern=_ERRNO)
                ev = np.asarray(e.is_valid())
                errs.append((idx[hx[ev]], e.field("e").filter(pa.array(ev))))
        if len(rest):
            r = pc.extract_regex(_take_str(lines, ti[rest]), pattern=_TAIL_ANY)
            v = np.asarray(r.is_valid())
            idx = rest[v]
            if len(idx):
                rv = r.filter(pa.array(v))
                tl[idx] = _lengths(rv.field("t"))
                take_dur(idx, rv.field("d"))
                ret[idx], ret_ok[idx] = _parse_ret(rv.field("v"))
                err = rv.field("err")
                has = np.asarray(pc.not_equal(err, ""))
                errs.append((idx[has], err.filter(pa.array(has))))
        return tl, ret, ret_ok, dur, dur_ok, _scatter_str(m, errs)

    # -- pairing -----------------------------------------------------------------

    def _pair(self, cur: _Events) -> tuple[pa.Table, np.ndarray]:
        """Join each <... resumed> row to its thread's <unfinished ...> row.

        Rows are those still pending from earlier feeds followed by this
        block's, so index order is line order.
        """
        ev = _Events.concat(self._pending, cur)
        m = len(ev)
        if m == 0:
            self._pending = _Events.empty()
            return _empty_table(), np.zeros(0, dtype=np.int64)
        kind = ev.kind
        pid = np.where(ev.pid_ok, ev.pid, -1)
        flow = np.flatnonzero(kind != _SIGNAL)
        # A stable sort by pid keeps each thread's rows in line order, so a
        # resumed row's predecessor is its thread's previous call.
        order = flow[np.argsort(pid[flow], kind="stable")]
        k = kind[order]
        same = np.zeros(len(order), dtype=bool)
        same[1:] = pid[order][1:] == pid[order][:-1]
        cand = np.zeros(len(order), dtype=bool)
        cand[1:] = same[1:] & (k[1:] == _RESUMED) & (k[:-1] == _UNFINISHED)
        ci = np.flatnonzero(cand)
        if len(ci):
            rn = ev.name.take(pa.array(order[ci])).fill_null("")
            un = ev.name.take(pa.array(order[ci - 1])).fill_null("")
            agree = np.asarray(pc.or_(pc.equal(rn, ""), pc.equal(rn, un)))
            cand[ci[~agree]] = False
        pi = np.flatnonzero(cand)
        partner = np.full(m, -1, dtype=np.int64)
        partner[order[pi - 1]] = order[pi]
        paired_res = np.zeros(m, dtype=bool)
        paired_res[order[pi]] = True

        # An unfinished call with nothing after it on its thread may resume
        # in a later chunk; one followed by anything else never will.
        last_of_pid = np.ones(len(order), dtype=bool)
        last_of_pid[:-1] = ~same[1:]
        pending = np.zeros(m, dtype=bool)
        pending[order[(k == _UNFINISHED) & last_of_pid]] = True

        orphan = (kind == _RESUMED) & ~paired_res
        if orphan.any():
            _adopt_orphans(ev, partner, orphan, pending, paired_res)
        orphan &= ~paired_res

        rows = np.flatnonzero(~paired_res & ~pending)
        unfinished = ((kind == _UNFINISHED) & (partner < 0)) | (kind == _DETACHED)
        table = self._emit(ev, rows, partner[rows], unfinished[rows])
        self._pending = ev.select(np.flatnonzero(pending)).detached()
        return table, ev.line_no[orphan]

    # -- output --------------------------------------------------------------------

    def _emit(self, ev: _Events, rows: np.ndarray, partner: np.ndarray, unfinished: np.ndarray) -> pa.Table:
        n = len(rows)
        if n == 0:
            return _empty_table()
        has_p = partner >= 0
        src = np.where(has_p, partner, rows)
        kind = ev.kind[rows]

        a_start, a_len, a_buf = ev.a_start[rows], ev.a_len[rows], ev.a_buf[rows]
        buffers = list(ev.buffers)
        pj = np.flatnonzero(has_p)
        if len(pj):
            # Unfinished part + resumed part: the only strings built anew.
            joined = pc.binary_join_element_wise(ev.args(rows[pj]), ev.args(partner[pj]), "")
            joff, _ = _offsets_data(joined)
            a_start[pj], a_len[pj], a_buf[pj] = joff[:-1], np.diff(joff), len(buffers)
            buffers.append(_data_buffer(joined))
        args = _views(a_start, a_len, a_buf, buffers)

        ia = pa.array(rows, pa.int64())
        name = ev.name.take(ia)
        # A resumed line's arguments do not begin with the call's first one.
        fd, fd_ok, fd_info = _first_fd(args, name, (kind <= _DETACHED) & (kind != _RESUMED))
        data = _data(args, name, fd, fd_ok)
        if (a_len > ARGS_CAP).any():
            args = pc.utf8_slice_codeunits(args, 0, ARGS_CAP)
        pid_ok = ev.pid_ok[rows]
        # On stderr a call can start unprefixed and resume with a pid.
        pid = np.where(pid_ok, ev.pid[rows], ev.pid[src])
        pid_ok = pid_ok | ev.pid_ok[src]
        return pa.table(
            {
                "line_no": pa.array(ev.line_no[rows]),
                "pid": pa.array(pid.astype(np.int32), mask=~pid_ok),
                "ts_us": pa.array(ev.ts[rows], mask=~ev.ts_ok[rows]),
                "dur_us": pa.array(ev.dur[src], mask=~ev.dur_ok[src]),
                "kind": _KIND_NAMES.take(pa.array(kind)),
                "syscall": pc.if_else(pa.array(kind == _EXIT), pa.scalar(None, pa.string()), name),
                "fd": pa.array(fd.astype(np.int32), mask=~fd_ok),
                "fd_info": fd_info,
                "args": args,
                "ret": pa.array(ev.ret[src], mask=~ev.ret_ok[src]),
                "errno": ev.errno.take(pa.array(src, pa.int64())),
                "unfinished": pa.array(unfinished.astype(bool)),
                "data": data,
            },
            schema=SCHEMA,
        )


def _adopt_orphans(ev: _Events, partner, orphan, pending, paired_res) -> None:
    """On stderr strace prints the [pid N] prefix only while more than one
    process is traced, so a call can start unprefixed and resume prefixed,
    or the other way round ("[pid 11463] rt_sigsuspend([], 8 <unfinished
    ...>" ... "<... rt_sigsuspend resumed>) = ?"). Pair such a resumed line
    with the latest earlier unpaired call of the same name whose prefix
    presence differs. Rare, so a plain loop, bounded for hostile input."""
    free = np.flatnonzero((ev.kind == _UNFINISHED) & (partner < 0))
    by_prefix = {True: free[ev.pid_ok[free]], False: free[~ev.pid_ok[free]]}
    taken: set[int] = set()
    for r in np.flatnonzero(orphan)[:ADOPT_MAX]:
        cands = by_prefix[not ev.pid_ok[r]]
        hi = int(np.searchsorted(cands, r))
        if not hi:
            continue
        rname = ev.name[int(r)].as_py()
        for u in cands[max(0, hi - ADOPT_LOOKBACK):hi][::-1]:
            u = int(u)
            if u not in taken and (not rname or rname == ev.name[u].as_py()):
                taken.add(u)
                partner[u] = r
                paired_res[r] = True
                pending[u] = False
                break


def _first_fd(args: pa.Array, name: pa.Array, rows: np.ndarray):
    """fd, fd-valid mask and -y annotation of each row's first argument:
    "7<TCP:[...]>, " "3, " "3</etc/ld.so.cache>" "1</dev/pts/0<char 136:0>>, "
    are fds; "0x7f...", "-1", "[{fd=7" are not."""
    n = len(args)
    fd = np.zeros(n, dtype=np.int64)
    ok = np.zeros(n, dtype=bool)
    info = pa.nulls(n, pa.string())
    off, data = _offsets_data(args)
    L = np.diff(off)
    width = 10
    ch = _gather(data, off[:-1], L, width)
    isd = (ch >= ord("0")) & (ch <= ord("9")) & (np.arange(width) < L[:, None])
    run = np.where(isd.all(axis=1), width, np.argmin(isd, axis=1))
    nxt = ch[np.arange(n), np.minimum(run, width - 1)]
    valid = rows & (run >= 1) & (run <= 9) & ((run == L) | (nxt == ord(",")) | (nxt == ord("<")))
    annotated = valid & (run < L) & (nxt == ord("<"))
    cand = np.flatnonzero(valid & ~annotated)
    if len(cand):
        known = np.asarray(pc.is_in(name.take(pa.array(cand)), value_set=_FD_FIRST).fill_null(False))
        valid[cand[~known]] = False
    vi = np.flatnonzero(valid)
    if not len(vi):
        return fd, ok, info
    fd[vi] = _ints(_cut(args, vi, np.zeros(len(vi), np.int64), run[vi]))
    ok[vi] = True
    ai = np.flatnonzero(annotated)
    if len(ai):
        sub = _take_str(args, ai)
        # The annotation ends at the '>' before ", " or at the very end:
        # "TCP:[127.0.0.1:42018->127.0.0.1:19093]" holds a '>' of its own.
        end = pc.find_substring(sub, ">, ").to_numpy()
        _, last = _first_last(sub)
        end = np.where(end >= 0, end, np.where(last == ord(">"), L[ai] - 1, -1))
        good = end > run[ai]
        gi = np.flatnonzero(good)
        if len(gi):
            info = _scatter_str(n, [(ai[gi], _cut(sub, gi, run[ai][gi] + 1, end[gi]))])
    return fd, ok, info


def _data(args: pa.Array, name: pa.Array, fd: np.ndarray, fd_ok: np.ndarray) -> pa.Array:
    """The unescaped first quoted string of writes to stdout/stderr."""
    n = len(args)
    si = np.flatnonzero(fd_ok & ((fd == 1) | (fd == 2)))
    if len(si):
        w = np.asarray(pc.is_in(name.take(pa.array(si)), value_set=_WRITE_FAMILY).fill_null(False))
        si = si[w]
    if not len(si):
        return pa.nulls(n, pa.string())
    m = pc.extract_regex(_take_str(args, si), pattern=_QUOTED)
    v = np.asarray(m.is_valid())
    si = si[v]
    q = m.field("q").filter(pa.array(v))
    # Log lines escape only \n \t \r \" (no escaped backslash), so whole-array
    # replaces decode them; anything else goes through unescape() one by one.
    easy = q
    for esc, ch in (('\\"', '"'), ("\\n", "\n"), ("\\t", "\t"), ("\\r", "\r")):
        easy = pc.replace_substring(easy, esc, ch)
    unusual = np.asarray(pc.match_substring_regex(q, _UNUSUAL_ESCAPE))
    if unusual.any():
        ui = np.flatnonzero(unusual)
        hard = pa.array([unescape(s) for s in q.take(pa.array(ui)).to_pylist()], pa.string())
        easy = pc.replace_with_mask(easy, pa.array(unusual), hard)
    return _scatter_str(n, [(si, easy)])


def _cut_by_message(line: str | None) -> bool:
    """Whether strace's own message cut this line, leaving the rest of it on
    the next line (see _join_cut_lines)."""
    if not line or not line.endswith(("attached", "detached")):
        return False
    m = re.match(r"^(.+?)strace: Process \d+ (?:attached|detached)$", line)
    return bool(m) and not re.fullmatch(r"(?:\[pid +\d+\] )?", m.group(1))


def _join_cut_lines(lines: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Rejoin "wait4(-1, strace: Process 5940 attached" + " <unfinished ...>".

    Returns the lines with each first half replaced by the whole line, and
    for each line the index of the line it was joined to (-1 for none): the
    second halves point at their first.
    """
    n = len(lines)
    joined_to = np.full(n, -1, dtype=np.int64)
    ends = pc.or_(pc.ends_with(lines, " attached"), pc.ends_with(lines, " detached"))
    ci = np.flatnonzero(np.asarray(ends))
    ci = ci[ci + 1 < n]
    if not len(ci):
        return lines, joined_to
    m = pc.extract_regex(lines.take(pa.array(ci)), pattern=_SPLIT_MSG)
    pre = m.field("pre").fill_null("")
    nxt = lines.take(pa.array(ci + 1))
    # Not when the first half is only a prefix (a plain message line) or the
    # next line starts a line of its own.
    only_prefix = np.asarray(pc.match_substring_regex(pre, r"^(?:\[pid +\d+\] )?$"))
    own = np.asarray(pc.extract_regex(nxt, pattern=_HEAD_ANY).is_valid())
    use = np.asarray(m.is_valid()) & ~only_prefix & ~own
    if not use.any():
        return lines, joined_to
    um = pa.array(use)
    joined = pc.binary_join_element_wise(pre.filter(um), nxt.filter(um), "")
    mask = np.zeros(n, dtype=bool)
    mask[ci[use]] = True
    joined_to[ci[use] + 1] = ci[use]
    return pc.replace_with_mask(lines, pa.array(mask), joined), joined_to


# --- Program output on strace's stream ------------------------------------------
#
# Without -o, strace writes to stderr, and a traced program that writes to
# the same stderr has its text land in whatever line strace has open at that
# moment: strace prints a call's start when the call is entered and the rest
# when it returns. In the call's own line:
#   [pid 16476] 1795332605.978754 write(2</tmp/x>, "%7|...CorrId 2)\n", 156%7|...CorrId 2)
#   ) = 156 <0.000017>
# in another thread's, begun after strace closed the write's with
# <unfinished ...>, even between two of its arguments:
#   [pid 20541] 1795332819.097661 rt_sigprocmask(SIG_SETMASK, ~[KILL STOP RTMIN RT_1], %7|...NodeId 111
#   NULL, 8) = 0 <0.000013>
# or between two lines, on a line of its own. Text of several lines puts
# the rest of them in between. OUTPUT_LOOKBACK bounds how far back the
# write and the open line may be.
OUTPUT_LOOKBACK = 64
_PY_HEAD = re.compile(_HEAD_ANY)
# The calls that write a buffer to fd 1 or 2: 'write(2</dev/pts/0>, "' ...
_PY_STD_WRITE = re.compile(r'(?:write|pwrite64|sendto|send)\([12](?:<(?:[^<>]|<[^<>]*>)*>)?, "')
_PY_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"(\.\.\.)?')
# How a line that strace finished ends: ") = 0 <0.000012>", "= ?",
# " <unfinished ...>", " <detached ...>", "--- ... ---", "+++ ... +++".
_PY_FINISHED = re.compile(r"(?:= \S.*|<unfinished \.\.\.>|<detached \.\.\.>| ---| \+\+\+)$")


def _std_write_buffer(line: str) -> tuple[str, bool, int] | None:
    """For a write to fd 1/2: the text it puts out, whether -s cut it, and
    where the quoted buffer ends on the line; None for other lines."""
    m = _PY_HEAD.match(line)
    if not m or not m.group("tok").endswith("("):
        return None
    start = m.start("tok")
    if not _PY_STD_WRITE.match(line, start):
        return None
    q = _PY_QUOTED.search(line, start)
    return (unescape(q.group(1)), q.group(2) is not None, q.end()) if q else None


def _text_start(line: str, head_end: int, between: list[str], writes) -> int:
    """Where a write's text starts on the open line it landed in, followed by
    the lines ``between`` and then the rest of the line; -1 when it is not
    the text of the line's own write or of one of ``writes`` (buffers of the
    writes before it, nearest first)."""
    own = _std_write_buffer(line)
    for k, (text, cut, qend) in enumerate(itertools.chain([own] if own else [], writes)):
        parts = text.split("\n")
        if not parts[0]:
            continue
        # The whole buffer: its lines are this line's end, the lines in
        # between, and nothing after the last newline. A cut one (-s) is
        # known only to its cut.
        whole = len(parts) == len(between) + 2 and parts[-1] == "" and between == parts[1:-1]
        if (whole or (cut and len(parts) > 1)) and line.endswith(parts[0]):
            at = len(line) - len(parts[0])
        elif cut and len(parts) == 1:
            if own and k == 0:  # after its own length argument: '"..., 432%7|...'
                m = re.compile(r", \d+" + re.escape(parts[0])).match(line, qend)
                at = m.end() - len(parts[0]) if m else -1
            else:
                at = line.rfind(parts[0])
        else:
            continue
        if at >= head_end:
            return at
    return -1


def _join_program_output(lines: pa.Array, kind: np.ndarray, joined_to: np.ndarray,
                          context: list[str]) -> tuple[pa.Array | None, np.ndarray]:
    """Take the program's text out of strace's lines: cut it from the open
    line it landed in and join that line's rest to it, and mark the lines
    that are only program text. Tried only for lines that did not parse, so
    a capture written with -o costs nothing. ``context``: the lines just
    before the block, where the write may be.

    Returns the new lines (None when nothing changed; joined_to then points
    each line's rest at the line it ends) and the mask of program text."""
    n = len(lines)
    program = np.zeros(n, dtype=bool)
    odd = np.flatnonzero(kind == _UNRECOGNISED)
    if not len(odd):
        return None, program
    pre = len(context)
    text: list[str | None] = context + [None] * n

    def get(i: int) -> str:
        if text[i] is None:
            text[i] = lines[i - pre].as_py() or ""
        return text[i]

    heads: dict[int, re.Match | None] = {}

    def head(i: int):
        if i not in heads:
            heads[i] = _PY_HEAD.match(get(i))
        return heads[i]

    buffers: dict[int, tuple | None] = {}

    def writes_before(i: int):
        """The buffers of the writes to fd 1/2 before line i, nearest first."""
        for x in range(i - 1, max(-1, i - 1 - OUTPUT_LOOKBACK), -1):
            if x not in buffers:
                w = get(x)
                buffers[x] = _std_write_buffer(w) if "write(" in w or "send" in w else None
            if buffers[x]:
                yield buffers[x]

    replace: dict[int, str] = {}
    for c in odd.tolist():
        if program[c] or joined_to[c] >= 0:
            continue
        rest = get(pre + c)
        # The rest of an open line, after the text (and its other lines).
        between: list[str] = []
        for j in range(c - 1, max(-1, c - 1 - OUTPUT_LOOKBACK), -1):
            if joined_to[j] >= 0 or j in replace:
                break
            h = head(pre + j)
            if h is None:
                between.insert(0, get(pre + j))
                continue
            if kind[j] == _TRUNCATED:
                line = get(pre + j)
                at = _text_start(line, h.end(), between, writes_before(pre + j))
                if at >= 0:
                    replace[j] = line[:at] + rest
                    joined_to[c] = j
                    program[j + 1:c] = True
            break
        if joined_to[c] >= 0:
            continue
        # A text line of its own, between two of strace's.
        for buf in writes_before(pre + c):
            if buf[0] and (rest == buf[0].split("\n")[0] or (buf[1] and "\n" not in buf[0]
                                                                     and rest.startswith(buf[0]))):
                program[c] = True
                break
    if not replace:
        return None, program
    mask = np.zeros(n, dtype=bool)
    idx = sorted(replace)
    mask[idx] = True
    return pc.replace_with_mask(lines, pa.array(mask), pa.array([replace[i] for i in idx], pa.string())), program


def _held_tail(block: pa.Array) -> int:
    """How many of the block's last lines may still be waiting for the rest
    of a line in what comes next: a line cut by an strace message, or an open
    line (within OUTPUT_LOOKBACK of the end) and what follows it."""
    k = len(block)
    if not k:
        return 0
    hold = 1 if _cut_by_message(block[k - 1].as_py()) else 0
    for j in range(k - 1, max(-1, k - 1 - OUTPUT_LOOKBACK), -1):
        line = block[j].as_py() or ""
        if _PY_HEAD.match(line):
            if not _PY_FINISHED.search(line):
                hold = max(hold, k - j)
            break
    return hold


def _concat(tables: list[pa.Table]) -> pa.Table:
    """The tables' rows in line order."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return _empty_table()
    t = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    line_no = np.concatenate([c.to_numpy() for c in t["line_no"].chunks])
    if len(line_no) < 2 or (line_no[1:] >= line_no[:-1]).all():
        return t
    # Only calls that completed in a later block are out of place, so the
    # sorted order is a few long runs of the current one: stitch slices
    # together rather than copy every row with take().
    perm = np.argsort(line_no, kind="stable")
    breaks = np.flatnonzero(perm[1:] != perm[:-1] + 1) + 1
    if len(breaks) > 4096:
        return t.take(pa.array(perm))
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(perm)]])
    return pa.concat_tables([t.slice(int(perm[a]), int(b - a)) for a, b in zip(starts, ends)])


def _as_string_array(lines) -> pa.Array:
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks() if lines.num_chunks else pa.array([], pa.string())
    elif not isinstance(lines, pa.Array):
        lines = pa.array(list(lines), pa.string())
    if lines.type != pa.string():
        lines = lines.cast(pa.string())
    if lines.null_count:
        lines = lines.fill_null("")
    if len(lines) and pc.any(pc.ends_with(lines, "\r")).as_py():  # CRLF files
        lines = pc.utf8_rtrim(lines, "\r")
    return lines


# --- Convenience ------------------------------------------------------------------


def parse_lines(lines: list[str] | pa.Array, first_line_no: int = 1) -> tuple[pa.Table, ParseCounts]:
    """Parse a whole input at once: one feed() and finish(), in line order."""
    p = StraceParser()
    a = p.feed(_as_string_array(lines), first_line_no)
    return _concat([a, p.finish()]), p.counts


def looks_like(sample: list[str]) -> float:
    """0..1: how much these first lines of a file look like strace output.

    The share of non-blank lines that parse (strace's own messages count),
    so strace output scores 1 and a log, JSON or source file near 0.
    """
    try:
        lines = [s.rstrip("\r\n") for s in sample if isinstance(s, str)]
        if not lines:
            return 0.0
        p = StraceParser()
        p.feed(pa.array(lines, pa.string()), 1)
        p.finish()
        c = p.counts
        nonblank = c.lines - c.skipped.get("blank", 0)
        if nonblank <= 0:
            return 0.0
        good = c.parsed + sum(c.skipped.get(k, 0) for k in ("strace_message", "orphan_resumed", "program_output"))
        return max(0.0, min(1.0, good / nonblank))
    except Exception:  # a guess about an arbitrary file must never raise
        return 0.0
