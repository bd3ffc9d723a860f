"""Where bpfcalls' uprobes go in a process's libc: the alternative to the
syscall tracepoints that costs other processes nothing.

A uprobe is a breakpoint in the traced process's own pages of a file: the
kernel filters it by the process's memory, so one probe opened on the
process (perf_event_open with its pid) fires in all of its threads, those
it starts later too, and in no other process. What it costs the traced
process depends on the instruction it replaces: the kernel emulates jumps,
calls and pushes, and single-steps a copy of anything else, a debug trap
that in a KVM guest is a VM exit (bench/uprobes.py: ~16 us a call against
~0.5 us). So each call's probe goes on the first instruction the kernel
emulates before the call has changed its arguments or its stack, in the
shapes glibc's x86-64 syscall wrappers take (glibc 2.36's, objdump -d):

    write:    80 3d <disp32> 00   cmpb $0x0,__libc_single_threaded(%rip)
              74 17               je ...                       <- here
    sendto:   80 3d <disp32> 00   cmpb $0x0,__libc_single_threaded(%rip)
              41 89 ca            mov %ecx,%r10d
              74 1d               je ...                       <- here
    recvmsg:  53                  push %rbx                    <- here
    socket:   b8 29 00 00 00      mov $0x29,%eax               (none: single-stepped)

(each optionally after an endbr64). The calls a producer makes thousands
of times a second (``HOT``) must have such a point, or the tracer keeps to
the tracepoints; the rest (a connection's socket, its options) are probed
at their first instruction.

libc returns -1 and leaves the error in errno, a thread-local variable at
the thread pointer plus an offset the dynamic loader writes in a GOT slot
of libc's, the slot ``__errno_location`` loads:
    48 8b 05 <disp32>       mov errno@gottpoff(%rip),%rax
    64 48 03 04 25 0 0 0 0  add %fs:0x0,%rax
The program reads that slot in the process itself, where libc is mapped
(the entry probe's address, less the probe's place in the file, is libc's
base), so it holds in any process that maps this libc: a command kdiag
starts is probed before its exec.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from kdiag.collectors._bpftrace_records import CODE_OF

# libc's function -> the call the record names (strace's name for the
# syscall it makes: send is sendto with no address, as strace shows it).
CALL_OF = {
    "write": "write", "read": "read", "writev": "writev", "send": "sendto", "sendto": "sendto",
    "recv": "recvfrom", "recvfrom": "recvfrom", "sendmsg": "sendmsg", "recvmsg": "recvmsg", "poll": "poll",
    "ppoll": "ppoll", "epoll_wait": "epoll_wait", "epoll_pwait": "epoll_pwait", "connect": "connect",
    "socket": "socket", "setsockopt": "setsockopt", "getsockopt": "getsockopt", "close": "close",
}
# libc's _exit makes the process's exit_group: a probe with no return,
# its code the loader's (CODE_EXIT_GROUP in _bpfcalls.h).
EXIT = "_exit"
# The calls of a busy producer's every request: a single-stepped probe on
# any of them would cost it more than the tracepoints do.
HOT = frozenset({"write", "read", "writev", "send", "sendto", "recv", "recvfrom", "sendmsg", "recvmsg", "poll",
                 "ppoll", "epoll_wait", "epoll_pwait"})

ENDBR64 = b"\xf3\x0f\x1e\xfa"
CMPB_RIP = b"\x80\x3d"          # cmpb $imm8, disp32(%rip): 7 bytes
MOV_ECX_R10D = b"\x41\x89\xca"
ERRNO_LOAD = b"\x48\x8b\x05"    # mov disp32(%rip), %rax: 7 bytes
ADD_FS0 = b"\x64\x48\x03\x04\x25\x00\x00\x00\x00"
MAX_ELF_BYTES = 64 << 20


class Probe(NamedTuple):
    function: str
    offset: int         # in the file, as a uprobe names it
    vaddr: int          # in libc's addresses (the program finds libc's base from it)
    code: int | None    # the record's call code (CODE_OF); None: EXIT
    emulated: bool      # False: single-stepped


class Plan(NamedTuple):
    path: Path          # the libc, as this process reaches it
    probes: list[Probe]
    errno_slot: int     # the GOT slot of errno's offset from the thread pointer, in libc's addresses; 0: unknown
    missing: list[str]  # functions the libc has not


def _jcc(code: bytes, i: int) -> bool:
    return len(code) > i + 1 and (0x70 <= code[i] <= 0x7f or (code[i] == 0x0f and 0x80 <= code[i + 1] <= 0x8f))


def probe_point(code: bytes) -> int | None:
    """The offset, in a function's first bytes ``code``, of an instruction
    the kernel emulates with the arguments and the return address still as
    the caller left them; None for a shape not known here."""
    i = len(ENDBR64) if code.startswith(ENDBR64) else 0
    if len(code) > i + 1 and (0x50 <= code[i] <= 0x57 or (code[i] == 0x41 and 0x50 <= code[i + 1] <= 0x57)):
        return i                                    # push %reg
    if code[i:i + 2] != CMPB_RIP:
        return None
    i += 7
    if code[i:i + 3] == MOV_ECX_R10D:
        i += 3
    return i if _jcc(code, i) else None


class _Elf(NamedTuple):
    data: bytes
    loads: list[tuple[int, int, int]]     # PT_LOAD: (vaddr, offset, filesz)
    symbols: dict[str, int]               # defined functions of .dynsym -> vaddr


def _read_elf(path: Path) -> _Elf | None:
    """An ELF64 little-endian object's loadable segments and dynamic
    function symbols; None for anything else."""
    with open(path, "rb") as f:
        # a libc is a few MiB; the file is named by the traced process's maps
        data = f.read(MAX_ELF_BYTES + 1)
    if len(data) > MAX_ELF_BYTES or data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01" or len(data) < 64:
        return None
    try:
        e_phoff, e_shoff = struct.unpack_from("<QQ", data, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
        loads = []
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, e_phoff + i * phentsize)
            if p_type == 1:
                loads.append((p_vaddr, p_offset, p_filesz))
        # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link
        sections = [struct.unpack_from("<IIQQQQI", data, e_shoff + i * shentsize) for i in range(shnum)]
        symbols = {}
        for sec in sections:
            if sec[1] != 11:        # SHT_DYNSYM
                continue
            strtab = sections[sec[6]][4]
            for at in range(sec[4], sec[4] + sec[5] - 23, 24):
                st_name, st_info, _, _, st_value, _ = struct.unpack_from("<IBBHQQ", data, at)
                if st_info & 0xf == 2 and st_value:     # STT_FUNC, defined
                    start = strtab + st_name
                    end = data.find(b"\0", start)
                    name = data[start:end].decode("ascii", "replace")
                    symbols.setdefault(name, st_value)
    except (struct.error, IndexError, OverflowError):
        return None
    return _Elf(data, loads, symbols)


def _file_offset(elf: _Elf, vaddr: int) -> int | None:
    for p_vaddr, p_offset, p_filesz in elf.loads:
        if p_vaddr <= vaddr < p_vaddr + p_filesz:
            return vaddr - p_vaddr + p_offset
    return None


def _function(elf: _Elf, name: str, size: int = 32) -> tuple[int, int, bytes] | None:
    """(the function ``name``'s file offset, its address in the object's
    addresses, its first ``size`` bytes), or None."""
    vaddr = elf.symbols.get(name)
    at = _file_offset(elf, vaddr) if vaddr else None
    return None if at is None else (at, vaddr, elf.data[at:at + size])


def function_code(path: Path, name: str) -> tuple[int, bytes] | None:
    """(the file offset of the function ``name`` of the shared object
    ``path``, its first 32 bytes), or None."""
    elf = _read_elf(path)
    found = _function(elf, name) if elf else None
    return None if found is None else (found[0], found[2])


def libc_of(pid: int) -> tuple[Path, int] | None:
    """(the libc ``pid`` has mapped, as this process reaches it; the address
    its file's start is mapped at), or None."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
        root = os.path.realpath(f"/proc/{pid}/root")
    except OSError:
        return None
    for line in maps.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and int(parts[2], 16) == 0 and (
                "/libc.so" in parts[5] or "/libc-" in parts[5]) and parts[5].startswith("/"):
            return Path(root) / parts[5].lstrip("/"), int(parts[0].split("-")[0], 16)
    return None


def errno_slot(elf: _Elf) -> int:
    """The GOT slot ``__errno_location`` loads errno's offset from, in
    libc's addresses; 0 where its shape is not known."""
    found = _function(elf, "__errno_location", 24)
    if found is None:
        return 0
    _, vaddr, code = found
    i = len(ENDBR64) if code.startswith(ENDBR64) else 0
    if code[i:i + 3] != ERRNO_LOAD or code[i + 7:i + 16] != ADD_FS0:
        return 0
    return vaddr + i + 7 + struct.unpack_from("<i", code, i + 3)[0]


def plan(pid: int) -> tuple[Plan | None, str]:
    """Where to probe ``pid``'s libc, or (None, why not)."""
    found = libc_of(pid)
    if found is None:
        return None, "no libc mapped in the process (static, or another C library)"
    path, _ = found
    try:
        elf = _read_elf(path)
    except OSError as e:
        return None, f"cannot read {path}: {e.strerror}"
    if elf is None:
        return None, f"{path} is not an x86-64 ELF object"
    probes, missing = [], []
    for fn, call in [*CALL_OF.items(), (EXIT, None)]:
        found = _function(elf, fn)
        if found is None:
            missing.append(fn)
            continue
        at, vaddr, code = found
        point = probe_point(code)
        if point is None and fn in HOT:
            return None, f"{fn}() in {path} begins with no instruction the kernel emulates"
        probes.append(Probe(fn, at + (point or 0), vaddr + (point or 0), CODE_OF.get(call), point is not None))
    hot_missing = [fn for fn in missing if fn in HOT and fn not in ("send", "recv")]
    if hot_missing:
        return None, f"{path} has no {', '.join(hot_missing)}"
    return Plan(path, probes, errno_slot(elf), missing), ""
