"""collectors/_libc_probes.py: where bpfcalls' uprobes go in a process's
libc, and errno's place, against processes built and run here."""
import os
import subprocess

import pytest

from conftest import need
from kdiag.collectors import _libc_probes as lp


def code(hexes: str) -> bytes:
    return bytes.fromhex(hexes.replace(" ", ""))


@pytest.mark.parametrize("shape, at", [
    ("803d91320e00 00 7417 b801000000 0f05", 7),             # write: cmpb $0,...(%rip); je
    ("f30f1efa 803d91320e00 00 0f8412000000", 11),           # the same after endbr64, a rel32 je
    ("803d31090d00 00 4189ca 741d", 10),                     # sendto: ...; mov %ecx,%r10d; je
    ("53 4883ec10 803d3c0b0d00 00", 0),                      # recvmsg: push %rbx
    ("4154 4989ca 4531e4", 0),                               # ppoll: push %r12
    ("b829000000 0f05", None),                               # socket: mov $41,%eax (single-stepped)
    ("803d91320e00 00 b801000000", None),                    # the test, then no jump
    ("", None),
])
def test_the_probe_goes_on_an_instruction_the_kernel_emulates(shape, at):
    assert lp.probe_point(code(shape)) == at


ERRNO_C = r"""
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
int main(void)
{
    printf("%ld\n", (long)((char *)&errno - (char *)__builtin_thread_pointer()));
    fflush(stdout);
    pause();
    return 0;
}
"""


def _run(tmp_path, extra: list[str]) -> subprocess.Popen:
    need("cc")
    src, exe = tmp_path / "errno.c", tmp_path / "errno"
    src.write_text(ERRNO_C)
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src), *extra], check=True)
    return subprocess.Popen([str(exe)], stdout=subprocess.PIPE, text=True)


def test_a_process_libc_its_probes_and_errno(tmp_path):
    """The slot the program reads errno's place from holds, in a running
    process, the offset the process itself gives errno."""
    proc = _run(tmp_path, [])
    try:
        told = int(proc.stdout.readline())
        plan, why = lp.plan(proc.pid)
        assert plan is not None, why
        _, base = lp.libc_of(proc.pid)
        with open(f"/proc/{proc.pid}/mem", "rb") as mem:
            mem.seek(base + plan.errno_slot)
            assert int.from_bytes(mem.read(8), "little", signed=True) == told != 0
        by_name = {p.function: p for p in plan.probes}
        assert set(lp.HOT) <= set(by_name) and all(by_name[f].emulated for f in lp.HOT)
        assert by_name[lp.EXIT].code is None and by_name["send"].code == by_name["sendto"].code
        # the probe lies inside the function the symbol names, in the file
        at, head = lp.function_code(plan.path, "write")
        assert at <= by_name["write"].offset < at + len(head)
        assert by_name["write"].vaddr - by_name["write"].offset == by_name["read"].vaddr - by_name["read"].offset
    finally:
        proc.kill()
        proc.wait()


def test_a_static_program_has_no_libc_to_probe(tmp_path):
    proc = _run(tmp_path, ["-static"])
    try:
        proc.stdout.readline()
        plan, why = lp.plan(proc.pid)
        assert plan is None and "no libc" in why
    finally:
        proc.kill()
        proc.wait()


def test_what_is_not_an_elf_object_is_refused(tmp_path):
    junk = tmp_path / "libc.so.6"
    for data in (b"", b"\x7fELF" + b"\x02\x01" + b"\0" * 10, b"#!/bin/sh\n" * 50, b"\x7fELF\x02\x01" + b"\xff" * 200):
        junk.write_bytes(data)
        assert lp.function_code(junk, "write") is None
    assert lp.libc_of(2 ** 22 + 12345) is None
    assert lp.function_code(lp.libc_of(os.getpid())[0], "no_such_fn") is None
