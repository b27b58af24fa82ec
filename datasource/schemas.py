"""The ``kafka-log`` source's output: the columns of each mode (Spark's schema and the Arrow form
Spark checks each batch against), and where the columns of a batch's header come from."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kcompact.readers import codecs
from kcompact.readers.batch import Batch
from kcompact.readers.records import CONTROL_TYPES

MODES = ("records", "compaction", "batches", "table")


def _schema(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, type_) for name, type_ in fields])


_HEADERS = ArrayType(_schema(("key", StringType()), ("value", BinaryType())))
_BATCH_FIELDS = (
    ("batchBaseOffset", LongType()),
    ("batchLastOffset", LongType()),
    ("batchPosition", LongType()),
    ("segmentBaseOffset", LongType()),
    ("producerId", LongType()),
    ("producerEpoch", ShortType()),
    ("baseSequence", IntegerType()),
    ("isTransactional", BooleanType()),
    ("isControl", BooleanType()),
    ("magic", ByteType()),
    ("codec", StringType()),
    ("deleteHorizonMs", LongType()),
)
SCHEMAS = {
    "records": _schema(
        ("key", BinaryType()), ("value", BinaryType()), ("topic", StringType()), ("partition", IntegerType()),
        ("offset", LongType()), ("timestamp", TimestampType()), ("timestampType", IntegerType()),
        ("headers", _HEADERS), *_BATCH_FIELDS,
    ),
    "compaction": _schema(
        ("partitionDir", StringType()),
        ("topic", StringType()), ("partition", IntegerType()), ("segmentBaseOffset", LongType()),
        ("batchPosition", LongType()), ("batchBaseOffset", LongType()), ("recordIndex", IntegerType()),
        ("offset", LongType()), ("key", BinaryType()), ("tombstone", BooleanType()), ("timestamp", LongType()),
        ("isControl", BooleanType()), ("isTransactional", BooleanType()), ("producerId", LongType()),
    ),
    "batches": _schema(
        ("topic", StringType()), ("partition", IntegerType()), ("segmentBaseOffset", LongType()),
        ("batchPosition", LongType()), ("batchSize", IntegerType()), ("batchBaseOffset", LongType()),
        ("batchLastOffset", LongType()), ("recordCount", IntegerType()), ("magic", ByteType()),
        ("codec", StringType()), ("isTransactional", BooleanType()), ("isControl", BooleanType()),
        ("controlType", StringType()), ("producerId", LongType()), ("producerEpoch", ShortType()),
        ("baseSequence", IntegerType()), ("maxTimestamp", LongType()), ("deleteHorizonMs", LongType()),
        ("leaderEpoch", IntegerType()), ("crcValid", BooleanType()),
    ),
}
SCHEMAS["table"] = StructType(
    SCHEMAS["records"].fields[:8]
)  # key, value, topic, partition, offset, timestamp(Type), headers
# What Spark checks each yielded batch against: its own Arrow form of the schema.
ARROW_SCHEMAS = {mode: to_arrow_schema(schema, timezone="UTC") for mode, schema in SCHEMAS.items()}

# Header fields of one batch, by output column.
_PER_BATCH: dict[str, Callable[[Batch], object]] = {
    "batchPosition": lambda b: b.position,
    "batchSize": lambda b: b.size,
    "batchBaseOffset": lambda b: b.base_offset,
    "batchLastOffset": lambda b: b.last_offset,
    "recordCount": lambda b: b.count,
    "magic": lambda b: b.magic,
    "codec": lambda b: codecs.name(b.codec),
    "isTransactional": lambda b: b.is_transactional,
    "isControl": lambda b: b.is_control,
    "controlType": lambda b: CONTROL_TYPES.get(b.control_type()) if b.is_control else None,
    "producerId": lambda b: b.producer_id,
    "producerEpoch": lambda b: b.producer_epoch,
    "baseSequence": lambda b: b.base_sequence,
    "maxTimestamp": lambda b: b.max_timestamp,
    "deleteHorizonMs": lambda b: b.base_timestamp if b.has_delete_horizon else None,
    "leaderEpoch": lambda b: b.partition_leader_epoch,
    "crcValid": lambda b: b.crc_valid(),
    "timestampType": lambda b: b.timestamp_type,
}
# readers.columns names -> output names
_RENAMED = {
    "batch_base_offset": "batchBaseOffset",
    "batch_position": "batchPosition",
    "producer_id": "producerId",
    "is_transactional": "isTransactional",
    "is_control": "isControl",
}
