"""The three per-segment index files, encoded (parsed by ``readers.indexes``)."""

from __future__ import annotations

import numpy as np

from kcompact.readers.indexes import TXN_ENTRY, AbortedTxn, OffsetEntry, TimeEntry

# the on-disk entries, big-endian: (relative offset, position) and (timestamp, relative offset)
OFFSET_DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
TIME_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])


def encode_entries(rows: np.ndarray, dtype: np.dtype) -> bytes:
    """(n, 2) integer rows as the entries of an index of ``dtype`` (OFFSET_DTYPE, TIME_DTYPE)."""
    out = np.empty(len(rows), dtype)
    out[dtype.names[0]], out[dtype.names[1]] = rows[:, 0], rows[:, 1]
    return out.tobytes()


def encode_offset_index(entries: list[OffsetEntry]) -> bytes:
    rows = [(e.relative_offset, e.position) for e in entries]
    return encode_entries(np.array(rows, np.int64).reshape(-1, 2), OFFSET_DTYPE)


def encode_time_index(entries: list[TimeEntry]) -> bytes:
    rows = [(e.timestamp, e.relative_offset) for e in entries]
    return encode_entries(np.array(rows, np.int64).reshape(-1, 2), TIME_DTYPE)


def encode_txn_index(entries: list[AbortedTxn]) -> bytes:
    return b"".join(
        TXN_ENTRY.pack(e.version, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in entries
    )
