"""``spark.readStream.format("kafka-log")``: a log dir read as it grows. The source's offset is
Spark's Kafka source's: {"topic": {"partition": next offset to read}}, JSON in the checkpoint.

Each micro-batch reads [start, end) of every partition, planned like a batch read. The end is
the log end (read_committed: the last stable offset), held back by ``maxOffsetsPerTrigger`` and
``maxBytesPerTrigger`` spread over the partitions in proportion to what each has to read (as
Spark's Kafka source spreads its limit), and under ``Trigger.AvailableNow`` never past what was
there when the query started. A partition that appears later is read from its start. Offsets
that vanished before they were read (retention or a deletion moved the log start past them) fail
the query naming them, or with ``failOnDataLoss=false`` are skipped. A cleaning run in between
leaves offsets where they were: the batch reads what the cleaner kept."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kcompact import errors
from kcompact.datasource.options import Settings
from kcompact.datasource.planning import Split, offset_range, partition_splits, selected_partitions
from kcompact.datasource.positions import Positions
from kcompact.datasource.rows import read_split
from kcompact.logdir.splits import OffsetRange

Offsets = dict[str, dict[str, int]]  # Spark's Kafka source's form: {"topic": {"partition": offset}}


def _put(offsets: Offsets, topic: str, partition: int, value: int) -> None:
    offsets.setdefault(topic, {})[str(partition)] = value


def _get(offsets: Offsets, topic: str, partition: int) -> int | None:
    return offsets.get(topic, {}).get(str(partition))


class KafkaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, settings: Settings):
        if settings.mode == "table":
            raise errors.UsageError("kafka-log: mode=table reads a table in a batch query, not a stream")
        self.settings = settings
        self.target: Offsets | None = None  # Trigger.AvailableNow: what there was at the start

    def _positions(self) -> list[Positions]:
        seen, out = set(), []
        for part, _ in selected_partitions(self.settings):
            if (part.topic, part.partition) not in seen:  # the same partition in two log dirs: the first
                seen.add((part.topic, part.partition))
                out.append(Positions(part))
        return out

    def _end(self, positions: Positions) -> int:
        return positions.last_stable if self.settings.committed else positions.log_end

    def initialOffset(self) -> Offsets:
        """Where a new query starts: the starting options (timestamps too), else each partition's
        start. Not Spark's ``latest`` default: a Python source cannot keep its initial offsets in
        the checkpoint, so a query stopped before its first batch would start again later on."""
        out: Offsets = {}
        for pos in self._positions():
            start = offset_range(self.settings, pos).start
            _put(out, pos.part.topic, pos.part.partition, pos.log_start if start is None else start)
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.settings.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.settings.max_offsets_per_trigger)
        if self.settings.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.settings.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {}
        for pos in self._positions():
            _put(self.target, pos.part.topic, pos.part.partition, self._end(pos))

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        spans = []  # (positions, begin, end)
        for pos in self._positions():
            topic, number = pos.part.topic, pos.part.partition
            begin = _get(start, topic, number)
            begin = pos.log_start if begin is None else begin
            end = self._end(pos)
            if self.target is not None:
                cap = _get(self.target, topic, number)
                end = begin if cap is None else min(end, cap)  # a partition that appeared later waits
            spans.append((pos, begin, max(begin, end)))
        if not isinstance(limit, ReadAllAvailable):
            spans = self._limited(spans, limit)
        out: Offsets = {}
        for pos, _, end in spans:
            _put(out, pos.part.topic, pos.part.partition, end)
        for topic, partitions in start.items():  # a partition gone from the listing keeps its offset
            for number, value in partitions.items():
                out.setdefault(topic, {}).setdefault(number, value)
        return out

    def _limited(self, spans: list, limit: ReadLimit) -> list:
        rows = [self.settings.max_offsets_per_trigger, limit.max_rows if isinstance(limit, ReadMaxRows) else None]
        size = [self.settings.max_bytes_per_trigger, limit.max_bytes if isinstance(limit, ReadMaxBytes) else None]
        max_rows = min((n for n in rows if n is not None), default=None)
        max_bytes = min((n for n in size if n is not None), default=None)
        if max_rows is not None:
            spans = _spread(spans, max_rows, lambda pos: 1.0)
        if max_bytes is not None:
            spans = _spread(spans, max_bytes, _bytes_per_offset)
        return spans

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        splits, lost = [], []
        for pos in self._positions():
            topic, number = pos.part.topic, pos.part.partition
            stop = _get(end, topic, number)
            if stop is None:
                continue
            begin = _get(start, topic, number)
            begin = pos.log_start if begin is None else begin
            if begin < pos.log_start:
                lost.append(f"{topic}-{number} offsets {begin} to {min(stop, pos.log_start) - 1}")
                begin = pos.log_start
            splits += partition_splits(pos, OffsetRange(begin, stop), self.settings)
        if lost and self.settings.fail_on_data_loss:
            raise errors.LogChanged(f"kafka-log: records gone before they were read (retention or deletion): "
                             f"{'; '.join(lost)}. Set failOnDataLoss=false to skip them")
        return splits

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, Split):
            yield from read_split(partition, self.settings.mode, self.settings.include_headers)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the log is the broker's, and the checkpoint is Spark's."""


def _bytes_per_offset(pos: Positions) -> float:
    """A partition's stored bytes per offset, from its segments' sizes (what a byte limit counts)."""
    span = max(1, pos.log_end - pos.log_start)
    return max(1.0, sum(seg.size for seg in pos.part.segments) / span)


def _spread(spans: list, budget: int, cost) -> list:
    """The ends moved back so the spans cost at most ``budget`` in all, each partition given a
    share in proportion to its cost (at least one offset when it has any, so a query moves)."""
    costs = [(end - begin) * cost(pos) for pos, begin, end in spans]
    total = sum(costs)
    if total <= budget:
        return spans
    out = []
    for (pos, begin, end), spent in zip(spans, costs):
        if spent == 0:
            out.append((pos, begin, end))
            continue
        share = budget * spent / total / cost(pos)
        out.append((pos, begin, min(end, begin + max(1, int(share)))))
    return out
