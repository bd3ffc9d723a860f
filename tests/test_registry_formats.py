"""The format registry holds together: every parser module that declares
formats is listed and every listed one declares them, each declaration is
complete, and detection recognises each format from a real capture."""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import FIXTURES, ROOT

import kdiag.parsers
from kdiag.bundle.archive import table_schemas
from kdiag.ingest.detect import detect
from kdiag.parsers.format import ANALYSIS_INPUTS, PSEUDONYMISERS, READS, RECOGNITION_ORDER, Format, LeftAsIs
from kdiag.parsers.registry import FORMAT_MODULES, format_named, formats

# One real capture per format. fixtures/ holds no socket samples or probe
# files; fuzz/seeds/ has them, recorded from real runs (its README says how).
SEEDS = ROOT / "fuzz" / "seeds"
REAL_FILE = {
    "rdkafka_log": FIXTURES / "captures" / "nagle_on" / "rdkafka.log",
    "strace": FIXTURES / "captures" / "nagle_on" / "strace.txt",
    "stats": FIXTURES / "captures" / "nagle_on" / "stats.jsonl",
    "sockets": SEEDS / "sockets.jsonl",
    "pcap": SEEDS / "probes.pcap",
    "probes_jsonl": SEEDS / "probes.jsonl",
    "handshakes_jsonl": SEEDS / "handshakes.jsonl",
    "traceroute": FIXTURES / "path" / "tcptraceroute_latency.txt",
    "mtr": FIXTURES / "path" / "mtr_report_latency.txt",
    "ping": FIXTURES / "path" / "ping_latency.txt",
    "ss": FIXTURES / "path" / "ss_tinp_nagle_loopback.txt",
}


def _declaring_modules() -> set[str]:
    """Modules under kdiag.parsers that define FORMATS, found by walking
    the package, not by reading the registry."""
    found = set()
    for info in pkgutil.walk_packages(kdiag.parsers.__path__, "kdiag.parsers."):
        module = importlib.import_module(info.name)
        if "FORMATS" in vars(module):
            found.add(info.name)
    return found


def problems(fmt) -> list[str]:
    """What is missing or wrong in one format's declaration."""
    out = []
    for f in dataclasses.fields(Format):
        # bundle_dir None says something: a capture no bundle holds.
        if getattr(fmt, f.name, None) is None and f.name != "bundle_dir":
            out.append(f"{f.name} missing")
    if out:
        return out
    if not isinstance(fmt.name, str) or not fmt.name:
        out.append("name is not a name")
    if fmt.recognised_by not in RECOGNITION_ORDER:
        out.append(f"recognised_by {fmt.recognised_by!r} is none of {RECOGNITION_ORDER}")
    if not callable(fmt.recognise) or not callable(fmt.parser):
        out.append("recognise and parser must be callable")
    if fmt.reads not in READS:
        out.append(f"reads {fmt.reads!r} is none of {READS}")
    if not isinstance(fmt.schema_version, int) or fmt.schema_version < 1:
        out.append("schema_version is not a version")
    if not fmt.tables:
        out.append("fills no table")
    for table, schema in fmt.tables.items():
        if not isinstance(table, str) or not isinstance(schema, pa.Schema):
            out.append(f"table {table!r}: not a name with a pyarrow schema")
    return out + _more_problems(fmt)


def _more_problems(fmt) -> list[str]:
    out = []
    if not isinstance(fmt.title, str) or not fmt.title.strip():
        out.append("title is not words")
    pseudo = fmt.pseudonymised
    if not (pseudo in PSEUDONYMISERS or (isinstance(pseudo, LeftAsIs) and isinstance(pseudo.why, str)
                                         and pseudo.why.strip())):
        out.append(f"pseudonymised {pseudo!r} is none of {PSEUDONYMISERS} nor a reason it is left as it is")
    if not hasattr(fmt.feeds, "items") or set(fmt.feeds) != set(fmt.tables or ()):
        out.append(f"feeds {fmt.feeds!r}: not each of its tables -> the analysis inputs it gives")
    elif not all(isinstance(fed, tuple) and fed and set(fed) <= set(ANALYSIS_INPUTS) for fed in fmt.feeds.values()):
        out.append(f"feeds {fmt.feeds!r}: a table gives none of {ANALYSIS_INPUTS}")
    if fmt.bundle_dir is not None and (not isinstance(fmt.bundle_dir, str) or not fmt.bundle_dir
                                       or "/" in fmt.bundle_dir):
        out.append(f"bundle_dir {fmt.bundle_dir!r} is not one folder under raw/")
    return out


def test_every_declaring_module_is_registered_and_the_other_way_round():
    registered = {f"kdiag.parsers.{m}" for m in FORMAT_MODULES}
    assert len(registered) == len(FORMAT_MODULES)
    assert _declaring_modules() == registered


@pytest.mark.parametrize("fmt", formats(), ids=lambda f: f.name)
def test_each_format_declares_everything(fmt):
    assert isinstance(fmt, Format)
    assert problems(fmt) == []


def test_a_format_that_omits_an_attribute_is_caught():
    fmt = formats()[0]
    for field in dataclasses.fields(Format):
        if field.name != "bundle_dir":
            assert problems(dataclasses.replace(fmt, **{field.name: None})), field.name
    for wrong in ({"pseudonymised": "skip"}, {"pseudonymised": LeftAsIs("")}, {"feeds": {}},
                  {"feeds": {fmt.table: ("everything",)}}, {"feeds": {fmt.table: ()}},
                  {"title": " "}, {"bundle_dir": "raw/x"}):
        assert problems(dataclasses.replace(fmt, **wrong)), wrong
    assert problems(dataclasses.replace(fmt, pseudonymised=LeftAsIs("holds no address"))) == []
    with pytest.raises(TypeError):
        Format(name="x", recognised_by="lines", recognise=len, tables={"x": pa.schema([])},
               reads="chunks", parser=len)   # no schema_version


