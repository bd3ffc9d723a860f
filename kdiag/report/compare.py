"""Before and after a change: latency and throughput with bootstrap
confidence intervals, the causes' shares, what the BEFORE run's finding
predicted beside what AFTER measured, and one sentence saying whether the
change fixed it. Pure: two findings dicts in, one dict out (the JSON of
``kdiag compare --json``); the renderers below read only that dict."""
from __future__ import annotations

import math

from kdiag.analysis.causes import BY_NAME, OTHERWISE, part_of
from kdiag.report.html import dict_or_empty, request_rows
from kdiag.report.svg import fmt, num
from kdiag.visible import visible, visible_text

RESAMPLES = 2000
SEED = 20261125
LEVEL = 0.95
# A cause below this share of the requests after the change is gone.
GONE_SHARE = 0.10
# The lab's bar for a prediction: the predicted saving within this fraction
# of the measured one.
PREDICTION_TOLERANCE = 0.25


def _nearest_rank(sorted_vals, q: float):
    import numpy as np

    n = sorted_vals.shape[-1]
    k = np.clip(np.rint(q * (n - 1)).astype(int), 0, n - 1)
    return sorted_vals[..., k]


def quantile_ci(values: list[float], q: float) -> dict:
    """The q-quantile (nearest rank, as the findings compute it) and its
    percentile-bootstrap interval."""
    import numpy as np

    vals = np.asarray([v for v in values if num(v) is not None], dtype=float)
    if vals.size == 0:
        return {"value": None, "lo": None, "hi": None, "n": 0}
    point = float(_nearest_rank(np.sort(vals), q))
    if vals.size < 10:
        return {"value": point, "lo": None, "hi": None, "n": int(vals.size)}
    rng = np.random.default_rng(SEED)
    boots = _nearest_rank(np.sort(vals[rng.integers(0, vals.size, (RESAMPLES, vals.size))], axis=1), q)
    lo, hi = np.quantile(boots, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return {"value": point, "lo": float(lo), "hi": float(hi), "n": int(vals.size)}


def rate_ci(send_us: list[float], scale: float = 1.0) -> dict:
    """Requests a second over the run (times ``scale``), and an interval
    from resampling equal time windows (a block bootstrap: requests close
    in time are not independent)."""
    import numpy as np

    t = np.sort(np.asarray([v for v in send_us if num(v) is not None], dtype=float))
    if t.size < 2 or t[-1] <= t[0]:
        return {"value": None, "lo": None, "hi": None, "n": int(t.size)}
    span_s = (t[-1] - t[0]) / 1e6
    point = (t.size - 1) / span_s * scale
    k = max(5, min(20, t.size // 5))
    if t.size < 10:
        return {"value": point, "lo": None, "hi": None, "n": int(t.size)}
    counts = np.histogram(t, bins=k, range=(t[0], t[-1]))[0]
    rng = np.random.default_rng(SEED)
    # (n - 1) intervals between n requests, as the point estimate counts them.
    boots = counts[rng.integers(0, k, (RESAMPLES, k))].sum(axis=1) * ((t.size - 1) / t.size) / span_s * scale
    lo, hi = np.quantile(boots, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return {"value": point, "lo": float(lo), "hi": float(hi), "n": int(t.size)}


def _holding(e: dict) -> dict:
    """``e`` with its interval widened to hold its point. A steady producer
    fills every window alike, so the interval is its point alone, and the
    rescaling's rounding can leave it an ulp beside the point."""
    if e["lo"] is None or e["hi"] is None:
        return e
    return {**e, "lo": float(min(e["lo"], e["value"])), "hi": float(max(e["hi"], e["value"]))}


def side(findings: dict, name: str, rows: list[dict]) -> dict:
    """One run's figures; ``rows``: its requests (the fair sample, without
    the slowest kept beside it)."""
    totals = [r.get("total_ms") for r in rows]
    rr = dict_or_empty(findings.get("request_rows"))
    summary = dict_or_empty(findings.get("summary"))
    probe = dict_or_empty(findings.get("probe"))
    sampled_of = num(rr.get("of")) if rr.get("sampled") else None
    scale = (sampled_of / len(rows)) if sampled_of and rows else 1.0
    per_request = None
    if num(probe.get("delivered")) and num(summary.get("requests")):
        per_request = probe["delivered"] / summary["requests"]
    rate = rate_ci([r.get("send_us") for r in rows], scale * (per_request or 1.0))
    probe_rate = num(probe.get("msgs_per_s"))
    if probe_rate and rate["value"]:
        # The probe's own rate is what the application saw (delivered over
        # its whole run, the time between requests included); the interval
        # keeps its width relative to the requests' rate.
        k = probe_rate / rate["value"]
        rate = _holding({**rate, "value": probe_rate, "lo": rate["lo"] and rate["lo"] * k,
                         "hi": rate["hi"] and rate["hi"] * k})
    shares = {f["cause"]: f.get("share") for f in findings.get("findings") or [] if isinstance(f, dict)
              and isinstance(f.get("cause"), str)}
    delivery = findings.get("delivery_ms") if isinstance(findings.get("delivery_ms"), list) else []
    return {"name": name, "verdict": findings.get("verdict"), "requests": summary.get("requests"),
            "p50_ms": quantile_ci(totals, 0.5), "p99_ms": quantile_ci(totals, 0.99),
            "delivery_p50_ms": quantile_ci(delivery, 0.5),
            "rate": rate, "rate_unit": "msg/s" if per_request else "requests/s",
            "probe_msgs_per_s": probe_rate, "shares": shares,
            "sampled": bool(rr.get("sampled"))}


def compare(before: dict, after: dict, names: tuple[str, str] = ("before", "after")) -> dict:
    if names[0] == names[1]:   # two runs' folders of one name: the distributions are keyed by name
        names = (f"{names[0]} (before)", f"{names[1]} (after)")
    rows_b, rows_a = request_rows(before, slowest=False), request_rows(after, slowest=False)
    b, a = side(before, names[0], rows_b), side(after, names[1], rows_a)
    cause = b["verdict"] if b["verdict"] not in (None, OTHERWISE) else None
    # A cause that holds messages before their request (the queue) shows in
    # the delivery time, not in the requests' latency.
    metric = "delivery_p50_ms" if part_of(cause) == "queue" and b["delivery_p50_ms"]["value"] is not None \
        and a["delivery_p50_ms"]["value"] is not None else "p50_ms"
    out = {"before": b, "after": a, "cause": cause, "metric": metric,
           "prediction": _prediction(before, b, a, cause, metric)}
    out["phases"] = phases_compared(before, after)
    phase = getattr(BY_NAME.get(cause), "PHASE", None)
    if phase is not None:
        # A connection's phase held the messages, not the requests: the fix
        # shows in that phase, which the requests' latency does not hold.
        out["fixed"], out["sentence"] = _phase_judged(out["phases"], cause, phase)
    else:
        out["fixed"], out["sentence"] = _judged(b, a, cause, metric)
    out["distributions"] = {name: [r["total_ms"] for r in rows if num(r.get("total_ms")) is not None]
                            for name, rows in zip(names, (rows_b, rows_a))}
    return out


def phase_ms(findings: dict, phase: str) -> float | None:
    """A run's figure for a connection phase (life.py): its slowest instance,
    the metadata wait, or (``down``) the time a broker could not be reached.
    From findings anyone may have edited."""
    life = dict_or_empty(findings.get("life"))
    if phase == "down":
        # Attempts and none failed: reached at once.
        return num(life.get("down_ms")) if life.get("down_ms") is not None or not num(life.get("attempts")) else 0.0
    if phase == "metadata":
        return num(dict_or_empty(life.get("metadata")).get("ms"))
    return num(dict_or_empty(dict_or_empty(life.get("phases")).get(phase)).get("max_ms"))


def phases_compared(before: dict, after: dict) -> dict:
    """Each phase either run timed: [before, after], slowest ms."""
    from kdiag.analysis.life import PHASES

    got = {ph: [phase_ms(before, ph), phase_ms(after, ph)] for ph in (*PHASES, "down")}
    return {ph: v for ph, v in got.items() if v != [None, None]}


def _phase_judged(phases: dict, cause: str, phase: str) -> tuple[bool | None, str]:
    slow = BY_NAME[cause].SLOW_MS
    b, a = phases.get(phase, [None, None])
    what = "the time a broker could not be reached" if phase == "down" else f"the slowest {phase} phase"
    if b is None:
        return None, f"Cannot tell: the run before shows no {phase} phase to compare."
    if a is None:
        return None, (f"Cannot tell: the run after shows no {phase} phase ({what} was {fmt(b)} ms before); "
                      "its log needs debug=broker from the producer's start.")
    moved = f"{what} {fmt(b)} ms before, {fmt(a)} ms after"
    if a <= slow if slow else a == 0:
        return True, f"The change fixed it: {cause} is gone; {moved}."
    if a < b:
        return False, f"Shorter, not fixed: {moved}, still {cause}."
    return False, f"The change did not shorten it: {moved}."


def _prediction(before: dict, b: dict, a: dict, cause: str | None, metric: str) -> dict | None:
    f = next((f for f in before.get("findings") or [] if isinstance(f, dict) and f.get("cause") == cause), None)
    p = f.get("predicted") if f else None
    if not isinstance(p, dict):
        return None
    mb, ma = b[metric]["value"], a[metric]["value"]
    if metric == "delivery_p50_ms":
        saving = num(p.get("saves_delivery_p50_ms"))
        p50, p99, measured_p99 = (None if saving is None or mb is None else round(mb - saving, 3)), None, None
    else:
        saving, p50, p99, measured_p99 = num(p.get("saves_p50_ms")), p.get("p50_ms"), p.get("p99_ms"), \
            a["p99_ms"]["value"]
    if saving is None:
        return None
    out = {"cause": cause, "fix": f.get("fix"), "metric": metric, "predicted_p50_ms": p50, "predicted_p99_ms": p99,
           "measured_p50_ms": ma, "measured_p99_ms": measured_p99, "predicted_saving_ms": saving,
           "measured_saving_ms": None, "within_tolerance": None}
    if mb is not None and ma is not None:
        measured = mb - ma
        out["measured_saving_ms"] = round(measured, 3)
        out["within_tolerance"] = abs(saving - measured) <= PREDICTION_TOLERANCE * abs(measured)
    return out


def _judged(b: dict, a: dict, cause: str | None, metric: str = "p50_ms") -> tuple[bool | None, str]:
    pb, pa = b[metric], a[metric]
    if pb["value"] is None or pa["value"] is None:
        return None, "Cannot tell: one side has no completed Produce request to compare."
    what = "delivery p50" if metric == "delivery_p50_ms" else "p50"
    moved = (f"{what} {ci_text(pb)} ms before, {ci_text(pa)} ms after"
             + (f" ({pb['value'] / pa['value']:.3g}x faster)" if pa["value"] > 0 and pb["value"] > pa["value"] else ""))
    separated = pb["lo"] is not None and pa["hi"] is not None and pa["hi"] < pb["lo"]
    worse = pa["lo"] is not None and pb["hi"] is not None and pa["lo"] > pb["hi"]
    share_after = a["shares"].get(cause) or 0.0
    if cause is None:
        return None, f"Before the change the requests were {b['verdict'] or 'not judged'}: nothing to fix; {moved}."
    if separated and share_after < GONE_SHARE:
        return True, f"The change fixed it: {cause} is gone ({pct(b['shares'].get(cause))} of requests before, " \
                     f"{pct(share_after)} after); {moved}."
    if separated:
        return False, f"Faster, not fixed: {cause} still holds {pct(share_after)} of the requests; {moved}."
    if worse:
        return False, f"The change made it worse: {moved}."
    return False, f"The change did not fix it: the intervals overlap; {moved}."


def pct(v) -> str:
    return f"{(num(v) or 0) * 100:.0f}%"


def ci_text(e: dict) -> str:
    if e["value"] is None:
        return "?"
    if e["lo"] is None:
        return f"{fmt(e['value'])}"
    return f"{fmt(e['value'])} [{fmt(e['lo'])}, {fmt(e['hi'])}]"


def render_text(c: dict) -> str:
    b, a = c["before"], c["after"]
    # The names are files' (anyone's); every cell is shown before it is
    # aligned, and every line again as it is joined.
    b_name, a_name = visible(b["name"]), visible(a["name"])
    b_verdict, a_verdict = visible(b["verdict"]), visible(a["verdict"])
    lines = [f"kdiag compare: {b_name} -> {a_name}", "",
             f"  {'':<14}{'BEFORE':>28}{'AFTER':>28}",
             f"  {'P50(ms)':<14}{ci_text(b['p50_ms']):>28}{ci_text(a['p50_ms']):>28}",
             f"  {'P99(ms)':<14}{ci_text(b['p99_ms']):>28}{ci_text(a['p99_ms']):>28}",
             f"  {a['rate_unit'].upper():<14}{ci_text(b['rate']):>28}{ci_text(a['rate']):>28}",
             *([f"  {'DELIVERY(ms)':<14}{ci_text(b['delivery_p50_ms']):>28}{ci_text(a['delivery_p50_ms']):>28}"]
               if b["delivery_p50_ms"]["value"] is not None or a["delivery_p50_ms"]["value"] is not None else []),
             f"  {'REQUESTS':<14}{str(b['requests']):>28}{str(a['requests']):>28}",
             f"  {'VERDICT':<14}{b_verdict:>28}{a_verdict:>28}", "", "  CAUSES (share of requests)"]
    for cause in sorted(set(b["shares"]) | set(a["shares"])):
        lines.append(f"    {visible(cause):<24}{pct(b['shares'].get(cause)):>8} -> {pct(a['shares'].get(cause))}")
    if c.get("phases"):
        lines += ["", "  CONNECTION PHASES (slowest, ms)"]
        for ph, (pb, pa) in c["phases"].items():
            lines.append(f"    {visible(ph):<24}{'?' if pb is None else fmt(pb):>8} -> {'?' if pa is None else fmt(pa)}")
    p = c.get("prediction")
    if p:
        ok = {True: "within", False: "outside", None: "?"}[p["within_tolerance"]]
        what = "delivery p50" if p["metric"] == "delivery_p50_ms" else "p50"
        lines += ["", f"  PREDICTED by {b_name}'s {p['cause']} finding: {what} "
                      f"{fmt(p['predicted_p50_ms'] or 0)} ms, saving {fmt(p['predicted_saving_ms'] or 0)} ms",
                  f"  MEASURED in {a_name}: {what} {fmt(p['measured_p50_ms'] or 0)} ms, saving "
                  f"{fmt(p['measured_saving_ms'] or 0)} ms ({ok} {PREDICTION_TOLERANCE:.0%} of the measured saving)"]
    lines += ["", f"{c['sentence']}", f"  ({LEVEL:.0%} intervals: bootstrap, {RESAMPLES} resamples; rates by "
                                       "resampling time windows)"]
    return visible_text(lines)


def log_bins(a: list[float], b: list[float], bins: int = 30) -> list[float]:
    vals = [v for v in a + b if v > 0]
    if not vals:
        return [0.0, 1.0]
    lo, hi = min(vals), max(vals)
    if hi <= lo:
        hi = lo * 1.5
    return [lo * (hi / lo) ** (i / bins) for i in range(bins + 1)]


def count_in(values: list[float], edges: list[float]) -> list[int]:
    import bisect

    out = [0] * (len(edges) - 1)
    for v in values:
        if v <= 0 or math.isnan(v):
            continue
        i = min(len(out) - 1, max(0, bisect.bisect_right(edges, v) - 1))
        out[i] += 1
    return out
