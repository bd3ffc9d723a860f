"""The cause registry: every cause module is listed once in ORDER, declares
what a cause must, is written into docs/causes.md, its rule gives its cause to
the request it declares (MEETS), its signal hook to the run it declares
(RUN_MEETS), and the report's colours, the predictions and the likely ranking
read it."""
import importlib
import inspect
import pkgutil
import re

import pytest

from conftest import ROOT
from kdiag.analysis import causes, likely_causes, predict
from kdiag.analysis.causes import Facts, ThinEvidence, classify, label_of, resolve_slow
from kdiag.analysis.causes.__main__ import page
from kdiag.analysis.judge import signal_findings
from kdiag.report.html import OTHER_COLORS, color_of

# librdkafka property names: dotted lower-case words.
PROPERTY = re.compile(r"^[a-z]+(\.[a-z]+)*$")
COLOUR = re.compile(r"^#[0-9a-f]{6}$")
VERSIONS = (None, (0, 11, 6), (1, 4, 0), (1, 5, 0), (2, 3, 0), (2, 10, 0))


def _scanned() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(causes.__path__) if not m.name.startswith("_"))


def test_every_cause_module_is_in_the_order_and_back():
    assert sorted(causes.ORDER) == _scanned()
    assert len(set(causes.ORDER)) == len(causes.ORDER)


@pytest.mark.parametrize("name", sorted(set(causes.ORDER) | set(_scanned())))
def test_cause_declares_everything(name):
    mod = importlib.import_module(f"kdiag.analysis.causes.{name}")
    missing = [a for a in causes.REQUIRED if not hasattr(mod, a)]
    assert not missing, f"{name} lacks {missing}"
    assert mod.NAME == name
    assert isinstance(mod.TAIL, bool)
    for attr in ("COLUMNS", "SUMMED", "EXAMPLE_COLUMNS"):
        cols = getattr(mod, attr)
        assert isinstance(cols, tuple) and all(isinstance(c, str) for c in cols), attr
    assert mod.rule is None or callable(mod.rule)
    assert mod.MEETS is None or isinstance(mod.MEETS, dict)
    assert callable(mod.evidence) and callable(mod.fix_text) and callable(mod.fix)
    for version in VERSIONS:
        fix = mod.fix(version)
        assert isinstance(fix, dict), (name, version)
        assert all(PROPERTY.match(k) and isinstance(v, str) for k, v in fix.items()), (name, fix)
    assert COLOUR.match(mod.COLOUR), mod.COLOUR
    assert mod.PART in causes.PARTS
    for attr in ("SIGNATURE", "FIX_DOC"):
        text = getattr(mod, attr)
        # One cell of a Markdown table.
        assert isinstance(text, str) and text.strip() and "\n" not in text and "|" not in text, attr
    for hook in causes.HOOKS:
        if hasattr(mod, hook):
            assert len(inspect.signature(getattr(mod, hook)).parameters) == 1, (name, hook)
    assert hasattr(mod, "from_signals") == hasattr(mod, "RUN_MEETS"), name


def test_names_are_unique_and_the_docs_table_them():
    names = [c.NAME for c in causes.CAUSES]
    assert len(set(names)) == len(names)
    table = (ROOT / "docs" / "causes.md").read_text().split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M)) == set(names)


def test_the_docs_page_is_written_from_the_modules():
    """docs/causes.md is what ``python -m kdiag.analysis.causes`` writes:
    every cause's row from its SIGNATURE, FIX_DOC and PART, the predicted
    effect's lists from the PARTs."""
    text = (ROOT / "docs" / "causes.md").read_text()
    assert text == page(), "run: python -m kdiag.analysis.causes > docs/causes.md"
    for c in causes.CAUSES:
        assert f"| `{c.NAME}` | {c.SIGNATURE} | {c.FIX_DOC} |" in text


def test_each_cause_keeps_its_colour():
    colours = [c.COLOUR for c in causes.CAUSES]
    assert len(set(colours)) == len(colours)
    assert causes.UNKNOWN_COLOUR not in colours
    for c in causes.CAUSES:
        assert causes.colour_of(c.NAME) == color_of(c.NAME, {}) == c.COLOUR
    assert causes.colour_of("none") == causes.UNKNOWN_COLOUR
    # The report tells apart names no module declares (a stranger's findings).
    others: dict = {}
    assert [color_of(n, others) for n in ("x", "y", "x")] == [OTHER_COLORS[0], OTHER_COLORS[1], OTHER_COLORS[0]]


