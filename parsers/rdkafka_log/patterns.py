"""The line formats read: librdkafka's own and the client libraries',
as RE2 patterns, each quoting the format string it matches; and the
table they fill."""
from __future__ import annotations

import re

import pyarrow as pa

SCHEMA = pa.schema(
    [
        ("line_no", pa.int64()),
        ("ts_us", pa.int64()),
        ("level", pa.int8()),
        ("facility", pa.string()),
        ("client", pa.string()),
        ("thread", pa.string()),
        ("broker", pa.string()),
        ("event", pa.string()),
        ("request", pa.string()),
        ("api_version", pa.int16()),
        ("size_bytes", pa.int64()),
        ("corr_id", pa.int32()),
        ("rtt_ms", pa.float64()),
        ("detail", pa.string()),
        ("text", pa.string()),
        ("ts_resolution_us", pa.int32()),
        ("msgs", pa.int32()),
        ("count", pa.int32()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("error", pa.string()),
        ("elapsed_ms", pa.float64()),
        ("repeat", pa.int32()),
    ]
)
# Schema version 1 (kdiag before the columns after "text") and 2 (before
# "repeat"): bundles that carry them still verify.
SCHEMA_V1 = pa.schema(list(SCHEMA)[:15])
SCHEMA_V2 = pa.schema(list(SCHEMA)[:22])

# "%7|1795314017.477|SEND|rdkafka#producer-1| <message>"; anything before the
# "%" (a wrapper's own prefix without "|") is tolerated, unless it opens a
# JSON object or a quote: the message then ends before the line does, and
# wrapped.py reads it.
HEADER = r"^[^|{\"']*%[0-7]\|[0-9]{1,12}\.[0-9]{3}\|[A-Za-z0-9_\-]*\|[^|]*\| "
# rd_kafka_dbg() prefixes "[thrd:%s]: "; rd_rkb_dbg() adds the broker name
# "%s: ": "ssl://h:p/111", "sasl_ssl://h:p/bootstrap", ":0/internal", and
# for plaintext no scheme at all (rd_kafka_mk_brokername() omits it):
# "127.0.0.1:9092/1". The stderr format puts a space before the thread; the
# log callbacks' messages are given one to match.
# A redacted name may hold "]]" ("kafka-1.[[REDACTED]]:9092/1").
THREAD = r"^ \[thrd:(?P<thread>(?:[^\]]|\]\])*)\]: "
THREAD_STRIP = r"^ (?:\[thrd:(?:[^\]]|\]\])*\]: )?"
# A plaintext host is a name or an address: a prefix such as
# "name#producer-1:FAC:" or "...|event=" must not pass for part of it.
# Names users or their tools rewrote are names too: "main/1",
# "<REDACTED>/2", "kafka-1.[[REDACTED]]:9092/1", a bare "[[REDACTED]]";
# and the consumer's "GroupCoordinator" (rd_kafka_cgrp's broker). Their
# host part holds no ":" but before a port, nor "=", ",", ";": a prefix cannot pass.
BROKER_NAME = (r"(?:[A-Za-z_]*://\S+/(?:-?[0-9]+|bootstrap|internal|[A-Za-z0-9_\-]+)|:[0-9]+/internal"
                r"|(?:[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\]):[0-9]+/(?:-?[0-9]+|bootstrap|internal)"
                r"|[^\s/|:=,;]+(?::[0-9]+)?/(?:-?[0-9]+|bootstrap|internal)"
                r"|GroupCoordinator|\[\[[A-Za-z_]+\]\]|<[A-Za-z_]+>)")
BROKER = r"^(?P<broker>" + BROKER_NAME + "): "
BROKER_STRIP = r"^" + BROKER_NAME + ": "

APP_ERROR = (r"^(?:.*?code=(?P<detail>-?[A-Za-z0-9_]{1,64}))?.*?"
             r"(?P<error>(?:Local|Broker): [A-Z][A-Za-z ]{0,80}[a-z]|Local_[A-Za-z]{1,64}|_[A-Z]+(?:_[A-Z]+)*"
             r"|[0-9]{1,6}/[0-9]{1,6} brokers are down)")

# Each pattern quotes the format string in rdkafka_broker.c it matches.
EVENTS: list[tuple[str, str, str]] = [
    # "Sent %sRequest (v%hd, %zu bytes @ %zu, CorrId %d)"; before v0.9.2
    # "Sent %sRequest (v%hd, %zd bytes, CorrId %d)"; before v0.8.5 (2014)
    # "Sent %sRequest (%zd bytes, CorrId %"PRId32")".
    ("send", "Sent ",
     (r"^Sent (?P<request>[A-Za-z]+)Request \((?:v(?P<api_version>[0-9]{1,4}), )?"
      r"(?P<size_bytes>[0-9]{1,18}) bytes(?: @ [0-9]+)?, CorrId (?P<corr_id>-?[0-9]{1,10})\)")),
    # "Sent partial %sRequest (v%hd, %zd+%zd/%zu bytes, CorrId %d)"
    ("send_partial", "Sent partial ",
     (r"^Sent partial (?P<request>[A-Za-z]+)Request \(v(?P<api_version>[0-9]{1,4}), "
      r"(?P<detail>[0-9]+\+[0-9]+)/(?P<size_bytes>[0-9]{1,18}) bytes, CorrId (?P<corr_id>-?[0-9]{1,10})\)")),
    # "Received %sResponse (v%hd, %zu bytes, CorrId %d, rtt %.2fms)"; before
    # v0.8.5 (2014) "Received %sResponse (%zd bytes, CorrId %"PRId32")".
    ("recv", "Received ",
     (r"^Received (?P<request>[A-Za-z]+)Response \((?:v(?P<api_version>[0-9]{1,4}), )?"
      r"(?P<size_bytes>[0-9]{1,18}) bytes, CorrId (?P<corr_id>-?[0-9]{1,10})"
      r"(?:, rtt ?(?P<rtt_ms>[0-9]{1,12}(?:\.[0-9]{1,6})?)ms)?\)")),
    # "Retrying %sRequest (v%hd, %zu bytes, retry %d/%d, prev CorrId %d) in %dms";
    # before v0.11.4 "Retrying %sRequest (v%hd, %zu bytes, retry %d/%d)".
    ("retry", "Retrying ",
     (r"^Retrying (?P<request>[A-Za-z]+)Request \(v(?P<api_version>[0-9]{1,4}), "
      r"(?P<size_bytes>[0-9]{1,18}) bytes, retry (?P<detail>[0-9]+/[0-9]+)"
      r"(?:, prev CorrId (?P<corr_id>-?[0-9]{1,10}))?\)")),
    # "Response for unknown CorrId %d (timed out?)"
    ("unknown_corrid", "Response for unknown CorrId",
     r"^Response for unknown CorrId (?P<corr_id>-?[0-9]{1,10})"),
    # "%s: Broker changed state %s -> %s"
    ("state", "Broker changed state ",
     r"^Broker changed state (?P<detail>[A-Z_]+ -> [A-Z_]+)"),
    # "Connecting to %s (%s) with socket %d"
    ("connect", "Connecting to ",
     r"^Connecting to (?P<detail>\S+ \([a-z_]+\)) with socket [0-9]+"),
    # "Connected to %s"
    ("connected", "Connected to ", r"^Connected to (?P<detail>\S+)"),
    # rd_kafka_broker_bufq_timeout_scan(), REQTMOUT: since v1.0.0 (2018-12)
    # "Timed out %sRequest %s (after %"PRId64"ms, timeout #%d)%s", %s being
    # "in flight", "in retry queue" or "in output queue"; v0.11.6 (2018-11)
    # "Timed out #%d %sRequest %s (after %"PRId64"ms)".
    ("timeout", "Timed out ",
     (r"^Timed out (?:#[0-9]+ )?(?P<request>[A-Za-z]+)Request (?P<detail>[a-z][a-z ]*[a-z]) "
      r"\(after (?P<elapsed_ms>[0-9]{1,12})ms")),
    # REQTMOUT's summary: since v0.11.6 "Timed out %i in-flight, %i
    # retry-queued, %i out-queue, %i partially-sent requests"; v0.9.2 to
    # v0.11.5 "Timed out %i+%i+%i requests" (in-flight, retry, queued).
    ("timeouts", "Timed out ",
     (r"^Timed out (?P<detail>(?P<count>[0-9]{1,9})(?: in-flight, [0-9]+ retry-queued, [0-9]+ out-queue, "
      r"[0-9]+ partially-sent|(?:\+[0-9]+){1,2})) requests")),
    # rd_kafka_broker_fail(), FAIL: "%s: %s" (broker, errstr) at log level and
    # "%s (%s)%s%s" (errstr, error name, ...) at debug; errstr for timeouts
    # is "%i request(s) timed out: disconnect%s" with " (average rtt
    # %.3fms)" since v0.9.5 (2017-03), and since v1.0.0 " (after %dms in
    # state %s)" at its end. Before v1.0.0 its debug line, BROKERFAIL, was
    # "failed: err: %s: (errno: %s)" (the error's string, strerror(errno)):
    # "Local: Message timed out" when requests timed out. Matched on the
    # facility, or on the words (parser._FAIL_TEXT) where it is not printed.
    ("fail", "",
     (r"^(?P<detail>(?:(?P<count>[0-9]{1,9}) request\(s\) timed out|failed: err: (?P<error>.*?): \(errno: )?.*?)"
      r"(?: \(average rtt (?P<rtt_ms>[0-9]{1,12}(?:\.[0-9]{1,6})?)ms\))?"
      r"(?: \(after (?P<elapsed_ms>[0-9]{1,12})ms in state [A-Z_]+[^)]*\))?"
      r"(?: \(_?[A-Z_]+\))?(?:: identical to last error)?(?:: error log suppressed)?\s*$")),
    # rd_kafka_handle_Produce_error() / rd_kafka_msgbatch_handle_Produce_result(),
    # MSGSET: "%s [%"PRId32"]: MessageSet with %i message(s) (MsgId %"PRIu64",
    # BaseSeq %"PRId32") encountered error: %s (actions %s)%s" and "... delivered";
    # before idempotence (v1.0.0) without the "(MsgId ..., BaseSeq ...)".
    ("msgset", "MessageSet with ",
     (r"^(?P<topic>\S+) \[(?P<partition>-?[0-9]{1,10})\]: MessageSet with (?P<msgs>[0-9]{1,9}) message\(s\)"
      r"(?: \([^)]*\))? (?:delivered|encountered error: (?P<error>.*?) \(actions (?P<detail>[^)]*)\))")),
    # rd_kafka_msgset_writer_finalize(), PRODUCE: "%s [%"PRId32"]: Produce
    # MessageSet with %i message(s) (%"PRIusz" bytes, ApiVersion %d, ..."
    ("produce", "Produce MessageSet with ",
     (r"^(?P<topic>\S+) \[(?P<partition>-?[0-9]{1,10})\]: Produce MessageSet with (?P<msgs>[0-9]{1,9}) "
      r"message\(s\) \((?P<size_bytes>[0-9]{1,18}) bytes")),
    # rd_kafka_toppar_producer_serve(), TOPPAR: "%.*s [%"PRId32"] %d
    # message(s) in xmit queue (%d added from partition queue)"
    ("xmit_queue", " in xmit queue",
     (r"^(?P<topic>\S+) \[(?P<partition>-?[0-9]{1,10})\] (?P<msgs>[0-9]{1,9}) message\(s\) in xmit queue "
      r"\((?P<count>[0-9]{1,9}) added")),
    # v0.8's rd_kafka_broker_producer_serve(), TOPPAR: "%.*s [%"PRId32"]
    # %i+%i msgs" (the partition queue's count, then the transmit queue's),
    # at every serve of the partition: the first count is what the broker
    # thread takes into its transmit queue.
    ("xmit_queue", " msgs",
     r"^(?P<topic>\S+) \[(?P<partition>-?[0-9]{1,10})\] (?P<count>[0-9]{1,9})\+(?P<msgs>[0-9]{1,9}) msgs\b"),
    # rd_kafka_err_action(), REQERR: "%sRequest failed: %s: actions %s" (and
    # "... explicit actions %s").
    ("reqerr", "Request failed: ",
     (r"^(?P<request>[A-Za-z]+)Request failed: (?P<error>.*): (?:explicit )?actions (?P<detail>.*)")),
    # "librdkafka v%s (0x%x) %s initialized (builtin.features ..."
    ("init", "librdkafka v",
     r"^librdkafka v(?P<detail>[0-9][0-9A-Za-z.\-+]*) \(0x[0-9a-fA-F]+\) \S+ initialized"),
] + [
    # An error as the application got it (delivery report, exception,
    # error callback), not one of the log lines above: rd_kafka_err2str()'s
    # "Local: %s" / "Broker: %s" strings, the error code's name ("_%s" as
    # the clients print it, .NET's ErrorCode "Local_MessageTimedOut"),
    # confluent-kafka's KafkaError{code=%s,val=%d,str="%s"}; and
    # _ALL_BROKERS_DOWN's "%d/%d brokers are down".
    ("app_error", needle, APP_ERROR) for needle in ("Local", "Broker: ", "_TIMED_OUT", " brokers are down")
]

# The same patterns with the API name captured up to the space, then its
# "Request"/"Response" suffix checked and cut: "(?P<request>[A-Za-z]+)Request"
# makes RE2 try every split of the word, which costs it twice the time.
ONE_PASS = {
    name: (re.sub(r"\(\?P<request>\[A-Za-z\]\+\)(Request|Response) ", r"(?P<request>[A-Za-z]+) ", pat),
           "Response" if name == "recv" else "Request")
    for name, _, pat in EVENTS if "(?P<request>" in pat
}
# Events found by their facility, whatever the text begins with.
BY_FACILITY = {"fail": "FAIL"}
# Events read only where no other kind is: an error string stands inside
# many of the log lines above.
FALLBACK = frozenset({"app_error"})
# Events whose text begins with a topic or an API name: found by a substring.
ANYWHERE = frozenset({"msgset", "produce", "xmit_queue", "reqerr", "app_error"})


EVENT_FIELDS = ("request", "api_version", "size_bytes", "corr_id", "rtt_ms", "detail", "msgs", "count", "topic",
                 "partition", "error", "elapsed_ms")
# Groups that may not take part in a match (RE2 then gives ""): null them.
OPTIONAL = {"retry": ("corr_id",), "send": ("api_version",), "recv": ("api_version", "rtt_ms"),
             "fail": ("count", "rtt_ms", "elapsed_ms", "error"), "msgset": ("error", "detail"),
             "app_error": ("detail",)}

# ---- the client libraries' own log output around librdkafka's message ----

# Confluent.Kafka (.NET) Loggers.ConsoleLogger:
#   var now = DateTime.Now.ToString("yyyy-MM-dd HH:mm:ss.fff");
#   Console.Error.WriteLine($"{logInfo.Level}|{now}|{logInfo.Name}|{logInfo.Facility}| {logInfo.Message}");
# Level is the SyslogLevel enum's name: Emergency = 0 ... Debug = 7.
DOTNET_LEVELS = ["Emergency", "Alert", "Critical", "Error", "Warning", "Notice", "Info", "Debug"]
# Before 1.0 (0.11.x) its default logger printed the level as a number:
# "7|2026-11-22 04:42:32.123|rdkafka#producer-1|SEND| ...".
DOTNET = (r"^(?P<lname>" + "|".join(DOTNET_LEVELS) + r"|[0-7])\|"
           r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2}) (?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})\.(?P<frac>[0-9]{3})\|"
           r"(?P<client>[^|]*)\|(?P<facility>[A-Za-z0-9_\-]*)\| ")
