"""Spark data source ``kafka-log``: Kafka log dirs read in place, as Arrow record batches.

    spark.dataSource.register(KafkaLogDataSource)
    spark.read.format("kafka-log").load("/data/kafka-logs")           # or s3://bucket/logs
    spark.read.format("kafka-log").option("paths", "/a,/b").load()

Options (all optional but a path):
  ``path`` / ``paths``   a log dir (or one ``<topic>-<partition>`` dir); ``paths`` a comma list.
  ``mode``               ``records`` (default; like Spark's Kafka source plus batch fields),
                         ``compaction`` (what the cleaner decides on; no value is decoded) or
                         ``batches`` (one row per batch, from its header; a control batch's one
                         record and a compressed legacy wrapper's inner messages are decoded too).
  ``topics``             comma list of topics.
  ``partitions``         comma list of ``topic:N`` or ``N`` (partition N of every topic).
  ``startingOffset``     inclusive lower offset bound; ``endingOffset`` exclusive upper one. Each is
                         ``N`` for every partition and/or ``topic:P=N`` / ``P=N`` entries, comma separated.
  ``partitionDirs``      JSON object {partition dir: ending offset or null}: read exactly those
                         ``<topic>-<n>`` dirs (no log-dir listing), each below its own ending offset.
                         Replicas of one partition in several log dirs stay apart this way; the
                         compaction mode's ``partitionDir`` column says which dir a row came from.
  ``maxSplitBytes``      largest byte range of one task (default 128 MiB; a single batch may exceed it).
  ``pushFilters``        ``true`` to accept Spark's filter pushdown (needs the Spark SQL conf
                         ``spark.sql.python.filterPushdown.enabled=true``; with that conf off, Spark rejects
                         any reader that implements pushdown, so it is opt-in).

Planning (driver) lists the log dirs and reads ``.index`` files only when a segment is larger than
``maxSplitBytes`` or the offset range starts or ends inside it. One task reads one byte range of one
segment: the whole ``.log``, or the ranges between offset-index positions (every position is a batch
start). The offset range drops partitions, whole segments (segment base offsets bound their offsets)
and index ranges (an entry says the batches before its position hold offsets below its offset, and
those from its position on hold offsets above the previous entry's); rows outside it are dropped
while reading, and a task stops at the first batch past the range. Tasks carry only paths and
numbers, and read through ``storage`` in bounded chunks, so executors need neither the driver's
working directory nor memory for whole segments. On an object store, executors find their settings
the way fsspec does (for instance ``FSSPEC_S3`` set through ``spark.executorEnv``).

Pushed filters (with ``pushFilters``), all handled exactly, so Spark does not re-check them:
``EqualTo``/``In`` on ``topic`` (strings) and ``partition`` (integers), in every mode; and in
``records``/``compaction`` mode ``EqualTo``, ``GreaterThan``, ``GreaterThanOrEqual``, ``LessThan``
and ``LessThanOrEqual`` on ``offset`` (integers), which narrow the offset range like the options
do. Every other filter (``Not``, ``IsNull``, ``In`` on offset, other columns, other value types) is
returned to Spark.

A corrupt entry fails the task with a ``FormatError`` naming the file and byte position. In
``batches`` mode a batch whose CRC or codec is wrong is listed (``crcValid`` false) instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
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

import storage
from readers import codecs
from readers.batch import Batch
from readers.columns import batch_columns
from logdir.listing import Partition, parse_partition_dir, scan_log_dir, scan_partition
from logdir.splits import DEFAULT_MAX_SPLIT_BYTES, ByteRange, OffsetRange, partition_ranges
from readers.records import CONTROL_TYPES
from readers.segment import DEFAULT_CHUNK, iter_batches

MODES = ("records", "compaction", "batches")
GROUP_BYTES = 4 << 20  # stored bytes of batches turned into one Arrow batch
GROUP_RECORDS = 1 << 16


# -- schemas ---------------------------------------------------------------------------------
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


# -- what to read ----------------------------------------------------------------------------
PartitionKey = tuple[str | None, int]  # (None, n): partition n of every topic


@dataclass(frozen=True, slots=True)
class OffsetBound:
    """One offset per partition: a default and per-partition overrides (exact topic first)."""

    default: int | None = None
    overrides: tuple[tuple[PartitionKey, int], ...] = ()

    def of(self, topic: str, partition: int) -> int | None:
        found = dict(self.overrides)
        return found.get((topic, partition), found.get((None, partition), self.default))


@dataclass(frozen=True, slots=True)
class Selection:
    """The partitions and offsets a read returns: options, then pushed filters, all ANDed."""

    topics: frozenset[str] | None = None
    partitions: tuple[frozenset[PartitionKey], ...] = ()  # a partition must match each set
    starts: tuple[OffsetBound, ...] = ()
    ends: tuple[OffsetBound, ...] = ()

    def selects(self, topic: str, partition: int) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        return all((topic, partition) in keys or (None, partition) in keys for keys in self.partitions)

    def offsets(self, topic: str, partition: int) -> OffsetRange:
        out = OffsetRange()
        for bound in self.starts:
            out = out.narrowed(bound.of(topic, partition), None)
        for bound in self.ends:
            out = out.narrowed(None, bound.of(topic, partition))
        return out

    def with_topics(self, topics: frozenset[str]) -> Selection:
        return replace(self, topics=topics if self.topics is None else self.topics & topics)

    def with_partitions(self, numbers: frozenset[int]) -> Selection:
        return replace(self, partitions=self.partitions + (frozenset((None, n) for n in numbers),))

    def with_offsets(self, start: int | None, end: int | None) -> Selection:
        return replace(
            self,
            starts=self.starts + ((OffsetBound(start),) if start is not None else ()),
            ends=self.ends + ((OffsetBound(end),) if end is not None else ()),
        )


@dataclass(frozen=True, slots=True)
class Settings:
    """The parsed options: plain data, pickled to executors with the reader."""

    paths: tuple[str, ...]
    mode: str
    selection: Selection
    max_split_bytes: int
    push_filters: bool
    dirs: tuple[tuple[str, int | None], ...] = ()

    @classmethod
    def parse(cls, options: dict[str, str]) -> Settings:
        paths = [p for p in [options.get("path", "")] + options.get("paths", "").split(",") if p.strip()]
        dirs = _partition_dirs(options.get("partitionDirs"))
        if not paths and not dirs:
            raise ValueError("kafka-log needs a path: load(path), option('paths', 'a,b') or option('partitionDirs', ...)")
        mode = options.get("mode", "records").lower()
        if mode not in MODES:
            raise ValueError(f"kafka-log mode must be one of {', '.join(MODES)}, not {mode!r}")
        max_split = int(options.get("maxSplitBytes", DEFAULT_MAX_SPLIT_BYTES))
        if max_split <= 0:
            raise ValueError(f"maxSplitBytes must be positive, not {max_split}")
        push = options.get("pushFilters", "false").lower() == "true"
        return cls(tuple(p.strip() for p in paths), mode, _selection(options), max_split, push, dirs)


def _partition_dirs(text: str | None) -> tuple[tuple[str, int | None], ...]:
    if not text:
        return ()
    try:
        given = json.loads(text)
        dirs = tuple((str(d).rstrip("/"), None if end is None else int(end)) for d, end in given.items())
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"partitionDirs must be a JSON object {{dir: ending offset or null}}, not {text!r}") from None
    for d, _ in dirs:
        if parse_partition_dir(d.rsplit("/", 1)[-1]) is None:
            raise ValueError(f"partitionDirs: {d!r} is not a <topic>-<partition> dir")
    return dirs


def _selection(options: dict[str, str]) -> Selection:
    def given(name: str, parse: Callable[[str], object]) -> tuple:
        return (parse(options[name]),) if name in options else ()

    topics = frozenset(_items(options["topics"])) if "topics" in options else None
    partitions = given("partitions", lambda text: frozenset(map(_partition_key, _items(text))))
    return Selection(topics, partitions, given("startingOffset", _offset_bound), given("endingOffset", _offset_bound))


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _partition_key(text: str) -> PartitionKey:
    topic, sep, number = text.rpartition(":")
    if not number.strip().isdigit() or (sep and not topic):
        raise ValueError(f"a partition is 'topic:N' or 'N', not {text!r}")
    return (topic if sep else None), int(number)


def _offset_bound(text: str) -> OffsetBound:
    default, overrides = None, []
    for item in _items(text):
        key, sep, value = item.rpartition("=")
        try:
            if sep:
                overrides.append((_partition_key(key), int(value)))
            else:
                default = int(value)
        except ValueError:
            raise ValueError(f"an offset is 'N', 'topic:P=N' or 'P=N', not {item!r}") from None
    return OffsetBound(default, tuple(overrides))


# -- planning (driver) ------------------------------------------------------------------------
@dataclass(frozen=True)
class Split(ByteRange, InputPartition):
    """One task: a ``ByteRange`` of one segment, as Spark's input partition."""

    @classmethod
    def of(cls, byte_range: ByteRange) -> Split:
        return cls(**{f.name: getattr(byte_range, f.name) for f in fields(ByteRange)})


