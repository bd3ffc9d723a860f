"""kdiag's compiled parts, each optional, so that kdiag installs where they
cannot be built and runs its slower path there:

- the compiled scans (parsers/_scan.c, parsers/_scan_strace.c); without them the parsers run their
  reference code (parsers/scan.py). Needs a C compiler.
- the compiled capture reader (parsers/_wire.c); without it captures are read by its reference,
  kdiag.parsers.pcap and kdiag.parsers.wire.packets. Needs a C compiler.
- the bpfcalls tracer (collectors/_bpfcalls.bpf.c, a BPF program, and
  collectors/_bpfcalls.c, its loader); without it ``kdiag trace`` uses
  bpftrace or strace. Needs clang and libbpf's headers (Debian: clang,
  libbpf-dev).

Everything else is in pyproject.toml."""
import subprocess
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError

BPF_LOADER = "kdiag.collectors._bpfcalls"


class BuildExt(build_ext):
    """Builds the BPF program into its loader, as the bytes of a generated
    header (the loader is skipped, as optional, when the program cannot be
    built): one file to install, wherever pip puts it."""

    def build_extension(self, ext):
        if ext.name == BPF_LOADER:
            gen = Path(self.build_temp) / "bpfcalls-gen"
            obj = gen / "_bpfcalls.bpf.o"
            self._bpf_program(obj)
            data = obj.read_bytes()
            rows = ",\n".join(",".join(str(b) for b in data[i:i + 32]) for i in range(0, len(data), 32))
            (gen / "_bpfcalls_object.h").write_text(
                f"static const unsigned char BPF_OBJECT[] = {{\n{rows}\n}};\n")
            ext.include_dirs = [*ext.include_dirs, str(gen)]
        super().build_extension(ext)

    @staticmethod
    def _bpf_program(out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        # linux/types.h includes asm/types.h, which Debian keeps under the multiarch triple
        arch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
        cmd = ["clang", "-O2", "-g", "-target", "bpf", f"-I/usr/include/{arch}", "-Icollectors",
               "-c", "collectors/_bpfcalls.bpf.c", "-o", str(out)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise CompileError(f"the BPF program needs clang: {e}") from e
        if res.returncode != 0:
            raise CompileError(f"clang could not build the BPF program: {res.stderr.strip()[-2000:]}")


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension("kdiag.parsers._scan", ["parsers/_scan.c", "parsers/_scan_strace.c"], optional=True,
                  extra_compile_args=["-O2"], depends=["parsers/_scan.h"]),
        Extension("kdiag.parsers._wire", ["parsers/_wire.c"], optional=True, extra_compile_args=["-O2"]),
        Extension(BPF_LOADER, ["collectors/_bpfcalls.c"], optional=True, extra_compile_args=["-O2"],
                  include_dirs=["collectors"], libraries=["bpf"], depends=["collectors/_bpfcalls.h"]),
    ],
)
