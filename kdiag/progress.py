"""Progress while kdiag works: the stage it is in, elapsed time, and where
the amount of work is known a bar with the remaining time (probe messages,
bytes of a capture parsed, with lines a second). On stderr, only when that
is a terminal and the output is not --json: a pipe or a log file gets the
results and the one-line notes, never a redrawn line.

The code that does the work asks ``current()`` for the display and opens a
``stage``; without one shown, stages cost nothing and print nothing. rich
is imported only when a display is shown."""
from __future__ import annotations

import contextlib
import contextvars
import time
from typing import Iterator, TextIO

from kdiag.visible import visible, visible_lines


class Stage:
    """One step of the work; ``update`` with how much is done of ``total``."""

    def update(self, done: float, **fields) -> None:
        pass


class Progress:
    """What nothing is shown by."""

    def stage(self, name: str, total: float | None = None) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext(Stage())

    def say(self, line: str) -> bool:
        """Print ``line`` above the display; False when there is none."""
        return False

    def stop(self) -> None:
        """Take the display off the terminal for good (the results follow)."""


class _RichStage(Stage):
    def __init__(self, bar, task) -> None:
        self._bar, self._task, self._t0 = bar, task, time.monotonic()

    def update(self, done: float, **fields) -> None:
        rate = ""
        lines = fields.get("lines")
        if lines:
            rate = f"{lines / max(time.monotonic() - self._t0, 1e-3):,.0f} lines/s"
        self._bar.update(self._task, completed=done, rate=rate)


class _RichProgress(Progress):
    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        self.console = Console(file=stream, stderr=True)
        self._bar = Bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24),
                        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("elapsed,"),
                        TimeRemainingColumn(), TextColumn("left"), console=self.console, transient=True, redirect_stdout=False,
                        redirect_stderr=False)

    def __enter__(self) -> "_RichProgress":
        self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.stop()

    @contextlib.contextmanager
    def stage(self, name: str, total: float | None = None) -> Iterator[Stage]:
        from rich.markup import escape

        # A stage names a file, whose name is anyone's: shown as data, and
        # never read as rich's markup ("[link=...]" would plant a link).
        task = self._bar.add_task(escape(visible(name)), total=total, rate="")
        try:
            yield _RichStage(self._bar, task)
        finally:
            self._bar.remove_task(task)

    def say(self, line: str) -> bool:
        self.console.print(visible_lines(line), markup=False, highlight=False, soft_wrap=True)
        return True

    def stop(self) -> None:
        self._bar.stop()   # again at __exit__: rich stops once


_CURRENT: contextvars.ContextVar[Progress] = contextvars.ContextVar("kdiag_progress", default=Progress())


def current() -> Progress:
    return _CURRENT.get()


def wanted(stream: TextIO, as_json: bool) -> bool:
    isatty = getattr(stream, "isatty", None)
    return not as_json and bool(isatty and isatty())


@contextlib.contextmanager
def shown(stream: TextIO, enabled: bool) -> Iterator[Progress]:
    """The display on ``stream`` for the ``with`` block, when ``enabled``."""
    if not enabled:
        yield current()
        return
    with _RichProgress(stream) as p:
        token = _CURRENT.set(p)
        try:
            yield p
        finally:
            _CURRENT.reset(token)
