"""The user's own path tools as evidence: tcptraceroute, traceroute,
mtr, ping and ss output (fixtures/path/, made here by the real tools; each
.cmd says how) read into the probes and sockets tables, however a chat
mangled them, recognised by content alone, and used as the path RTT and
the socket evidence."""
from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES

from kdiag.ingest.detect import detect
from kdiag.parsers.mtr import parse_report
from kdiag.parsers.ping import parse_ping
from kdiag.parsers.ss import parse_ss
from kdiag.parsers.traceroute import parse_listing

PATH = FIXTURES / "path"
OURS = ("traceroute", "mtr", "ping", "ss")


def lines(name: str) -> list[str]:
    return (PATH / name).read_text().splitlines()


def hops(table: pa.Table) -> list[tuple]:
    return [(r["ttl"], r["round"], r["responder"], r["answer"], r["rtt_ms"]) for r in table.to_pylist()]


def accounted(counts) -> None:
    assert counts.lines == counts.parsed + counts.skipped_total, counts.to_dict()


# ------------------------------------------------------------ each format from its fixture

def test_tcptraceroute_hops_rtts_and_answers():
    t, c = parse_listing(lines("tcptraceroute_latency.txt"))
    assert hops(t) == [
        (1, 1, "10.201.1.1", "time_exceeded", 31.327), (1, 2, "10.201.1.1", "time_exceeded", 30.466),
        (1, 3, "10.201.1.1", "time_exceeded", 30.607),
        (2, 1, "10.201.2.2", "open", 30.56), (2, 2, "10.201.2.2", "open", 30.747),
        (2, 3, "10.201.2.2", "open", 30.716)]
    assert set(t["target_host"].to_pylist()) == {"10.201.2.2"}
    assert set(t["target_port"].to_pylist()) == {9093}
    assert set(t["method"].to_pylist()) == {"tcptraceroute"}
    assert c.parsed == 4 and not c.skipped


def test_tcptraceroute_closed_port_and_names():
    t, _ = parse_listing(lines("tcptraceroute_closed_latency.txt"))
    assert [r["answer"] for r in t.to_pylist() if r["ttl"] == 2] == ["closed"] * 3
    assert set(t["target_port"].to_pylist()) == {9}
    t, _ = parse_listing(lines("tcptraceroute_name_latency.txt"))
    assert set(t["target_host"].to_pylist()) == {"10.201.2.2"}
    assert t.to_pylist()[-1]["answer"] == "open"
    t, _ = parse_listing(lines("tcptraceroute_loopback.txt"))
    assert hops(t) == [(1, 1, "127.0.0.1", "open", 0.073), (1, 2, "127.0.0.1", "open", 0.033),
                       (1, 3, "127.0.0.1", "open", 0.062)]


def test_traceroute_listing_protocol_comes_from_the_command_line():
    plain = lines("traceroute_T_name_latency.txt")
    t, _ = parse_listing(plain)
    # Without the command the listing does not say what it sent.
    assert set(t["method"].to_pylist()) == {"traceroute"}
    assert hops(t)[-1] == (2, 3, "10.201.2.2", "reply", 30.645)
    assert hops(t)[0] == (1, 1, "10.201.1.1", "time_exceeded", 30.634)
    t, c = parse_listing(["$ traceroute -T -p 9093 broker1.example.com", *plain])
    assert set(t["method"].to_pylist()) == {"traceroute_t"}
    assert set(t["target_port"].to_pylist()) == {9093}
    assert [r["answer"] for r in t.to_pylist() if r["ttl"] == 2] == ["open"] * 3
    accounted(c)
    t, _ = parse_listing(["$ traceroute -I 10.201.2.2", *lines("traceroute_I_latency.txt")])
    assert set(t["method"].to_pylist()) == {"traceroute_icmp"}
    assert hops(t)[-3:] == [(6, 1, None, "none", None), (6, 2, "10.201.2.2", "reply", 34.832),
                            (6, 3, "10.201.2.2", "reply", 34.807)]
    assert [r["answer"] for r in t.to_pylist() if r["ttl"] == 2] == ["none"] * 3
    t, _ = parse_listing(["# traceroute 10.201.2.2", *lines("traceroute_udp_latency.txt")])
    assert set(t["method"].to_pylist()) == {"traceroute_udp"}