def plan_splits(settings: Settings) -> list[Split]:
    splits = []
    for path, end in settings.dirs:
        part = scan_partition(path, *parse_partition_dir(path.rsplit("/", 1)[-1]))
        if settings.selection.selects(part.topic, part.partition):
            offsets = settings.selection.offsets(part.topic, part.partition).narrowed(None, end)
            splits += [Split.of(r) for r in partition_ranges(part, offsets, settings.max_split_bytes)]
    for root in settings.paths:
        for part in _partitions(root):
            if settings.selection.selects(part.topic, part.partition):
                offsets = settings.selection.offsets(part.topic, part.partition)
                splits += [Split.of(r) for r in partition_ranges(part, offsets, settings.max_split_bytes)]
    return splits


def _partitions(root: str) -> list[Partition]:
    """A log dir's partitions; a path that is itself a partition dir reads as that partition."""
    logdir = scan_log_dir(root)
    if logdir.partitions or logdir.metadata:
        return logdir.partitions
    parsed = parse_partition_dir(root.rstrip("/").rsplit("/", 1)[-1])
    return [scan_partition(logdir.path, *parsed)] if parsed else []


# -- reading (executors) -----------------------------------------------------------------------
def read_split(split: Split, mode: str) -> Iterator[pa.RecordBatch]:
    """The split's rows in Arrow batches of bounded size, opened and read through ``storage``."""
    chunk = max(1, min(DEFAULT_CHUNK, split.end - split.start))
    with storage.open_read(split.path) as f:
        entries = iter_batches(f, split.path, split.start, split.end, chunk, strict=mode != "batches")
        for group in _groups(_in_range(entries, split.offsets)):
            table = BUILDERS[mode](group, split)
            if table.num_rows:
                yield table


