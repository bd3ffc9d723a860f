import time

from kdiag.deadline import Deadline, wait_until


def test_wait_until_returns_the_first_truthy_answer():
    answers = iter([None, 0, "found", "later"])
    assert wait_until(lambda: next(answers), 5, 0.001) == "found"


def test_wait_until_gives_the_last_falsy_answer_when_time_runs_out():
    calls = []
    t0 = time.monotonic()
    assert wait_until(lambda: calls.append(1), 0.05, 0.01) is None
    took = time.monotonic() - t0
    assert 0.05 <= took < 1.0
    # Asked about every interval, and once more when the time was up.
    assert 3 <= len(calls) <= 7


def test_wait_until_asks_once_even_with_no_time():
    assert wait_until(lambda: True, 0, 1.0) is True
    assert wait_until(lambda: False, 0, 1.0) is False


def test_give_up_ends_the_wait_early():
    t0 = time.monotonic()
    assert wait_until(lambda: False, 5, 0.01, give_up=lambda: True) is False
    assert time.monotonic() - t0 < 1.0


def test_a_condition_met_during_the_last_sleep_counts():
    end = time.monotonic() + 0.05
    assert wait_until(lambda: time.monotonic() >= end, 0.05, 10.0) is True


def test_deadline_counts_down_to_zero():
    d = Deadline(0.05)
    assert not d.expired()
    assert 0 < d.remaining_s() <= 0.05
    time.sleep(0.06)
    assert d.expired()
    assert d.remaining_s() == 0.0


def test_deadline_from_a_start():
    past = time.monotonic() - 10
    assert Deadline(5, start=past).expired()
    assert not Deadline(20, start=past).expired()
