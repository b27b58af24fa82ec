"""Reading a ``kafka-log`` split (executors): its batches through ``storage`` in bounded chunks,
grouped, and turned into Arrow record batches of the mode's columns, rows outside the offset
range dropped."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from kcompact import storage
from kcompact.compaction.rules.model import BatchInfo
from kcompact.compaction.rules.transactions import TransactionSweep
from kcompact.datasource.planning import Split
from kcompact.datasource.schemas import _PER_BATCH, _RENAMED, ARROW_SCHEMAS
from kcompact.logdir.splits import OffsetRange
from kcompact.readers.batch import Batch
from kcompact.readers.columns import batch_columns
from kcompact.readers.segment import DEFAULT_CHUNK, iter_batches

GROUP_BYTES = 4 << 20  # stored bytes of batches turned into one Arrow batch
GROUP_RECORDS = 1 << 16


def read_split(split: Split, mode: str, headers: bool = True) -> Iterator[pa.RecordBatch]:
    """The split's rows in Arrow batches of bounded size, opened and read through ``storage``;
    ``headers=False`` leaves the records mode's ``headers`` column out."""
    chunk = max(1, min(DEFAULT_CHUNK, split.end - split.start))
    with storage.open_read(split.path, split.file_size) as f:
        entries = _in_range(iter_batches(f, split.path, split.start, split.end, chunk, strict=mode != "batches"),
                            split.offsets)
        if split.aborted is not None:
            entries = _committed(entries, split.aborted, split.segment_base)
        for group in _groups(entries):
            table = BUILDERS[mode](group, split)
            if not headers and "headers" in table.schema.names:
                table = table.drop_columns(["headers"])
            if table.num_rows:
                yield table


def _committed(batches: Iterator[Batch], aborted: tuple, segment: int) -> Iterator[Batch]:
    """What a read_committed consumer gets: the batches of aborted transactions dropped (the
    aborted transactions the fetch lists, matched to their producers' batches as Kafka's consumer
    does: ``compaction.rules.transactions.TransactionSweep``), and no control batch. Transactions whose
    marker lies before the first batch read are over: they are not given to the sweep."""
    sweep, first = TransactionSweep(), True
    for batch in batches:
        if first:
            sweep.add(t for t in aborted if t.last_offset >= batch.base_offset)
            first = False
        info = BatchInfo.of(batch, segment)
        if batch.is_control:
            sweep.on_control(info)
        elif not sweep.on_data(info):
            yield batch


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
