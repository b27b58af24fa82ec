"""How Kafka's cleaner feeds a cleaned segment: one append per read chunk, not per batch.

``Cleaner.cleanInto`` reads a source segment into an I/O buffer, filters the complete batches
the buffer holds (``MemoryRecords.filterTo``) and appends what they kept to the cleaned segment
as ONE ``LogSegment.append``; the broker's index rule (an entry once ``index.interval.bytes``
have passed) fires at most once per append, so a cleaned segment's indexes are sparser than a
leader's and depend on where the chunks end. The chunks follow from the input batch sizes and
the buffers, which:
- start at ``log.cleaner.io.buffer.size / log.cleaner.threads / 2`` bytes (read and write
  buffers share the setting), and again at each source segment (``restoreBuffers``);
- grow when the next batch is larger than the read buffer (``growBuffersOrFail``): doubling,
  up to the larger of the topic's ``max.message.bytes`` and the broker's ``message.max.bytes``
  (or up to the batch itself once the buffer has reached the topic's limit);
- end a chunk early when the chunk's output outgrows the write buffer (KAFKA-5316: filterTo
  returns right after the batch that made its output buffer grow).
What each append reports (its largest offset, largest timestamp and that timestamp's offset)
follows ``FilterResult.updateRetainedBatchMetadata``: see ``ReadChunks.appends``.

A group has a great many batches: they are walked by one compiled call per buffer of them
(``nogil``: other threads' kernels run meanwhile), and Python sees only the appends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from kcompact.readers.batch import NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class BufferSizes:
    """The cleaner's I/O buffer settings for one topic."""

    initial: int  # ioBufferSize: log.cleaner.io.buffer.size / log.cleaner.threads / 2
    max_message_bytes: int  # the topic's max.message.bytes
    max_io_buffer: int  # the broker's message.max.bytes (LogCleaner's maxIoBufferSize)

    @classmethod
    def of(cls, io_buffer_size: int, threads: int, max_message_bytes: int, message_max_bytes: int) -> BufferSizes:
        """From the settings: log.cleaner.io.buffer.size, log.cleaner.threads, the topic's
        max.message.bytes and the broker's message.max.bytes."""
        initial = io_buffer_size // threads // 2
        return cls(max(initial, 1), max_message_bytes, message_max_bytes)


@njit(cache=True, nogil=True)
def grown(capacity, batch_size, max_message_bytes, max_io_buffer):
    """The read buffer after ``growBuffersOrFail`` for a first batch of ``batch_size`` bytes
    that did not fit ``capacity`` (repeated until it fits, as the cleaner's loop does)."""
    while batch_size > capacity:
        limit = batch_size if capacity >= max_message_bytes else max_message_bytes
        capacity = min(capacity * 2, max(limit, max_io_buffer))
    return capacity


# ReadChunks.state: the buffers, then the open chunk: its input and output bytes so far, its kept
# batches and FilterResult's metadata of them
CAPACITY, READ, WRITTEN, KEPT, MAX_OFFSET, MAX_TIMESTAMP, OFFSET_OF_MAX_TIMESTAMP = range(7)


@njit(cache=True, nogil=True)
def _close(state, out, m, end):
    """The open chunk ends at byte ``end`` of the output: row ``m`` of ``out`` when it kept a
    batch (one with none appends nothing). Returns the rows so far."""
    if state[KEPT] > 0:
        out[m, 0], out[m, 1] = end, state[MAX_OFFSET]
        out[m, 2], out[m, 3] = state[MAX_TIMESTAMP], state[OFFSET_OF_MAX_TIMESTAMP]
        m += 1
    state[READ] = state[WRITTEN] = state[KEPT] = 0
    state[MAX_OFFSET], state[MAX_TIMESTAMP], state[OFFSET_OF_MAX_TIMESTAMP] = -1, NO_TIMESTAMP, -1
    return m


