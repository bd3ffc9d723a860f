"""One block of strace lines -> per-line fields (kind, pid, time, name,
where the arguments are, what follows them), after learning the line
layout a file uses from its first lines."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers import scan
from kdiag.parsers.strace.grammar import (
    ERRNO,
    EXIT_BODY,
    FAST_PID,
    FAST_TOKEN,
    FAST_TS,
    HEAD_ANY,
    SIGNAL_BODY,
    TAIL_ANY,
    TAIL_REV_DUR,
    TAIL_REV_NODUR,
)
from kdiag.parsers.strace.schema import (
    BLANK,
    DETACHED,
    EXIT,
    KILLED,
    MESSAGE,
    RESUMED,
    SIGNAL,
    STACK,
    SYSCALL,
    TRUNCATED,
    UNFINISHED,
    UNRECOGNISED,
)
from kdiag.parsers.strace.values import ints, parse_ret, scatter_str, seconds_us
from kdiag.parsers.strings import cut as _cut
from kdiag.parsers.strings import data_buffer as _data_buffer
from kdiag.parsers.strings import first_last as _first_last
from kdiag.parsers.strings import lengths as _lengths
from kdiag.parsers.strings import offsets_data as _offsets_data
from kdiag.parsers.strings import take_str as _take_str
from kdiag.parsers.strings import views as _views

# The end of a completed call is parsed from the line's last TAIL_WINDOW
# bytes; only lines whose end is longer than that are parsed again in full.
TAIL_WINDOW = 192
# How many leading lines decide the line format (see learn_layout).
SAMPLE_LINES = 256


class Layout(NamedTuple):
    """The one line layout a file was found to use."""
    fast_head: str          # the one-pass head pattern for it
    fast_tod: bool          # its timestamps are times of day
    has_dur: bool           # -T durations: which tail pattern to try first
    pid_kind: str = "b"     # FAST_PID's key
    ts_kind: str = "none"   # FAST_TS's key


def learn_layout(lines: pa.Array) -> Layout | None:
    """Pick the one-pass head pattern, and which tail pattern to try
    first, from the first lines that parse; None when none does."""
    sample = lines.slice(0, SAMPLE_LINES)
    head = pc.extract_regex(sample, pattern=HEAD_ANY)
    valid = np.asarray(head.is_valid())
    # strace's own messages ("strace: Process 1 attached") have no prefix.
    tok = head.field("tok").fill_null("")
    valid &= ~np.asarray(pc.or_(pc.starts_with(tok, "strace"), pc.starts_with(tok, "[")))
    if not valid.any():
        return None
    row = head[int(np.flatnonzero(valid)[0])].as_py()
    ts = row["ts"] or ""
    pid_kind = "o" if row["p"] and not row["p"].startswith("[") else "b"
    ts_kind = "tod" if ":" in ts else ("num" if ts else "none")
    tail = pc.extract_regex(sample, pattern=TAIL_ANY)
    durs = tail.filter(tail.is_valid()).field("d")
    has_dur = bool(len(durs)) and bool(pc.any(pc.not_equal(durs, "")).as_py())
    return layout_of(pid_kind, "num_o" if ts_kind == "num" and pid_kind == "o" else ts_kind, has_dur)


def layout_of(pid_kind: str, ts_kind: str, has_dur: bool) -> Layout:
    """The Layout of pid prefixes ``pid_kind`` and timestamps ``ts_kind``
    (FAST_PID's and FAST_TS's keys)."""
    return Layout("^" + FAST_PID[pid_kind] + FAST_TS[ts_kind] + FAST_TOKEN, ts_kind == "tod", has_dur,
                  pid_kind, ts_kind)


@dataclass
class _Fields:
    """The block's per-line fields, filled in by the steps of line_fields."""
    lines: pa.Array
    L: np.ndarray                # byte length of each line
    hlen: np.ndarray             # length of the head (pid, time, token)
    ok: np.ndarray               # the head matched
    pid: np.ndarray
    pid_ok: np.ndarray
    ts: np.ndarray
    ts_ok: np.ndarray
    tod: np.ndarray
    tok: pa.Array                # the token that ends the head ("" when none)
    # Filled in by _classify:
    kind: np.ndarray | None = None
    a_stop: np.ndarray | None = None   # where the arguments stop (they start at hlen)
    is_call: np.ndarray | None = None
    is_res: np.ndarray | None = None
    # Filled in by _completed (exits' ret by _names):
    ret: np.ndarray | None = None
    ret_ok: np.ndarray | None = None
    dur: np.ndarray | None = None
    dur_ok: np.ndarray | None = None
    errno: pa.Array | None = None

    def as_dict(self, names: list) -> dict:
        return {
            "kind": self.kind, "pid": self.pid, "pid_ok": self.pid_ok, "ts": self.ts, "ts_ok": self.ts_ok,
            "tod": self.tod, "name": scatter_str(len(self.lines), names), "a_start": self.hlen,
            "a_stop": self.a_stop, "ret": self.ret, "ret_ok": self.ret_ok, "errno": self.errno,
            "dur": self.dur, "dur_ok": self.dur_ok,
        }