def test_traceroute_marks_and_a_listing_without_banner():
    t, c = parse_listing([" 1  10.0.0.1  1.000 ms  1.100 ms  1.200 ms",
                          " 2  10.0.0.9  2.000 ms !H  * 2.500 ms !N",
                          " 3  * * *"])
    assert hops(t)[3:6] == [(2, 1, "10.0.0.9", "unreachable", 2.0), (2, 2, None, "none", None),
                            (2, 3, "10.0.0.9", "unreachable", 2.5)]
    assert c.parsed == 3


def test_mtr_report_text_wide_and_json():
    t, c = parse_report(["$ mtr --tcp -P 9093 --report -c 3 -n 10.201.2.2", *lines("mtr_report_latency.txt")])
    # Best, Avg, Wrst per hop: the path table's min/median/max.
    assert hops(t) == [(1, 1, "10.201.1.1", "time_exceeded", 30.5), (1, 2, "10.201.1.1", "time_exceeded", 30.8),
                       (1, 3, "10.201.1.1", "time_exceeded", 31.5),
                       (2, 1, "10.201.2.2", "open", 30.4), (2, 2, "10.201.2.2", "open", 30.5),
                       (2, 3, "10.201.2.2", "open", 30.6)]
    assert set(t["method"].to_pylist()) == {"mtr_tcp"} and set(t["target_port"].to_pylist()) == {9093}
    assert c.parsed == 5 and not c.skipped   # the prompt line too
    t, _ = parse_report(lines("mtr_wide_b_latency.txt"))
    assert set(t["method"].to_pylist()) == {"mtr"}
    assert hops(t)[3:] == [(2, 1, "10.201.2.2", "reply", 30.5), (2, 2, "10.201.2.2", "reply", 30.6),
                           (2, 3, "10.201.2.2", "reply", 30.7)]
    t, c = parse_report(lines("mtr_json_latency.json"))
    assert hops(t)[3:] == [(2, 1, "10.201.2.2", "reply", 30.586), (2, 2, "10.201.2.2", "reply", 30.598),
                           (2, 3, "10.201.2.2", "reply", 30.612)]
    assert c.parsed == c.lines == 36


def test_mtr_loss_makes_unanswered_rounds():
    t, _ = parse_report(["HOST: vm   Loss%   Snt   Last   Avg  Best  Wrst StDev",
                         "  1.|-- 10.0.0.1    50.0%     4   1.0   1.5   1.0   2.0   0.5",
                         "  2.|-- ???        100.0%     4   0.0   0.0   0.0   0.0   0.0"])
    assert [r["answer"] for r in t.to_pylist()] == ["time_exceeded"] * 2 + ["none"] * 6
    assert [r["rtt_ms"] for r in t.to_pylist()][:2] == [1.5, 1.5]


def test_ping_replies_summary_and_losses():
    t, c = parse_ping(lines("ping_latency.txt"))
    assert hops(t) == [(2, 1, "10.201.2.2", "reply", 31.5), (2, 2, "10.201.2.2", "reply", 31.6),
                       (2, 3, "10.201.2.2", "reply", 31.4), (2, 4, "10.201.2.2", "reply", 31.3),
                       (2, 5, "10.201.2.2", "reply", 31.7)]   # ttl=63: the second hop
    assert set(t["method"].to_pylist()) == {"icmp_ping"} and t["target_port"].null_count == 5
    accounted(c)
    t, _ = parse_ping(lines("ping_name_latency.txt"))
    assert set(t["target_host"].to_pylist()) == {"10.201.2.2"}
    t, c = parse_ping(lines("ping_latency.txt")[-3:])   # the summary alone
    assert [r["rtt_ms"] for r in t.to_pylist()] == [31.349, 31.5, 31.5, 31.5, 31.689]
    t, _ = parse_ping(["PING b (10.0.0.5) 56(84) bytes of data.",
                       "64 bytes from 10.0.0.5: icmp_seq=1 ttl=57 time=12.1 ms",
                       "From 10.0.0.1 icmp_seq=2 Destination Host Unreachable",
                       "--- b ping statistics ---",
                       "3 packets transmitted, 1 received, +1 errors, 66% packet loss, time 2003ms"])
    assert [r["answer"] for r in t.to_pylist()] == ["reply", "unreachable", "none"]