@pytest.mark.parametrize("cause", causes.CAUSES, ids=lambda c: c.NAME)
def test_a_prediction_takes_out_the_wait_of_a_wait_cause_only(cause):
    """A fast body and the cause's held requests: the fix's predicted p50
    exists exactly for a cause whose part is the wait."""
    rows = [{"cause": "healthy", "wait_ms": 0.4, "total_ms": 0.8}] * 6 + \
        [{"cause": cause.NAME, "wait_ms": 40.4, "total_ms": 40.8}] * 7
    base = predict.baseline(rows, None, None)
    got = predict.predicted(rows, cause.NAME, base)
    if cause.PART == "wait":
        assert got["p50_ms"] == 0.8 and got["saves_p50_ms"] == 40.0
    else:
        assert got is None
    findings = [{"cause": cause.NAME, "fix": {}}]
    predict.attach(findings, {"columns": ["cause", "wait_ms", "total_ms"],
                              "rows": [[r["cause"], r["wait_ms"], r["total_ms"]] for r in rows]}, None, None, 25.0)
    if cause.PART == "queue":
        assert findings[0]["predicted"]["saves_delivery_p50_ms"] == 25.0
    else:
        assert findings[0]["predicted"] == got


def _run(requests=0, path_rtt_ms=None, client_ms=None, summary=None, meta=None) -> Facts:
    return Facts(None, {}, requests, path_rtt_ms, False, None, None,
                 {"path_rtt_source": "handshakes", "requests": requests, **(summary or {})}, dict(meta or {}),
                 client_ms)


@pytest.mark.parametrize("cause", [c for c in causes.CAUSES if hasattr(c, "from_signals")], ids=lambda c: c.NAME)
def test_a_signal_cause_names_itself_from_the_run_it_declares(cause):
    """``from_signals`` names its cause from RUN_MEETS, and nothing from a
    run with no signals; judge.signal_findings makes it a finding whose
    sentences read that run."""
    assert cause.from_signals(_run(requests=10, meta={"signals": {}})) is None
    run = _run(**cause.RUN_MEETS)
    got = cause.from_signals(run)
    assert set(got) == {"requests", "share", "time_share", "rests_on"}, got
    assert got["rests_on"] and set(got["rests_on"]) <= set(causes.EVIDENCE), got
    assert isinstance(got["requests"], int) and got["requests"] > 0
    assert 0 < got["share"] <= 1 and 0 <= got["time_share"] <= 1, got
    findings: list[dict] = []
    signal_findings(findings, run, None)
    mine = [f for f in findings if f["cause"] == cause.NAME]
    assert len(mine) == 1, findings
    assert mine[0]["evidence"] and all(isinstance(e, str) and e for e in mine[0]["evidence"])
    assert isinstance(mine[0]["fix_text"], str) and mine[0]["fix_text"]
    assert mine[0]["rests_on"] == got["rests_on"]


# Runs as thin evidence (no syscalls) shows them: slow or not, TLS or not,
# the path known or not, about the delayed-ACK band or not.
THIN = [ThinEvidence(rtt, path, tls, frozenset(found), {"untimed": untimed}, queue)
        for rtt in (None, 2.0, 41.0, 120.0) for path in (None, 0.3, 100.0) for tls in (False, True)
        for found, untimed, queue in (((), 0, None), (causes.ORDER, 3, 1.5))]


@pytest.mark.parametrize("cause", [c for c in causes.CAUSES if hasattr(c, "likely")], ids=lambda c: c.NAME)
def test_a_likely_hook_scores_and_says_how_to_decide(cause):
    said = [cause.likely(thin) for thin in THIN]
    assert any(s is not None for s in said), "a hook that never ranks its cause"
    for s in said:
        if s is not None:
            score, support, decide = s
            assert isinstance(score, int) and isinstance(support, str) and support and decide


def test_rank_walks_the_hooks_by_score():
    for thin in THIN:
        result = {"summary": {"rtt_p50_ms": thin.rtt_ms, "path_rtt_ms": thin.path_rtt_ms,
                              "brokers": ["ssl://b:9093/1" if thin.tls else "b:9092/1"],
                              "split_ms": {"client_queue": thin.client_queue_ms}},
                  "findings": [{"cause": c} for c in thin.found], "signals": thin.signals}
        assert likely_causes.thin_evidence(result) == thin
        scored = [(c.likely(thin), c.NAME) for c in causes.CAUSES if hasattr(c, "likely")]
        want = [name for s, name in sorted((x for x in scored if x[0] is not None), key=lambda x: -x[0][0])]
        assert [r["cause"] for r in likely_causes.rank(result)] == want


def test_derived_lists():
    assert causes.TAIL_CAUSES == tuple(c.NAME for c in causes.CAUSES if c.TAIL)
    assert set(causes.FIXES) == set(causes.ORDER)
    assert {"cause", "pid", "fd"} <= set(causes.example_columns())


