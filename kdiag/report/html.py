"""Findings -> one self-contained HTML page: the verdict, evidence and fix
first, then the pictures an engineer would draw on the ticket (a request's
waterfall, latency over time and by cause, the socket's state, the path)
and what the inputs lacked. No script, no network: styles inline, charts
as SVG (kdiag.report.svg), a Content-Security-Policy that forbids the
rest. The findings may come from a stranger's bundle: every value is
type-checked where it is read here, and the page is written by
templates/report.html, whose engine escapes every value it writes."""
from __future__ import annotations

import math
import time
from pathlib import Path

from markupsafe import Markup

from kdiag.analysis.causes import BY_NAME, colour_of
from kdiag.report import svg
from kdiag.report.page_limits import IN_PROBES, SHOWN, capped, paths_shown
from kdiag.report.svg import fmt, num
from kdiag.report.templating import macros, render
from kdiag.report.text import rests_on_text, verdict_text

OTHER_COLORS = ("#6b6ecf", "#b5cf6b", "#e7ba52", "#d6616b", "#ce6dbd", "#9c9ede")
PARTS = (("client queue", "#e377c2"), ("send", "#ff7f0e"), ("wait for response", "#1f77b4"), ("read", "#2ca02c"))
SOCKET_PANELS = (("nodelay", "TCP_NODELAY (1 = set)", True), ("unacked", "unacked segments", False),
                 ("notsent_bytes", "bytes not yet sent (held)", False),
                 ("total_retrans", "retransmits (total)", False), ("snd_cwnd", "congestion window (segments)", False))
SOCKET_COLUMNS = ("ts_us", "fd", "remote", "remote_port", *[c for c, _, _ in SOCKET_PANELS])
SOCKET_ROWS_MAX = 20_000
WATERFALL_WORST = 3
# Where a capped section's rows are all kept.
IN_FINDINGS = "kdiag replay --json of the same inputs prints them all"
IN_SOCKETS = "tables/sockets.parquet of the bundle holds every sample"

def color_of(cause: str, others: dict) -> str:
    # A cause keeps its colour across charts and reports (its module's);
    # other names each get one of their own, in the order they are drawn.
    if cause in BY_NAME:
        return colour_of(cause)
    return others.setdefault(cause, OTHER_COLORS[len(others) % len(OTHER_COLORS)])


def _text(v) -> str:
    return v if isinstance(v, str) else ""


def _list(v) -> list:
    return v if isinstance(v, list) else []


def dict_or_empty(v) -> dict:
    return v if isinstance(v, dict) else {}


def request_rows(findings: dict, slowest: bool = True) -> list[dict]:
    """The per-request rows findings.json carries (judge.request_rows), as
    dicts; rows of the wrong shape are left out. ``slowest``: with the
    slowest requests kept beside a sample (the rest alone are a fair one)."""
    rr = dict_or_empty(findings.get("request_rows"))
    cols = [c for c in _list(rr.get("columns")) if isinstance(c, str)]
    rows = _list(rr.get("rows")) + (_list(rr.get("slowest")) if slowest else [])
    return [dict(zip(cols, r)) for r in rows if isinstance(r, list) and len(r) == len(cols)]


def sockets_of(tables_dir: Path | None):
    """The socket samples of a tables directory, the columns the charts
    draw and at most SOCKET_ROWS_MAX rows; None when there are none."""
    if tables_dir is None or not (Path(tables_dir) / "sockets.parquet").is_file():
        return None
    import pyarrow.parquet as pq

    f = pq.ParquetFile(Path(tables_dir) / "sockets.parquet")
    cols = [c for c in SOCKET_COLUMNS if c in f.schema_arrow.names]
    if "ts_us" not in cols:
        return None
    rows: list[dict] = []
    for batch in f.iter_batches(columns=cols, batch_size=4096):
        rows += batch.to_pylist()
        if len(rows) >= SOCKET_ROWS_MAX:
            break
    return rows[:SOCKET_ROWS_MAX]


