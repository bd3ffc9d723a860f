"""Findings -> the text an on-call engineer reads."""
from __future__ import annotations

import time

from kdiag.visible import visible, visible_text


def _fmt(v, unit: str = "") -> str:
    if v is None:
        return "?"
    return f"{v:g}{unit}" if isinstance(v, (int, float)) else str(v)


def _probe_line(probe: dict) -> str:
    """The probe's own summary. It comes from a bundle, which anyone may have
    edited: any field may be missing or of another type."""
    rate, p50 = probe.get("rate"), probe.get("p50_delivery_ms")
    number = (int, float)
    return (f"  PROBE       {_fmt(probe.get('delivered'))}/{_fmt(probe.get('messages'))} delivered, "
            f"{_fmt(probe.get('msgs_per_s'))} msg/s, {_fmt(probe.get('size_bytes'))} B values, "
            + (f"asynchronous at {rate:g}/s" if isinstance(rate, number) and rate else "one at a time")
            + (f", delivery p50 {_fmt(p50)} ms" if isinstance(p50, number) and p50 else ""))


def _path_title(paths: list[dict]) -> str:
    """Whose probes the PATH listing holds: kdiag's, the user's tools', or both."""
    methods = {r.get("method") for r in paths if isinstance(r, dict)}
    users = sorted(m for m in methods - {"syn", "connect", None} if isinstance(m, str))
    if not users:
        return "  PATH (TCP SYN probes to each broker's port, like traceroute -T)"
    if set(users) == methods:
        return f"  PATH (the user's own tool output: {', '.join(users)})"
    return f"  PATH (kdiag's probes to each broker's port, and the user's own tool output: {', '.join(users)})"


def render(findings: dict, *, bundle: str | None = None, probe: dict | None = None) -> str:
    out = _head_lines(findings, probe)
    out += _path_lines(findings.get("paths"))
    out += wire_lines(findings.get("wire"))
    out += life_lines(findings.get("life"))
    out.append("")
    out.append(f"VERDICT: {verdict_text(findings)}")
    for f in findings.get("findings", []):
        out += _finding_lines(f, findings.get("summary") or {})
    out += _closing_lines(findings)
    if bundle:
        out.append(f"bundle: {bundle}")
    # Most fields come from a bundle or a capture: each whole line is shown
    # as data, so a field a later change adds unescaped still cannot start a
    # row or act on the terminal, here or in report.txt.
    return visible_text(out)


def verdict_text(findings: dict) -> str:
    """The verdict, or why there is none: nothing about a Kafka client
    (none), or evidence of one that decides no cause (undecided)."""
    if findings.get("verdict"):
        return str(findings["verdict"])
    if findings.get("undecided"):
        return "undecided: the input holds a Kafka client's evidence, but nothing in it decides a cause"
    return "none: nothing in the input about a Kafka client's requests"


def rests_on_text(f: dict, s: dict) -> str:
    """What a finding rests on, each with how much of it there was:
    "statistics (12 snapshots), path (ping)". From a bundle anyone may
    have edited: any field may be missing or of another type."""
    st = s.get("statistics") if isinstance(s.get("statistics"), dict) else {}
    said = {"requests": f"{s.get('requests')} Produce requests" if s.get("requests") else None,
            "statistics": f"{st.get('snapshots')} snapshots" if st.get("snapshots") else None,
            "path": s.get("path_rtt_source")}
    rests = f.get("rests_on") if isinstance(f.get("rests_on"), list) else []
    parts = []
    for kind in rests:
        more = said.get(kind) if isinstance(kind, str) else None
        parts.append(f"{kind} ({more})" if more else str(kind))
    return ", ".join(parts)


def _statistics_lines(s: dict) -> list[str]:
    from kdiag.analysis.stats_windows import series_lines

    st = s.get("statistics")
    if not isinstance(st, dict) or not st.get("series"):
        return []
    return [f"  STATISTICS {st.get('snapshots')} snapshot(s) of {st.get('brokers')} broker(s), ms "
            f"(per snapshot, the slowest broker):", *("    " + ln for ln in series_lines(st))]


