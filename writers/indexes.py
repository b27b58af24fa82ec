"""The three per-segment index files, encoded (parsed by ``readers.indexes``)."""

from __future__ import annotations

from kcompact.readers.indexes import OFFSET_ENTRY, TIME_ENTRY, TXN_ENTRY, AbortedTxn, OffsetEntry, TimeEntry


def encode_offset_index(entries: list[OffsetEntry]) -> bytes:
    return b"".join(OFFSET_ENTRY.pack(e.relative_offset, e.position) for e in entries)


def encode_time_index(entries: list[TimeEntry]) -> bytes:
    return b"".join(TIME_ENTRY.pack(e.timestamp, e.relative_offset) for e in entries)


def encode_txn_index(entries: list[AbortedTxn]) -> bytes:
    return b"".join(
        TXN_ENTRY.pack(e.version, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in entries
    )
