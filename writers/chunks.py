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
follows ``FilterResult.updateRetainedBatchMetadata``: see ``Appended``.
"""

from __future__ import annotations

from dataclasses import dataclass

from readers.batch import NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class BufferSizes:
    """The cleaner's I/O buffer settings for one topic."""

    initial: int  # ioBufferSize: log.cleaner.io.buffer.size / log.cleaner.threads / 2
    max_message_bytes: int  # the topic's max.message.bytes
    max_io_buffer: int  # the broker's message.max.bytes (LogCleaner's maxIoBufferSize)

    @classmethod
    def of(cls, config: dict[str, int]) -> BufferSizes:
        """From resolved settings (topic-level names; broker-only ones by their broker names)."""
        initial = config["log.cleaner.io.buffer.size"] // config["log.cleaner.threads"] // 2
        return cls(max(initial, 1), config["max.message.bytes"], config["message.max.bytes"])

    def grown(self, capacity: int, batch_size: int) -> int:
        """The read buffer after ``growBuffersOrFail`` for a first batch of ``batch_size`` bytes
        that did not fit ``capacity`` (repeated until it fits, as the cleaner's loop does)."""
        while batch_size > capacity:
            limit = batch_size if capacity >= self.max_message_bytes else self.max_message_bytes
            capacity = min(capacity * 2, max(limit, self.max_io_buffer))
        return capacity


@dataclass(slots=True)
class Appended:
    """What one chunk appends: its bytes and FilterResult's metadata of them."""

    parts: list[bytes]
    max_offset: int = -1  # the largest retained offset: LogSegment's largestOffset
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1  # shallowOffsetOfMaxTimestamp

    def add(self, data: bytes, max_offset: int, max_timestamp: int, offset_of_max_timestamp: int) -> None:
        """A retained batch. ``max_offset``: the batch's last offset when it is copied or kept
        empty, its last retained record's when rebuilt; ``offset_of_max_timestamp``: the batch's
        last offset (a rebuilt v2 batch keeps the original's), as MemoryRecordsBuilder.info says."""
        self.parts.append(data)
        self.max_offset = max(self.max_offset, max_offset)
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max_timestamp


class ReadChunks:
    """Splits the batches of a cleaned group into the cleaner's read chunks, in file order.

    For each input batch call ``before(segment, size)``; it returns True when the open chunk
    ends before that batch. After the batch's output (``None``: dropped), ``after(size)``
    returns True when the chunk ends right after it (KAFKA-5316)."""

    def __init__(self, sizes: BufferSizes):
        self.sizes = sizes
        self.capacity = sizes.initial
        self.segment: int | None = None
        self.read = 0  # input bytes in the open chunk
        self.written = 0  # output bytes of the open chunk

    def before(self, segment: int, size: int) -> bool:
        ends = False
        if segment != self.segment:  # a new source segment: a new cleanInto, buffers restored
            ends = self.read > 0
            self.segment, self.capacity, self.read, self.written = segment, self.sizes.initial, 0, 0
        elif self.read and self.read + size > self.capacity:  # not complete in this read
            ends, self.read, self.written = True, 0, 0
        if not self.read and size > self.capacity:
            self.capacity = self.sizes.grown(self.capacity, size)
        self.read += size
        return ends

    def after(self, written: int | None) -> bool:
        if written is None:
            return False
        self.written += written
        if self.written > self.capacity:  # the output buffer had to grow: filterTo returns here
            self.read = self.written = 0
            return True
        return False
