"""bench/uprobes.py: what uprobes would cost the traced process and the
host (the values are the machine's; the order between them is not)."""
from conftest import need, require


def test_uprobes_smoke(tmp_path):
    need("clang", root=True)
    need("cc")
    from bench import uprobes
    from kdiag.collectors import bpfcalls

    require(bpfcalls.check())
    figures = {f.name: f for f in uprobes.run(smoke=True, work=tmp_path)}
    ns = {name.split(" under ")[1].removesuffix(" ns a call"): f.value for name, f in figures.items()
          if name.startswith("write() of the traced process under ")}
    assert all(v is not None and v > 0 for v in ns.values()), figures
    assert set(ns) == {"untraced", "bpfcalls (per-syscall tracepoints)", "uprobe at write()'s first instruction",
                       "uprobe at write()'s first conditional jump", "uprobe and uretprobe at that jump"}, ns
    # An emulated instruction is never dearer than a single-stepped one, and a
    # return probe adds to its entry's.
    assert ns["uprobe at write()'s first conditional jump"] < ns["uprobe at write()'s first instruction"]
    assert ns["untraced"] < ns["uprobe at write()'s first conditional jump"] < ns["uprobe and uretprobe at that jump"]
    # A socket's send() as a producer's is recorded: the tracer adds to it.
    send = next(f for f in figures.values() if f.name.startswith("send() on a connected UDP socket"))
    assert send.ref_value > 0 and send.value > send.ref_value, send.note
    tax = next(f for f in figures.values() if "unrelated process" in f.name)
    assert tax.value is not None and tax.value > 80, tax.note
    threads = next(f for f in figures.values() if "other threads" in f.name)
    assert threads.value > 0 and threads.ref_value > 0, threads.note
