"""Rebuild a magic-v2 batch keeping some of its records, without decoding them.

``writers.batch.encode_like`` is the reference: it gives Kafka's cleaner output
(MemoryRecordsBuilder fed the retained records), but builds a ``Record`` per
record and re-encodes every field, ~0.4 M records/s. Most of a record survives a
rebuild untouched: the base offset stays, so offsetDelta, key, value and headers
keep their bytes. Only the timestampDelta varint changes (when the base timestamp
moves: another first record, a delete horizon, LogAppendTime's zero deltas) and
with it the length varint. A compiled kernel splices the kept records with those
two varints rewritten; Python adds one compress call, the header and the CRC.

Output equals ``encode_like(batch, kept records, delete_horizon_ms)`` byte for byte
for uncompressed batches (compressed ones: the same records section before
compression) whenever the input's varints are minimal, as every Kafka client
writes them; a batch that loses nothing and gains no horizon is returned as
stored, as the cleaner copies it.
"""

from __future__ import annotations

import struct

import crc32c
import numpy as np
from numba import njit

from readers import codecs
from readers.batch import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    V2_HEADER_SIZE,
    Batch,
)
from readers.scan import RECORD_POS
from readers.scan import _varint as read_varint

# The header split at the CRC: the CRC covers the tail and the records, so the tail is packed first.
_HEAD = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_KEPT_ATTRIBUTES = ATTR_CODEC_MASK | ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL
_MAX_GROWTH = 18  # a record grows by at most 9 bytes in each rewritten varint (1 -> 10 bytes)


@njit(cache=True, nogil=True, boundscheck=False)
def _write_varint(out, pos, value):
    """Zigzag LEB128 of an int64 at ``pos``; returns the next position."""
    z = (value << 1) ^ (value >> 63)
    while (z & ~np.int64(0x7F)) != 0:
        out[pos] = (z & 0x7F) | 0x80
        pos += 1
        z = (z >> 7) & np.int64(0x01FFFFFFFFFFFFFF)  # logical shift: z is an unsigned bit pattern
    out[pos] = z
    return pos + 1


@njit(cache=True, nogil=True, boundscheck=False)
def _varint_size(value):
    z = (value << 1) ^ (value >> 63)
    size = 1
    while (z & ~np.int64(0x7F)) != 0:
        z = (z >> 7) & np.int64(0x01FFFFFFFFFFFFFF)
        size += 1
    return size


@njit(cache=True, nogil=True, boundscheck=False)
def _bounds(cols, keep, end, n_bytes):
    """Output capacity for the kept records, or -1 when ``cols`` does not lie within
    [0, end) of the buffer in increasing order (so that the splice never reads outside)."""
    count = cols.shape[0]
    if keep.shape[0] != count or end > n_bytes:
        return -1
    capacity = 0
    for i in range(count):
        pos = cols[i, RECORD_POS]
        nxt = cols[i + 1, RECORD_POS] if i + 1 < count else end
        if pos < 0 or nxt <= pos or nxt > end:
            return -1
        if keep[i]:
            capacity += nxt - pos + _MAX_GROWTH
    return capacity


@njit(cache=True, nogil=True, boundscheck=False)
def splice_records(buf, cols, keep, end, old_base, log_append, append_time, has_horizon, horizon):
    """The records section holding the kept records of ``buf`` (scanned into ``cols``;
    the last record ends at ``end``), re-based as MemoryRecordsBuilder re-bases them.

    A record's timestamp is ``old_base`` + its delta, or ``append_time`` with
    ``log_append``. The new base is ``horizon`` when ``has_horizon``, else the
    first kept record's timestamp. Returns (section, size, new base, max kept
    timestamp); size -1 means ``cols`` does not describe ``buf``.
    """
    capacity = _bounds(cols, keep, end, buf.shape[0])
    out = np.empty(max(capacity, 0), dtype=np.uint8)
    if capacity < 0:
        return out, -1, np.int64(0), np.int64(0)
    new_base = horizon
    max_ts = np.int64(NO_TIMESTAMP)
    first = True
    w = 0
    count = cols.shape[0]
    for i in range(count):
        if not keep[i]:
            continue
        pos = cols[i, RECORD_POS]
        nxt = cols[i + 1, RECORD_POS] if i + 1 < count else end
        length, body, err = read_varint(buf, pos, nxt)
        if err != 0 or body + length != nxt or length < 1:
            return out, -1, np.int64(0), np.int64(0)
        delta, rest, err = read_varint(buf, body + 1, nxt)  # after the attributes byte
        if err != 0:
            return out, -1, np.int64(0), np.int64(0)
        ts = append_time if log_append else old_base + delta
        if first:
            first = False
            max_ts = ts
            if not has_horizon:
                new_base = ts
        elif ts > max_ts:
            max_ts = ts
        new_delta = ts - new_base
        w = _write_varint(out, w, 1 + _varint_size(new_delta) + (nxt - rest))
        out[w] = 0  # record attributes: unused, written as 0 like Kafka's DefaultRecord
        w = _write_varint(out, w + 1, new_delta)
        n = nxt - rest
        out[w : w + n] = buf[rest:nxt]  # faster than a byte loop here (1.4x on the bench corpus)
        w += n
    return out, w, new_base, max_ts


