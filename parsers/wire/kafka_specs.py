"""The Kafka protocol's layouts that kdiag decodes, as data.

Source of truth: the Kafka project's message specifications,
``clients/src/main/resources/common/message/*.json`` in apache/kafka (read at
commit 1eb7644349cb, October 2024; Produce's version 13 from the 4.1.0
``ProduceRequest.json``/``ProduceResponse.json``). Each ``<Name>Request.json``
gives an api's ``apiKey``, ``validVersions`` and ``flexibleVersions``;
``RequestHeader.json`` and ``ResponseHeader.json`` the headers;
``ProduceRequest.json`` and ``ProduceResponse.json`` the two layouts below.

The decoder (``kafka.py``) and the tests' encoder both walk these tables, so
a layout is written once. A field lists the versions it exists in as
``(first, last)``, ``last`` None for "and every later one" (the specs'
``"3+"``); ``tag`` marks a tagged field (flexible versions only).
"""
from __future__ import annotations

from typing import NamedTuple

# api key -> (name, lowest version, highest version, first flexible version or None).
# The specs' "validVersions" and "flexibleVersions" of each <Name>Request.json
# at the commit above; the highest versions raised to the later specs' (Kafka
# 4.x: apache/kafka's StreamsGroup*, *ShareGroupOffsets files for keys 88-92,
# and the copies kafka-python 3.0.12 ships in kafka/protocol/schemas/resources
# with the versions its table of Kafka 4.0-4.3 brokers lists), so that a new
# client's first request is still recognised. The lowest stays 0 for every
# api: versions the brokers dropped (Kafka 4.0 dropped Produce 0-2 and others)
# are still sent by older clients, and are in captures of them. Key 74 was
# ListClientMetricsResources before Kafka 4.1.
APIS: dict[int, tuple[str, int, int, int | None]] = {
    0: ("Produce", 0, 13, 9),
    1: ("Fetch", 0, 18, 12),
    2: ("ListOffsets", 0, 11, 6),
    3: ("Metadata", 0, 13, 9),
    4: ("LeaderAndIsr", 0, 7, 4),
    5: ("StopReplica", 0, 4, 2),
    6: ("UpdateMetadata", 0, 8, 6),
    7: ("ControlledShutdown", 0, 3, 3),
    8: ("OffsetCommit", 0, 10, 8),
    9: ("OffsetFetch", 0, 10, 6),
    10: ("FindCoordinator", 0, 6, 3),
    11: ("JoinGroup", 0, 9, 6),
    12: ("Heartbeat", 0, 4, 4),
    13: ("LeaveGroup", 0, 5, 4),
    14: ("SyncGroup", 0, 5, 4),
    15: ("DescribeGroups", 0, 6, 5),
    16: ("ListGroups", 0, 5, 3),
    17: ("SaslHandshake", 0, 1, None),
    18: ("ApiVersions", 0, 4, 3),
    19: ("CreateTopics", 0, 7, 5),
    20: ("DeleteTopics", 0, 6, 4),
    21: ("DeleteRecords", 0, 2, 2),
    22: ("InitProducerId", 0, 6, 2),
    23: ("OffsetForLeaderEpoch", 0, 4, 4),
    24: ("AddPartitionsToTxn", 0, 5, 3),
    25: ("AddOffsetsToTxn", 0, 4, 3),
    26: ("EndTxn", 0, 5, 3),
    27: ("WriteTxnMarkers", 0, 2, 1),
    28: ("TxnOffsetCommit", 0, 5, 3),
    29: ("DescribeAcls", 0, 3, 2),
    30: ("CreateAcls", 0, 3, 2),
    31: ("DeleteAcls", 0, 3, 2),
    32: ("DescribeConfigs", 0, 4, 4),
    33: ("AlterConfigs", 0, 2, 2),
    34: ("AlterReplicaLogDirs", 0, 2, 2),
    35: ("DescribeLogDirs", 0, 5, 2),
    36: ("SaslAuthenticate", 0, 2, 2),
    37: ("CreatePartitions", 0, 3, 2),
    38: ("CreateDelegationToken", 0, 3, 2),
    39: ("RenewDelegationToken", 0, 2, 2),
    40: ("ExpireDelegationToken", 0, 2, 2),
    41: ("DescribeDelegationToken", 0, 3, 2),
    42: ("DeleteGroups", 0, 2, 2),
    43: ("ElectLeaders", 0, 2, 2),
    44: ("IncrementalAlterConfigs", 0, 1, 1),
    45: ("AlterPartitionReassignments", 0, 1, 0),
    46: ("ListPartitionReassignments", 0, 0, 0),
    47: ("OffsetDelete", 0, 0, None),
    48: ("DescribeClientQuotas", 0, 1, 1),
    49: ("AlterClientQuotas", 0, 1, 1),
    50: ("DescribeUserScramCredentials", 0, 0, 0),
    51: ("AlterUserScramCredentials", 0, 0, 0),
    52: ("Vote", 0, 1, 0),
    53: ("BeginQuorumEpoch", 0, 1, 1),
    54: ("EndQuorumEpoch", 0, 1, 1),
    55: ("DescribeQuorum", 0, 2, 0),
    56: ("AlterPartition", 0, 3, 0),
    57: ("UpdateFeatures", 0, 2, 0),
    58: ("Envelope", 0, 0, 0),
    59: ("FetchSnapshot", 0, 1, 0),
    60: ("DescribeCluster", 0, 2, 0),
    61: ("DescribeProducers", 0, 0, 0),
    62: ("BrokerRegistration", 0, 4, 0),
    63: ("BrokerHeartbeat", 0, 1, 0),
    64: ("UnregisterBroker", 0, 0, 0),
    65: ("DescribeTransactions", 0, 0, 0),
    66: ("ListTransactions", 0, 2, 0),
    67: ("AllocateProducerIds", 0, 0, 0),
    68: ("ConsumerGroupHeartbeat", 0, 1, 0),
    69: ("ConsumerGroupDescribe", 0, 0, 0),
    70: ("ControllerRegistration", 0, 0, 0),
    71: ("GetTelemetrySubscriptions", 0, 0, 0),
    72: ("PushTelemetry", 0, 0, 0),
    73: ("AssignReplicasToDirs", 0, 0, 0),
    74: ("ListConfigResources", 0, 1, 0),
    75: ("DescribeTopicPartitions", 0, 0, 0),
    76: ("ShareGroupHeartbeat", 0, 1, 0),
    77: ("ShareGroupDescribe", 0, 1, 0),
    78: ("ShareFetch", 0, 2, 0),
    79: ("ShareAcknowledge", 0, 2, 0),
    80: ("AddRaftVoter", 0, 1, 0),
    81: ("RemoveRaftVoter", 0, 0, 0),
    82: ("UpdateRaftVoter", 0, 0, 0),
    83: ("InitializeShareGroupState", 0, 0, 0),
    84: ("ReadShareGroupState", 0, 0, 0),
    85: ("WriteShareGroupState", 0, 1, 0),
    86: ("DeleteShareGroupState", 0, 0, 0),
    87: ("ReadShareGroupStateSummary", 0, 1, 0),
    88: ("StreamsGroupHeartbeat", 0, 1, 0),
    89: ("StreamsGroupDescribe", 0, 1, 0),
    90: ("DescribeShareGroupOffsets", 0, 1, 0),
    91: ("AlterShareGroupOffsets", 0, 0, 0),
    92: ("DeleteShareGroupOffsets", 0, 0, 0),
}

