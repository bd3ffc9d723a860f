"""How much of an untrusted bundle kdiag is willing to read.

A bundle comes from another host and is attached to a ticket: a small
archive can claim or unpack to gigabytes, hold hundreds of thousands of
members, or carry a manifest nested past what the JSON decoder survives.
Each cap is far above what a real bundle needs (a 30-message trace: 1 MB
unpacked, 22 members, a 10 KB manifest nested 5 deep; a 10,000-message one
about ten times that) and can be raised by an option or the environment.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from kdiag import settings
from kdiag.errors import UsageError

MIB = 1 << 20


@dataclass(frozen=True)
class Cap:
    what: str          # what the cap limits, for the refusal
    option: str        # the command-line option that raises it
    env: str           # the environment variable that raises it
    scale: int         # bytes per unit of the option (MiB), or 1


# One Cap per Limits field, in the field's name.
CAPS = {
    "unpacked_bytes": Cap("unpacked size", "--max-unpacked-mb", "KDIAG_MAX_UNPACKED_MB", MIB),
    "members": Cap("member count", "--max-members", "KDIAG_MAX_MEMBERS", 1),
    "manifest_bytes": Cap("manifest size", "--max-manifest-mb", "KDIAG_MAX_MANIFEST_MB", MIB),
    "manifest_depth": Cap("manifest nesting depth", "--max-manifest-depth", "KDIAG_MAX_MANIFEST_DEPTH", 1),
}


@dataclass(frozen=True)
class Limits:
    unpacked_bytes: int = 4096 * MIB     # all members together; also caps any one of them
    members: int = 10_000
    manifest_bytes: int = 16 * MIB
    manifest_depth: int = 64

    @classmethod
    def resolve(cls, args=None, environ=None) -> "Limits":
        """The defaults, raised (or lowered) by the environment, then by the
        command line's options (argparse dests max_unpacked_mb, ...)."""
        limits = cls()
        for f in fields(cls):
            cap = CAPS[f.name]
            raw = settings.raw(cap.env, environ)
            if raw not in (None, ""):
                limits = replace(limits, **{f.name: _units(raw, cap, cap.env)})
            given = getattr(args, cap.option[2:].replace("-", "_"), None) if args is not None else None
            if given is not None:
                limits = replace(limits, **{f.name: _units(given, cap, cap.option)})
        return limits

    def refusal(self, name: str, found: str) -> str:
        """One line: which cap the bundle passes, and how to raise it."""
        cap = CAPS[name]
        limit = getattr(self, name)
        shown = f"{limit / cap.scale:g} MiB" if cap.scale == MIB else str(limit)
        return (f"{found}: over the {cap.what} cap of {shown}; not read "
                f"({cap.option} or {cap.env} raises it)")


def _units(value, cap: Cap, source: str) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{source}={value!r}: want a number") from None
    if not number > 0 or number == float("inf"):
        raise UsageError(f"{source}={value!r}: want a number above 0")
    return max(1, int(number * cap.scale))


def add_options(parser) -> None:
    """The caps as options of a command that reads bundles."""
    defaults = Limits()
    for name, cap in CAPS.items():
        default = getattr(defaults, name)
        unit = "MB" if cap.scale == MIB else "N"
        shown = f"{default / cap.scale:g}"
        parser.add_argument(cap.option, type=float if cap.scale == MIB else int, metavar=unit,
                            help=f"refuse a bundle over this {cap.what} (default ${cap.env}, else {shown})")
