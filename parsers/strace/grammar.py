"""The line formats strace prints, as RE2 patterns for pyarrow.compute."""
from __future__ import annotations

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
HEAD_ANY = (
    r"^(?P<p>(?:\[pid +\d{1,9}\] |\d{1,9} +)?)"
    r"(?P<ts>(?: *\d{1,10}\.\d{1,9}|\d\d:\d\d:\d\d(?:\.\d{1,9})?) )?"
    r"(?P<rel>(?:\(\+ *\d{1,10}\.\d{1,9}\) )?)"
    + _TOKEN.format(r"|strace: |\[ Process PID=")
)
# The same for the one layout a file was found to use, written so that no two
# branches can start on the same character: RE2 then matches it one-pass,
# about twice as fast. Lines it misses go through HEAD_ANY.
FAST_PID = {"o": r"(?P<p>\d{1,9} +)", "b": r"(?P<p>(?:\[pid +\d{1,9}\] )?)"}
FAST_TS = {
    # After "2482  " the padding is the pid's; -r pads its own otherwise.
    "num_o": r"(?P<ts>\d{1,10}\.\d{1,9} )",
    "num": r"(?P<ts> *\d{1,10}\.\d{1,9} )",
    "tod": r"(?P<ts>\d\d:\d\d:\d\d(?:\.\d{1,9})? )",
    "none": r"(?P<ts>)",
}
FAST_TOKEN = _TOKEN.format("")

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
# ("3</dev/null<char 1:3>>") fall through to TAIL_ANY.
_TAIL_REV = (
    r"^(?P<d>{0})(?P<x>(?:\)[^()]*\( )?(?:[A-Z_][A-Z0-9_]* )?)"
    r"(?P<v>[0-9?>][^ ]* = +\))"
)
TAIL_REV_DUR = _TAIL_REV.format(r">\d{1,9}\.\d{1,9}< ")
TAIL_REV_NODUR = _TAIL_REV.format("")
# Forwards and on the whole line, for what the reversed patterns miss:
#   ") = 3</dev/null<char 1:3>> <0.000014>", ") = -1 512 (Unknown error 512)",
# tails longer than the window. Leftmost match, like the reversed one.
TAIL_ANY = (
    r"(?P<t>\) += (?P<v>(?:-?\d+|0x[0-9a-fA-F]+|\?)(?:<(?:[^<>]|->|<[^<>]*>)*>)?)"
    r"(?: (?P<err>E[A-Z0-9_]+|\d+))?(?: \([^\"]*\))?"
    r"(?: <(?P<d>\d{1,9}\.\d{1,9})>)?)$"
)
# " ENOENT (No such file or directory)": the errno part of a tail.
ERRNO = r"^ (?P<e>E[A-Z0-9_]+)"
# "wait4(-1, strace: Process 5940 attached" then " <unfinished ...>": on
# stderr strace's own messages can cut a line in two.
SPLIT_MSG = r"^(?P<pre>.+?)strace: Process \d+ (?:attached|detached)$"
# Between "--- " and " ---": "SIGCHLD {si_signo=SIGCHLD, ...}", "stopped by SIGSTOP".
SIGNAL_BODY = r"^(?:stopped by )?(?P<sig>SIG[A-Z0-9_+-]+|\d+)"
# Between "+++ " and " +++": "exited with 0", "killed by SIGKILL (core dumped)".
EXIT_BODY = r"^(?:exited with (?P<st>\d{1,9})|killed by (?P<sig>SIG[A-Z0-9_+-]+|\d+))"
# The first C string of the arguments: '2</tmp/x.log>, "%7|...CorrId 20)\n", 157'
# or 'writev(2, [{iov_base="...", iov_len=5}], 1'.
QUOTED = r'^[^"]*"(?P<q>(?:[^"\\]|\\.)*)"'
UNUSUAL_ESCAPE = r'\\[^ntr"]'
