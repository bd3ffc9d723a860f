"""A C struct's layout read from its header is the one the C compiler gives."""
import subprocess

import pytest

from conftest import need
from kdiag.collectors import bpfcalls
from kdiag.collectors._c_layout import Header, LayoutError

ODD = """
#include <linux/types.h>
#define N 3  /* a comment */
enum { ONE = 1, TWO, TEN = 10, ELEVEN };
struct inner { __u8 flag; __u32 v; __u16 tail; };   // 12 bytes, aligned to 4
struct odd {
    __u8 a;
    __u64 b;
    __s16 c[N], d;
    struct inner in;
    char text[5];
    __s64 last;
    __u8 end;
};
"""


def compiler_offsets(tmp_path, header: str, struct: str, fields: list[str]) -> dict[str, int]:
    """offsetof of each field, and sizeof as "", from the C compiler."""
    need("cc")
    (tmp_path / "h.h").write_text(header)
    prints = "".join(f'printf("{f} %zu\\n", offsetof(struct {struct}, {f}));' for f in fields)
    (tmp_path / "t.c").write_text(f'#include <stdio.h>\n#include <stddef.h>\n#include "h.h"\n'
                                  f'int main(void) {{ {prints} printf(" %zu\\n", sizeof(struct {struct})); }}\n')
    subprocess.run(["cc", "-o", str(tmp_path / "t"), str(tmp_path / "t.c")], check=True)
    out = subprocess.run([str(tmp_path / "t")], check=True, capture_output=True, text=True).stdout
    return {name: int(v) for name, v in (line.rsplit(" ", 1) for line in out.splitlines())}


def test_padding_nesting_and_arrays_are_laid_out_as_c_does(tmp_path):
    h = Header(ODD)
    layout = h.layout("odd")
    assert h.constants == {"N": 3, "ONE": 1, "TWO": 2, "TEN": 10, "ELEVEN": 11}
    want = compiler_offsets(tmp_path, ODD, "odd", list(layout.offsets))
    assert {**layout.offsets, "": layout.size} == want
    values = {"a": 1, "b": 2, "c": (-1, 2, 3), "d": 4, "in_flag": 5, "in_v": 6, "in_tail": 7, "text": b"hi",
              "last": -8, "end": 9}
    got = layout.unpack_from(layout.pack(**values))
    assert got._asdict() == {**values, "text": b"hi\0\0\0"}
    assert layout.unpack_from(layout.pack(c=(5,))).c == (5, 0, 0)


def test_fields_before_one_include_the_padding_before_it(tmp_path):
    head = Header(ODD).layout("odd", up_to="last")
    assert head.size == compiler_offsets(tmp_path, ODD, "odd", ["last"])["last"]
    assert head.Record._fields[-2:] == ("in_tail", "text")


@pytest.mark.parametrize("text, why", [
    ("struct s { unsigned int x; };", "cannot read"),
    ("struct s { float x; };", "unknown type"),
    ("struct s { __u8 x[M]; };", "neither a number nor a constant"),
    ("struct s { __u8 x; };", "no field y"),
])
def test_what_it_cannot_read_is_an_error(text, why):
    with pytest.raises(LayoutError, match=why):
        Header(text).layout("s", up_to="y")


def test_bpfcalls_records_are_laid_out_as_the_compiled_tracer_writes_them(tmp_path):
    text = (bpfcalls.HEADER_PATH).read_text()
    full = bpfcalls.HEADER.layout("rec")
    want = compiler_offsets(tmp_path, text, "rec", list(full.offsets))
    assert {**full.offsets, "": full.size} == want
    assert bpfcalls.RECORD.size == want["name"]