def line_fields(lines: pa.Array, layout: Layout | None, compiled: bool | None = None) -> dict:
    """Per-line fields of a block: kind code, pid, ts, name, args range
    and what follows the arguments. The lines the file's layout reads and
    that end as most calls end are read in one compiled pass
    (``scan.strace_lines``) where it was built; the patterns below read the
    rest, and every line where ``compiled`` is False: the reference."""
    c = None if layout is None else scan.strace_lines(lines, layout.pid_kind, layout.ts_kind, layout.has_dur,
                                                      compiled)
    if c is None:
        return _line_fields(lines, layout)
    ok = c[scan.L_OK] == 1
    n = len(lines)
    flag = lambda k: c[k].astype(bool)  # noqa: E731
    p = {"kind": c[scan.L_KIND], "pid": c[scan.L_PID], "pid_ok": flag(scan.L_PID_OK), "ts": c[scan.L_TS],
         "ts_ok": flag(scan.L_TS_OK), "tod": np.full(n, layout.fast_tod), "a_start": c[scan.L_HLEN],
         "a_stop": c[scan.L_A_STOP], "ret": c[scan.L_RET], "ret_ok": flag(scan.L_RET_OK), "dur": c[scan.L_DUR],
         "dur_ok": flag(scan.L_DUR_OK)}
    buf = [_data_buffer(lines)]
    sure = np.flatnonzero(ok)
    names = [(sure, _views(c[scan.L_NAME, sure], c[scan.L_NAME_LEN, sure], np.zeros(len(sure), np.int64), buf))]
    ei = np.flatnonzero(c[scan.L_ERR_LEN] > 0)
    errs = [(ei, _views(c[scan.L_ERR, ei], c[scan.L_ERR_LEN, ei], np.zeros(len(ei), np.int64), buf))]
    if len(sure) < n:
        rest = np.flatnonzero(~ok)
        ref = _line_fields(_take_str(lines, rest), layout)
        for k, v in p.items():
            v[rest] = ref[k]
        names.append((rest, ref["name"]))
        errs.append((rest, ref["errno"]))
    p["name"] = scatter_str(n, names)
    p["errno"] = scatter_str(n, errs)
    return p


def _line_fields(lines: pa.Array, layout: Layout | None) -> dict:
    """line_fields by the patterns alone."""
    f = _heads(lines, layout)
    unf, det = _classify(f)
    _completed(f, unf, det, layout.has_dur if layout else None)
    return f.as_dict(_names(f))


