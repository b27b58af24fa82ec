"""Spark data source ``kafka-log``: Kafka log dirs read in place, as Arrow record batches.

    spark.dataSource.register(KafkaLogDataSource)
    spark.read.format("kafka-log").load("/data/kafka-logs")           # or s3://bucket/logs
    spark.read.format("kafka-log").option("paths", "/a,/b").load()

Spark's Kafka source's options mean the same here (``subscribe``, ``assign``, ``startingOffsets``/
``endingOffsets`` JSON with -2/-1, ``startingTimestamp``/``endingTimestamp``, ``*OffsetsByTimestamp``,
``kafka.isolation.level``, ``includeHeaders``, and for streams ``maxOffsetsPerTrigger``,
``maxBytesPerTrigger``, ``failOnDataLoss``: ``datasource.spark_options``, docs/data-source.md);
``mode=table`` is a compacted topic as a table (``datasource.table``); ``readStream`` reads a
growing log dir (``datasource.streaming``).

Options (all optional but a path):
  ``path`` / ``paths``   a log dir (or one ``<topic>-<partition>`` dir); ``paths`` a comma list.
  ``mode``               ``records`` (default; like Spark's Kafka source plus batch fields), ``table``,
                         ``compaction`` (what the cleaner decides on; no value is decoded) or
                         ``batches`` (one row per batch, from its header; a control batch's one
                         record and a compressed legacy wrapper's inner messages are decoded too).
  ``topics``             comma list of topics; none of them in the paths is an error naming those there.
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

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from kcompact.datasource.options import OffsetBound, Selection, Settings
from kcompact.datasource.planning import Split, plan_splits
from kcompact.datasource.rows import BUILDERS, read_split
from kcompact.datasource.schemas import ARROW_SCHEMAS, MODES, SCHEMAS
from kcompact.datasource.streaming import KafkaLogStreamReader
from kcompact.datasource.table import PartitionSplits, by_partition, read_table

__all__ = [
    "ARROW_SCHEMAS", "BUILDERS", "MODES", "SCHEMAS", "KafkaLogDataSource", "KafkaLogPushdownReader", "KafkaLogReader",
    "KafkaLogStreamReader", "OffsetBound", "Selection", "Settings", "Split", "plan_splits", "read_split",
]


# -- Spark's interfaces ------------------------------------------------------------------------
# The options are parsed in ``datasource.options``, splits planned in ``datasource.planning`` and
# rows read in ``datasource.rows``, in the columns of ``datasource.schemas``.
class KafkaLogReader(DataSourceReader):
    def __init__(self, settings: Settings):
        self.settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        splits = plan_splits(self.settings)
        return by_partition(splits) if self.settings.mode == "table" else splits

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # with no split planned Spark still runs one empty task
        if isinstance(partition, Split):
            yield from read_split(partition, self.settings.mode, self.settings.include_headers)
        elif isinstance(partition, PartitionSplits):
            yield from read_table(partition, self.settings.include_headers)


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
    if column == ("offset",) and mode in ("records", "compaction"):  # a table's rows are what is left after all offsets
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
        settings = Settings.parse(self.options)
        schema = SCHEMAS[settings.mode]
        if settings.include_headers or "headers" not in schema.fieldNames():
            return schema
        return StructType([f for f in schema.fields if f.name != "headers"])

    def reader(self, schema: StructType) -> DataSourceReader:
        settings = Settings.parse(self.options)
        return (KafkaLogPushdownReader if settings.push_filters else KafkaLogReader)(settings)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaLogStreamReader(Settings.parse(self.options))