# confluent-kafka-go LogEvent.String():
#   fmt.Sprintf("[%v][%s][%s][%d]%s", logEvent.Timestamp.Format(time.RFC3339),
#               logEvent.Name, logEvent.Tag, logEvent.Level, logEvent.Message)
# RFC 3339 prints whole seconds: kept, with a resolution of a second.
GO = (r"^.*?\[(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})T(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.(?P<frac>[0-9]+))?"
       r"(?P<tz>Z|[+\-][0-9]{2}:[0-9]{2})\]"
       r"\[(?P<client>[^\]]*)\]\[(?P<facility>[A-Za-z0-9_\-]*)\]\[(?P<level>[0-7])\]")
# The logger callback of librdkafka's examples (rdkafka_example.c,
# rdkafka_performance.c), copied into many programs and bindings (Ruby's
# Hermann, C and C++ services), some through their own logger:
#   fprintf(stderr, "%u.%03u RDKAFKA-%i-%s: %s: %s\n", (int)tv.tv_sec,
#           (int)(tv.tv_usec / 1000), level, fac, rd_kafka_name(rk), buf);
# without the time when a logger prints its own, or with a word of the
# program's before "RDKAFKA" ("APP-RDKAFKA-7-SEND").
OLD_PRINT = (r"^.*?(?:(?P<s>[0-9]{9,10})\.(?P<frac>[0-9]{3}) )?(?:[A-Za-z0-9_]+-)?RDKAFKA-(?P<level>[0-7])-"
             r"(?P<facility>[A-Za-z0-9_\-]+): (?P<client>[^:]*): ")
