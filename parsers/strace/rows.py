"""Event rows -> the ``syscalls`` table: resumed calls joined to their
start, the first fd and its annotation, what a write put on stdout/stderr."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers import scan
from kdiag.parsers.strace.events import Events
from kdiag.parsers.strace.grammar import QUOTED, UNUSUAL_ESCAPE
from kdiag.parsers.strace.schema import DETACHED, EXIT, KIND_NAMES, RESUMED, SCHEMA, empty_table_of_schema
from kdiag.parsers.strace.values import ints, scatter_str, unescape
from kdiag.parsers.strings import cut as _cut
from kdiag.parsers.strings import data_buffer as _data_buffer
from kdiag.parsers.strings import first_last as _first_last
from kdiag.parsers.strings import gather as _gather
from kdiag.parsers.strings import offsets_data as _offsets_data
from kdiag.parsers.strings import placed as _placed
from kdiag.parsers.strings import take_str as _take_str
from kdiag.parsers.strings import validity as _validity
from kdiag.parsers.strings import views as _views

ARGS_CAP = 4096

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


def emit_rows(ev: Events, rows: np.ndarray, partner: np.ndarray, unfinished: np.ndarray) -> pa.Table:
    """The table rows of events ``rows``; ``partner``: the resumed row each
    one joins (-1 for none), ``unfinished``: whether it never resumed."""
    n = len(rows)
    if n == 0:
        return empty_table_of_schema()
    has_p = partner >= 0
    src = np.where(has_p, partner, rows)
    kind = ev.kind[rows]

    a_start, a_len, a_buf = ev.a_start[rows], ev.a_len[rows], ev.a_buf[rows]
    buffers = list(ev.buffers)
    pj = np.flatnonzero(has_p)
    if len(pj):
        # Unfinished part + resumed part: the only strings built anew.
        joined = _joined_args(ev, rows[pj], partner[pj])
        joff, _ = _offsets_data(joined)
        a_start[pj], a_len[pj], a_buf[pj] = joff[:-1], np.diff(joff), len(buffers)
        buffers.append(_data_buffer(joined))
    args = _views(a_start, a_len, a_buf, buffers)

    # An exit has no call: its name is null, here and in the table.
    name = ev.name.take(pa.array(rows, pa.int64(), mask=kind == EXIT))
    # A resumed line's arguments do not begin with the call's first one.
    fd, fd_ok, fd_info = _first_fd(args, name, (kind <= DETACHED) & (kind != RESUMED))
    data = _data(args, name, fd, fd_ok)
    if (a_len > ARGS_CAP).any():
        args = pc.utf8_slice_codeunits(args, 0, ARGS_CAP)
    dur, dur_ok = _durations(ev, rows, src, has_p)
    pid_ok = ev.pid_ok[rows]
    # On stderr a call can start unprefixed and resume with a pid.
    pid = np.where(pid_ok, ev.pid[rows], ev.pid[src])
    pid_ok = pid_ok | ev.pid_ok[src]
    return pa.table(
        {
            "line_no": pa.array(ev.line_no[rows]),
            "pid": pa.array(pid.astype(np.int32), mask=~pid_ok),
            "ts_us": pa.array(ev.ts[rows], mask=~ev.ts_ok[rows]),
            "dur_us": pa.array(dur, mask=~dur_ok),
            "kind": KIND_NAMES.take(pa.array(kind)),
            "syscall": name,
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



def _joined_args(ev: Events, first: np.ndarray, then: np.ndarray) -> pa.Array:
    """ev's arguments at ``first`` each followed by those at ``then``. The
    compiled copy lays the pieces out in turn, first then then, so every
    second offset bounds a joined string: one copy, where cutting both
    halves out and joining them made three (a sixth of the rows are
    joined in -f captures of librdkafka's threads)."""
    k = len(first)
    both = np.empty(2 * k, dtype=np.int64)
    both[0::2], both[1::2] = first, then
    got = scan.copy_out_many(ev.buffers, ev.a_buf[both], ev.a_start[both], ev.a_len[both])
    if got is None:   # the reference: both halves cut out, then joined
        return pc.binary_join_element_wise(ev.args(first), ev.args(then), "")
    off, _ = _offsets_data(got)
    return pa.Array.from_buffers(pa.string(), k, [None, pa.py_buffer(off[0::2].astype(np.int32)),
                                                  _data_buffer(got)])


def _durations(ev: Events, rows: np.ndarray, src: np.ndarray, has_p: np.ndarray):
    """-T's duration; without it, a call split into ``<unfinished ...>`` and
    ``<... resumed>`` lasted from its first line's time to its second's
    (strace stamps the one at the call's entry, the other at its return).
    Not from whole seconds (-t): their difference says nothing of a call."""
    dur, dur_ok = ev.dur[src].copy(), ev.dur_ok[src].copy()
    start, end = ev.ts[rows], ev.ts[src]
    timed = has_p & ~dur_ok & ev.ts_ok[rows] & ev.ts_ok[src] & (end >= start)
    timed &= (start % 1_000_000 != 0) | (end % 1_000_000 != 0)
    dur[timed] = (end - start)[timed]
    dur_ok |= timed
    return dur, dur_ok


def _first_fd(args: pa.Array, name: pa.Array, rows: np.ndarray, compiled: bool | None = None):
    """fd, fd-valid mask and -y annotation of each row's first argument:
    "7<TCP:[...]>, " "3, " "3</etc/ld.so.cache>" "1</dev/pts/0<char 136:0>>, "
    are fds; "0x7f...", "-1", "[{fd=7" are not. Read in compiled code where
    it was built (``scan.first_fds``), else as below: the reference."""
    c = scan.first_fds(args, compiled)
    if c is None:
        return _first_fd_ref(args, name, rows)
    n = len(args)
    valid = rows & (c[scan.F_RUN] > 0)
    cand = np.flatnonzero(valid & (c[scan.F_ANNOTATED] == 0))
    if len(cand):
        known = np.asarray(pc.is_in(name.take(pa.array(cand)), value_set=_FD_FIRST).fill_null(False))
        valid[cand[~known]] = False
    fd = np.where(valid, c[scan.F_FD], 0)
    gi = np.flatnonzero(valid & (c[scan.F_INFO] >= 0))
    info = pa.nulls(n, pa.string())
    if len(gi):
        info = _placed(n, gi, c[scan.F_INFO, gi], c[scan.F_INFO_LEN, gi], _data_buffer(args))
    return fd, valid, info


def _first_fd_ref(args: pa.Array, name: pa.Array, rows: np.ndarray):
    """_first_fd by numpy and Arrow."""
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
    fd[vi] = ints(_cut(args, vi, np.zeros(len(vi), np.int64), run[vi]))
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
            info = scatter_str(n, [(ai[gi], _cut(sub, gi, run[ai][gi] + 1, end[gi]))])
    return fd, ok, info


def _data(args: pa.Array, name: pa.Array, fd: np.ndarray, fd_ok: np.ndarray, compiled: bool | None = None) -> pa.Array:
    """The unescaped first quoted string of writes to stdout/stderr: found
    and decoded in compiled code where it was built (``scan.quoted_data``),
    else by the patterns below, the reference."""
    n = len(args)
    si = np.flatnonzero(fd_ok & ((fd == 1) | (fd == 2)))
    if len(si):
        w = np.asarray(pc.is_in(name.take(pa.array(si)), value_set=_WRITE_FAMILY).fill_null(False))
        si = si[w]
    if not len(si):
        return pa.nulls(n, pa.string())
    mask = np.zeros(n, dtype=bool)
    mask[si] = True
    got = scan.quoted_data(args, mask, compiled)
    if got is None:
        return _data_ref(args, si)
    q, text = got
    status = q[scan.Q_STATUS]
    # The decoded texts lie in row order in ``text``, from its start.
    easy = status == 1
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.where(easy, q[scan.Q_LEN], 0), out=offsets[1:])
    out = pa.Array.from_buffers(pa.string(), n, [_validity(easy), pa.py_buffer(offsets), text])
    hard = np.flatnonzero(status == 2)
    if len(hard):
        raw = _views(q[scan.Q_AT, hard], q[scan.Q_LEN, hard], np.zeros(len(hard), np.int64), [_data_buffer(args)])
        decoded = pa.array([unescape(s) for s in raw.to_pylist()], pa.string())
        out = scatter_str(n, [(np.flatnonzero(easy), out.filter(pa.array(easy))), (hard, decoded)])
    return out


def _data_ref(args: pa.Array, si: np.ndarray) -> pa.Array:
    """_data's strings by the patterns: rows ``si`` of args."""
    n = len(args)
    m = pc.extract_regex(_take_str(args, si), pattern=QUOTED)
    v = np.asarray(m.is_valid())
    si = si[v]
    q = m.field("q").filter(pa.array(v))
    # Log lines escape only \n \t \r \" (no escaped backslash), so whole-array
    # replaces decode them; anything else goes through unescape() one by one.
    easy = q
    for esc, ch in (('\\"', '"'), ("\\n", "\n"), ("\\t", "\t"), ("\\r", "\r")):
        easy = pc.replace_substring(easy, esc, ch)
    unusual = np.asarray(pc.match_substring_regex(q, UNUSUAL_ESCAPE))
    if unusual.any():
        ui = np.flatnonzero(unusual)
        hard = pa.array([unescape(s) for s in q.take(pa.array(ui)).to_pylist()], pa.string())
        easy = pc.replace_with_mask(easy, pa.array(unusual), hard)
    return scatter_str(n, [(si, easy)])



def concat_rows(tables: list[pa.Table]) -> pa.Table:
    """The tables' rows in line order."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return empty_table_of_schema()
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