def _in_range(batches: Iterator[Batch], offsets: OffsetRange) -> Iterator[Batch]:
    """Skip entries wholly below the range, stop at the first v2 batch wholly above it (offsets grow
    through a segment; a legacy wrapper's own offset is its last, so it never stops the scan)."""
    for batch in batches:
        if offsets.start is not None and batch.last_offset < offsets.start:
            continue
        if offsets.end is not None and batch.magic == 2 and batch.base_offset_field >= offsets.end:
            return
        yield batch


def _groups(batches: Iterator[Batch]) -> Iterator[list[Batch]]:
    group, size, records = [], 0, 0
    for batch in batches:
        group.append(batch)
        size += batch.size
        records += batch.records_count
        if size >= GROUP_BYTES or records >= GROUP_RECORDS:
            yield group
            group, size, records = [], 0, 0
    if group:
        yield group


def _batch_column(group: list[Batch], name: str, type_: pa.DataType) -> pa.Array:
    getter = _PER_BATCH[name]
    return pa.array([getter(b) for b in group], type_)


def _constants(split: Split, n: int) -> dict[str, pa.Array]:
    return {
        "partitionDir": pa.repeat(pa.scalar(split.path.rsplit("/", 1)[0], pa.string()), n),
        "topic": pa.repeat(pa.scalar(split.topic, pa.string()), n),
        "partition": pa.repeat(pa.scalar(split.partition, pa.int32()), n),
        "segmentBaseOffset": pa.repeat(pa.scalar(split.segment_base, pa.int64()), n),
    }


def _assemble(columns: dict[str, pa.Array], mode: str, offsets: OffsetRange, low: str, high: str) -> pa.RecordBatch:
    """Columns in schema order and types, rows outside the offset range dropped."""
    schema = ARROW_SCHEMAS[mode]
    arrays = [columns[f.name] if columns[f.name].type == f.type else columns[f.name].cast(f.type) for f in schema]
    table = pa.RecordBatch.from_arrays(arrays, schema=schema)
    keep = offsets.mask(columns[low].to_numpy(), columns[high].to_numpy())
    return table if keep is None else table.filter(pa.array(keep))


