"""A Ctrl-C or SIGTERM that lands while Python runs a finaliser still ends
the run (kdiag.interrupts): Python drops an exception raised there."""
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = """
import os, signal, socket, sys, time, weakref
from kdiag import interrupts

if sys.argv[2] == "sigint-ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)

def callback(_):
    # The signal's handler runs here, inside the weakref callback.
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    for _ in range(1000):
        pass

class Thing:
    pass

try:
    with interrupts.sigterm_interrupts():
        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing
        if sys.argv[3] == "busy":
            for _ in range(200):
                time.sleep(0.01)
        else:   # blocked in a read, as a replay waits on its JVM
            a, b = socket.socketpair()
            a.settimeout(20)
            try:
                a.recv(1)
            except TimeoutError:
                pass
        print("ran to the end")
except KeyboardInterrupt:
    print("interrupted", interrupts.SIGNALLED.is_set())
"""


@pytest.mark.parametrize("then", ["busy", "blocked"])
@pytest.mark.parametrize("sig, sigint", [("SIGINT", "default"), ("SIGTERM", "default"),
                                         ("SIGTERM", "sigint-ignored")])
def test_a_signal_inside_a_finaliser_still_interrupts(sig, sigint, then):
    res = subprocess.run([sys.executable, "-c", SCRIPT, sig, sigint, then], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert res.stdout == "interrupted True\n", res.stdout + res.stderr
    assert "Exception ignored" not in res.stderr, res.stderr


def test_other_unraisable_exceptions_are_still_reported():
    code = ("import weakref\nfrom kdiag import interrupts\nclass T: pass\n"
            "def cb(_):\n    raise ValueError('from a callback')\n"
            "with interrupts.sigterm_interrupts():\n    t = T(); r = weakref.ref(t, cb); del t\nprint('ran')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.stdout == "ran\n" and "ValueError: from a callback" in res.stderr, res.stdout + res.stderr