# JSON.stringify() of an event.log object: node-rdkafka's
# { severity, fac, message }, confluent-kafka-javascript's adds name; the
# KafkaJS-style logger's { message, fac, timestamp: Date.now(), name }.
JSON_LINE = r'^\s*\{.*"fac"\s*:\s*"'
JSON_MSG = r'"message"\s*:\s*"(?P<msg>(?:[^"\\]|\\.)*)"'
JSON_FIELDS = [
    ("facility", r'"fac"\s*:\s*"(?P<v>[^"\\]*)"'),
    ("level", r'"severity"\s*:\s*(?P<v>[0-7])\b'),
    ("client", r'"name"\s*:\s*"(?P<v>[^"\\]*)"'),
    ("ts_ms", r'"timestamp"\s*:\s*(?P<v>[0-9]{12,14})\b'),
]
# console.log() of the same objects: Node's util.inspect puts the object on
# one line ("{ severity: 7, fac: 'SEND', message: '...' }") when it fits in
# breakLength (80), else one property a line, indented two spaces, between
# "{" and "}" lines. Strings are quoted ', else " or ` when they hold a '.
_KEY = r"(?:^\{ |^  |, )"


def _js_string(group: str) -> str:
    return rf"(?P<{group}>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`\\]|\\.)*`)"


