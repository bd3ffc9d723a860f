"""Charts as inline SVG: the HTML report opens offline and runs no script,
so a chart is markup. The geometry is computed here; the markup is the
macros of templates/svg.html, which escape every text and attribute value:
the numbers and names come from bundles anyone may have written. Each
function returns markup (markupsafe.Markup) for a template to insert."""
from __future__ import annotations

import math

from kdiag.report.templating import macros

W, H = 760, 250
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 14, 40


def _svg():
    return macros("svg.html")


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

    def svg(self, name: str, marks: list, title: str, count: int | None = None):
        """``count``: the data marks among ``marks`` (default: all of them)."""
        yticks = [(self.y(t), fmt(t)) for t in nice_ticks(self.y_lo, self.y_hi, self.y_log)]
        xticks = [(self.x(t), fmt(t)) for t in nice_ticks(self.x_lo, self.x_hi, self.x_log, 8)] if self.x_ticks else []
        box = {"left": LEFT, "right": self.w - RIGHT, "top": TOP, "bottom": self.h - BOTTOM, "h": self.h,
               "x_label": self.x_label, "y_label": self.y_label}
        return chart(name, self.w, self.h, title, [_svg().frame(box, yticks, xticks), *marks],
                     len(marks) if count is None else count)


def chart(name: str, w: int, h: int, title: str, body: list, marks: int):
    """An <svg> of ``body``'s marks; ``marks`` is what it says it draws."""
    return _svg().chart(name, w, h, title, body, marks)


def empty(name: str, why: str):
    """Where a chart would be: what is missing, said, so a missing chart is
    never a blank space."""
    return _svg().empty(name, why)


def dot(x: float, y: float, color: str, tip: str, r: float = 3.0):
    return _svg().dot(x, y, color, tip, r)


def rect(x: float, y: float, w: float, h: float, color: str, tip: str):
    return _svg().rect(x, y, max(w, 0.0), max(h, 0.0), color, tip)


def line(points: list[tuple[float, float]], color: str, tip: str, step: bool = False):
    if step:
        stepped: list[tuple[float, float]] = []
        for (x0, y0), (x1, _) in zip(points, points[1:]):
            stepped += [(x0, y0), (x1, y0)]
        points = stepped + points[-1:]
    return _svg().line(points, color, tip)


def interval(x: float, y0: float, y1: float, color: str, tip: str):
    """A vertical line from y0 to y1: an interval around a dot."""
    return _svg().interval(x, y0, y1, color, tip)


def label(text: str, x, y, cls: str = "wlabel", anchor: str | None = None, tip: str | None = None):
    """A text beside a mark; ``x`` and ``y`` as they are to be written."""
    return _svg().label(text, x, y, cls, anchor, tip)


def legend(items: list[tuple[str, str]]):
    return _svg().legend(items)
