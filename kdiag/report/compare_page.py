"""``kdiag compare -o PAGE``: the comparison (kdiag.report.compare) as one
self-contained HTML page, drawn as the report is (kdiag.report.svg) and
written by templates/compare.html, which escapes every value it writes."""
from __future__ import annotations

from kdiag.report import svg
from kdiag.report.compare import LEVEL, RESAMPLES, ci_text, count_in, log_bins, pct
from kdiag.report.html import OTHER_CAUSES, color_of
from kdiag.report.page_limits import SHOWN
from kdiag.report.svg import fmt, num
from kdiag.report.templating import render

SIDES = ("#d62728", "#2ca02c")   # before, after


def render_compare_html(c: dict) -> str:
    b, a = c["before"], c["after"]
    return render("compare.html", title=f"kdiag compare: {b['name']} vs {a['name']}", before=b["name"],
                  after=a["name"], verdict_color={True: "#2ca02c", False: "#d62728", None: "#7f7f7f"}[c.get("fixed")],
                  sentence=c["sentence"], figures=_figures(c), prediction=_prediction(c), latency=_latency(c),
                  causes=_causes(c), distribution=_distribution(c), level=LEVEL, resamples=RESAMPLES) + "\n"


def _figures(c: dict) -> list[list[str]]:
    b, a = c["before"], c["after"]
    rows = [("p50 (ms)", ci_text(b["p50_ms"]), ci_text(a["p50_ms"])),
            ("p99 (ms)", ci_text(b["p99_ms"]), ci_text(a["p99_ms"])),
            (a["rate_unit"], ci_text(b["rate"]), ci_text(a["rate"])),
            ("message delivery p50 (ms)", ci_text(b["delivery_p50_ms"]), ci_text(a["delivery_p50_ms"])),
            ("requests", str(b["requests"]), str(a["requests"])),
            ("verdict", str(b["verdict"]), str(a["verdict"]))]
    rows += [(f"{ph} phase, slowest (ms)", "?" if pb is None else fmt(pb), "?" if pa is None else fmt(pa))
             for ph, (pb, pa) in (c.get("phases") or {}).items()]
    return [list(r) for r in rows]


def _prediction(c: dict) -> dict | None:
    p = c.get("prediction")
    if not p:
        return None
    fix = ", ".join(f"{k}={v}" for k, v in (p.get("fix") or {}).items())
    ok = {True: "within", False: "outside", None: "not comparable to"}[p.get("within_tolerance")]
    what = "message delivery p50" if p.get("metric") == "delivery_p50_ms" else "p50"
    return {"cause": p["cause"], "fix": fix, "ok": ok,
            "rows": [(f"{what} (ms)", fmt(p["predicted_p50_ms"] or 0), fmt(p["measured_p50_ms"] or 0)),
                     ("p99 (ms)", fmt(p["predicted_p99_ms"] or 0), fmt(p["measured_p99_ms"] or 0)),
                     ("saving at the median (ms)", fmt(p["predicted_saving_ms"] or 0),
                      fmt(p["measured_saving_ms"] or 0))]}


def _latency(c: dict) -> str:
    items = [(f"{q} {s['name']}", s[f"{q}_ms"], SIDES[i]) for q in ("p50", "p99")
             for i, s in enumerate((c["before"], c["after"]))]
    vals = [v for _, e, _ in items for v in (e["value"], e["lo"], e["hi"]) if num(v) is not None and v > 0]
    if not vals:
        return svg.empty("compare_latency", "no latencies on either side")
    fr = svg.Frame((0.0, float(len(items))), (min(vals), max(vals)), x_label="", y_label="latency (ms, log)",
                   y_log=True, x_ticks=False, x_exact=True)
    marks, dots = [], 0
    for i, (label, e, color) in enumerate(items):
        x = fr.x(i + 0.5)
        if num(e["value"]) is None or e["value"] <= 0:
            continue
        if e["lo"] is not None and e["hi"] is not None and e["lo"] > 0:
            marks.append(svg.interval(x, fr.y(e["lo"]), fr.y(e["hi"]), color, f"{label}: {ci_text(e)} ms"))
        marks.append(svg.dot(x, fr.y(e["value"]), color, f"{label}: {ci_text(e)} ms", r=5))
        dots += 1
        marks.append(svg.label(label, f"{x:.1f}", fr.h - 22, anchor="middle"))
    return fr.svg("compare_latency", marks, "p50 and p99 with their intervals", count=dots)


def _causes(c: dict) -> str:
    sides = (c["before"], c["after"])
    names = sorted(set(sides[0]["shares"]) | set(sides[1]["shares"]))
    if not names:
        return svg.empty("compare_causes", "no causes named on either side")

    def share(s: dict, n: str) -> float:
        return num(s["shares"].get(n)) or 0.0
    if len(names) > SHOWN["causes"]:   # the largest by name, the rest as one
        top = sorted(names, key=lambda n: -max(share(s, n) for s in sides))[:SHOWN["causes"]]
        names = sorted(top) + [OTHER_CAUSES]
        sides = tuple({**s, "shares": {**{n: share(s, n) for n in top},
                                       OTHER_CAUSES: sum(share(s, n) for n in s["shares"] if n not in top)}}
                      for s in sides)
    w, left, bar_h = svg.W, 90, 26
    others: dict = {}
    marks, y, drawn = [], 8, 0
    for label, s in zip(("before", "after"), sides):
        x = left
        for n in names:
            width = share(s, n) * (w - left - 20)
            if width > 0:
                marks.append(svg.rect(x, y, width, bar_h, color_of(n, others), f"{s['name']}: {n} {pct(share(s, n))}"))
                drawn += 1
            x += width
        marks.append(svg.label(label, left - 8, y + 17, anchor="end", tip=s["name"]))
        y += bar_h + 12
    return (svg.chart("compare_causes", w, y, "share of requests by cause", marks, drawn)
            + svg.legend([(n, color_of(n, others)) for n in names]))


def _distribution(c: dict) -> str:
    (nb, before), (na, after) = list(c["distributions"].items())
    if not before and not after:
        return svg.empty("compare_distribution", "no per-request latencies on either side")
    edges = log_bins(before, after)
    counts = [count_in(before, edges), count_in(after, edges)]
    top = max(max(cs) for cs in counts) or 1
    fr = svg.Frame((edges[0], edges[-1]), (0.0, float(top)), x_label="latency (ms, log)", y_label="requests",
                   x_log=True, x_exact=True)
    marks = []
    for side, (name, cs) in enumerate(zip((nb, na), counts)):
        for i, k in enumerate(cs):
            if k:
                x0, x1 = fr.x(edges[i]), fr.x(edges[i + 1])
                marks.append(svg.rect(x0 + 0.5, fr.y(k), x1 - x0 - 1, fr.y(0) - fr.y(k), SIDES[side],
                                      f"{name}: {k} requests of {fmt(edges[i])}-{fmt(edges[i + 1])} ms"))
    return (fr.svg("compare_distribution", marks, "latency distribution before and after")
            + svg.legend([(nb, SIDES[0]), (na, SIDES[1])]))
