"""The ``table`` mode: a compacted topic as a table, one row per key holding its latest value,
keys whose latest record is a tombstone left out, read_committed. What Kafka's cleaner converges
to, computed without a shuffle: a key's records all live in one partition (producers partition
by key), so one task reads one partition's splits in offset order and keeps the latest row of
each key as it goes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from kcompact.datasource.planning import Split
from kcompact.datasource.rows import read_split
from kcompact.datasource.schemas import ARROW_SCHEMAS

_ROWS_OUT = 1 << 16
_FIRST_MERGE = 1 << 20  # rows gathered before the first reduction to each key's latest


@dataclass(frozen=True)
class PartitionSplits(InputPartition):
    """One task of the table mode: every split of one partition, in offset order."""

    splits: tuple[Split, ...]


def by_partition(splits: Sequence[Split]) -> list[PartitionSplits]:
    grouped: dict[str, list[Split]] = {}
    for split in splits:
        grouped.setdefault(split.path.rsplit("/", 1)[0], []).append(split)
    return [PartitionSplits(tuple(group)) for group in grouped.values()]


def read_table(task: PartitionSplits, headers: bool = True) -> Iterator[pa.RecordBatch]:
    schema = ARROW_SCHEMAS["table"]
    names = [name for name in schema.names if headers or name != "headers"]
    live: pa.Table | None = None
    pending: list[pa.RecordBatch] = []
    waiting = 0
    for split in task.splits:
        for batch in read_split(split, "records", headers):
            batch = batch.select(names)
            batch = batch.filter(pc.is_valid(batch.column("key")))
            pending.append(batch)
            waiting += batch.num_rows
            if waiting >= max(_FIRST_MERGE, live.num_rows if live is not None else 0):
                live, pending, waiting = _latest(live, pending), [], 0
    live = _latest(live, pending)
    if live is None:
        return
    live = live.filter(pc.is_valid(live.column("value")))
    for batch in live.combine_chunks().to_batches(_ROWS_OUT):
        if batch.num_rows:
            yield batch


def _latest(live: pa.Table | None, pending: list[pa.RecordBatch]) -> pa.Table | None:
    """Each key's last row (rows come in offset order), in offset order; tombstones kept (a
    later reduction needs them to hide older values)."""
    parts = ([live] if live is not None else []) + ([pa.Table.from_batches(pending)] if pending else [])
    if not parts:
        return None
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    order = pa.array(np.arange(table.num_rows, dtype=np.int64))
    last = (
        pa.table({"key": table.column("key"), "i": order}).group_by("key", use_threads=False).aggregate([("i", "max")])
    )
    keep = last.column("i_max")
    return table.take(pc.take(keep, pc.sort_indices(keep)))