def test_ss_socket_state_and_the_nagle_hold():
    t, c = parse_ss(lines("ss_tinp_nagle_loopback.txt"))
    (row,) = t.to_pylist()
    assert (row["pid"], row["fd"], row["remote"], row["remote_port"], row["state"]) == \
        (10419, 5, "127.0.0.1:33029", 33029, "ESTABLISHED")
    assert (row["notsent_bytes"], row["unacked"], row["ato_ms"]) == (2096, 1, 40.0)
    assert (row["rtt_ms"], row["rttvar_ms"], row["min_rtt_ms"], row["snd_cwnd"]) == (20.155, 24.055, 0.004, 18)
    assert row["ts_us"] is None and row["delivery_rate_bytes_s"] == 93184000000 // 8
    assert c.parsed == c.lines == 3
    t, _ = parse_ss(lines("ss_tin_nagle_loopback.txt"))
    assert t.to_pylist()[0]["fd"] is None and t.to_pylist()[0]["notsent_bytes"] == 2096


# ------------------------------------------------------------ as pasted

def mangled(raw: list[str]) -> dict[str, list[str]]:
    return {
        "quote": ["> " + s for s in raw],
        "crlf": [s + "\r" for s in raw],
        "fence": ["```", *raw, "```"],
        "trailing": [s + "   " for s in raw],
        "autolink": [s.replace("10.201.2.2", "<10.201.2.2>").replace("10.201.1.1", "[10.201.1.1](http://10.201.1.1)")
                     for s in raw],
    }


@pytest.mark.parametrize("parse,name", [
    (parse_listing, "tcptraceroute_name_latency.txt"), (parse_listing, "traceroute_T_latency.txt"),
    (parse_report, "mtr_report_latency.txt"), (parse_report, "mtr_json_latency.json"),
    (parse_ping, "ping_latency.txt"), (parse_ss, "ss_tinp_nagle_loopback.txt"),
], ids=lambda x: x if isinstance(x, str) else x.__name__)
def test_chat_and_markdown_mangling_reads_the_same(parse, name, tmp_path):
    raw = lines(name)
    want, _ = parse(raw)
    assert len(want)
    for how, text in mangled(raw).items():
        got, c = parse(text)
        assert _rows(got) == _rows(want), how
        accounted(c)
        blind = tmp_path / f"{how}.bin"
        blind.write_text("\n".join(text) + "\n")
        assert detect(blind) == detect(PATH / name), how


def _rows(t: pa.Table) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "line_no"} for r in t.to_pylist()]


def test_the_prompt_line_is_read_and_an_unreadable_line_counted():
    t, c = parse_listing(["user@host:~$ tcptraceroute broker1.example.com 9093", *lines("traceroute_T_latency.txt"),
                          "some words the user typed"])
    assert set(t["target_port"].to_pylist()) == {9093}
    assert c.skipped == {"not_traceroute": 1} and c.examples[0][2] == "some words the user typed"
    accounted(c)


@pytest.mark.parametrize("parse", [parse_listing, parse_report, parse_ping, parse_ss], ids=lambda p: p.__name__)
def test_junk_never_crashes_and_every_line_is_counted(parse):
    rnd = random.Random(16)
    alphabet = " \t*!()[]<>|`-.:/%0123456789abcdefms{}\"\r"
    junk = ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 80))) for _ in range(400)]
    for name in ("tcptraceroute_latency.txt", "mtr_json_latency.json", "ping_latency.txt", "ss_tin_nagle_loopback.txt"):
        junk += [s[:rnd.randrange(0, len(s) + 1)] for s in lines(name)]
    rnd.shuffle(junk)
    _, c = parse(junk)
    accounted(c)


