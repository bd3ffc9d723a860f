"""How a command ends on Ctrl-C or SIGTERM, and the umask of what it
writes: set up by ``kdiag.cli`` around the commands that read captures,
and by ``trace`` and ``lab matrix`` around their own runs."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

# Set by a Ctrl-C or SIGTERM. The KeyboardInterrupt it raises does not
# always reach kdiag.cli as one: raised inside PySpark's collect, its cleanup
# (``getResult`` on a socket the interrupted reader left) raises a
# Py4JJavaError over it; the run still ends as interrupted.
SIGNALLED = threading.Event()


def interrupted(e: BaseException) -> bool:
    """A signal came, or ``e`` was raised while a KeyboardInterrupt was
    handled (a handler installed after ours, such as the one PySpark's
    SparkContext puts in the main thread, does not set the flag)."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return SIGNALLED.is_set()


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM ends a trace as Ctrl-C does: detach, keep what was captured,
    write the bundle marked partial. Main thread only (tests may call main()
    from elsewhere, where signals cannot be handled)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old_int = signal.getsignal(signal.SIGINT)
    last = [signal.SIGINT]

    def on_signal(signum, frame):
        SIGNALLED.set()
        last[0] = signum
        # py4j logs the interrupt it is handed, traceback and all, on the
        # root logger; "kdiag: interrupted" is the one line to show.
        if "logging" in sys.modules:
            sys.modules["logging"].disable(sys.modules["logging"].CRITICAL)
        # Ctrl-C still does what the handler before ours did (PySpark's
        # cancels the running jobs), then interrupts.
        if signum == signal.SIGINT and callable(old_int) and old_int is not signal.default_int_handler:
            old_int(signum, frame)
        raise KeyboardInterrupt

    old_hook = sys.unraisablehook
    main_thread = threading.main_thread().ident
    inside = [True]

    def signal_again(signum):
        # From another thread, after the hook has returned (else the handler
        # would raise inside the hook, and that too is dropped), and as a
        # real signal to the main thread: it stops a blocking read there
        # (py4j waiting on the JVM), which a mere flag would not.
        time.sleep(0.001)
        if inside[0]:
            signal.pthread_kill(main_thread, signum)

    def on_unraisable(unraisable):
        # A signal that lands while Python runs a weakref callback, a __del__
        # or a finaliser raises KeyboardInterrupt there, where Python prints
        # it ("Exception ignored in ...") and drops it: a replay signalled in
        # py4j's finalisers once ran on to its end and exited 0. The signal
        # is sent again until it lands where the run's own code is.
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and SIGNALLED.is_set():
            threading.Thread(target=signal_again, args=(last[0],), name="kdiag-signal-again", daemon=True).start()
            return
        old_hook(unraisable)

    old_term = signal.signal(signal.SIGTERM, on_signal)
    # A SIGINT the caller ignores (nohup, a shell's background job) stays ignored.
    ours = callable(old_int)
    if ours:
        signal.signal(signal.SIGINT, on_signal)
    sys.unraisablehook = on_unraisable
    try:
        yield
    finally:
        inside[0] = False
        sys.unraisablehook = old_hook
        signal.signal(signal.SIGTERM, old_term)
        if ours:
            signal.signal(signal.SIGINT, old_int)
        if SIGNALLED.is_set() and "logging" in sys.modules:
            sys.modules["logging"].disable(sys.modules["logging"].NOTSET)


@contextlib.contextmanager
def private_files():
    """What kdiag (and its Spark JVM) writes while reading captures is
    readable by its owner only: tables and temporary files hold traffic."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)