def _heads(lines: pa.Array, layout: Layout | None) -> _Fields:
    """The head of each line: pid prefix, timestamp and the token after."""
    n = len(lines)
    off, _ = _offsets_data(lines)
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
    if layout is not None:
        passes.append((layout.fast_head, False))
    passes.append((HEAD_ANY, True))
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
            is_tod = np.full(len(idx), layout.fast_tod)
        hlen[idx] = hl
        ok[idx] = True
        toks.append((idx, tok))
        has = _lengths(p_s) > 0
        if has.any():
            # "2482  " or "[pid  5940] "
            pid[idx[has]] = ints(pc.utf8_trim(p_s.filter(pa.array(has)), " []pid"))
            pid_ok[idx[has]] = True
        has = _lengths(ts_s) > 0
        if has.any():
            hm = pa.array(has)
            ts[idx[has]] = seconds_us(pc.utf8_trim(ts_s.filter(hm), " "), is_tod[has])
            ts_ok[idx[has]] = True
        tod[idx] = is_tod
    tok = scatter_str(n, toks).fill_null("")
    return _Fields(lines, np.diff(off), hlen, ok, pid, pid_ok, ts, ts_ok, tod, tok)


def _classify(f: _Fields) -> tuple[np.ndarray, np.ndarray]:
    """What each line is, from the token that ends the head; where the
    arguments of unfinished and detached calls stop. Returns the masks of
    lines ending in <unfinished ...> and <detached ...>."""
    lines, L, hlen, ok = f.lines, f.L, f.hlen, f.ok
    first, last = _first_last(f.tok)
    kind = np.full(len(lines), UNRECOGNISED, dtype=np.int64)
    kind[L == 0] = BLANK
    is_call = ok & (last == ord("("))
    kind[ok & ~is_call & ((first == ord("s")) | (first == ord("[")))] = MESSAGE
    # -k prints the stack of each call on its own lines: " > /lib/...(fn+0x26) [0x1ab70]".
    other = np.flatnonzero(~ok & (L > 3))
    if len(other):
        stack = np.asarray(pc.starts_with(_take_str(lines, other), " > "))
        kind[other[stack]] = STACK

    a_stop = hlen.copy()
    unf = np.asarray(pc.ends_with(lines, "<unfinished ...>"))
    unf_sp = np.asarray(pc.ends_with(lines, " <unfinished ...>"))
    det = np.asarray(pc.ends_with(lines, " <detached ...>"))
    u = is_call & unf & (L - 16 >= hlen)
    kind[u] = UNFINISHED
    a_stop[u] = np.maximum(L[u] - np.where(unf_sp[u], 17, 16), hlen[u])
    d = is_call & ~unf & det
    kind[d] = DETACHED
    a_stop[d] = np.maximum(L[d] - 15, hlen[d])
    f.kind, f.a_stop, f.is_call, f.is_res = kind, a_stop, is_call, ok & (first == ord("<"))
    return unf, det


def _completed(f: _Fields, unf: np.ndarray, det: np.ndarray, has_dur: bool | None) -> None:
    """Return value, duration and errno of completed and resumed calls, and
    where their arguments stop."""
    n, kind, L, hlen, is_call, is_res = len(f.lines), f.kind, f.L, f.hlen, f.is_call, f.is_res
    # "<... read resumed>" or "<... resumed>"; anything else is not strace.
    res_ok = is_res & np.asarray(pc.ends_with(f.tok, "resumed>"))

    ret = np.zeros(n, dtype=np.int64)
    ret_ok = np.zeros(n, dtype=bool)
    dur = np.zeros(n, dtype=np.int64)
    dur_ok = np.zeros(n, dtype=bool)
    errno = pa.nulls(n, pa.string())
    ti = np.flatnonzero((is_call & ~unf & ~det) | res_ok)
    if len(ti):
        tl, r, rok, du, dok, err = _call_ends(f.lines, ti, has_dur)
        good = (tl >= 0) & (L[ti] - tl >= hlen[ti])
        gi = ti[good]
        kind[ti[~good]] = TRUNCATED
        kind[gi] = np.where(is_res[gi], RESUMED, SYSCALL)
        f.a_stop[gi] = L[gi] - tl[good]
        ret[gi], ret_ok[gi] = r[good], rok[good]
        dur[gi], dur_ok[gi] = du[good], dok[good]
        errno = scatter_str(n, [(gi, err.filter(pa.array(good)))])
    kind[is_call & (kind == UNRECOGNISED)] = TRUNCATED
    f.ret, f.ret_ok, f.dur, f.dur_ok, f.errno = ret, ret_ok, dur, dur_ok, errno