def _client(findings: dict) -> str:
    """The producer's library: librdkafka's version, or another library its
    Produce requests' client ids are the default of."""
    version, other = findings.get("librdkafka_version"), findings.get("client_library")
    if not version and isinstance(other, str) and other:
        return f"{visible(other)}, by its client id"
    return f"librdkafka {visible(str(version)) if version else '?'}"


def _head_lines(findings: dict, probe: dict | None) -> list[str]:
    s = findings.get("summary", {})
    out: list[str] = []
    when = ""
    first, last = s.get("first_send_us"), s.get("last_recv_us")
    if isinstance(first, (int, float)) and first:
        t0 = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(first / 1e6))
        # No response timed (whole-second lines give no latency): the start only.
        when = f", {t0} +{(last - first) / 1e6:.1f}s" if isinstance(last, (int, float)) else f", {t0}"
    out.append(f"kdiag: {s.get('requests', 0)} Produce requests to {len(s.get('brokers', []))} broker(s){when}"
               f" ({_client(findings)}; request timing from {s.get('source') or '?'})")
    if findings.get("probe_error"):
        out.append(f"  PROBE FAILED {findings['probe_error'].splitlines()[0]}")
    if isinstance(probe, dict) and probe:
        out.append(_probe_line(probe))
    out.append(f"  LATENCY(ms) p50 {_fmt(s.get('latency_p50_ms'))}  p99 {_fmt(s.get('latency_p99_ms'))}"
               f"   librdkafka rtt p50 {_fmt(s.get('rtt_p50_ms'))}  p99 {_fmt(s.get('rtt_p99_ms'))}")
    sp = s.get("split_ms", {})
    out.append("  TYPICAL REQUEST(ms, median)  "
               f"client queue {_fmt(sp.get('client_queue'))} | socket send {_fmt(sp.get('socket_send'))} | "
               f"wait for response {_fmt(sp.get('wait_response'))} | read {_fmt(sp.get('read_response'))}")
    if s.get("path_rtt_ms") is not None:
        le = "<= " if s.get("path_rtt_upper_bound") else ""
        out.append(f"  PATH RTT(ms) {le}{_fmt(s['path_rtt_ms'])} ({s.get('path_rtt_source')})")
    out += _statistics_lines(s)
    return out


def _path_lines(paths: list | None) -> list[str]:
    if not paths:
        return []
    from kdiag.parsers.tcp_path import format_path_rows
    from kdiag.report.page_limits import IN_PROBES, paths_shown

    out = [_path_title(paths)]
    shown, more = paths_shown(paths)
    table = format_path_rows(shown)
    out.extend("    " + ln for ln in table.splitlines())
    if more:
        out.append(f"    ... and {more:,} more hops not shown; {IN_PROBES}")
    return out


def wire_lines(wire) -> list[str]:
    """What a packet capture held (analysis.wire.summary): its connections
    by protocol and hop, and what was not read. From a bundle anyone may
    have edited: any field may be missing or of another type."""
    if not isinstance(wire, dict):
        return []
    out = [f"  CAPTURE {_ms(wire.get('connections'))} TCP connection(s): {_ms(wire.get('kafka'))} Kafka, "
           f"{_ms(wire.get('tls'))} TLS, {_ms(wire.get('other'))} other (not read); {_ms(wire.get('producer'))} "
           f"the producer's own, the others a relay's onward hop"]
    for key, what in (("holding", "Nagle held"), ("relays_holding", "Nagle held, on a relay's onward hop,")):
        for c in (wire.get(key) if isinstance(wire.get(key), list) else [])[:3]:
            if isinstance(c, dict):
                out.append(f"    {c.get('client')} -> {c.get('server')}: {what} {_ms(c.get('nagle_holds'))} "
                           f"request(s) until the peer's ACK")
    for c in (wire.get("unread") if isinstance(wire.get("unread"), list) else [])[:3]:
        if isinstance(c, dict):
            out.append(f"    connection {c.get('flow')}: not read past {c.get('unread')}")
    return out