@njit(cache=True, nogil=True)
def _appends(state, restore, initial, max_message_bytes, max_io_buffer, in_size, at, size, max_offset,
             max_timestamp, offset_of_max_timestamp):
    """``ReadChunks.appends`` over ``state``: (rows, the output's size, the first kept batch not
    where the output so far ends or -1)."""
    n = in_size.shape[0]
    out = np.empty((n + 1, 4), np.int64)
    m = end = 0
    if restore:  # a new cleanInto: buffers restored
        if state[READ] > 0:
            m = _close(state, out, m, end)
        state[CAPACITY], state[READ], state[WRITTEN] = initial, 0, 0
    for i in range(n):
        if state[READ] > 0 and state[READ] + in_size[i] > state[CAPACITY]:  # not complete in this read
            m = _close(state, out, m, end)
        if state[READ] == 0 and in_size[i] > state[CAPACITY]:
            state[CAPACITY] = grown(state[CAPACITY], in_size[i], max_message_bytes, max_io_buffer)
        state[READ] += in_size[i]
        if at[i] < 0:  # dropped: read, not written
            continue
        if at[i] != end:
            return out[:m], end, i
        end += size[i]
        state[KEPT] += 1
        state[MAX_OFFSET] = max(state[MAX_OFFSET], max_offset[i])
        if max_timestamp[i] > state[MAX_TIMESTAMP]:  # the first batch with the largest
            state[MAX_TIMESTAMP], state[OFFSET_OF_MAX_TIMESTAMP] = max_timestamp[i], offset_of_max_timestamp[i]
        state[WRITTEN] += size[i]
        if state[WRITTEN] > state[CAPACITY]:  # the output buffer had to grow: filterTo returns here
            m = _close(state, out, m, end)
    return out[:m], end, -1


class ReadChunks:
    """The cleaner's read chunks of a cleaned group and what each appends, its batches given a
    buffer of them at a time, in file order (a chunk may span buffers)."""

    def __init__(self, sizes: BufferSizes):
        self.sizes = sizes
        self.segment: str | None = None
        self.state = np.array([sizes.initial, 0, 0, 0, -1, NO_TIMESTAMP, -1], np.int64)

    def appends(self, segment: str, in_size: np.ndarray, at: np.ndarray, size: np.ndarray, max_offset: np.ndarray,
                max_timestamp: np.ndarray, offset_of_max_timestamp: np.ndarray) -> tuple[np.ndarray, int]:
        """The appends that end among these batches of source ``segment`` (input sizes
        ``in_size``), whose output is one buffer: batch i's at ``at[i]`` (-1: dropped), ``size[i]``
        bytes, the kept ones one after another in order. Returns (rows of (end, largest offset,
        max timestamp, its offset), the output's size): an append's bytes are the output up to its
        ``end`` from the previous row's (or 0), after whatever the open chunk kept before these
        batches; what follows the last row belongs to the chunk still open.

        FilterResult's metadata of a chunk: the largest of its kept batches' ``max_offset`` (the
        batch's last offset when it is copied or kept empty, its last retained record's when
        rebuilt), the first largest ``max_timestamp`` with that batch's
        ``offset_of_max_timestamp`` (its last offset: a rebuilt v2 batch keeps the original's),
        as MemoryRecordsBuilder.info says."""
        restore = len(in_size) > 0 and segment != self.segment
        if restore:
            self.segment = segment
        sizes = self.sizes
        rows, end, bad = _appends(self.state, restore, sizes.initial, sizes.max_message_bytes, sizes.max_io_buffer,
                                  in_size, at, size, max_offset, max_timestamp, offset_of_max_timestamp)
        if bad >= 0:
            raise ValueError(f"{segment}: batch {bad}'s output at byte {int(at[bad])}, not right after the kept "
                             f"batches before it (byte {end})")
        return rows, end

    def close(self) -> tuple[int, int, int] | None:
        """The group ends: what its last chunk appends (largest offset, max timestamp, its offset)
        after the bytes it kept, or None when it kept nothing."""
        state = self.state
        if not state[KEPT]:
            return None
        return int(state[MAX_OFFSET]), int(state[MAX_TIMESTAMP]), int(state[OFFSET_OF_MAX_TIMESTAMP])