def _names(f: _Fields) -> list:
    """The name of each row-giving line: call, signal or killing signal, as
    (indices, names) parts; exits get their status as ret."""
    lines, kind, L, hlen, a_stop, tok = f.lines, f.kind, f.L, f.hlen, f.a_stop, f.tok
    first, _ = _first_last(tok)
    is_sig = f.ok & (first == ord("-"))
    is_exit = f.ok & (first == ord("+"))
    # Signals "--- SIGCHLD {...} ---" and exits "+++ exited with 0 +++":
    # the text between the markers becomes args.
    marked = []
    for mask, suffix in ((is_sig, " ---"), (is_exit, " +++")):
        good = mask & np.asarray(pc.ends_with(lines, suffix)) & (L - 4 >= hlen)
        kind[mask & ~good] = TRUNCATED
        a_stop[good] = L[good] - 4
        marked.append(np.flatnonzero(good))
    sig_i, exit_i = marked

    names = []
    ci = np.flatnonzero(f.is_call & (kind <= DETACHED))
    if len(ci):
        names.append((ci, pc.utf8_slice_codeunits(tok.take(pa.array(ci)), 0, -1)))
    ri = np.flatnonzero(kind == RESUMED)
    if len(ri):
        names.append((ri, pc.utf8_slice_codeunits(tok.take(pa.array(ri)), 5, -9)))
    if len(sig_i):
        m = pc.extract_regex(_cut(lines, sig_i, hlen[sig_i], a_stop[sig_i]), pattern=SIGNAL_BODY)
        v = np.asarray(m.is_valid())
        kind[sig_i[v]] = SIGNAL
        kind[sig_i[~v]] = TRUNCATED
        names.append((sig_i[v], m.field("sig").filter(pa.array(v))))
    if len(exit_i):
        m = pc.extract_regex(_cut(lines, exit_i, hlen[exit_i], a_stop[exit_i]), pattern=EXIT_BODY)
        v = np.asarray(m.is_valid())
        # "+++ superseded by execve in pid 123 +++" is an exit too.
        kind[exit_i] = EXIT
        if v.any():
            mv = m.filter(pa.array(v))
            vi = exit_i[v]
            killed = np.asarray(pc.not_equal(mv.field("sig"), ""))
            kind[vi[killed]] = KILLED
            names.append((vi[killed], mv.field("sig").filter(pa.array(killed))))
            f.ret[vi[~killed]] = ints(mv.field("st").filter(pa.array(~killed)))
            f.ret_ok[vi[~killed]] = True
    return names


def _call_ends(lines: pa.Array, ti: np.ndarray, has_dur: bool | None):
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
            dur[idx[has]] = seconds_us(secs, np.zeros(int(has.sum()), dtype=bool))
            dur_ok[idx[has]] = True

    rest = np.arange(m)
    order = (TAIL_REV_DUR, TAIL_REV_NODUR) if has_dur is not False else (TAIL_REV_NODUR, TAIL_REV_DUR)
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
        ret[idx], ret_ok[idx] = parse_ret(vs)
        hx = np.flatnonzero(_lengths(x) > 0)
        if len(hx):
            xs = pc.binary_reverse(x.take(pa.array(hx))).cast(pa.string())
            e = pc.extract_regex(xs, pattern=ERRNO)
            ev = np.asarray(e.is_valid())
            errs.append((idx[hx[ev]], e.field("e").filter(pa.array(ev))))
    if len(rest):
        r = pc.extract_regex(_take_str(lines, ti[rest]), pattern=TAIL_ANY)
        v = np.asarray(r.is_valid())
        idx = rest[v]
        if len(idx):
            rv = r.filter(pa.array(v))
            tl[idx] = _lengths(rv.field("t"))
            take_dur(idx, rv.field("d"))
            ret[idx], ret_ok[idx] = parse_ret(rv.field("v"))
            err = rv.field("err")
            has = np.asarray(pc.not_equal(err, ""))
            errs.append((idx[has], err.filter(pa.array(has))))
    return tl, ret, ret_ok, dur, dur_ok, scatter_str(m, errs)