def _record_rows(group: list[Batch], split: Split, values: bool) -> tuple[dict[str, pa.Array], np.ndarray]:
    """Per-record columns from ``readers.columns`` (renamed) and each row's index into ``group``."""
    cols = batch_columns(group, values=values)
    columns = {_RENAMED.get(name, name): cols.column(name) for name in cols.schema.names}
    columns |= _constants(split, cols.num_rows)
    starts = np.fromiter((b.position for b in group), np.int64, len(group))
    return columns, np.searchsorted(starts, columns["batchPosition"].to_numpy())


def compaction_rows(group: list[Batch], split: Split) -> pa.RecordBatch:
    columns, in_group = _record_rows(group, split, values=False)
    first_of_batch = np.searchsorted(in_group, in_group, side="left")
    columns["recordIndex"] = pa.array((np.arange(len(in_group)) - first_of_batch).astype(np.int32))
    return _assemble(columns, "compaction", split.offsets, "offset", "offset")


_RECORDS_BATCH_FIELDS = ("batchLastOffset", "producerEpoch", "baseSequence", "magic", "codec", "deleteHorizonMs",
                         "timestampType")


def records_rows(group: list[Batch], split: Split) -> pa.RecordBatch:
    columns, in_group = _record_rows(group, split, values=True)
    schema, take = ARROW_SCHEMAS["records"], pa.array(in_group)
    for name in _RECORDS_BATCH_FIELDS:
        columns[name] = _batch_column(group, name, schema.field(name).type).take(take)
    millis = columns["timestamp"].to_numpy()
    columns["timestamp"] = pa.array(millis * 1000).cast(schema.field("timestamp").type)
    return _assemble(columns, "records", split.offsets, "offset", "offset")


def batch_rows(group: list[Batch], split: Split) -> pa.RecordBatch:
    schema = ARROW_SCHEMAS["batches"]
    columns = {f.name: _batch_column(group, f.name, f.type) for f in schema if f.name in _PER_BATCH}
    columns |= _constants(split, len(group))
    return _assemble(columns, "batches", split.offsets, "batchBaseOffset", "batchLastOffset")


BUILDERS = {"records": records_rows, "compaction": compaction_rows, "batches": batch_rows}


# -- Spark's interfaces ------------------------------------------------------------------------
class KafkaLogReader(DataSourceReader):
    def __init__(self, settings: Settings):
        self.settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        return plan_splits(self.settings)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, Split):  # with no split planned Spark still runs one empty task
            yield from read_split(partition, self.settings.mode)


class KafkaLogPushdownReader(KafkaLogReader):
    """The reader with ``pushFilters``: a separate class, since Spark refuses readers that define
    it unless filter pushdown is enabled in the session."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        unhandled = []
        for f in filters:
            narrowed = _narrowed(self.settings.selection, f, self.settings.mode)
            if narrowed is None:
                unhandled.append(f)
            else:
                self.settings = replace(self.settings, selection=narrowed)
        return unhandled


def _narrowed(selection: Selection, f: Filter, mode: str) -> Selection | None:
    """``selection`` narrowed by ``f`` when the reader applies ``f`` exactly, else None."""
    column = getattr(f, "attribute", None)  # ``Not`` has none
    values = (f.value,) if isinstance(f, EqualTo) else tuple(f.value) if isinstance(f, In) else None
    if column == ("topic",) and values is not None and all(isinstance(v, str) for v in values):
        return selection.with_topics(frozenset(values))
    if column == ("partition",) and values is not None and all(_is_int(v) for v in values):
        return selection.with_partitions(frozenset(values))
    if column == ("offset",) and mode != "batches":
        bounds = _offset_filter(f)
        return None if bounds is None else selection.with_offsets(*bounds)
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _offset_filter(f: Filter) -> tuple[int | None, int | None] | None:
    """An integer offset comparison as a range [start, end)."""
    value = getattr(f, "value", None)
    if not _is_int(value):
        return None
    if isinstance(f, GreaterThan):
        return value + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return value, None
    if isinstance(f, LessThan):
        return None, value
    if isinstance(f, LessThanOrEqual):
        return None, value + 1
    if isinstance(f, EqualTo):
        return value, value + 1
    return None


class KafkaLogDataSource(DataSource):
    """``spark.read.format("kafka-log")``: see the module docstring for options and modes."""

    @classmethod
    def name(cls) -> str:
        return "kafka-log"

    def schema(self) -> StructType:
        return SCHEMAS[Settings.parse(self.options).mode]

    def reader(self, schema: StructType) -> DataSourceReader:
        settings = Settings.parse(self.options)
        return (KafkaLogPushdownReader if settings.push_filters else KafkaLogReader)(settings)