PRODUCE = 0
API_VERSIONS = 18
CONTROLLED_SHUTDOWN = 7


class Field(NamedTuple):
    """One field of a layout. ``type``: int8, int16, int32, int64, uuid,
    string, bytes, records (bytes holding record batches), array (of the
    struct ``fields``) or struct (``fields``, only as a tagged field)."""
    name: str
    type: str
    first: int = 0
    last: int | None = None
    nullable: bool = False
    tag: int | None = None
    fields: tuple = ()

    def present(self, version: int) -> bool:
        return self.first <= version and (self.last is None or version <= self.last)


# ProduceRequest.json: validVersions 0-13, flexibleVersions 9+. Version 3
# adds TransactionalId (and record batches of magic 2 in Records); 13
# names topics by TopicId instead of Name.
PRODUCE_REQUEST = (
    Field("transactional_id", "string", 3, nullable=True),
    Field("acks", "int16"),
    Field("timeout_ms", "int32"),
    Field("topics", "array", fields=(
        Field("name", "string", 0, 12),
        Field("topic_id", "uuid", 13),
        Field("partitions", "array", fields=(
            Field("index", "int32"),
            Field("records", "records", nullable=True),
        )),
    )),
)

# ProduceResponse.json: validVersions 0-13, flexibleVersions 9+. Version 1
# adds ThrottleTimeMs, 2 LogAppendTimeMs, 5 LogStartOffset, 8 RecordErrors and
# ErrorMessage, 10 the tagged CurrentLeader and NodeEndpoints, 13 TopicId.
PRODUCE_RESPONSE = (
    Field("topics", "array", fields=(
        Field("name", "string", 0, 12),
        Field("topic_id", "uuid", 13),
        Field("partitions", "array", fields=(
            Field("index", "int32"),
            Field("error_code", "int16"),
            Field("base_offset", "int64"),
            Field("log_append_time_ms", "int64", 2),
            Field("log_start_offset", "int64", 5),
            Field("record_errors", "array", 8, fields=(
                Field("batch_index", "int32", 8),
                Field("batch_index_error_message", "string", 8, nullable=True),
            )),
            Field("error_message", "string", 8, nullable=True),
            Field("current_leader", "struct", 10, tag=0, fields=(
                Field("leader_id", "int32", 10),
                Field("leader_epoch", "int32", 10),
            )),
        )),
    )),
    Field("throttle_time_ms", "int32", 1),
    Field("node_endpoints", "array", 10, tag=0, fields=(
        Field("node_id", "int32", 10),
        Field("host", "string", 10),
        Field("port", "int32", 10),
        Field("rack", "string", 10, nullable=True),
    )),
)