ADVERSARIAL = [" 1  1 ms", "[" * 20000, "<http://a|" * 3000, "a:1 " * 5000, "http://" * 3000,
               "\trtt:1 cwnd:" + "9" * 40 + " pacing_rate " + "1" * 400 + "bps",
               "  1.|-- a  0.0% " + "9" * 400 + " 1 1 1 1 0", "  1.|-- a  nan% inf 1 1 1 1 0",
               "99999999999 packets transmitted, 99999999999 received", "rtt min/avg/max/mdev = 1/2/3/4 ms",
               '{"report": {"hubs": [{"count": 99999, "host": "a", "Snt": 1e308}]}}',
               "64 bytes from a: icmp_seq=" + "9" * 50 + " ttl=999 time=1 ms"]


@pytest.mark.parametrize("parse", [parse_listing, parse_report, parse_ping, parse_ss], ids=lambda p: p.__name__)
def test_long_and_huge_lines_cost_little_and_stay_in_range(parse):
    import time

    from kdiag.parsers import mtr, ping, ss, traceroute

    start = time.monotonic()
    for line in ADVERSARIAL:
        for mod in (traceroute, mtr, ping, ss):
            mod.looks_like([line] * 3)
        table, c = parse([line] * 3)
        accounted(c)
        assert len(table) <= 3000, line[:40]
    assert time.monotonic() - start < 5.0   # linear, not quadratic, in the line's length


# ------------------------------------------------------------ recognition

def _inputs() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix != ".cmd"
                  and p.name not in ("CASE", "README.md", "CAPTURED"))


def test_each_path_fixture_is_recognised_as_its_tool():
    want = {"tcptraceroute": "traceroute", "traceroute": "traceroute", "mtr": "mtr", "ping": "ping", "ss": "ss"}
    for p in sorted(PATH.glob("*")):
        if p.suffix != ".cmd" and p.name != "README.md":
            assert detect(p) == want[p.name.split("_")[0]], p.name


def test_no_other_fixture_changes_its_format(monkeypatch):
    """Every fixture in the tree is detected as it was before these formats
    were registered, but for the path tools' own output."""
    from kdiag.parsers import registry

    with_ours = {p: detect(p) for p in _inputs()}
    without = tuple(f for f in registry.formats() if f.name not in OURS)
    monkeypatch.setattr(registry, "formats", lambda: without)
    for p, kind in with_ours.items():
        if kind in OURS:
            assert detect(p) is None, p   # a tool's output that nothing read before
        else:
            assert detect(p) == kind, p


# ------------------------------------------------------------ as evidence

def _tables(tmp: Path, probes: list[pa.Table] = (), sockets: pa.Table | None = None) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    if probes:
        pq.write_table(pa.concat_tables(probes), tmp / "probes.parquet")
    if sockets is not None:
        pq.write_table(sockets, tmp / "sockets.parquet")
    return tmp


def test_path_rtt_takes_the_users_tool_with_its_source(spark, tmp_path):
    from kdiag.analysis.connections import path_rtt_of
    from kdiag.parsers.tcp_probe import parse_probes_jsonl

    tcptr, _ = parse_listing(lines("tcptraceroute_latency.txt"))
    ping, _ = parse_ping(lines("ping_loopback.txt"))
    rtt, source, bound = path_rtt_of(spark, _tables(tmp_path / "a", [tcptr, ping]), [])
    assert (rtt, bound) == (30.716, False)
    assert source == "tcptraceroute output (user's), 3 answers from the broker's port"
    rtt, source, bound = path_rtt_of(spark, _tables(tmp_path / "b", [ping]), [])
    assert (rtt, source, bound) == (0.036, "ping output (user's), 5 answers from the broker's host, not its port",
                                    False)
    # kdiag's own probes still come first.
    own, _ = parse_probes_jsonl(['{"target_host": "10.201.2.2", "target_port": 9093, "ttl": 2, "round": 1, '
                                 '"responder": "10.201.2.2", "answer": "open", "rtt_ms": 30.1, "method": "syn"}'])
    _, source, _ = path_rtt_of(spark, _tables(tmp_path / "c", [tcptr, own]), [])
    assert source == "SYN probes answered by the broker port (1)"
    # An strace handshake that is only an upper bound gives way to the user's ping.
    conns = [{"handshake_ms": 5.0, "handshake_upper_bound": True}]
    _, source, _ = path_rtt_of(spark, _tables(tmp_path / "d", [ping]), conns)
    assert source.startswith("ping output (user's)")