def test_names_are_unique_and_found_by_name():
    names = [f.name for f in formats()]
    assert len(names) == len(set(names))
    for fmt in formats():
        assert format_named(fmt.name) is fmt


def test_a_table_filled_by_two_formats_has_one_schema():
    seen: dict[str, pa.Schema] = {}
    for fmt in formats():
        for table, schema in fmt.tables.items():
            assert seen.setdefault(table, schema).equals(schema, check_metadata=True), table


def test_every_table_named_is_one_the_bundle_checks():
    schemas = table_schemas()
    for fmt in formats():
        for table, schema in fmt.tables.items():
            assert table in schemas, (fmt.name, table)
            assert schemas[table].equals(schema, check_metadata=True), (fmt.name, table)


# A format added later brings its real capture as fixtures/formats/NAME.*.
SAMPLES = FIXTURES / "formats"


def real_file(name: str) -> Path | None:
    if name in REAL_FILE:
        return REAL_FILE[name]
    found = sorted(SAMPLES.glob(f"{name}.*"))
    return found[0] if len(found) == 1 else None


@pytest.mark.parametrize("name", [f.name for f in formats()])
def test_every_format_has_a_real_capture_here(name):
    assert real_file(name) is not None and real_file(name).is_file(), \
        f"no real {name} capture: add one as {SAMPLES.relative_to(ROOT)}/{name}.*"


@pytest.mark.parametrize("name", [f.name for f in formats()])
def test_detection_recognises_each_format_from_a_real_capture(name, tmp_path):
    # By content: the same bytes under a name that says nothing.
    blind = tmp_path / "capture.bin"
    blind.write_bytes(real_file(name).read_bytes())
    assert detect(blind) == name


@pytest.mark.parametrize("name", [f.name for f in formats()])
def test_each_format_is_pseudonymised_as_it_declares(name, tmp_path):
    from kdiag.bundle.pseudonym.staging import pseudonymiser_of
    from kdiag.parsers.format import PACKET_REWRITER, TEXT_SCANNER

    blind = tmp_path / "capture.bin"
    blind.write_bytes(real_file(name).read_bytes())
    how = format_named(name).pseudonymised
    kind, why = pseudonymiser_of(blind)
    if how == TEXT_SCANNER:
        assert kind == "text"
    elif how == PACKET_REWRITER:
        assert kind in ("pcap", "pcapng")
    else:
        assert kind == "left" and how.why in why


@pytest.mark.parametrize("foreign", [
    ROOT / "README.md",
    ROOT / "pyproject.toml",
    Path(kdiag.parsers.registry.__file__),
], ids=lambda p: p.name)
def test_a_foreign_file_is_no_format(foreign):
    assert detect(foreign) is None


# docs/formats.md: its table of formats is the registry's, row for row.
FORMATS_PAGE = ROOT / "docs" / "formats.md"
PAGE_HEADER = ("| format | what it is | recognised by | tables | pseudonymised by | analysis inputs "
               "| in a bundle |")


def _page_row(fmt) -> str:
    cells = [f"`{fmt.name}`", fmt.title, fmt.recognised_by, ", ".join(f"`{t}`" for t in fmt.tables),
             str(fmt.pseudonymised), ", ".join(fmt.inputs),
             f"`raw/{fmt.bundle_dir}/`" if fmt.bundle_dir else "the user's own"]
    return "| " + " | ".join(cells) + " |"


def _page_table(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(PAGE_HEADER) + 2   # past the |---| line
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


def test_the_formats_page_lists_every_format_as_the_registry_declares_it():
    expected = [_page_row(fmt) for fmt in formats()]
    assert _page_table(FORMATS_PAGE.read_text()) == expected, "\n".join(expected)


def test_the_formats_page_check_catches_a_changed_fact(tmp_path):
    text = FORMATS_PAGE.read_text()
    row = _page_row(format_named("pcap"))
    wrong = row.replace("pcap rewriter", "text scanner")
    assert wrong != row and _page_table(text.replace(row, wrong)) != [_page_row(f) for f in formats()]


def test_the_formats_page_says_what_each_analysis_input_is():
    text = FORMATS_PAGE.read_text()
    for name in ANALYSIS_INPUTS:
        assert f"- **{name}**: " in text, name


def test_whole_files_tell_those_parsed_after_them(tmp_path):
    """Given in any order, the handshakes are parsed first (they name the
    brokers a pcap cannot) and the packets before the probe results (which
    then add no SYN probe of their own): Format.parse_order and Told."""
    from kdiag.ingest.tables import parse_paths

    files = [SEEDS / "probes.jsonl", SEEDS / "probes.pcap", SEEDS / "handshakes.jsonl"]
    alone = parse_paths(files[:1], tmp_path / "alone").read("probes")
    assert "syn" in alone["method"].to_pylist()
    out = parse_paths(files, tmp_path / "all")
    kinds = [f["kind"] for f in out.files]
    assert kinds == ["probes_jsonl", "pcap", "handshakes_jsonl"]
    probes = out.read("probes")
    packets = parse_paths(files[1:2], tmp_path / "pcap").read("probes")
    assert len(probes) == len(packets)   # the results' SYN probes are the packets'
    assert any(probes["broker"].to_pylist()) and not any(packets["broker"].to_pylist())