def rebuild(batch: Batch, keep: np.ndarray, delete_horizon_ms: int | None = None) -> bytes:
    """``batch`` keeping the records where ``keep`` (one bool per stored record) is set,
    as ``encode_like`` encodes it; ``delete_horizon_ms`` stamps a delete horizon."""
    if batch.magic != 2:
        raise ValueError("only magic-v2 batches are rebuilt here; legacy wrappers: writers.legacy")
    keep = np.asarray(keep, dtype=np.bool_)
    if keep.shape != (batch.records_count,):
        raise ValueError(f"keep mask of shape {keep.shape} for a batch of {batch.records_count} records")
    kept = int(np.count_nonzero(keep))
    current = batch.base_timestamp if batch.has_delete_horizon else None
    if delete_horizon_ms is None:
        delete_horizon_ms = current
    if kept == batch.records_count and delete_horizon_ms == current:
        return bytes(batch.data)
    if kept == 0:
        return empty(batch)
    data, buf, cols = batch.scan_records()
    end = batch.end if batch.codec == codecs.NONE else len(data)
    return spliced(batch, buf, cols, end, keep, kept, delete_horizon_ms)[0]


def spliced(head, buf: np.ndarray, cols: np.ndarray, end: int, keep: np.ndarray, kept: int,
            delete_horizon_ms: int | None) -> tuple[bytes, int]:
    """The batch whose header fields ``head`` has (a ``Batch``, or a ``readers.walk`` header) and
    whose records section, decompressed, lies in ``buf`` up to ``end`` (scanned into ``cols``),
    keeping the ``kept`` records where ``keep`` is set; and the largest kept timestamp."""
    log_append = bool(head.attributes & ATTR_TIMESTAMP_TYPE)
    has_horizon = delete_horizon_ms is not None
    section, size, base_ts, max_ts = splice_records(
        buf, cols, keep, end, head.base_timestamp, log_append, head.max_timestamp,
        has_horizon, delete_horizon_ms if has_horizon else 0,
    )
    if size < 0:
        raise ValueError(f"batch at offset {head.base_offset_field}: records section does not match its scan")
    codec = head.attributes & ATTR_CODEC_MASK
    body = section[:size] if codec == codecs.NONE else codecs.compress(codec, section[:size])
    attributes = head.attributes & _KEPT_ATTRIBUTES | (ATTR_DELETE_HORIZON if has_horizon else 0)
    return _framed(head, attributes, int(base_ts), int(max_ts), kept, body), int(max_ts)


def empty(head) -> bytes:
    """Kafka's empty batch header (DefaultRecordBatch.writeEmptyHeader) for the batch whose header
    fields ``head`` has: no codec, no first timestamp, no delete horizon, the original max
    timestamp and offset span."""
    attributes = head.attributes & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL)
    return _framed(head, attributes, NO_TIMESTAMP, head.max_timestamp, 0, b"")


def _framed(batch, attributes: int, base_ts: int, max_ts: int, count: int, body) -> bytes:
    """Header + ``body`` with the CRC-32C of everything after the CRC field."""
    tail = _TAIL.pack(
        attributes, batch.last_offset_delta, base_ts, max_ts,
        batch.producer_id, batch.producer_epoch, batch.base_sequence, count,
    )
    crc = crc32c.crc32c(body, crc32c.crc32c(tail))
    length = V2_HEADER_SIZE - LOG_OVERHEAD + len(body)
    head = _HEAD.pack(batch.base_offset_field, length, batch.partition_leader_epoch, 2, crc)
    return b"".join((head, tail, body))
