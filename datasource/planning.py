"""Planning a ``kafka-log`` read (driver): the log dirs listed, the selected partitions'
segments cut into byte ranges, each range one Spark task (``Split``)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from pyspark.sql.datasource import InputPartition

from kcompact.datasource.options import Settings
from kcompact.logdir.listing import Partition, parse_partition_dir, scan_log_dir, scan_partition
from kcompact.logdir.splits import ByteRange, partition_ranges


@dataclass(frozen=True)
class Split(ByteRange, InputPartition):
    """One task: a ``ByteRange`` of one segment, as Spark's input partition."""

    @classmethod
    def of(cls, byte_range: ByteRange) -> Split:
        return cls(**{f.name: getattr(byte_range, f.name) for f in fields(ByteRange)})


def plan_splits(settings: Settings) -> list[Split]:
    """The splits of the selected partitions. A ``topics`` option none of whose topics the paths
    hold (a typo, another broker's log dir) is an error naming the topics they do hold: a read
    that silently returns no row looks like an empty topic. A topic named beside one that exists
    is not (a broker holds replicas of some topics only), nor a pushed filter (a query with no
    rows, as in SQL)."""
    splits, found = [], set()
    for path, end in settings.dirs:
        part = scan_partition(path, *parse_partition_dir(path.rsplit("/", 1)[-1]))
        found.add(part.topic)
        if settings.selection.selects(part.topic, part.partition):
            offsets = settings.selection.offsets(part.topic, part.partition).narrowed(None, end)
            splits += [Split.of(r) for r in partition_ranges(part, offsets, settings.max_split_bytes)]
    for root in settings.paths:
        for part in _partitions(root):
            found.add(part.topic)
            if settings.selection.selects(part.topic, part.partition):
                offsets = settings.selection.offsets(part.topic, part.partition)
                splits += [Split.of(r) for r in partition_ranges(part, offsets, settings.max_split_bytes)]
    named = settings.named_topics
    if named and not named & found:
        where = ", ".join([*settings.paths, *(path for path, _ in settings.dirs)])
        raise ValueError(f"kafka-log: topics={','.join(sorted(named))}: no such topic in {where}; "
                         f"the topics there: {', '.join(sorted(found)) or 'none (no partition directory)'}")
    return splits


def _partitions(root: str) -> list[Partition]:
    """A log dir's partitions; a path that is itself a partition dir reads as that partition."""
    logdir = scan_log_dir(root)
    if logdir.partitions or logdir.metadata:
        return logdir.partitions
    parsed = parse_partition_dir(root.rstrip("/").rsplit("/", 1)[-1])
    return [scan_partition(logdir.path, *parsed)] if parsed else []