def test_path_rtt_from_ss_minrtt_else_an_upper_bound(spark, tmp_path):
    from kdiag.analysis.connections import path_rtt_of

    ss, _ = parse_ss(lines("ss_tin_nagle_loopback.txt"))
    assert path_rtt_of(spark, _tables(tmp_path / "a", sockets=ss), []) == (
        0.004, "ss -ti output (user's), minrtt of 1 socket(s)", False)
    no_min, _ = parse_ss([s.replace(" minrtt:0.004", "") for s in lines("ss_tin_nagle_loopback.txt")])
    rtt, source, bound = path_rtt_of(spark, _tables(tmp_path / "b", sockets=no_min), [])
    assert (rtt, bound) == (21.353, True) and "an upper bound" in source


def test_socket_held_reads_a_pasted_ss_listing(tmp_path):
    from kdiag.analysis.samples import socket_held

    ss, _ = parse_ss(["> " + s for s in lines("ss_tinp_nagle_loopback.txt")])
    tables = _tables(tmp_path, sockets=ss)
    held = socket_held(tables, None)   # a log alone knows no fd
    assert held == {"samples": 1, "held": 1, "source": "ss", "notsent_bytes": 2096, "ato_ms": 40.0}
    assert socket_held(tables, 9)["source"] == "ss"


def test_the_report_lists_the_users_path(tmp_path):
    from kdiag.analysis.connections import path_rows
    from kdiag.report.text import render

    tcptr, _ = parse_listing(lines("tcptraceroute_latency.txt"))
    ping, _ = parse_ping(lines("ping_latency.txt"))
    paths = path_rows(_tables(tmp_path, [tcptr, ping]))
    text = render({"summary": {"path_rtt_ms": 30.716, "path_rtt_upper_bound": False,
                               "path_rtt_source": "tcptraceroute output (user's), 3 answers from the broker's port"},
                   "paths": paths, "findings": []})
    assert "PATH RTT(ms) 30.716 (tcptraceroute output (user's), 3 answers from the broker's port)" in text
    assert "PATH (the user's own tool output: icmp_ping, tcptraceroute)" in text
    assert "10.201.2.2:9093, tcptraceroute probes, 2 hops" in text
    assert "10.201.2.2, icmp_ping probes, 1 hop" in text
    assert "  1  10.201.1.1  30.466/30.607/31.327  time_exceeded 3/3" in text
    assert "  2  10.201.2.2  30.560/30.716/30.747  open 3/3" in text


def test_a_log_only_nagle_finding_cites_the_pasted_ss_hold(tmp_path):
    from types import SimpleNamespace

    from kdiag.analysis.causes._nagle import log_only_evidence

    ss, _ = parse_ss(lines("ss_tin_nagle_loopback.txt"))
    facts = SimpleNamespace(agg=SimpleNamespace(k=8, total=43.0), requests=8, path_rtt_ms=0.004,
                            rtt_upper_bound=False, summary={"path_rtt_source": "ss -ti output (user's)"},
                            meta={"tables_dir": _tables(tmp_path, sockets=ss)})
    assert ("the user's ss -ti showed the client socket holding 2096 bytes unsent behind an unacknowledged "
            "segment in 1 of 1 socket lines (ato 40.0 ms): Nagle waiting for the ACK, seen on the socket itself"
            in log_only_evidence(facts))
