"""What the compaction decision needs from a run of batches, as one Arrow record batch.

One row per record: offset, key (null for a null key), tombstone (null value),
timestamp (as ``Batch.records()`` gives it: LogAppendTime batches give the max
timestamp, magic-0 entries -1), and the batch it lives in, repeated per row:
``Batch.base_offset`` (a compressed legacy wrapper: its first inner offset),
file position, producer id, flags. With ``values=True`` each row also carries
the record's value and headers (``VALUE_SCHEMA``), for readers that show records
whole rather than decide on them.

The records of a v2 data batch are located by the compiled scanner and their
keys (and values, header keys and header values) copied by ``scan.gather``
straight into contiguous Arrow data buffers, so no Python code runs per record
(per record with headers: one call locating its headers); only control batches
and legacy v0/v1 entries (both rare) go through ``Batch.records()``."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
from numba import njit

from kcompact.readers import codecs, scan
from kcompact.readers.batch import LOG_APPEND_TIME, Batch
from kcompact.readers.records import Record

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
HEADER = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
VALUE_SCHEMA = SCHEMA.append(pa.field("value", pa.binary())).append(
    pa.field("headers", pa.list_(HEADER), nullable=False)
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


def _grown(array: np.ndarray, size: int, used: int) -> np.ndarray:
    out = np.empty(size, array.dtype)
    out[:used] = array[:used]
    return out


class _Binary:
    """A growable Arrow binary column (validity, offsets, data), filled by ``scan.gather``."""

    def __init__(self) -> None:
        self.n = 0  # values filled
        self.end = 0  # bytes used in data
        self.valid = np.empty(1024, np.bool_)
        self.offsets = np.zeros(1025, np.int64)
        self.data = np.empty(1 << 16, np.uint8)

    def reserve(self, rows: int, nbytes: int) -> None:
        """Room for ``rows`` more values of ``nbytes`` bytes in all (amortised doubling)."""
        need = self.n + rows
        if need > len(self.valid):
            size = max(need, 2 * len(self.valid))
            self.valid = _grown(self.valid, size, self.n)
            self.offsets = _grown(self.offsets, size + 1, self.n + 1)
        need = self.end + nbytes
        if need > len(self.data):
            self.data = _grown(self.data, max(need, 2 * len(self.data)), self.end)

    def gather(self, buf: np.ndarray, positions: np.ndarray, lengths: np.ndarray) -> None:
        """Append the byte ranges (positions[i], lengths[i]) of ``buf``; position -1 is null."""
        n = len(positions)
        self.reserve(n, int(lengths.sum()))
        np.greater_equal(positions, 0, out=self.valid[self.n : self.n + n])
        self.end = scan.gather(buf, positions, lengths, self.offsets, self.data, self.n, self.end)
        self.n += n

    def append(self, value: bytes | None) -> None:
        size = 0 if value is None else len(value)
        self.reserve(1, size)
        self.valid[self.n] = value is not None
        if size:
            self.data[self.end : self.end + size] = np.frombuffer(value, np.uint8)
            self.end += size
        self.n += 1
        self.offsets[self.n] = self.end

    def array(self, type_: pa.DataType) -> pa.Array:
        """The gathered bytes as an Arrow ``binary`` or ``string`` column, null where invalid."""
        n = self.n
        if self.end > _MAX_BINARY_BYTES:
            raise ValueError(f"{self.end} bytes exceed one Arrow binary column; pass fewer batches")
        valid = self.valid[:n]
        null_count = n - int(np.count_nonzero(valid))
        validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
        offsets = pa.py_buffer(self.offsets[: n + 1].astype(np.int32))
        data = pa.py_buffer(self.data[: self.end])
        return pa.Array.from_buffers(type_, n, [validity, offsets, data], null_count)


class _Payloads:
    """Values and headers: gathered only on request, since the cleaner never needs them."""

    def __init__(self) -> None:
        self.value = _Binary()
        self.header_key = _Binary()
        self.header_value = _Binary()
        self.header_counts: list[np.ndarray] = []  # one array of per-record counts per batch

    def add_scanned(self, buf: np.ndarray, cols: np.ndarray) -> None:
        self.value.gather(buf, cols[:, scan.VALUE_POS], cols[:, scan.VALUE_LEN])
        counts = cols[:, scan.HEADERS_COUNT].copy()
        self.header_counts.append(counts)
        with_headers = np.flatnonzero(counts).tolist()
        if not with_headers:
            return
        found = np.concatenate([scan.scan_headers(buf, cols[i, scan.HEADERS_POS], counts[i]) for i in with_headers])
        self.header_key.gather(buf, found[:, 0], found[:, 1])
        self.header_value.gather(buf, found[:, 2], found[:, 3])

    def add_records(self, records: list[Record]) -> None:
        for record in records:
            self.value.append(record.value)
            for key, value in record.headers:
                self.header_key.append(key.encode("utf-8", "surrogateescape"))
                self.header_value.append(value)
        self.header_counts.append(np.array([len(r.headers) for r in records], np.int64))

    def columns(self) -> dict[str, pa.Array]:
        counts = np.concatenate(self.header_counts) if self.header_counts else np.empty(0, np.int64)
        offsets = np.zeros(len(counts) + 1, np.int32)
        np.cumsum(counts, out=offsets[1:])
        items = pa.StructArray.from_arrays(
            [self.header_key.array(pa.string()), self.header_value.array(pa.binary())], fields=list(HEADER)
        )
        headers = pa.ListArray.from_arrays(pa.array(offsets), items, type=pa.list_(HEADER))
        return {"value": self.value.array(pa.binary()), "headers": headers}


class _Rows:
    """Growable per-row arrays, filled a batch at a time with array operations."""

    def __init__(self, values: bool) -> None:
        self.n = 0  # rows filled
        self.offset = np.empty(1024, np.int64)
        self.timestamp = np.empty(1024, np.int64)
        self.tombstone = np.empty(1024, np.bool_)
        self.key = _Binary()
        self.payloads = _Payloads() if values else None
        # Batch-level fields, one entry per batch, repeated per row at the end.
        self.batch_rows: list[int] = []
        self.batch_fields: dict[str, list] = {name: [] for name in _BATCH_FIELDS}

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` more rows (amortised doubling)."""
        need = self.n + rows
        if need > len(self.offset):
            size = max(need, 2 * len(self.offset))
            for name in ("offset", "timestamp", "tombstone"):
                setattr(self, name, _grown(getattr(self, name), size, self.n))

    def add_batch_fields(self, batch: Batch, rows: int) -> None:
        self.batch_rows.append(rows)
        fields = self.batch_fields
        fields["batch_base_offset"].append(batch.base_offset)
        fields["batch_position"].append(batch.position)
        fields["producer_id"].append(batch.producer_id)
        fields["is_transactional"].append(batch.is_transactional)
        fields["is_control"].append(batch.is_control)


