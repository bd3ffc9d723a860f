"""Exit statuses, defined once; scripts depend on them."""
from enum import IntEnum


class ExitStatus(IntEnum):
    OK = 0
    ERROR = 1          # kdiag failed; the message says why
    USAGE = 2          # bad command line
    NO_DATA = 3        # ran, but the inputs held nothing to analyse
    INTERRUPTED = 130  # Ctrl-C / SIGTERM; partial output is kept
