"""Kafka's producer-state snapshots, rendered as a broker writes them (parsed, with the layout,
by ``readers.snapshot``)."""

from __future__ import annotations

import struct

import crc32c

from kcompact.readers.snapshot import ENTRY, VERSION, ProducerEntry


def render_snapshot(entries: list[ProducerEntry]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(
        ENTRY.pack(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.offset_delta,
                    e.timestamp, e.coordinator_epoch, e.current_txn_first_offset)
        for e in entries
    )
    return struct.pack(">hI", VERSION, crc32c.crc32c(body)) + body
