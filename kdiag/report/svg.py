"""Charts as inline SVG, drawn here: the HTML report opens offline and runs
no script, so a chart is markup. Every text and attribute value is escaped:
the numbers and names come from bundles anyone may have written."""
from __future__ import annotations

import math
from html import escape

from kdiag.report.shown import clipped
from kdiag.visible import visible

W, H = 760, 250
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 14, 40


def esc(v) -> str:
    """``v`` as page text: controls, format characters (bidirectional
    overrides) and lone surrogates shown as escapes rather than interpreted
    or hidden by the browser, clipped to SHOWN's length, markup escaped."""
    return escape(visible(clipped(v if isinstance(v, str) else str(v))), quote=True)


# What an axis can span: its ratios, differences and decades stay finite
# (1e-300 to 1e300 made a log axis of inf/inf) and few (a tick per decade).
# Epoch microseconds are 1.8e15; a latency under 1e-12 ms is a zero.
PLOTTABLE_MAX = 1e18
PLOTTABLE_MIN = 1e-12


def num(v) -> float | None:
    """A float a chart can place, or None (what an edited bundle holds may
    be anything): finite, at most PLOTTABLE_MAX in size, and a magnitude
    under PLOTTABLE_MIN drawn as 0."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:   # an integer past float range
        return None
    if not math.isfinite(f) or abs(f) > PLOTTABLE_MAX:
        return None
    return 0.0 if abs(f) < PLOTTABLE_MIN else f


def fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


def nice_ticks(lo: float, hi: float, log: bool, n: int = 5) -> list[float]:
    if log:
        out = [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
        return [t for t in out if lo <= t <= hi] or [lo, hi]
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


class Frame:
    """A plot area with its two axes; x and y map data to pixels."""

    def __init__(self, x_range: tuple[float, float], y_range: tuple[float, float], *, x_label: str,
                 y_label: str, y_log: bool = False, x_log: bool = False, w: int = W, h: int = H,
                 x_ticks: bool = True, x_exact: bool = False) -> None:
        """``x_exact``: the x range as given, without the margin a plot of
        points gets (bins and categories fill theirs edge to edge)."""
        self.w, self.h, self.x_log, self.y_log, self.x_ticks = w, h, x_log, y_log, x_ticks
        self.x_lo, self.x_hi = x_range if x_exact else self._span(*x_range, x_log)
        self.y_lo, self.y_hi = self._span(*y_range, y_log)
        self.x_label, self.y_label = x_label, y_label

    @staticmethod
    def _span(lo: float, hi: float, log: bool) -> tuple[float, float]:
        if log:
            lo, hi = max(lo, 1e-6), max(hi, 1e-6)
            return lo / 1.3, hi * 1.3
        if hi <= lo:
            return lo - 1, hi + 1
        return lo, hi + (hi - lo) * 0.04

    def _at(self, v: float, lo: float, hi: float, log: bool) -> float:
        if log:
            v, lo, hi = math.log10(max(v, 1e-6)), math.log10(lo), math.log10(hi)
        return 0.0 if hi == lo else (v - lo) / (hi - lo)

    def x(self, v: float) -> float:
        return LEFT + self._at(v, self.x_lo, self.x_hi, self.x_log) * (self.w - LEFT - RIGHT)

    def y(self, v: float) -> float:
        return self.h - BOTTOM - self._at(v, self.y_lo, self.y_hi, self.y_log) * (self.h - TOP - BOTTOM)

    def svg(self, name: str, marks: list[str], title: str, count: int | None = None) -> str:
        """``count``: the data marks among ``marks`` (default: all of them)."""
        grid = []
        for t in nice_ticks(self.y_lo, self.y_hi, self.y_log):
            y = self.y(t)
            grid.append(f'<line class="grid" x1="{LEFT}" x2="{self.w - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                        f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(t)}</text>')
        for t in nice_ticks(self.x_lo, self.x_hi, self.x_log, 8) if self.x_ticks else []:
            x = self.x(t)
            grid.append(f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{self.h - BOTTOM}" '
                        f'y2="{self.h - BOTTOM + 4}"/><text class="tick" x="{x:.1f}" y="{self.h - BOTTOM + 16}" '
                        f'text-anchor="middle">{fmt(t)}</text>')
        axes = (f'<line class="axis" x1="{LEFT}" x2="{self.w - RIGHT}" y1="{self.h - BOTTOM}" y2="{self.h - BOTTOM}"/>'
                f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{self.h - BOTTOM}"/>'
                f'<text class="label" x="{(LEFT + self.w - RIGHT) / 2:.0f}" y="{self.h - 6}" '
                f'text-anchor="middle">{esc(self.x_label)}</text>'
                f'<text class="label" transform="translate(14 {(TOP + self.h - BOTTOM) / 2:.0f}) rotate(-90)" '
                f'text-anchor="middle">{esc(self.y_label)}</text>')
        return chart(name, self.w, self.h, title, "".join(grid) + axes + "".join(marks),
                     len(marks) if count is None else count)


def chart(name: str, w: int, h: int, title: str, body: str, marks: int) -> str:
    return (f'<svg class="chart" data-chart="{esc(name)}" data-marks="{marks}" viewBox="0 0 {w} {h}" '
            f'role="img" aria-label="{esc(title)}" xmlns="http://www.w3.org/2000/svg"><title>{esc(title)}</title>'
            f'{body}</svg>')


def empty(name: str, why: str) -> str:
    """Where a chart would be: what is missing, said, so a missing chart is
    never a blank space."""
    return f'<p class="empty" data-chart="{esc(name)}" data-marks="0">{esc(why)}</p>'


def dot(x: float, y: float, color: str, tip: str, r: float = 3.0) -> str:
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{esc(color)}"><title>{esc(tip)}</title></circle>'


def rect(x: float, y: float, w: float, h: float, color: str, tip: str) -> str:
    return (f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(w, 0.0):.2f}" height="{max(h, 0.0):.2f}" '
            f'fill="{esc(color)}"><title>{esc(tip)}</title></rect>')


def line(points: list[tuple[float, float]], color: str, tip: str, step: bool = False) -> str:
    if step:
        stepped: list[tuple[float, float]] = []
        for (x0, y0), (x1, _) in zip(points, points[1:]):
            stepped += [(x0, y0), (x1, y0)]
        points = stepped + points[-1:]
    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return (f'<polyline points="{pts}" fill="none" stroke="{esc(color)}" stroke-width="1.6">'
            f'<title>{esc(tip)}</title></polyline>')


def legend(items: list[tuple[str, str]]) -> str:
    return '<ul class="legend">' + "".join(
        f'<li><span class="swatch" style="background:{esc(c)}"></span>{esc(n)}</li>' for n, c in items) + "</ul>"
