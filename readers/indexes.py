"""The three per-segment index files, parsed from their bytes (encoded by ``writers.indexes``).

Active segments have zero-filled preallocated index files; a trailing run of
all-zero entries is that preallocation, not data (a real offset-index entry
never has position 0, since one is only added after index.interval.bytes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kcompact.errors import FormatError

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
TXN_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    relative_offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimeEntry:
    timestamp: int
    relative_offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = 0


def used_entries(path: str, data: bytes, entry: struct.Struct) -> int:
    """How many entries come before the zero-filled preallocation."""
    if len(data) % entry.size:
        raise FormatError(
            path, len(data) - len(data) % entry.size,
            f"file size {len(data)} is not a multiple of the {entry.size}-byte entry size",
        )
    return -(-len(data.rstrip(b"\0")) // entry.size)  # up to the entry holding the last non-zero byte


def _entries(path: str, data: bytes, entry: struct.Struct) -> tuple[list[tuple], int]:
    """Entries before the zero-filled preallocation, and how many zero entries followed."""
    n = used_entries(path, data, entry)
    return list(entry.iter_unpack(data[: n * entry.size])), len(data) // entry.size - n


def parse_offset_index(path: str, data: bytes) -> list[OffsetEntry]:
    rows, _ = _entries(path, data, OFFSET_ENTRY)
    return [OffsetEntry(*row) for row in rows]


def parse_time_index(path: str, data: bytes) -> list[TimeEntry]:
    rows, _ = _entries(path, data, TIME_ENTRY)
    return [TimeEntry(*row) for row in rows]


def parse_txn_index(path: str, data: bytes) -> list[AbortedTxn]:
    if len(data) % TXN_ENTRY.size:
        raise FormatError(
            path, len(data) - len(data) % TXN_ENTRY.size,
            f"file size {len(data)} is not a multiple of the {TXN_ENTRY.size}-byte entry size",
        )
    out = []
    for i, (version, pid, first, last, lso) in enumerate(TXN_ENTRY.iter_unpack(data)):
        if version != 0:
            raise FormatError(path, i * TXN_ENTRY.size, f"unknown aborted-transaction entry version {version}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out