INSPECT_MSG = _KEY + "message: " + _js_string("m")
INSPECT_FIELDS = [
    ("facility", _KEY + "fac: " + _js_string("v")),
    ("level", _KEY + r"severity: (?P<v>[0-7])(?:,| \}|$)"),
    ("client", _KEY + "name: " + _js_string("v")),
    ("ts_ms", _KEY + r"timestamp: (?P<v>[0-9]{12,14})(?:,| \}|$)"),
]
# A string longer than breakLength is printed in pieces, "'...' +" and the
# next pieces indented four spaces, the last one ending the property:
#   message: '[thrd:ssl://h:9093/1]: ssl://h:9093/1: Sent ProduceRequest' +
#     ' (v10, 2170 bytes @ 0, CorrId 5)',
INSPECT_CONT = r"^    (?P<m>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`\\]|\\.)*`)(?P<more> \+)?,?$"
INSPECT_PART = r"^(?:\{|\}|  (?:severity|fac|name|timestamp): .*|    ['\"`].*['\"`](?: \+)?,?)$"
# confluent-kafka (Python) log_cb:
#   PyObject_CallMethod(h->logger, "log", "issss", level_map[level],
#                       "%s [%s] %s", fac, rd_kafka_name(rk), buf);
# so the record's message is "SEND [rdkafka#producer-1] [thrd:...]: ...",
# under any logging format. rd_kafka_name() is "%s#%s-%i" (client.id,
# producer or consumer, instance number): the "#type-N" anchors it.
PYTHON = r"(?P<facility>[A-Za-z0-9_]+) \[(?P<client>[^\]\s]*#[a-z_]+-[0-9]+)\] "
PYTHON_SPLIT = r"[A-Za-z0-9_]+ \[[^\]\s]*#[a-z_]+-[0-9]+\] "
# %(asctime)s: "2026-11-22 04:42:32,123" (local time, no zone unless the
# datefmt adds one); with a datefmt such as "%H:%M:%S" plus ",%(msecs)03d"
# only the time of day.
PY_TIME = (r"(?:(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[ T])?(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})"
            r"(?:[.,](?P<frac>[0-9]{1,6}))?(?P<tz>Z|[+\-][0-9]{2}:?[0-9]{2}| [+\-][0-9]{4})?")
# confluent-kafka maps syslog levels 0-2 to CRITICAL and 5-6 to INFO: only
# DEBUG, WARNING and ERROR name one syslog level.
PY_LEVEL = r"(?i)(?:^|[^A-Za-z])(?P<v>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?:[^A-Za-z]|$)"
PY_LEVELS = {"DEBUG": 7, "WARNING": 4, "WARN": 4, "ERROR": 3}

COLS = (("ts_us", pa.int64()), ("level", pa.int8()), ("facility", pa.string()),
         ("client", pa.string()), ("msg", pa.string()), ("ts_resolution_us", pa.int32()))
