"""Event rows of a block before they become table rows, and the pairing
of each ``<... resumed>`` row with its thread's ``<unfinished ...>`` row."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kdiag.parsers.strace.schema import DETACHED, RESUMED, SIGNAL, UNFINISHED
from kdiag.parsers.strings import data_buffer as _data_buffer
from kdiag.parsers.strings import offsets_data as _offsets_data
from kdiag.parsers.strings import views as _views

# Bounds on the search for a resumed call's start across pid prefixes
# (see _adopt_orphans): orphans tried per block, candidates per orphan.
ADOPT_MAX = 1000
ADOPT_LOOKBACK = 64


@dataclass
class Events:
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
    def empty(cls) -> "Events":
        z = np.zeros(0, dtype=np.int64)
        b = np.zeros(0, dtype=bool)
        return cls(z, z, b, z, b, z, z, b, z, b, pa.nulls(0, pa.string()), pa.nulls(0, pa.string()),
                   z, z, z, [])

    def select(self, idx: np.ndarray) -> "Events":
        ia = pa.array(idx, pa.int64())
        kw = {k: getattr(self, k)[idx] for k in self._NUMERIC}
        return Events(name=self.name.take(ia), errno=self.errno.take(ia), buffers=self.buffers, **kw)

    def args(self, idx: np.ndarray) -> pa.Array:
        return _views(self.a_start[idx], self.a_len[idx], self.a_buf[idx], self.buffers)

    def detached(self) -> "Events":
        """A copy whose args no longer point into the block's line buffer, so
        that a few rows can be kept across feeds without pinning it."""
        a = self.args(np.arange(len(self)))
        off, _ = _offsets_data(a)
        kw = {k: getattr(self, k) for k in self._NUMERIC}
        kw.update(a_start=off[:-1], a_len=np.diff(off), a_buf=np.zeros(len(self), np.int64))
        return Events(name=self.name, errno=self.errno, buffers=[_data_buffer(a)], **kw)

    @staticmethod
    def concat(a: "Events", b: "Events") -> "Events":
        if not len(a):
            return b
        kw = {k: np.concatenate([getattr(a, k), getattr(b, k)]) for k in Events._NUMERIC}
        kw["a_buf"] = np.concatenate([a.a_buf, b.a_buf + len(a.buffers)])
        return Events(name=pa.concat_arrays([a.name, b.name]), errno=pa.concat_arrays([a.errno, b.errno]),
                       buffers=a.buffers + b.buffers, **kw)



class Paired(NamedTuple):
    events: Events              # the pending rows, then the block's
    rows: np.ndarray             # indices into events that are table rows now
    partner: np.ndarray          # per row: the resumed row it joins; -1 for none
    unfinished: np.ndarray       # per row: the call never resumed
    pending: Events             # calls that may resume in a later block
    orphan_line_no: np.ndarray   # resumed lines that found no call to join


def pair(pending: Events, cur: Events) -> Paired:
    """Join each <... resumed> row to its thread's <unfinished ...> row.

    Rows are those still pending from earlier feeds followed by this
    block's, so index order is line order.
    """
    ev = Events.concat(pending, cur)
    m = len(ev)
    if m == 0:
        none = np.zeros(0, dtype=np.int64)
        return Paired(ev, none, none, np.zeros(0, dtype=bool), Events.empty(), none)
    kind = ev.kind
    pid = np.where(ev.pid_ok, ev.pid, -1)
    flow = np.flatnonzero(kind != SIGNAL)
    # A stable sort by pid keeps each thread's rows in line order, so a
    # resumed row's predecessor is its thread's previous call.
    order = flow[thread_order(pid[flow])]
    k = kind[order]
    same = np.zeros(len(order), dtype=bool)
    same[1:] = pid[order][1:] == pid[order][:-1]
    cand = np.zeros(len(order), dtype=bool)
    cand[1:] = same[1:] & (k[1:] == RESUMED) & (k[:-1] == UNFINISHED)
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
    pending[order[(k == UNFINISHED) & last_of_pid]] = True

    orphan = (kind == RESUMED) & ~paired_res
    if orphan.any():
        _adopt_orphans(ev, partner, orphan, pending, paired_res)
    orphan &= ~paired_res

    rows = np.flatnonzero(~paired_res & ~pending)
    unfinished = ((kind == UNFINISHED) & (partner < 0)) | (kind == DETACHED)
    return Paired(ev, rows, partner[rows], unfinished[rows], ev.select(np.flatnonzero(pending)).detached(),
                  ev.line_no[orphan])


# A block's threads are few: one pass over the block for each keeps each
# thread's rows in line order, as a stable sort would, at a third of its
# cost (131,072 rows of 5 threads: 1.4 ms against 4.6 ms). Past this many
# threads, the sort.
FEW_THREADS = 16


def thread_order(pid: np.ndarray) -> np.ndarray:
    """The order that sorts ``pid`` by value, stably."""
    if not len(pid):
        return np.zeros(0, dtype=np.int64)
    seen = np.unique(pid[:1024])
    if len(seen) <= FEW_THREADS:
        parts = [np.flatnonzero(pid == p) for p in seen]
        if sum(len(x) for x in parts) == len(pid):
            return np.concatenate(parts)
    return np.argsort(pid, kind="stable")


def _adopt_orphans(ev: Events, partner, orphan, pending, paired_res) -> None:
    """On stderr strace prints the [pid N] prefix only while more than one
    process is traced, so a call can start unprefixed and resume prefixed,
    or the other way round ("[pid 11463] rt_sigsuspend([], 8 <unfinished
    ...>" ... "<... rt_sigsuspend resumed>) = ?"). Pair such a resumed line
    with the latest earlier unpaired call of the same name whose prefix
    presence differs. Rare, so a plain loop, bounded for hostile input."""
    free = np.flatnonzero((ev.kind == UNFINISHED) & (partner < 0))
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