# Attempts listed one a line; the findings keep more (life.SHOWN_ATTEMPTS).
ATTEMPT_LINES = 8
_NUM = (int, float)


def _ms(v) -> str:
    return f"{v:g}" if isinstance(v, _NUM) and not isinstance(v, bool) else "?"


def life_lines(life) -> list[str]:
    """The connections' phases (life.py): per phase its count, slowest and
    total, then the attempts one a line. From a bundle anyone may have
    edited: any field may be missing or of another type."""
    if not isinstance(life, dict):
        return []
    from kdiag.analysis.life import PHASES

    out = [f"  CONNECTIONS {_ms(life.get('attempts'))} attempt(s), {_ms(life.get('up'))} up, "
           f"{_ms(life.get('failed'))} failed ("
           + ("the packet capture's connections" if life.get("source") == "wire" else
              "librdkafka's broker state changes") + "; ms)"]
    phases = life.get("phases") if isinstance(life.get("phases"), dict) else {}
    for name in PHASES:
        p = phases.get(name)
        if not isinstance(p, dict):
            continue
        slow = p.get("slowest") if isinstance(p.get("slowest"), dict) else {}
        where = f"  slowest to {slow.get('broker')}" if slow.get("broker") else ""
        failed = f", {_ms(p.get('failed'))} failed" if p.get("failed") else ""
        out.append(f"    {name:<11} {_ms(p.get('n')):>4} x  slowest {_ms(p.get('max_ms')):>9}  "
                   f"total {_ms(p.get('total_ms')):>9}{failed}{where}")
    meta = life.get("metadata")
    if isinstance(meta, dict) and meta.get("requests"):
        out.append(f"    metadata    {_ms(meta.get('requests'))} MetadataRequest(s) in a row; "
                   + (f"the first ProduceRequest {_ms(meta.get('ms'))} ms after the first of them" if meta.get("produced")
                      else f"over {_ms(meta.get('ms'))} ms, and no ProduceRequest in the input"))
    for d in (life.get("dns") if isinstance(life.get("dns"), list) else [])[:ATTEMPT_LINES]:
        if isinstance(d, dict):
            out.append(f"    resolver    {d.get('server')}: a lookup of {_ms(d.get('ms'))} ms (syscalls, line "
                       f"{d.get('line')})")
    shown = [a for a in (life.get("shown") if isinstance(life.get("shown"), list) else []) if isinstance(a, dict)]
    t0 = next((a["start_us"] for a in shown if isinstance(a.get("start_us"), _NUM)), None)
    for a in shown[:ATTEMPT_LINES]:
        at = f"+{(a['start_us'] - t0) / 1e6:.3f}s" if isinstance(a.get("start_us"), _NUM) and t0 is not None \
            else "(untimed)"
        parts = " | ".join(f"{p.get('phase')} {_ms(p.get('ms'))}" for p in a.get("phases") or []
                           if isinstance(p, dict))
        out.append(f"    {at} {a.get('broker')}: {parts or '-'} -> {a.get('outcome')}")
    if len(shown) > ATTEMPT_LINES:
        out.append(f"    ... and {len(shown) - ATTEMPT_LINES} more attempt(s) in findings.json (\"life\")")
    return out + timed_out_lines(life.get("timed_out"))