def _frame(spark, rows: list[dict]):
    """A DataFrame of the requests, with every column a MEETS names (typed
    by its values) and a corr_id in row order."""
    from pyspark.sql.types import BooleanType, DoubleType, IntegerType, LongType, StructField, StructType

    kinds = {bool: BooleanType(), int: LongType(), float: DoubleType()}
    types = {}
    for c in causes.CAUSES:
        for col, v in (getattr(c, "MEETS", None) or {}).items():
            if col != "path_rtt_ms":
                types.setdefault(col, kinds[type(v)])
    schema = StructType([StructField("corr_id", IntegerType())]
                        + [StructField(col, t) for col, t in sorted(types.items())])
    data = [tuple([i] + [r.get(col) for col in sorted(types)]) for i, r in enumerate(rows)]
    return spark.createDataFrame(data, schema)


# A module without MEETS fails test_cause_declares_everything, not the collection.
@pytest.mark.parametrize("cause", [c for c in causes.CAUSES if getattr(c, "MEETS", None) is not None],
                         ids=lambda c: c.NAME)
def test_classify_gives_each_cause_its_request(spark, cause):
    meets = dict(cause.MEETS)
    path_rtt = meets.pop("path_rtt_ms", None)
    # A tail cause is a few requests in a fast body.
    fast = [{"wait_ms": 0.4, "total_ms": 0.8, "n_writes": 1}] * (3 if cause.TAIL else 0)
    df = classify(_frame(spark, [meets, *fast]), path_rtt)
    got = df.orderBy("corr_id").first().cause
    if cause.rule is None:
        assert got == causes.OTHERWISE == cause.NAME
        return
    assert got == label_of(cause)
    if label_of(cause) != cause.NAME:   # one rule, two causes: told apart over the run
        got = resolve_slow(df, None).orderBy("corr_id").first().cause
    assert got == cause.NAME


def test_the_linger_default_is_the_versions_own():
    """queue.buffering.max.ms defaulted to a second before v0.11.0: a 0.9
    client's fix text must not say 0.5 ms."""
    from kdiag.analysis.causes import client_queueing as cq

    assert [cq.linger_default(v) for v in ((0, 8, 6), (0, 9, 5), (0, 11, 6), (1, 4, 2), (1, 5, 0), (2, 3, 0))] \
        == ["1000 ms", "1000 ms", "0 ms", "0.5 ms", "5 ms", "5 ms"]
    assert cq.linger_default(None) is None


def _logged(signals: dict, requests: int = 1, latency_ms: float = 31.0) -> Facts:
    summary = {"requests": requests, "latency_p50_ms": latency_ms if requests else None}
    return Facts(None, {}, requests, None, False, None, None, summary, {"signals": signals}, None)


def test_the_logs_own_times_decide_client_queueing():
    """A message's wait from the application's line to librdkafka's taking
    it, or a backlog of large requests in flight, names client_queueing
    when it outweighs the request; a short wait, a shallow or small backlog
    do not."""
    from kdiag.analysis.causes import client_queueing as cq

    waited = {"enqueue_waits": 3, "enqueue_wait_p50_ms": 990.0}
    got = cq.from_signals(_logged(waited))
    assert got and abs(got["share"] - 990 / 1021) < 1e-9 and "log lines" in got["rests_on"]
    assert cq.from_signals(_logged({"enqueue_waits": 3, "enqueue_wait_p50_ms": 20.0})) is None   # under the request
    unsent = {"enqueue_waits": 0, "enqueue_waits_unsent": 1, "enqueue_wait_unsent_min_ms": 146.0}
    assert cq.from_signals(_logged(unsent))["share"] > 0.8
    assert "at least 146 ms" in cq.signal_evidence(_logged(unsent))[0]
    assert cq.from_signals(_logged(waited, requests=0))["share"] == 1.0
    deep = {"in_flight_depth_p50": 24.0, "produce_bytes_p50": 1048204.0, "in_flight_rtt_p50_ms": 600.0,
            "in_flight_slow": 16}
    assert cq.from_signals(_logged(deep))["share"] == 24 / 25
    assert cq.signal_fix(_logged(deep)) == {} and "compression.type" in cq.fix_text(_logged(deep))
    assert cq.from_signals(_logged({**deep, "produce_bytes_p50": 2000.0})) is None       # 48 KB in flight
    assert cq.from_signals(_logged({**deep, "in_flight_depth_p50": 3.0})) is None        # shallow
    assert cq.signal_fix(_logged(waited)) == {"linger.ms": "0"}