def batch_columns(batches: Iterable[Batch], values: bool = False) -> pa.RecordBatch:
    """One row per record of ``batches`` (see ``SCHEMA``, or ``VALUE_SCHEMA`` with ``values``);
    empty batches add no row.

    Malformed records raise the same ``FormatError`` as ``Batch.records()``.
    """
    rows = _Rows(values)
    for batch in batches:
        if batch.magic != 2 or batch.is_control:
            _add_records(rows, batch, batch.records())
        elif batch.records_count:
            _add_scanned(rows, batch)
    return _record_batch(rows)


@njit(cache=True, nogil=True, boundscheck=False)
def _fill(buf, cols, base_offset, base_ts, log_append, append_time, offset, timestamp, tombstone,
          key_valid, key_offsets, key_data, row, data_end):
    """A scanned batch's rows from ``row`` on: offset, timestamp, tombstone, and its keys copied
    after ``data_end`` of the key column (room already reserved). Returns the new data end.
    One call per batch: the per-column numpy calls it replaces cost more than the work."""
    d = data_end
    for i in range(cols.shape[0]):
        r = row + i
        offset[r] = base_offset + cols[i, scan.OFFSET_DELTA]
        timestamp[r] = append_time if log_append else base_ts + cols[i, scan.TIMESTAMP_DELTA]
        tombstone[r] = cols[i, scan.VALUE_POS] < 0
        key_offsets[r] = d
        p = cols[i, scan.KEY_POS]
        key_valid[r] = p >= 0
        if p >= 0:
            for j in range(cols[i, scan.KEY_LEN]):
                key_data[d + j] = buf[p + j]
            d += cols[i, scan.KEY_LEN]
    key_offsets[row + cols.shape[0]] = d
    return d


def _add_scanned(rows: _Rows, batch: Batch) -> None:
    """A v2 data batch: scanner positions -> row arrays and key bytes, in one kernel call."""
    _, buf, cols = batch.scan_records()
    n = cols.shape[0]
    rows.reserve(n)
    key = rows.key
    key.reserve(n, batch.size if batch.codec == codecs.NONE else len(buf))  # keys lie within the records
    log_append = batch.timestamp_type == LOG_APPEND_TIME
    key.end = _fill(buf, cols, batch.base_offset_field, batch.base_timestamp, log_append, batch.max_timestamp,
                    rows.offset, rows.timestamp, rows.tombstone, key.valid, key.offsets, key.data, rows.n, key.end)
    key.n += n
    if rows.payloads is not None:
        rows.payloads.add_scanned(buf, cols)
    rows.n += n
    rows.add_batch_fields(batch, n)


def _add_records(rows: _Rows, batch: Batch, records: list[Record]) -> None:
    """Control batches and legacy entries: decoded records, one at a time (they are rare)."""
    if not records:
        return
    rows.reserve(len(records))
    for record in records:
        i = rows.n
        rows.offset[i] = record.offset
        rows.timestamp[i] = record.timestamp
        rows.tombstone[i] = record.value is None
        rows.key.append(record.key)
        rows.n += 1
    if rows.payloads is not None:
        rows.payloads.add_records(records)
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
        "key": rows.key.array(pa.binary()),
        "tombstone": pa.array(rows.tombstone[:n]),
        "timestamp": pa.array(rows.timestamp[:n]),
    }
    columns = per_record | per_batch
    schema = SCHEMA
    if rows.payloads is not None:
        columns |= rows.payloads.columns()
        schema = VALUE_SCHEMA
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)