def timed_out_lines(got) -> list[str]:
    """Where the messages that timed out were (timed_out.py), one line a
    kind. From a bundle: any field may be anything."""
    if not isinstance(got, dict) or not isinstance(got.get("kinds"), list):
        return []
    out = [f"  TIMED OUT {_ms(got.get('messages'))} message(s) (message.timeout.ms ran out), where they were:"]
    for k in got["kinds"]:
        if not isinstance(k, dict):
            continue
        brokers = k.get("brokers") if isinstance(k.get("brokers"), list) else []
        on = f" on {', '.join(str(b) for b in brokers)}" if brokers else ""
        cause = f" ({k.get('cause')})" if k.get("cause") else ""
        out.append(f"    {_ms(k.get('messages')):>6}  {k.get('kind')}{on}{cause}")
    return out


def _finding_lines(f: dict, s: dict) -> list[str]:
    share, ts = f.get("share", 0), f.get("time_share")
    # A tail cause is named for its share of the time, not of the requests.
    of_time = f", {ts * 100:.0f}% of the time" if ts is not None and abs(ts - share) >= 0.05 else ""
    # A cause judged over the run from other evidence (a connection's phase,
    # error lines) counts no requests even where requests completed.
    rests = f.get("rests_on") if isinstance(f.get("rests_on"), list) else []
    if "requests" in rests or (s.get("requests") and (not rests or "example" in f)):
        out = [f"  {f['cause']}: {f.get('requests', 0)} requests ({share * 100:.0f}%{of_time})"]
    else:   # no request to count: its share of a message's time
        out = [f"  {f['cause']}: about {max(share, ts or 0) * 100:.0f}% of the time"]
    if isinstance(f.get("rests_on"), list) and f["rests_on"]:
        out.append(f"    rests on: {rests_on_text(f, s)}")
    out.extend(f"    - {e}" for e in f.get("evidence", []))
    if f.get("fix"):
        out.append("    fix: " + " ".join(f"-X {k}={v}" for k, v in f["fix"].items()))
    if f.get("fix_text"):
        out.append(f"    ({f['fix_text']})")
    if f.get("predicted_text"):
        out.append(f"    predicted {f['predicted_text']}")
    return out


def _closing_lines(findings: dict) -> list[str]:
    out: list[str] = []
    if findings.get("confidence"):
        out.append(f"CONFIDENCE: {findings['confidence']}")
    if findings.get("likely"):
        out.append("LIKELY CAUSES (most likely first; the capture that decides each):")
        for i, lk in enumerate(findings["likely"], 1):
            out.append(f"  {i}. {lk.get('cause')}: {lk.get('support')}")
            out.append(f"     decide: {lk.get('decide')}")
    if findings.get("unknowns"):
        out.append("NOT KNOWN:")
        out.extend(f"  - {u}" for u in findings["unknowns"])
    notes = findings.get("input_notes") or []
    checks = findings.get("input_checks") or []
    if notes or checks:
        out.append("INPUT:")
        out.extend(f"  - {n}" for n in notes)
        out.extend(f"  - {c['input']}: {c['detail']}" for c in checks)
    return out


def render_apart(apart: list[dict]) -> str:
    """A line each for inputs reported apart (``kdiag replay A B``), after
    their reports: which is which at a glance."""
    rows = [("INPUT", "REQUESTS", "VERDICT", "P50(ms)", "P99(ms)", "LIBRDKAFKA", "CONFIDENCE")]
    for f in apart:
        s = f.get("summary") or {}
        # Each cell shown before the columns are measured: an escape's width
        # is what the terminal shows.
        rows.append(tuple(map(visible, (
            ", ".join(map(str, f.get("source") or [])) or "?", str(s.get("requests", 0)),
            str(f.get("verdict") or ("no data" if f.get("no_data") else "undecided" if f.get("undecided") else "-")),
            _fmt(s.get("latency_p50_ms")), _fmt(s.get("latency_p99_ms")),
            f.get("librdkafka_version") or "?", str(f.get("confidence") or "-").split(":")[0]))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return visible_text([f"APART: {len(apart)} runs, each analysed alone (--merge for one analysis of all)",
                        *("  " + ln for ln in lines)])