def render_html(findings: dict, sockets: list[dict] | None = None, *, source: str | None = None) -> str:
    findings = dict_or_empty(findings)
    others: dict = {}
    rows = request_rows(findings)
    return render("report.html", title=f"kdiag: {_text(findings.get('verdict')) or 'no verdict'}",
                  head=_head(findings, source), verdict=_verdict(findings, others), figures=_figures(findings),
                  waterfall=_waterfall(findings, rows), over_time=_over_time(findings, rows, others),
                  distribution=_distribution(rows, others), sockets=_sockets(sockets), paths=_paths(findings),
                  statistics=_statistics(findings), connections=_connections(findings),
                  capture=_capture(findings), inputs=_inputs(findings), in_findings=IN_FINDINGS,
                  in_probes=IN_PROBES) + "\n"


def _capture(findings: dict) -> list[str]:
    """What a packet capture held, the lines the terminal shows (text.wire_lines)."""
    from kdiag.report.text import wire_lines

    return [ln.strip() for ln in wire_lines(findings.get("wire"))]


def _parts():
    return macros("parts.html")


def _head(f: dict, source: str | None) -> dict:
    s = dict_or_empty(f.get("summary"))
    when = ""
    first, last = num(s.get("first_send_us")), num(s.get("last_recv_us"))
    if first and last:
        try:
            when = f", {time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(first / 1e6))} +{(last - first) / 1e6:.1f} s"
        except (OverflowError, OSError, ValueError):
            when = ""
    brokers = [b for b in _list(s.get("brokers")) if isinstance(b, str)]
    what = (f"{fmt(num(s.get('requests')) or 0)} Produce requests to {len(brokers)} broker(s){when}; "
            f"librdkafka {_text(f.get('librdkafka_version')) or '?'}; request timing from {_text(s.get('source')) or '?'}")
    return {"what": what, "source": source, "version": _text(f.get("kdiag_version")) or "?"}


def _verdict(f: dict, others: dict) -> dict:
    verdict = _text(f.get("verdict"))
    found, more_found = capped(_list(f.get("findings")), "findings")
    likely, more_likely = capped([dict_or_empty(x) for x in _list(f.get("likely"))], "likely")
    return {"color": color_of(verdict or "unexplained_slow", others),
            "name": verdict or verdict_text(f),
            "confidence": _text(f.get("confidence")),
            "findings": [_finding(dict_or_empty(fd), others, dict_or_empty(f.get("summary"))) for fd in found],
            "findings_left_out": more_found,
            "likely": [[_text(x.get("cause")), _text(x.get("support")), _text(x.get("decide"))] for x in likely],
            "likely_left_out": more_likely}


def _finding(fd: dict, others: dict, summary: dict) -> dict:
    share, ts = num(fd.get("share")) or 0.0, num(fd.get("time_share"))
    evidence, more = capped([e for e in _list(fd.get("evidence")) if isinstance(e, str)], "evidence")
    fix = dict_or_empty(fd.get("fix"))
    rests = _list(fd.get("rests_on"))
    by_requests = "requests" in rests or (bool(num(summary.get("requests"))) and (not rests or "example" in fd))
    return {"color": color_of(_text(fd.get("cause")), others), "cause": _text(fd.get("cause")),
            "count": (f"{fmt(num(fd.get('requests')) or 0)} requests ({share * 100:.0f}%"
                      + (f", {ts * 100:.0f}% of the time)" if ts is not None and abs(ts - share) >= 0.05 else ")"))
            if by_requests else f"about {max(share, ts or 0.0) * 100:.0f}% of the time",
            "requests": fmt(num(fd.get("requests")) or 0), "share": f"{share * 100:.0f}",
            "of_time": f", {ts * 100:.0f}% of the time" if ts is not None and abs(ts - share) >= 0.05 else "",
            "evidence": evidence, "evidence_left_out": more, "rests_on": rests_on_text(fd, summary),
            "fix_line": " ".join(f"-X {k}={v}" for k, v in fix.items() if isinstance(v, (str, int, float, bool))),
            "fix_text": fd["fix_text"] if isinstance(fd.get("fix_text"), str) else None,
            "predicted_text": fd["predicted_text"] if isinstance(fd.get("predicted_text"), str) else None}


