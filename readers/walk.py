"""A segment's entries a chunk at a time, each chunk's headers parsed by one compiled call.

``readers.segment.iter_batches`` builds a ``Batch`` per entry (Python work for each), which
bounds what the cleaner can do per core. Here a chunk of the file (``readers.segment.DEFAULT_CHUNK``
by default) is read into one numpy buffer and ``walk_entries`` parses the framing and every v2
header field of all its entries at once into an int64 matrix (one row per entry, columns
below); the CRCs of a chunk are one call too (``readers.crc``).
Framing problems end the walk with the same ``FormatError`` messages ``iter_batches`` gives, after
every earlier entry; an entry cut by the chunk's end is carried into the next chunk. Legacy
(magic 0/1) entries are framed here too; their contents are read through ``Batch`` (they are rare).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from numba import njit

from kcompact import errors
from kcompact.errors import FormatError
from kcompact.readers import codecs, compiled_codecs, scan
from kcompact.readers.batch import LEGACY_MIN_SIZE, Batch
from kcompact.readers.crc import crcs
from kcompact.readers.layout import (
    ATTRIBUTES_AT,
    BASE_SEQUENCE_AT,
    BASE_TIMESTAMP_AT,
    CRC_AT,
    LAST_OFFSET_DELTA_AT,
    LEADER_EPOCH_AT,
    LEGACY_ATTRIBUTES_AT,
    LEGACY_CRC_AT,
    LEGACY_TIMESTAMP_AT,
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
from kcompact.readers.segment import DEFAULT_CHUNK, problems

# Columns of the entry matrix. Legacy entries fill POSITION, SIZE, MAGIC, BASE_OFFSET (the
# entry's own offset), ATTRIBUTES, CRC and, for magic 1, BASE_TIMESTAMP = MAX_TIMESTAMP; the rest
# as a v2 header would be for them (LAST_OFFSET_DELTA 0, PRODUCER_ID -1, RECORDS_COUNT 1).
(POSITION, SIZE, MAGIC, BASE_OFFSET, LAST_OFFSET_DELTA, ATTRIBUTES, BASE_TIMESTAMP, MAX_TIMESTAMP, PRODUCER_ID,
 PRODUCER_EPOCH, BASE_SEQUENCE, RECORDS_COUNT, CRC, LEADER_EPOCH) = range(14)
N_COLUMNS = 14

# How a walk ended.
END, INCOMPLETE, SHORT, ZERO_FILLED, BAD_MAGIC, TOO_SHORT = range(6)
_PREFIX = 17  # offset, length, (leader epoch | crc), magic: enough to know an entry's size


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _be(buf, pos, n):
    """The big-endian signed integer of ``n`` bytes at ``pos``."""
    value = np.int64(0)
    for i in range(n):
        value = (value << 8) | np.int64(buf[pos + i])
    if n < 8 and value >= np.int64(1) << (8 * n - 1):
        value -= np.int64(1) << (8 * n)
    return value


@njit(cache=True, nogil=True, boundscheck=False)
def walk_entries(buf, start, end):
    """Every complete entry of ``buf[start:end]``: (matrix, position where the walk stopped, how).
    ``INCOMPLETE``: the entry at that position needs more bytes than ``end`` leaves; ``SHORT``:
    fewer than an entry prefix is left; the others are framing errors at that position."""
    pos = start
    rows = []
    while pos < end:
        if end - pos < _PREFIX:
            return _matrix(buf, rows), pos, SHORT
        length = _be(buf, pos + LENGTH_AT, 4)
        magic = buf[pos + MAGIC_AT]
        zero = True
        for i in range(pos, pos + _PREFIX):
            if buf[i] != 0:
                zero = False
                break
        if zero:
            return _matrix(buf, rows), pos, ZERO_FILLED
        if magic > 2:
            return _matrix(buf, rows), pos, BAD_MAGIC
        minimum = V2_HEADER_SIZE - LOG_OVERHEAD if magic == 2 else (14 if magic == 0 else 22)
        if length < minimum:
            return _matrix(buf, rows), pos, TOO_SHORT
        total = length + LOG_OVERHEAD
        if total > end - pos:
            return _matrix(buf, rows), pos, INCOMPLETE
        rows.append((pos, total))
        pos += total
    return _matrix(buf, rows), pos, END


@njit(cache=True, nogil=True, boundscheck=False)
def _matrix(buf, rows):
    out = np.empty((len(rows), N_COLUMNS), dtype=np.int64)
    for r in range(len(rows)):
        pos, total = rows[r]
        magic = buf[pos + MAGIC_AT]
        out[r, POSITION] = pos
        out[r, SIZE] = total
        out[r, MAGIC] = magic
        out[r, BASE_OFFSET] = _be(buf, pos, 8)
        if magic == 2:
            out[r, LEADER_EPOCH] = _be(buf, pos + LEADER_EPOCH_AT, 4)
            out[r, CRC] = _be(buf, pos + CRC_AT, 4) & 0xFFFFFFFF
            out[r, ATTRIBUTES] = _be(buf, pos + ATTRIBUTES_AT, 2)
            out[r, LAST_OFFSET_DELTA] = _be(buf, pos + LAST_OFFSET_DELTA_AT, 4)
            out[r, BASE_TIMESTAMP] = _be(buf, pos + BASE_TIMESTAMP_AT, 8)
            out[r, MAX_TIMESTAMP] = _be(buf, pos + MAX_TIMESTAMP_AT, 8)
            out[r, PRODUCER_ID] = _be(buf, pos + PRODUCER_ID_AT, 8)
            out[r, PRODUCER_EPOCH] = _be(buf, pos + PRODUCER_EPOCH_AT, 2)
            out[r, BASE_SEQUENCE] = _be(buf, pos + BASE_SEQUENCE_AT, 4)
            out[r, RECORDS_COUNT] = _be(buf, pos + RECORDS_COUNT_AT, 4)
        else:
            out[r, LEADER_EPOCH] = -1
            out[r, CRC] = _be(buf, pos + LEGACY_CRC_AT, 4) & 0xFFFFFFFF
            out[r, ATTRIBUTES] = buf[pos + LEGACY_ATTRIBUTES_AT]
            out[r, LAST_OFFSET_DELTA] = 0
            ts = _be(buf, pos + LEGACY_TIMESTAMP_AT, 8) if magic == 1 else -1
            out[r, BASE_TIMESTAMP] = ts
            out[r, MAX_TIMESTAMP] = ts
            out[r, PRODUCER_ID] = -1
            out[r, PRODUCER_EPOCH] = -1
            out[r, BASE_SEQUENCE] = -1
            out[r, RECORDS_COUNT] = 1
    return out


@dataclass(frozen=True, slots=True)
class Chunk:
    """The complete entries read at once: ``buf[entries[k, POSITION]:... + SIZE]`` is entry k, at
    file position ``file_position + entries[k, POSITION]``."""

    path: str
    buf: np.ndarray  # uint8
    file_position: int
    entries: np.ndarray  # (n, N_COLUMNS) int64

    def batch(self, k: int) -> Batch:
        """Entry ``k`` as a ``Batch`` (for legacy entries and control batches, which are rare)."""
        pos, size = int(self.entries[k, POSITION]), int(self.entries[k, SIZE])
        return Batch(self.path, self.buf, pos, pos + size, self.file_position + pos)

    def payload(self, k: int) -> bytes | np.ndarray:
        """The v2 records section of entry ``k``, decompressed (a view when uncompressed)."""
        pos, size = int(self.entries[k, POSITION]), int(self.entries[k, SIZE])
        raw = self.buf[pos + V2_HEADER_SIZE:pos + size]
        codec = int(self.entries[k, ATTRIBUTES]) & 0x07
        if codec == codecs.NONE:
            return raw
        try:
            return codecs.decompress(codec, raw)
        except errors.CodecError as exc:
            raise FormatError(self.path, self.file_position + pos,
                              f"batch at offset {int(self.entries[k, BASE_OFFSET])}: {exc}") from None


def read_chunks(f: BinaryIO, path: str, start: int = 0, end: int | None = None, chunk_size: int = DEFAULT_CHUNK,
                check: bool = True) -> Iterator[Chunk]:
    """The entries starting in [start, end) of the file (to its end by default), a chunk at a time.
    ``check``: verify every entry's CRC, codec and counts (``readers.segment.problems``), raising
    ``FormatError`` at the first bad one, after every entry before it. A chunk's bytes are a view
    of the file mapped into memory (a local file: no copy) or a buffer it was read into, one of two
    that take turns: they stay valid until the chunk after the next one is read; copy what you
    keep longer."""
    windows = _windows(f, start, chunk_size)
    buf, filled, file_pos, eof = next(windows)  # buf[:filled] holds the file from file_pos
    while True:
        entries, stop, how = walk_entries(buf, 0, filled)
        past = end is not None and bool(len(entries)) and file_pos + int(entries[-1, POSITION]) >= end
        if past:
            entries = entries[file_pos + entries[:, POSITION] < end]
        if len(entries):
            chunk = Chunk(path, buf, file_pos, entries)
            bad = _first_problem(chunk) if check else None
            if bad is not None:
                if bad[0]:
                    yield Chunk(path, buf, file_pos, entries[:bad[0]])
                raise bad[1]
            yield chunk
        if past or (end is not None and file_pos + stop >= end) or (how == END and eof):
            return
        if how not in (END, INCOMPLETE, SHORT) or eof:
            raise _framing_error(path, buf, file_pos, stop, filled, how)
        need = _be_py(buf, stop + LENGTH_AT) + LOG_OVERHEAD if how == INCOMPLETE else _PREFIX
        buf, filled, file_pos, eof = windows.send((stop, need))


def _windows(f: BinaryIO, start: int, size: int):
    """The file from ``start``, a window of ``size`` bytes at a time: (buffer, bytes filled, file
    position of its first byte, whether they reach the end of the file). Sent (used, need): the
    next window starts ``used`` bytes further and holds at least ``need`` bytes (when the file
    has them). A local file is mapped into memory, a window at a time, copy-on-write so that its
    views are writable numpy arrays like a read buffer (nothing writes them); a file that cannot
    be mapped (an object store's) is read."""
    try:
        fd = f.fileno()
        length = os.fstat(fd).st_size
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        fd = None
    if fd is None:
        yield from _read_windows(f, start, size)
        return
    pos, eof = start, False
    while True:
        base = pos - pos % mmap.ALLOCATIONGRANULARITY
        stop = min(length, pos + size)
        if stop <= pos:
            window, eof = np.empty(0, np.uint8), True
        else:
            mapped = mmap.mmap(fd, stop - base, access=mmap.ACCESS_COPY, offset=base)
            window, eof = np.frombuffer(mapped, np.uint8)[pos - base:], stop == length
        used, need = yield window, len(window), pos, eof
        pos += used
        size = max(size, need)


def _read_windows(f: BinaryIO, start: int, size: int):
    """``_windows`` read into two buffers that take turns."""
    f.seek(start)
    buffers = [np.empty(size, np.uint8), np.empty(size, np.uint8)]
    buf, filled, file_pos, eof = buffers[0], 0, start, False
    while True:
        while not eof and filled < len(buf):
            n = f.readinto(memoryview(buf)[filled:])
            eof = not n
            filled += n or 0
        used, need = yield buf, filled, file_pos, eof
        other = buffers[1] if buf is buffers[0] else buffers[0]
        if len(other) < need:
            other = np.empty(need, np.uint8)
        buffers = [buf, other]
        rest = filled - used
        other[:rest] = buf[used:filled]
        buf, filled, file_pos = other, rest, file_pos + used


def _be_py(buf: np.ndarray, pos: int) -> int:
    return int.from_bytes(bytes(buf[pos:pos + 4]), "big", signed=True)


def _first_problem(chunk: Chunk) -> tuple[int, FormatError] | None:
    """The first entry with a ``readers.segment.problems``, and the error naming it. Only the entries
    ``_next_suspect`` names are looked at in Python: the CRCs of all, legacy ones too (their ranges
    lie inside them, their values unused), in one ``readers.crc`` call."""
    e = chunk.entries
    computed = crcs(chunk.buf, e[:, POSITION] + V2_CRC_START, e[:, POSITION] + e[:, SIZE])
    k = _next_suspect(e, computed, 0)
    while k < len(e):
        batch = chunk.batch(k)
        found = problems(batch)
        if found:
            return k, FormatError(chunk.path, batch.position,
                                  f"batch at offset {batch.base_offset_field}: {'; '.join(found)}")
        k = _next_suspect(e, computed, k + 1)
    return None


@njit(cache=True, nogil=True, boundscheck=False)
def _next_suspect(e, computed, k):
    """The first entry from ``k`` on (``len(e)``: none) that ``problems`` may object to: a legacy
    one, or a v2 one whose codec, counts or CRC (``computed``) is wrong."""
    while k < e.shape[0]:
        if e[k, MAGIC] != 2:
            return k
        count, delta = e[k, RECORDS_COUNT], e[k, LAST_OFFSET_DELTA]
        if (e[k, ATTRIBUTES] & 0x07) > codecs.ZSTD or count < 0 or delta < 0 or count > delta + 1:
            return k
        if np.int64(computed[k]) != e[k, CRC]:
            return k
        k += 1
    return k


def _framing_error(path: str, buf: np.ndarray, file_pos: int, stop: int, filled: int, how: int) -> FormatError:
    """``iter_batches``'s message for the framing problem at ``stop``."""
    pos = file_pos + stop
    rest = buf[stop:filled]
    if how in (SHORT, ZERO_FILLED) and not rest.any():
        return FormatError(path, pos, "zero-filled bytes start here (a preallocated or torn tail)")
    if how == SHORT:
        return FormatError(path, pos, f"torn tail: {len(rest)} bytes left, fewer than an entry header")
    if how == ZERO_FILLED:
        return FormatError(path, pos, "torn tail: zero-filled entry header")
    offset = int.from_bytes(bytes(rest[:8]), "big", signed=True)
    length = _be_py(buf, stop + LENGTH_AT)
    magic = int(rest[MAGIC_AT])
    if how == BAD_MAGIC:
        return FormatError(path, pos, f"unknown magic {magic} (entry at offset {offset}, length {length})")
    if how == TOO_SHORT:
        minimum = V2_HEADER_SIZE - LOG_OVERHEAD if magic == 2 else LEGACY_MIN_SIZE[magic]
        return FormatError(path, pos, f"entry length {length} is below the magic-{magic} minimum of {minimum}")
    return FormatError(path, pos, f"torn batch: entry at offset {offset} needs {length + LOG_OVERHEAD} bytes, "
                                  f"the file ends after {len(rest)}")


@dataclass(frozen=True, slots=True)
class Sections:
    """The records of some v2 batches of a chunk, located by one compiled scan: batch i is entry
    ``ks[i]``; its records are rows ``rows[i]:rows[i + 1]`` of ``cols`` (``readers.scan`` columns),
    whose positions index ``arena`` (its decompressed section) when ``packed[i]``, else the chunk's
    buffer; its section ends at ``ends[i]`` there."""

    ks: np.ndarray
    packed: np.ndarray
    arena: np.ndarray
    ends: np.ndarray
    rows: np.ndarray
    cols: np.ndarray

    def buffer(self, i: int, chunk: Chunk) -> np.ndarray:
        return self.arena if self.packed[i] else chunk.buf

    def record_batches(self) -> np.ndarray:
        """Per record, its batch (an index into ``ks``)."""
        return np.repeat(np.arange(len(self.ks)), np.diff(self.rows))


def decode(chunk: Chunk, ks: np.ndarray) -> Sections:
    """The records of the v2 entries ``ks`` of ``chunk``: the compressed ones decompressed one
    after another into an arena (one compiled call: ``readers.compiled_codecs``), then every
    section scanned in one call. Bad records raise ``FormatError`` with the file position
    (uncompressed) or the position in the decompressed section, as ``Batch.records()`` does."""
    e = chunk.entries
    ks = np.asarray(ks, np.int64)
    packed = (e[ks, ATTRIBUTES] & 0x07) != codecs.NONE
    starts = e[ks, POSITION] + V2_HEADER_SIZE
    ends = e[ks, POSITION] + e[ks, SIZE]
    compressed = ks[packed]
    if len(compressed):
        arena, ends[packed] = compiled_codecs.decompress_many(
            chunk.buf, e[compressed, ATTRIBUTES] & 0x07, starts[packed], ends[packed],
            lambda i: chunk.payload(int(compressed[i])))
        starts[packed] = np.concatenate(([0], ends[packed][:-1]))
    else:
        arena = np.empty(1, np.uint8)
    counts = e[ks, RECORDS_COUNT]
    rows = np.zeros(len(ks) + 1, np.int64)
    np.cumsum(counts, out=rows[1:])
    cols = np.empty((int(rows[-1]), scan.N_COLUMNS), np.int64)
    done, err, pos = scan.scan_sections(chunk.buf, arena, packed, starts, ends, counts, cols)
    if err != scan.OK:
        k = int(ks[done])
        position = chunk.file_position + int(e[k, POSITION])
        prefix = f"batch at offset {int(e[k, BASE_OFFSET])}"
        what = scan.MESSAGES[err]
        if not packed[done]:
            raise FormatError(chunk.path, position + V2_HEADER_SIZE + int(pos - starts[done]), f"{prefix}: {what}")
        codec = codecs.name(int(e[k, ATTRIBUTES]) & 0x07)
        raise FormatError(chunk.path, position,
                          f"{prefix}: byte {int(pos - starts[done])} of its decompressed {codec} records: {what}")
    return Sections(ks, packed, arena, ends, rows, cols)
