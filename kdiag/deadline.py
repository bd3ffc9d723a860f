"""Waiting with a time limit: one place for kdiag's polling loops.

Times are ``time.monotonic()``: a wall clock stepped by NTP would cut a wait
short or stretch it."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


class Deadline:
    """A point ``timeout_s`` from now (or from ``start``, a monotonic time)."""

    def __init__(self, timeout_s: float, start: float | None = None):
        self.end = (time.monotonic() if start is None else start) + timeout_s

    def remaining_s(self) -> float:
        """Seconds left, never below 0."""
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end


def wait_until(predicate: Callable[[], T], timeout_s: float, interval_s: float,
               give_up: Callable[[], bool] | None = None) -> T:
    """Calls ``predicate`` every ``interval_s`` until it returns something
    truthy, the time runs out, or ``give_up()`` (asked after each falsy
    answer) is true; returns the predicate's last answer, so a caller tells
    success by its truth and gets what was found. The predicate is asked at
    least once, and once more when the time is up: a condition met during
    the last sleep still counts."""
    deadline = Deadline(timeout_s)
    while True:
        answer = predicate()
        if answer or (give_up is not None and give_up()) or deadline.expired():
            return answer
        time.sleep(min(interval_s, deadline.remaining_s()))
