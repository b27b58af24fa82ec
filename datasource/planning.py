"""Planning a ``kafka-log`` read (driver): the log dirs listed, each selected partition's offset
range found (options, timestamps, the last stable offset), its segments cut into byte ranges,
each range one Spark task (``Split``)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from pyspark.sql.datasource import InputPartition

from kcompact import errors
from kcompact.datasource.options import Settings
from kcompact.datasource.positions import Positions
from kcompact.logdir.listing import Partition, parse_partition_dir, scan_log_dir, scan_partition
from kcompact.logdir.splits import ByteRange, OffsetRange, partition_ranges
from kcompact.readers.indexes import AbortedTxn


@dataclass(frozen=True)
class Split(ByteRange, InputPartition):
    """One task: a ``ByteRange`` of one segment, as Spark's input partition; under read_committed
    with the partition's aborted transactions that meet its offset range."""

    aborted: tuple[AbortedTxn, ...] | None = None  # None: read_uncommitted

    @classmethod
    def of(cls, byte_range: ByteRange, aborted: tuple[AbortedTxn, ...] | None = None) -> Split:
        return cls(**{f.name: getattr(byte_range, f.name) for f in fields(ByteRange)}, aborted=aborted)


def plan_splits(settings: Settings) -> list[Split]:
    """The splits of the selected partitions, in offset order per partition."""
    splits = []
    for part, end in selected_partitions(settings):
        positions = Positions(part)
        splits += partition_splits(positions, offset_range(settings, positions).narrowed(None, end), settings)
    return splits


def selected_partitions(settings: Settings) -> list[tuple[Partition, int | None]]:
    """The selected partitions, each with the ending offset its ``partitionDirs`` entry gives.
    A ``topics`` option none of whose topics the paths hold (a typo, another broker's log dir)
    is an error naming the topics they do hold: a read that silently returns no row looks like
    an empty topic. A topic named beside one that exists is not (a broker holds replicas of some
    topics only), nor a pushed filter (a query with no rows, as in SQL)."""
    found, out = set(), []
    listed = [(scan_partition(path, *parse_partition_dir(path.rsplit("/", 1)[-1])), end) for path, end in settings.dirs]
    listed += [(part, None) for root in settings.paths for part in _partitions(root)]
    for part, end in listed:
        found.add(part.topic)
        if settings.selection.selects(part.topic, part.partition):
            out.append((part, end))
    named = settings.named_topics
    if named and not named & found:
        where = ", ".join([*settings.paths, *(path for path, _ in settings.dirs)])
        raise errors.UsageError(f"kafka-log: topics={','.join(sorted(named))}: no such topic in {where}; "
                         f"the topics there: {', '.join(sorted(found)) or 'none (no partition directory)'}")
    return out


def offset_range(settings: Settings, positions: Positions) -> OffsetRange:
    """The offsets a read of the partition returns: the offset options (-2 earliest, -1 latest),
    then the timestamp ones (the first offset at or after each, as ListOffsets finds it: a
    starting time later than every record starts at the log end, an ending one ends nowhere),
    then under read_committed the last stable offset."""
    topic, number = positions.part.topic, positions.part.partition
    selection = settings.selection
    out = selection.offsets(topic, number, positions.resolve if selection.sentinels() else None)
    start_time = settings.start_times.of(topic, number) if settings.start_times else None
    if start_time is not None:
        found = positions.offset_of_time(start_time)
        out = out.narrowed(positions.log_end if found is None else found, None)
    end_time = settings.end_times.of(topic, number) if settings.end_times else None
    if end_time is not None:
        out = out.narrowed(None, positions.offset_of_time(end_time))
    if settings.committed:
        out = out.narrowed(None, positions.last_stable)
    return out


def partition_splits(positions: Positions, offsets: OffsetRange, settings: Settings) -> list[Split]:
    """The splits of one partition's offsets ``offsets`` (none for an empty range)."""
    if offsets.start is not None and offsets.end is not None and offsets.end <= offsets.start:
        return []
    aborted = positions.aborted(offsets.start, offsets.end) if settings.committed else None
    return [Split.of(r, aborted) for r in partition_ranges(positions.part, offsets, settings.max_split_bytes)]


def _partitions(root: str) -> list[Partition]:
    """A log dir's partitions; a path that is itself a partition dir reads as that partition."""
    logdir = scan_log_dir(root)
    if logdir.partitions or logdir.metadata:
        return logdir.partitions
    parsed = parse_partition_dir(root.rstrip("/").rsplit("/", 1)[-1])
    return [scan_partition(logdir.path, *parsed)] if parsed else []