# DefaultRecordBatch (magic 2), the offsets of its 61-byte header:
# baseOffset int64 @0, batchLength int32 @8 (bytes after this field),
# partitionLeaderEpoch int32 @12, magic int8 @16, crc uint32 @17,
# attributes int16 @21, lastOffsetDelta int32 @23, baseTimestamp int64 @27,
# maxTimestamp int64 @35, producerId int64 @43, producerEpoch int16 @51,
# baseSequence int32 @53, records count int32 @57.
BATCH_HEADER_V2 = 61
BATCH_LENGTH_AT = 8
MAGIC_AT = 16
# Message sets (magic 0 and 1): offset int64, message_size int32, then
# crc int32, magic int8, attributes int8, timestamp int64 (magic 1 only), key
# bytes, value bytes.
MESSAGE_ENTRY_HEADER = 12
# The shortest message (after message_size) by magic: crc, magic,
# attributes, [timestamp], key length, value length.
MESSAGE_MIN = {0: 14, 1: 22}
# attributes & 0x07, in every magic.
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


# The error codes a Produce answer carries (per partition), by their names in
# Errors.java (clients/src/main/java/org/apache/kafka/common/protocol/).
PRODUCE_ERRORS = {
    -1: "UNKNOWN_SERVER_ERROR", 0: "NONE", 2: "CORRUPT_MESSAGE", 3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT", 10: "MESSAGE_TOO_LARGE",
    17: "INVALID_TOPIC_EXCEPTION", 18: "RECORD_LIST_TOO_LARGE", 19: "NOT_ENOUGH_REPLICAS",
    20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND", 21: "INVALID_REQUIRED_ACKS", 29: "TOPIC_AUTHORIZATION_FAILED",
    32: "INVALID_TIMESTAMP", 35: "UNSUPPORTED_VERSION", 43: "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    45: "OUT_OF_ORDER_SEQUENCE_NUMBER", 46: "DUPLICATE_SEQUENCE_NUMBER", 47: "INVALID_PRODUCER_EPOCH",
    48: "INVALID_TXN_STATE", 53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 56: "KAFKA_STORAGE_ERROR",
    59: "UNKNOWN_PRODUCER_ID", 74: "FENCED_LEADER_EPOCH", 76: "UNSUPPORTED_COMPRESSION_TYPE",
    87: "INVALID_RECORD", 100: "UNKNOWN_TOPIC_ID", 120: "TRANSACTION_ABORTABLE",
}


def error_name(code: int | None) -> str | None:
    """A Produce error code's name, ``ERROR_<code>`` for one not listed."""
    if code is None:
        return None
    return PRODUCE_ERRORS.get(code, f"ERROR_{code}")


def api_name(api_key: int) -> str | None:
    api = APIS.get(api_key)
    return api[0] if api else None


def is_flexible(api_key: int, api_version: int) -> bool:
    api = APIS.get(api_key)
    return bool(api) and api[3] is not None and api_version >= api[3]


def request_header_version(api_key: int, api_version: int) -> int:
    """RequestHeader.json: v2 (v1 plus tagged fields) for a flexible
    version, else v1 (v0 without ClientId); ControlledShutdown v0 alone
    still sends v0."""
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """ResponseHeader.json: v1 (v0 plus tagged fields) for a flexible
    version, else v0; ApiVersions answers always with v0, so that a client
    can read the error of a version the broker does not know."""
    if api_key == API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0
