"""The wire tests' captures: tcpdump (kdiag.lab.tcpdump) on a port of
theirs or in a network namespace."""
from __future__ import annotations

from kdiag.lab import tcpdump


def capture(path, *args, iface="lo", netns=None, bpf="tcp", prefix=None):
    """tcpdump -w path while the block runs (``args``: tcpdump's own
    options, ``-y LINUX_SLL2``); in ``netns`` or behind ``prefix``."""
    pre = prefix if prefix is not None else (["ip", "netns", "exec", netns] if netns else [])
    return tcpdump.capture(path, iface=iface, bpf=bpf, prefix=pre, options=args)