def _figures(f: dict) -> list[tuple[str, str]]:
    s = dict_or_empty(f.get("summary"))
    sp = dict_or_empty(s.get("split_ms"))
    probe = dict_or_empty(f.get("probe"))

    def ms(v) -> str:
        v = num(v)
        return "?" if v is None else f"{fmt(v)} ms"
    cells = [("latency p50", ms(s.get("latency_p50_ms"))), ("latency p99", ms(s.get("latency_p99_ms"))),
             ("librdkafka rtt p50", ms(s.get("rtt_p50_ms"))), ("path RTT", ms(s.get("path_rtt_ms"))),
             ("wait for response (median)", ms(sp.get("wait_response")))]
    if num(probe.get("msgs_per_s")) is not None:
        cells.insert(0, ("probe throughput", f"{fmt(num(probe['msgs_per_s']))} msg/s"))
    return cells


def _waterfall(f: dict, rows: list[dict]) -> Markup:
    """The typical request (the median by total) and the slowest, each a bar
    of its parts on one time scale. The client queue is the statistics'
    median: librdkafka reports it per window, not per request."""
    timed = [r for r in rows if num(r.get("total_ms")) is not None]
    if not timed:
        return svg.empty("waterfall", "no per-request timings in these findings (no Produce request completed, "
                                      "or kdiag made them before it kept them: kdiag report re-reads the captures)")
    by_total = sorted(timed, key=lambda r: num(r["total_ms"]))
    picked = [("typical (median)", by_total[(len(by_total) - 1) // 2])]
    picked += [(f"slowest #{i + 1}", r) for i, r in enumerate(reversed(by_total[-WATERFALL_WORST:]))]
    queue = num(dict_or_empty(dict_or_empty(f.get("summary")).get("split_ms")).get("client_queue"))
    bars = []
    for label, r in picked:
        known = [queue, *(num(r.get(k)) for k in ("send_ms", "wait_ms", "read_ms"))]
        send, wait, read = (v or 0.0 for v in known[1:])
        rest = max(0.0, (num(r["total_ms"]) or 0.0) - send - wait - read)   # time the split could not place
        bars.append((label, r, [queue or 0.0, send, wait + rest, read], known))
    longest = max(sum(p) for _, _, p, _ in bars) or 1.0
    w, row_h, left, right = svg.W, 34, 150, 250
    scale = (w - left - right) / longest
    marks, y = [], 8
    for label, r, p, known in bars:
        x = left
        tip = f"CorrId {r.get('corr_id', '?')} to {r.get('broker', '?')}"
        for (name, color), v in zip(PARTS, p):
            marks.append(svg.rect(x, y, v * scale, row_h - 12, color, f"{name}: {fmt(v)} ms ({tip})"))
            x += v * scale
        marks.append(svg.label(label, left - 8, y + 15, anchor="end"))
        parts = " · ".join("?" if v is None else fmt(v) for v in known)
        marks.append(svg.label(f"{parts} ms = {fmt(num(r['total_ms']) or 0)} ms", w - right + 8, y + 15, cls="tick"))
        y += row_h
    note = ("client queue: the statistics' median, the same on every bar" if queue is not None else
            "client queue unknown (no statistics)") + "; ? = not measured by these inputs (drawn in the wait)"
    return (svg.chart("waterfall", w, y + 4, "per-request waterfall", marks, len(bars))
            + svg.legend(list(PARTS)) + _parts().meta(f"Parts in ms: queue · send · wait · read. {note}."))


OTHER_CAUSES = "other causes"
# Attempts drawn in the connection timeline; the findings keep more.
CONNECTION_ROWS = 20
# A phase no cause is named for (apiversion).
UNSPLIT_COLOUR = "#c7c7c7"


def _cause(r: dict) -> str:
    return r.get("cause") if isinstance(r.get("cause"), str) else "?"


def _causes_of(rows: list[dict]) -> list[str]:
    """The causes of ``rows``, most requests first: the first SHOWN["causes"]
    by name, then OTHER_CAUSES for the rest, so a legend stays short."""
    seen: dict[str, int] = {}
    for r in rows:
        c = _cause(r)
        seen[c] = seen.get(c, 0) + 1
    named = sorted(seen, key=lambda c: -seen[c])
    return named if len(named) <= SHOWN["causes"] else named[:SHOWN["causes"]] + [OTHER_CAUSES]


def _drawn(pts: list[tuple]) -> list[tuple]:
    """At most SHOWN["requests"] of (send, total, row) in send order: the
    slowest tenth of that many, and an even sample of the rest."""
    n = SHOWN["requests"]
    if len(pts) <= n:
        return pts
    slow = set(sorted(range(len(pts)), key=lambda i: -pts[i][1])[:n // 10])
    rest = [i for i in range(len(pts)) if i not in slow]
    step = len(rest) / (n - len(slow))
    return [pts[i] for i in sorted(slow | {rest[int(k * step)] for k in range(n - len(slow))})]


def _sample_note(f: dict, drawn: int, timed: int) -> Markup:
    rr = dict_or_empty(f.get("request_rows"))
    of = num(rr.get("of"))
    total = int(of) if rr.get("sampled") is True and of else timed
    if drawn < total:
        return _parts().meta(f"{drawn:,} of {total:,} requests drawn: an even sample and the slowest; "
                             "the figures above count them all.")
    return Markup()


def _over_time(f: dict, rows: list[dict], others: dict) -> Markup:
    pts = [(num(r.get("send_us")), num(r.get("total_ms")), r) for r in rows]
    pts = [(t, v, r) for t, v, r in pts if t is not None and v is not None]
    if not pts:
        return svg.empty("over_time", "no per-request send times in these findings")
    timed, pts = len(pts), sorted(_drawn(pts), key=lambda p: p[0])
    t0 = min(t for t, _, _ in pts)
    vals = [v for _, v, _ in pts]
    log = min(vals) > 0 and max(vals) / min(vals) > 20
    fr = svg.Frame((0.0, max((t - t0) / 1e6 for t, _, _ in pts)), (0.0 if not log else min(vals), max(vals)),
                   x_label="seconds since the first request", y_label="latency (ms)", y_log=log)
    causes = _causes_of([r for _, _, r in pts])
    marks = [svg.dot(fr.x((t - t0) / 1e6), fr.y(v), color_of(_cause(r) if _cause(r) in causes else OTHER_CAUSES,
                                                              others),
                     f"{v} ms, {r.get('cause')}, CorrId {r.get('corr_id', '?')}") for t, v, r in pts]
    return (fr.svg("over_time", marks, "latency of each request over time, coloured by cause")
            + svg.legend([(c, color_of(c, others)) for c in causes]) + _sample_note(f, len(pts), timed))


def _distribution(rows: list[dict], others: dict, bins: int = 30) -> Markup:
    vals = [(num(r.get("total_ms")), _cause(r)) for r in rows]
    vals = [(v, c) for v, c in vals if v is not None and v >= 0]
    if not vals:
        return svg.empty("distribution", "no per-request latencies in these findings")
    lo, hi = min(v for v, _ in vals), max(v for v, _ in vals)
    log = lo > 0 and hi / lo > 20
    if hi <= lo:
        hi = lo + 1.0

    def bin_of(v: float) -> int:
        at = (math.log(v / lo) / math.log(hi / lo)) if log else (v - lo) / (hi - lo)
        return min(bins - 1, max(0, int(at * bins)))

    def edge(i: int) -> float:
        return lo * (hi / lo) ** (i / bins) if log else lo + (hi - lo) * i / bins
    causes = _causes_of([{"cause": c} for _, c in vals])
    at = {c: i for i, c in enumerate(causes)}
    counts = [[0] * len(causes) for _ in range(bins)]
    for v, c in vals:
        counts[bin_of(v)][at.get(c, len(causes) - 1)] += 1
    fr = svg.Frame((lo, hi), (0.0, float(max(sum(b) for b in counts))), x_label="latency (ms)",
                   y_label="requests", x_log=log, x_exact=True)
    marks = []
    for i, b in enumerate(counts):
        x0, x1 = fr.x(edge(i)), fr.x(edge(i + 1))
        base = 0
        for j, k in enumerate(b):
            if k:
                marks.append(svg.rect(x0 + 0.5, fr.y(base + k), x1 - x0 - 1, fr.y(base) - fr.y(base + k),
                                      color_of(causes[j], others),
                                      f"{k} {causes[j]} requests of {fmt(edge(i))}-{fmt(edge(i + 1))} ms"))
                base += k
    return (fr.svg("distribution", marks, "latency distribution, stacked by cause")
            + svg.legend([(c, color_of(c, others)) for c in causes]))


def _sockets(samples: list[dict] | None) -> Markup:
    if not samples:
        return svg.empty("sockets", "no socket samples in these inputs (kdiag trace samples TCP_INFO of the "
                                    "producer's broker sockets; a log or an strace alone has none)")
    conns: dict[str, list[dict]] = {}
    for r in samples:
        if num(r.get("ts_us")) is None:
            continue
        key = f"fd {r.get('fd')} to {r.get('remote') or '?'}:{r.get('remote_port') or '?'}"
        conns.setdefault(key, []).append(r)
    if not conns:
        return svg.empty("sockets", "the socket samples carry no times")
    t0 = min(num(r["ts_us"]) for rs in conns.values() for r in rs)
    t1 = max(num(r["ts_us"]) for rs in conns.values() for r in rs)
    # The connections sampled most, each a series: a panel's legend and
    # lines stay few however many sockets the samples name.
    busiest = sorted(conns, key=lambda k: -len(conns[k]))
    conns, more = {k: conns[k] for k in busiest[:SHOWN["connections"]]}, len(busiest) - SHOWN["connections"]
    colors = {k: OTHER_COLORS[i % len(OTHER_COLORS)] for i, k in enumerate(conns)}
    panels = []
    for col, label, is_flag in SOCKET_PANELS:
        series = {}
        for k, rs in conns.items():
            pts = []
            for r in sorted(rs, key=lambda r: r["ts_us"]):
                v = r.get(col)
                v = (1.0 if v else 0.0) if is_flag and isinstance(v, bool) else num(v)
                if v is not None:
                    pts.append(((num(r["ts_us"]) - t0) / 1e6, v))
            if pts:
                series[k] = _thinned(pts, SHOWN["socket_points"])
        name = f"socket_{col}"
        if not series:
            panels.append(svg.empty(name, f"{label}: not in the samples"))
            continue
        ys = [v for pts in series.values() for _, v in pts]
        fr = svg.Frame((0.0, max((t1 - t0) / 1e6, 1e-3)), (0.0, max(max(ys), 1.0)), x_label="seconds",
                       y_label=label, w=380, h=200)
        marks = []
        for k, pts in series.items():
            px = [(fr.x(t), fr.y(v)) for t, v in pts]
            marks.append(svg.line(px, colors[k], k, step=True) if len(px) > 1 else
                         svg.dot(px[0][0], px[0][1], colors[k], k))
        panels.append(fr.svg(name, marks, label))
    read_all = (_parts().meta(f"At most {SOCKET_ROWS_MAX:,} samples are read for these charts; {IN_SOCKETS}.")
                if len(samples) >= SOCKET_ROWS_MAX else Markup())
    return (_parts().panels(panels) + svg.legend([(k, c) for k, c in colors.items()])
            + _parts().left_out(more, "connections", IN_SOCKETS) + read_all)


def _thinned(pts: list[tuple[float, float]], n: int) -> list[tuple[float, float]]:
    """At most ``n`` of a series' (time, value) points, in time order: per
    bin of time its lowest and its highest, so a spike between kept points
    still shows."""
    if len(pts) <= n:
        return pts
    bins = n // 2
    t0 = min(t for t, _ in pts)
    width = (max(t for t, _ in pts) - t0) / bins or 1.0
    by_bin: dict[int, list] = {}
    for p in pts:
        by_bin.setdefault(min(bins - 1, int((p[0] - t0) / width)), []).append(p)
    out: list[tuple[float, float]] = []
    for b in sorted(by_bin):
        ps = by_bin[b]
        out += sorted({min(ps, key=lambda p: p[1]), max(ps, key=lambda p: p[1])})
    return out


def _paths(f: dict) -> dict:
    paths, more = paths_shown(f.get("paths"))
    s = dict_or_empty(f.get("summary"))
    rtt = num(s.get("path_rtt_ms"))
    cols = ["broker", "method", "ttl", "responder", "answer", "rtt_min_ms", "rtt_median_ms", "rtt_max_ms",
            "answered", "sent"]
    return {"rtt": None if rtt is None else fmt(rtt), "upper_bound": bool(s.get("path_rtt_upper_bound")),
            "rtt_source": _text(s.get("path_rtt_source")), "columns": cols,
            "rows": [[_cell(p.get(c)) for c in cols] for p in paths], "left_out": more,
            "empty": None if paths else svg.empty("paths", "no path probes in these inputs")}


# A point of the statistics series: (column, its key in the findings).
_STATS_COLUMNS = (("snapshot", "snapshot"), ("rtt p50 ms", "rtt_p50_ms"), ("rtt p99 ms", "rtt_p99_ms"),
                  ("queue p50 ms", "int_latency_p50_ms"), ("queue p99 ms", "int_latency_p99_ms"),
                  ("throttle avg ms", "throttle_avg_ms"), ("messages queued", "msg_cnt"))


def _statistics(f: dict) -> dict:
    """librdkafka's statistics, a row a snapshot (the slowest broker's
    windows): how queueing and rtt moved. The series comes from a file
    anyone may edit: what is not a number shows empty."""
    st = dict_or_empty(dict_or_empty(f.get("summary")).get("statistics"))
    series, more = capped([p for p in _list(st.get("series")) if isinstance(p, dict)], "statistics")
    cols = [c for c, k in _STATS_COLUMNS if any(num(p.get(k)) is not None for p in series)]
    keys = dict(_STATS_COLUMNS)
    head = (f"{fmt(num(st.get('snapshots')) or len(series))} snapshot(s) of {fmt(num(st.get('brokers')) or 0)} "
            f"broker(s); of each, the slowest broker's windows (their average where the version gives no "
            f"percentiles)") if series else None
    return {"head": head, "columns": cols, "rows": [[_cell(num(p.get(keys[c]))) for c in cols] for p in series],
            "left_out": more}


def _cell(v) -> str:
    if v is None:
        return ""
    return fmt(v) if num(v) is not None and not isinstance(v, int) else str(v)


def _inputs(f: dict) -> dict:
    checks, more_checks = capped([dict_or_empty(c) for c in _list(f.get("input_checks"))], "input_checks")
    keys = [k for k in ("input", "check", "count", "detail") if any(k in c for c in checks)]
    lists = []
    for title, key in (("What the inputs could not tell", "unknowns"), ("Notes on the inputs", "input_notes"),
                       ("Why the capture is partial", "partial_reasons")):
        items, more = capped([x for x in _list(f.get(key)) if isinstance(x, str)], "notes")
        if items:
            lists.append((title, items, more))
    files, more_files = capped([dict_or_empty(x) for x in _list(f.get("inputs"))], "inputs")
    return {"check_keys": keys, "checks": [[_cell(c.get(k)) for k in keys] for c in checks],
            "checks_left_out": more_checks, "lists": lists,
            "files": [[_text(x.get("path")), _text(x.get("kind")) or "not recognised",
                       *(_cell(dict_or_empty(x.get("counts")).get(k)) for k in ("lines", "parsed", "skipped_total"))]
                      for x in files],
            "files_left_out": more_files}


def _connections(f: dict) -> dict:
    """Each connection attempt a row of its phases on one time scale (life.py),
    and the phases summed: where messages waited before any request.
    From a bundle anyone may have edited: any field may be anything."""
    from kdiag.analysis.life import PHASE_CAUSE, PHASES

    life = dict_or_empty(f.get("life"))
    phases = dict_or_empty(life.get("phases"))
    rows = []
    for name in PHASES:
        p = dict_or_empty(phases.get(name))
        if p:
            rows.append([name, fmt(num(p.get("n")) or 0), _cell(num(p.get("max_ms"))), _cell(num(p.get("total_ms"))),
                         _text(dict_or_empty(p.get("slowest")).get("broker")) or ""])
    tout = dict_or_empty(life.get("timed_out"))
    timed_out = [f"{fmt(num(k.get('messages')) or 0)} {_text(k.get('kind'))}"
                 + (f" on {', '.join(b for b in _list(k.get('brokers')) if isinstance(b, str))}" if _list(k.get("brokers"))
                    else "") + (f" ({_text(k.get('cause'))})" if _text(k.get("cause")) else "")
                 for k in (dict_or_empty(x) for x in _list(tout.get("kinds")))]
    attempts = [dict_or_empty(a) for a in _list(life.get("shown"))][:CONNECTION_ROWS]
    timed = [a for a in attempts if num(a.get("start_us")) is not None]
    colours = {ph: colour_of(c) if c else UNSPLIT_COLOUR for ph, c in PHASE_CAUSE.items()}
    if not timed:
        return {"rows": rows, "chart": None, "timed_out": timed_out}
    t0 = min(num(a["start_us"]) for a in timed)
    ends = [num(a["start_us"]) - t0 + sum(num(dict_or_empty(p).get("ms")) or 0.0 for p in _list(a.get("phases"))) * 1e3
            for a in timed]
    span_us = max(ends) or 1.0
    w, row_h, left, right = svg.W, 26, 260, 20
    scale = (w - left - right) / span_us
    marks, y = [], 6
    for a in timed:
        x = left + (num(a["start_us"]) - t0) * scale
        for p in (dict_or_empty(p) for p in _list(a.get("phases"))):
            ms = num(p.get("ms")) or 0.0
            ph = _text(p.get("phase"))
            marks.append(svg.rect(x, y, max(ms * 1e3 * scale, 1.0), row_h - 10, colours.get(ph, UNSPLIT_COLOUR),
                                  f"{ph}: {fmt(ms)} ms ({_text(a.get('broker'))})"))
            x += ms * 1e3 * scale
        broker = _text(a.get("broker"))
        broker = broker if len(broker) <= 26 else broker[:12] + "…" + broker[-13:]
        label = f"+{fmt((num(a['start_us']) - t0) / 1e6)} s {broker} ({_text(a.get('outcome'))[:8]})"
        marks.append(svg.label(label, left - 8, y + 12, anchor="end", tip=_text(a.get("broker"))))
        y += row_h
    legend = [(ph, colours[ph]) for ph in PHASES]
    chart = (svg.chart("connections", w, y + 4, "connection attempts, phase by phase", marks, len(timed))
             + svg.legend(legend) + _parts().meta(f"Time from the first attempt, {fmt(span_us / 1e3)} ms in all."))
    return {"rows": rows, "chart": chart, "timed_out": timed_out}
