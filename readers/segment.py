"""Iterate the entries of a ``.log`` file from any seekable binary file object.

Memory stays bounded by the chunk size (or one batch, when a batch is larger):
a 1 GiB segment is never loaded whole. Framing problems (a torn or zero-filled
tail, a length past the end of the file, an unknown magic) end the iteration
with a ``FormatError`` naming the file and position, after every earlier valid
batch has been yielded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, TypeVar

import crc32c

from kcompact.errors import FormatError
from kcompact.readers import codecs
from kcompact.readers.batch import (
    ATTR_CODEC_MASK,
    ENTRY_PREFIX,
    LEGACY_MIN_SIZE,
    LOG_OVERHEAD,
    V2_CRC_START,
    V2_HEADER_SIZE,
    Batch,
)

T = TypeVar("T")

DEFAULT_CHUNK = 8 << 20
_PREFIX = ENTRY_PREFIX.size  # 17 bytes: enough to know the magic and the length
_MAX_CODEC = {0: codecs.LZ4, 1: codecs.LZ4, 2: codecs.ZSTD}


def problems(batch: Batch) -> list[str]:
    """What is wrong inside an entry whose framing is sound (CRC, codec, counts)."""
    found = []
    computed = batch.compute_crc()
    if computed != batch.crc:
        found.append(f"CRC mismatch: stored {batch.crc:#010x}, computed {computed:#010x}")
    if batch.codec > _MAX_CODEC[batch.magic]:
        found.append(f"unknown compression codec {batch.codec} for magic {batch.magic}")
    if batch.magic == 2:
        if batch.records_count < 0:
            found.append(f"negative record count {batch.records_count}")
        if batch.last_offset_delta < 0:
            found.append(f"negative lastOffsetDelta {batch.last_offset_delta}")
        elif batch.records_count > batch.last_offset_delta + 1:
            found.append(f"{batch.records_count} records cannot fit in {batch.last_offset_delta + 1} offsets")
    return found


def iter_batches(
    f: BinaryIO,
    path: str,
    start: int = 0,
    end: int | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    strict: bool = True,
) -> Iterator[Batch]:
    """Yield the entries that start in [start, end) of the file.

    With ``strict`` an entry with a bad CRC or unknown codec raises; without it,
    such entries are yielded too (framing is intact) so that callers such as
    ``verify`` can list every problem with ``problems()``.
    """
    f.seek(start)
    # The bytes read and not yet consumed are buf[off:] followed by ``more``. ``more`` is only
    # set while the entry at ``off`` straddles two reads: then that entry alone is copied,
    # instead of joining whole chunks (a copy into fresh memory costs more than the read).
    buf, off, buf_pos, eof, more = b"", 0, start, False, b""

    def refill(need: int) -> None:
        nonlocal buf, off, buf_pos, eof, more
        rest = len(buf) - off + len(more)
        want = max(chunk_size, need - rest)
        data = f.read(want)
        if len(data) < want:
            eof = True
        if more:  # an entry longer than what two reads held: join (rare)
            buf_pos += off
            buf, off, more = buf[off:] + more + data, 0, b""
        elif rest:
            more = data
        else:
            buf_pos += off
            buf, off = data, 0

    while True:
        pos = buf_pos + off
        if end is not None and pos >= end:
            return
        in_buf = len(buf) - off
        avail = in_buf + len(more)
        if avail < _PREFIX and not eof:
            refill(_PREFIX)
            continue
        if avail == 0:
            return
        if avail < _PREFIX:
            raise _tail_error(path, pos, buf[off:] + more, f"{avail} bytes left, fewer than an entry header")
        head, at = (buf, off) if in_buf >= _PREFIX else (buf[off:] + more[:_PREFIX], 0)
        offset, length, _, magic = ENTRY_PREFIX.unpack_from(head, at)
        if length == 0 and offset == 0 and magic == 0 and not any(head[at : at + _PREFIX]):
            raise _tail_error(path, pos, buf[off:] + more, "zero-filled entry header")
        if magic not in (0, 1, 2):
            raise FormatError(path, pos, f"unknown magic {magic} (entry at offset {offset}, length {length})")
        minimum = V2_HEADER_SIZE - LOG_OVERHEAD if magic == 2 else LEGACY_MIN_SIZE[magic]
        if length < minimum:
            raise FormatError(path, pos, f"entry length {length} is below the magic-{magic} minimum of {minimum}")
        total = length + LOG_OVERHEAD
        if avail < total:
            if eof:
                raise FormatError(
                    path, pos,
                    f"torn batch: entry at offset {offset} needs {total} bytes, the file ends after {avail}",
                )
            refill(total)
            continue
        if in_buf >= total:
            batch = Batch(path, buf, off, off + total, pos)
            off += total
        else:  # the entry straddles two reads: copy it alone, then go on in the newer read
            used = total - in_buf
            batch = Batch(path, buf[off:] + more[:used], 0, total, pos)
            buf, off, buf_pos, more = more, used, pos + in_buf, b""
        if strict and not _sound(batch):
            raise FormatError(path, pos, f"batch at offset {offset}: {'; '.join(problems(batch))}")
        yield batch


def torn_tail(f: BinaryIO, path: str, start: int = 0, chunk_size: int = DEFAULT_CHUNK) -> FormatError | None:
    """Where a segment's torn tail starts: its first invalid entry, when no valid batch follows it
    (what a crash mid-append leaves at the end of a log, and what a broker's recovery truncates).
    None when the segment is sound, or when a valid batch follows the invalid one: that is
    corruption, not a torn write, and nothing may be cut. A framing fault (a torn batch or header,
    zeros, an unknown magic) hides whatever follows it, so it counts as a tail, as the broker
    counts it."""
    first_bad = None
    try:
        for batch in iter_batches(f, path, start=start, chunk_size=chunk_size, strict=False):
            if _sound(batch):
                if first_bad is not None:
                    return None
            elif first_bad is None:
                first_bad = FormatError(path, batch.position,
                                        f"batch at offset {batch.base_offset_field}: {'; '.join(problems(batch))}")
    except FormatError as exc:
        return first_bad or exc
    return first_bad


def to_torn_tail(items: Iterable[T], f: BinaryIO, path: str,
                 on_torn: Callable[[FormatError], None] = lambda tail: None) -> Iterator[T]:
    """``items`` read (strictly) from ``f``, the segment a broker appends to, the active one: its
    batches (``iter_batches``) or chunks (``readers.walk.read_chunks``). A torn tail ends them,
    passed to ``on_torn``, instead of raising, since a crashed broker leaves one there and
    truncates it when it loads the log. Any other fault raises."""
    try:
        yield from items
    except FormatError as exc:
        tail = torn_tail(f, path, start=exc.position or 0)
        if tail is None or tail.position != exc.position:
            raise
        on_torn(tail)


def _sound(batch: Batch) -> bool:
    """``problems(batch)`` is empty: for v2 batches (nearly all) checked without building its
    messages, which costs more than the CRC of a typical batch."""
    if batch.magic != 2:
        return not problems(batch)
    return (crc32c.crc32c(memoryview(batch.buf)[batch.start + V2_CRC_START : batch.end]) == batch.crc
            and batch.attributes & ATTR_CODEC_MASK <= codecs.ZSTD and batch.records_count >= 0
            and batch.last_offset_delta >= 0 and batch.records_count <= batch.last_offset_delta + 1)


def _tail_error(path: str, pos: int, rest: bytes, what: str) -> FormatError:
    if not any(rest):
        return FormatError(path, pos, "zero-filled bytes start here (a preallocated or torn tail)")
    return FormatError(path, pos, f"torn tail: {what}")
