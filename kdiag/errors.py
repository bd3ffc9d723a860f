"""kdiag's errors: each carries a message fit to show a user as is."""


class KdiagError(Exception):
    """Base of every error kdiag reports without a traceback."""


class UsageError(KdiagError):
    """The command line asks for something kdiag cannot do."""


class InputError(KdiagError):
    """An input file or bundle cannot be used at all (partly bad input is
    counted and reported instead)."""
