"""Rebuild a magic-v2 batch keeping some of its records, without decoding them.

``encode_like`` (a test oracle, ``tests/oracles.py``) is the reference: it gives
Kafka's cleaner output (MemoryRecordsBuilder fed the retained records), but builds a
``Record`` per record and re-encodes every field, several times slower. Most of a record survives a
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

import numpy as np
from numba import njit

from kcompact.readers import codecs
from kcompact.readers.batch import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    NO_TIMESTAMP,
    Batch,
)
from kcompact.readers.crc import crcs
from kcompact.readers.layout import (
    ATTRIBUTES_AT,
    BASE_SEQUENCE_AT,
    BASE_TIMESTAMP_AT,
    CRC_AT,
    LAST_OFFSET_DELTA_AT,
    LEADER_EPOCH_AT,
    LENGTH_AT,
    LOG_OVERHEAD,
    MAGIC_AT,
    MAX_TIMESTAMP_AT,
    PRODUCER_EPOCH_AT,
    PRODUCER_ID_AT,
    RECORDS_COUNT_AT,
    V2_CRC_START,
    V2_HEADER_SIZE,
)
from kcompact.readers.scan import RECORD_POS
from kcompact.readers.scan import _varint as read_varint
from kcompact.writers.codecs import GZIP_OS_JAVA_16, compress

KEPT_ATTRIBUTES = ATTR_CODEC_MASK | ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL  # a rebuilt batch's
EMPTY_ATTRIBUTES = ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL  # an empty header's (writeEmptyHeader)
_MAX_GROWTH = 18  # a record grows by at most 9 bytes in each rewritten varint (1 -> 10 bytes)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _write_varint(out, pos, value):
    """Zigzag LEB128 of an int64 at ``pos``; returns the next position."""
    z = (value << 1) ^ (value >> 63)
    while (z & ~np.int64(0x7F)) != 0:
        out[pos] = (z & 0x7F) | 0x80
        pos += 1
        z = (z >> 7) & np.int64(0x01FFFFFFFFFFFFFF)  # logical shift: z is an unsigned bit pattern
    out[pos] = z
    return pos + 1


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _varint_size(value):
    z = (value << 1) ^ (value >> 63)
    size = 1
    while (z & ~np.int64(0x7F)) != 0:
        z = (z >> 7) & np.int64(0x01FFFFFFFFFFFFFF)
        size += 1
    return size


@njit(cache=True, nogil=True, boundscheck=False)
def _bounds(cols, r0, r1, keep, end, n_bytes):
    """Output capacity for the kept records of rows [r0, r1) of ``cols``, or -1 when they do not
    lie within [0, end) of the buffer in increasing order (so that the splice never reads outside)."""
    if keep.shape[0] < r1 or end > n_bytes:
        return -1
    capacity = 0
    for i in range(r0, r1):
        pos = cols[i, RECORD_POS]
        nxt = cols[i + 1, RECORD_POS] if i + 1 < r1 else end
        if pos < 0 or nxt <= pos or nxt > end:
            return -1
        if keep[i]:
            capacity += nxt - pos + _MAX_GROWTH
    return capacity


@njit(cache=True, nogil=True, boundscheck=False)
def _splice_into(buf, cols, r0, r1, keep, end, old_base, log_append, append_time, has_horizon, horizon, out, w):
    """The kept records of rows [r0, r1) of ``cols`` (their section of ``buf`` ends at ``end``)
    written re-based from ``out[w]`` on. Returns (write end, new base, max kept timestamp), or a
    write end of -1 when ``cols`` does not describe ``buf``."""
    new_base = horizon
    max_ts = np.int64(NO_TIMESTAMP)
    first = True
    for i in range(r0, r1):
        if not keep[i]:
            continue
        pos = cols[i, RECORD_POS]
        nxt = cols[i + 1, RECORD_POS] if i + 1 < r1 else end
        length, body, err = read_varint(buf, pos, nxt)
        if err != 0 or body + length != nxt or length < 1:
            return -1, np.int64(0), np.int64(0)
        delta, rest, err = read_varint(buf, body + 1, nxt)  # after the attributes byte
        if err != 0:
            return -1, np.int64(0), np.int64(0)
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
        out[w : w + n] = buf[rest:nxt]  # faster than a byte loop here
        w += n
    return w, new_base, max_ts


@njit(cache=True, nogil=True, boundscheck=False)
def splice_records(buf, cols, keep, end, old_base, log_append, append_time, has_horizon, horizon):
    """The records section holding the kept records of ``buf`` (scanned into ``cols``;
    the last record ends at ``end``), re-based as MemoryRecordsBuilder re-bases them.

    A record's timestamp is ``old_base`` + its delta, or ``append_time`` with
    ``log_append``. The new base is ``horizon`` when ``has_horizon``, else the
    first kept record's timestamp. Returns (section, size, new base, max kept
    timestamp); size -1 means ``cols`` does not describe ``buf``.
    """
    count = cols.shape[0]
    capacity = _bounds(cols, 0, count, keep, end, buf.shape[0]) if keep.shape[0] == count else -1
    out = np.empty(max(capacity, 0), dtype=np.uint8)
    if capacity < 0:
        return out, -1, np.int64(0), np.int64(0)
    w, new_base, max_ts = _splice_into(buf, cols, 0, count, keep, end, old_base, log_append, append_time,
                                       has_horizon, horizon, out, 0)
    return out, w, new_base, max_ts


@njit(cache=True, nogil=True, boundscheck=False)
def splice_batches(plain, packed, in_packed, cols, rows, ends, keep, todo, base_ts, log_append, append_time,
                   has_horizon, horizon):
    """``splice_records`` of the batches ``todo`` (indexes into the per-batch arrays: batch j's
    records are rows ``rows[j]:rows[j + 1]`` of ``cols``, in ``packed`` when ``in_packed[j]``, else
    ``plain``, its section ending at ``ends[j]``) into one buffer, one after another. Returns
    (buffer, starts (len(todo) + 1), new bases, max timestamps, the first batch whose records do
    not match their scan or -1)."""
    n = todo.shape[0]
    capacity = 0
    for t in range(n):
        j = todo[t]
        buf = packed if in_packed[j] else plain
        c = _bounds(cols, rows[j], rows[j + 1], keep, ends[j], buf.shape[0])
        if c < 0:
            return np.empty(0, np.uint8), np.zeros(n + 1, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), t
        capacity += c
    out = np.empty(capacity, np.uint8)
    starts = np.zeros(n + 1, np.int64)
    bases = np.empty(n, np.int64)
    maxima = np.empty(n, np.int64)
    w = 0
    for t in range(n):
        j = todo[t]
        buf = packed if in_packed[j] else plain
        w, bases[t], maxima[t] = _splice_into(buf, cols, rows[j], rows[j + 1], keep, ends[j], base_ts[t],
                                              log_append[t], append_time[t], has_horizon[t], horizon[t], out,
                                              starts[t])
        if w < 0:
            return out, starts, bases, maxima, t
        starts[t + 1] = w
    return out, starts, bases, maxima, -1


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _put(out, pos, value, n):
    """``value`` as a big-endian integer of ``n`` bytes at ``out[pos]``."""
    for i in range(n):
        out[pos + n - 1 - i] = (value >> (8 * i)) & 0xFF


@njit(cache=True, nogil=True, boundscheck=False)
def frame_batches(sources, source, start, length, header, attributes, base_ts, max_ts, count):
    """One buffer of batches, in order: entry i is ``length[i]`` bytes copied from
    ``sources[source[i]]`` at ``start[i]`` as they are (``header[i, 0]`` < 0), or a v2 batch
    framed around that body: the header fields of ``header[i]`` (base offset, leader epoch, last
    offset delta, producer id, producer epoch, base sequence) with ``attributes``, ``base_ts``,
    ``max_ts`` and ``count``, and its CRC left 0 (``fill_crcs``). A ``length`` of -1 writes nothing.
    Returns (buffer, each entry's start in it, or -1)."""
    n = length.shape[0]
    size = 0
    for i in range(n):
        if length[i] >= 0:
            size += length[i] + (V2_HEADER_SIZE if header[i, 0] >= 0 else 0)
    out = np.empty(size, np.uint8)
    at = np.full(n, -1, np.int64)
    w = 0
    for i in range(n):
        if length[i] < 0:
            continue
        at[i] = w
        if header[i, 0] >= 0:
            _put(out, w, header[i, 0], 8)
            _put(out, w + LENGTH_AT, V2_HEADER_SIZE - LOG_OVERHEAD + length[i], 4)
            _put(out, w + LEADER_EPOCH_AT, header[i, 1], 4)
            out[w + MAGIC_AT] = 2
            _put(out, w + CRC_AT, 0, 4)
            _put(out, w + ATTRIBUTES_AT, attributes[i], 2)
            _put(out, w + LAST_OFFSET_DELTA_AT, header[i, 2], 4)
            _put(out, w + BASE_TIMESTAMP_AT, base_ts[i], 8)
            _put(out, w + MAX_TIMESTAMP_AT, max_ts[i], 8)
            _put(out, w + PRODUCER_ID_AT, header[i, 3], 8)
            _put(out, w + PRODUCER_EPOCH_AT, header[i, 4], 2)
            _put(out, w + BASE_SEQUENCE_AT, header[i, 5], 4)
            _put(out, w + RECORDS_COUNT_AT, count[i], 4)
            w += V2_HEADER_SIZE
        src = sources[source[i]]
        s = start[i]
        out[w:w + length[i]] = src[s:s + length[i]]
        w += length[i]
    return out, at


def fill_crcs(out: np.ndarray, at: np.ndarray) -> None:
    """The CRC-32C of the v2 batches framed at positions ``at`` of ``out``."""
    at = np.asarray(at, np.int64)
    if not len(at):
        return
    length = out[(at + LENGTH_AT)[:, None] + np.arange(4)].view(">u4")[:, 0].astype(np.int64)  # batchLength
    crc = crcs(out, at + V2_CRC_START, at + LOG_OVERHEAD + length)
    out[(at + CRC_AT)[:, None] + np.arange(4)] = crc.astype(">u4").view(np.uint8).reshape(-1, 4)


def rebuild(batch: Batch, keep: np.ndarray, delete_horizon_ms: int | None = None,
            gzip_os: int = GZIP_OS_JAVA_16) -> bytes:
    """``batch`` keeping the records where ``keep`` (one bool per stored record) is set,
    as ``encode_like`` encodes it; ``delete_horizon_ms`` stamps a delete horizon, ``gzip_os`` is
    the JVM's gzip header OS byte."""
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
    log_append = bool(batch.attributes & ATTR_TIMESTAMP_TYPE)
    has_horizon = delete_horizon_ms is not None
    section, size, base_ts, max_ts = splice_records(
        buf, cols, keep, end, batch.base_timestamp, log_append, batch.max_timestamp,
        has_horizon, delete_horizon_ms if has_horizon else 0,
    )
    if size < 0:
        raise ValueError(f"batch at offset {batch.base_offset_field}: records section does not match its scan")
    codec = batch.attributes & ATTR_CODEC_MASK
    body = section[:size] if codec == codecs.NONE else np.frombuffer(compress(codec, section[:size], gzip_os), np.uint8)
    attributes = batch.attributes & KEPT_ATTRIBUTES | (ATTR_DELETE_HORIZON if has_horizon else 0)
    return _framed(batch, attributes, int(base_ts), int(max_ts), kept, body)


def empty(head) -> bytes:
    """Kafka's empty batch header (DefaultRecordBatch.writeEmptyHeader) for the batch whose header
    fields ``head`` has: no codec, no first timestamp, no delete horizon, the original max
    timestamp and offset span."""
    return _framed(head, head.attributes & EMPTY_ATTRIBUTES, NO_TIMESTAMP, head.max_timestamp, 0,
                   np.empty(0, np.uint8))


def header_fields(head) -> list[int]:
    """The fields ``frame_batches`` copies from an input batch's header, in its order."""
    return [head.base_offset_field, head.partition_leader_epoch, head.last_offset_delta, head.producer_id,
            head.producer_epoch, head.base_sequence]


def _framed(head, attributes: int, base_ts: int, max_ts: int, count: int, body: np.ndarray) -> bytes:
    """``frame_batches`` of one batch, with its CRC."""
    one = np.array([0], np.int64)
    out, at = frame_batches(
        (body,),
        one,
        one,
        np.array([len(body)], np.int64),
        np.array([header_fields(head)], np.int64),
        np.array([attributes], np.int64),
        np.array([base_ts], np.int64),
        np.array([max_ts], np.int64),
        np.array([count], np.int64),
    )
    fill_crcs(out, at)
    return out.tobytes()
