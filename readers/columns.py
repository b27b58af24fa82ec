"""What the compaction decision needs from a run of batches, as one Arrow record batch.

One row per record: offset, key (null for a null key), tombstone (null value),
timestamp (as ``Batch.records()`` gives it: LogAppendTime batches give the max
timestamp, magic-0 entries -1), and the batch it lives in, repeated per row:
``Batch.base_offset`` (a compressed legacy wrapper: its first inner offset),
file position, producer id, flags.

The records of a v2 data batch are located by the compiled scanner and their
keys copied by ``scan.gather`` straight into one contiguous Arrow data buffer,
so no Python code runs per record; only control batches and legacy v0/v1
entries (both rare) go through ``Batch.records()``."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from readers import scan
from readers.batch import LOG_APPEND_TIME, Batch
from readers.records import Record

SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("tombstone", pa.bool_(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("batch_base_offset", pa.int64(), nullable=False),
        pa.field("batch_position", pa.int64(), nullable=False),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("is_transactional", pa.bool_(), nullable=False),
        pa.field("is_control", pa.bool_(), nullable=False),
    ]
)

# Columns that repeat a batch header field on every row of the batch.
_BATCH_FIELDS = {
    "batch_base_offset": np.int64,
    "batch_position": np.int64,
    "producer_id": np.int64,
    "is_transactional": np.bool_,
    "is_control": np.bool_,
}
_MAX_BINARY_BYTES = (1 << 31) - 1  # Arrow ``binary`` has int32 offsets


class _Rows:
    """Growable per-row arrays, filled a batch at a time with array operations."""

    def __init__(self) -> None:
        self.n = 0  # rows filled
        self.key_end = 0  # bytes used in key_data
        self.offset = np.empty(1024, np.int64)
        self.timestamp = np.empty(1024, np.int64)
        self.key_valid = np.empty(1024, np.bool_)
        self.tombstone = np.empty(1024, np.bool_)
        self.key_offsets = np.empty(1025, np.int64)
        self.key_offsets[0] = 0
        self.key_data = np.empty(1 << 16, np.uint8)
        # Batch-level fields, one entry per batch, repeated per row at the end.
        self.batch_rows: list[int] = []
        self.batch_fields: dict[str, list] = {name: [] for name in _BATCH_FIELDS}

    def reserve(self, rows: int, key_bytes: int) -> None:
        """Room for ``rows`` more rows and ``key_bytes`` more key bytes (amortised doubling)."""
        need = self.n + rows
        if need > len(self.offset):
            size = max(need, 2 * len(self.offset))
            for name in ("offset", "timestamp", "key_valid", "tombstone"):
                setattr(self, name, _grown(getattr(self, name), size, self.n))
            self.key_offsets = _grown(self.key_offsets, size + 1, self.n + 1)
        need = self.key_end + key_bytes
        if need > len(self.key_data):
            self.key_data = _grown(self.key_data, max(need, 2 * len(self.key_data)), self.key_end)

    def add_batch_fields(self, batch: Batch, rows: int) -> None:
        self.batch_rows.append(rows)
        fields = self.batch_fields
        fields["batch_base_offset"].append(batch.base_offset)
        fields["batch_position"].append(batch.position)
        fields["producer_id"].append(batch.producer_id)
        fields["is_transactional"].append(batch.is_transactional)
        fields["is_control"].append(batch.is_control)


def _grown(array: np.ndarray, size: int, used: int) -> np.ndarray:
    out = np.empty(size, array.dtype)
    out[:used] = array[:used]
    return out


def batch_columns(batches: Iterable[Batch]) -> pa.RecordBatch:
    """One row per record of ``batches`` (see ``SCHEMA``); empty batches add no row.

    Malformed records raise the same ``FormatError`` as ``Batch.records()``.
    """
    rows = _Rows()
    for batch in batches:
        if batch.magic != 2 or batch.is_control:
            _add_records(rows, batch, batch.records())
        elif batch.records_count:
            _add_scanned(rows, batch)
    return _record_batch(rows)


def _add_scanned(rows: _Rows, batch: Batch) -> None:
    """A v2 data batch: scanner positions -> row arrays, keys gathered in one kernel call."""
    _, buf, cols = batch.scan_records()
    n = cols.shape[0]
    rows.reserve(n, int(cols[:, scan.KEY_LEN].sum()))
    lo, hi = rows.n, rows.n + n
    np.add(cols[:, scan.OFFSET_DELTA], batch.base_offset_field, out=rows.offset[lo:hi])
    if batch.timestamp_type == LOG_APPEND_TIME:
        rows.timestamp[lo:hi] = batch.max_timestamp
    else:
        np.add(cols[:, scan.TIMESTAMP_DELTA], batch.base_timestamp, out=rows.timestamp[lo:hi])
    np.greater_equal(cols[:, scan.KEY_POS], 0, out=rows.key_valid[lo:hi])
    np.less(cols[:, scan.VALUE_POS], 0, out=rows.tombstone[lo:hi])
    rows.key_end = scan.gather(
        buf, cols[:, scan.KEY_POS], cols[:, scan.KEY_LEN], rows.key_offsets, rows.key_data, lo, rows.key_end
    )
    rows.n = hi
    rows.add_batch_fields(batch, n)


def _add_records(rows: _Rows, batch: Batch, records: list[Record]) -> None:
    """Control batches and legacy entries: decoded records, one at a time (they are rare)."""
    if not records:
        return
    rows.reserve(len(records), sum(len(r.key) for r in records if r.key is not None))
    for record in records:
        i = rows.n
        rows.offset[i] = record.offset
        rows.timestamp[i] = record.timestamp
        rows.key_valid[i] = record.key is not None
        rows.tombstone[i] = record.value is None
        if record.key is not None:
            rows.key_data[rows.key_end : rows.key_end + len(record.key)] = np.frombuffer(record.key, np.uint8)
            rows.key_end += len(record.key)
        rows.key_offsets[i + 1] = rows.key_end
        rows.n += 1
    rows.add_batch_fields(batch, len(records))


def _record_batch(rows: _Rows) -> pa.RecordBatch:
    n = rows.n
    counts = np.array(rows.batch_rows, np.int64)
    per_batch = {
        name: pa.array(np.repeat(np.array(values, _BATCH_FIELDS[name]), counts))
        for name, values in rows.batch_fields.items()
    }
    per_record = {
        "offset": pa.array(rows.offset[:n]),
        "key": _keys(rows),
        "tombstone": pa.array(rows.tombstone[:n]),
        "timestamp": pa.array(rows.timestamp[:n]),
    }
    columns = per_record | per_batch
    return pa.RecordBatch.from_arrays([columns[name] for name in SCHEMA.names], schema=SCHEMA)


def _keys(rows: _Rows) -> pa.BinaryArray:
    """The gathered key bytes as an Arrow binary column, null where the key is null."""
    n = rows.n
    if rows.key_end > _MAX_BINARY_BYTES:
        raise ValueError(f"{rows.key_end} bytes of keys exceed one Arrow binary column; pass fewer batches")
    valid = rows.key_valid[:n]
    null_count = n - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    offsets = pa.py_buffer(rows.key_offsets[: n + 1].astype(np.int32))
    data = pa.py_buffer(rows.key_data[: rows.key_end])
    return pa.BinaryArray.from_buffers(pa.binary(), n, [validity, offsets, data], null_count)
