"""``write_group`` appends what Kafka's cleaner appends under the releases that index once per append
(3.9.0, 4.0.0: ``index_per_batch=False``): checked against a per-batch restatement of
the cleaner's read chunks (``writers.chunks``'s rules, one batch at a time as Cleaner.cleanInto and
FilterResult go) on random buffers of batches: sizes around and above the read buffer, dropped
batches, new source segments, chunks spanning buffers, timestamps that tie."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import ClassVar
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.operations import cleaned
from kcompact.operations.cleaned import ChunkOut, write_group
from kcompact.readers.batch import NO_TIMESTAMP
from kcompact.writers.chunks import BufferSizes
from kcompact.writers.segment import SegmentFiles


class Recorder:
    """A SegmentWriter that records its appends (and writes their bytes to the .log)."""

    made: ClassVar[list[Recorder]] = []

    def __init__(self, log, base_offset, *_, **__):
        self.log, self.base_offset, self.appends = log, base_offset, []
        Recorder.made.append(self)

    def append(self, chunk, largest_offset, max_timestamp, offset_of_max_timestamp):
        self.appends.append((bytes(chunk), largest_offset, max_timestamp, offset_of_max_timestamp))
        self.log.write(chunk)

    def add_aborted_txn(self, txn):
        raise AssertionError("no aborted transactions here")

    def close(self) -> SegmentFiles:
        size = sum(len(a[0]) for a in self.appends)
        return SegmentFiles(self.base_offset, size, 0, NO_TIMESTAMP, b"", b"", b"")


def reference(outs: list[ChunkOut], sizes: BufferSizes) -> list[tuple[bytes, int, int, int]]:
    """The appends, batch by batch: a chunk ends before a batch of a new segment (buffers
    restored) or one that does not fit the read with the batches before it; a chunk's first batch
    larger than the buffer grows it; a chunk ends after a kept batch whose output outgrows the
    buffer. An append: its kept batches' bytes, largest offset, the first largest timestamp and
    that batch's offset; a chunk that kept nothing appends nothing."""
    appends = []
    segment, capacity, read, written = None, sizes.initial, 0, 0
    chunk: list = [[], -1, NO_TIMESTAMP, -1]

    def end():
        nonlocal chunk, read, written
        if chunk[0]:
            appends.append((b"".join(chunk[0]), *chunk[1:]))
        chunk, read, written = [[], -1, NO_TIMESTAMP, -1], 0, 0

    for c in outs:
        for i in range(len(c.in_size)):
            s = int(c.in_size[i])
            if c.segment != segment:
                if read:
                    end()
                segment, capacity, read, written = c.segment, sizes.initial, 0, 0
            elif read and read + s > capacity:
                end()
            while not read and s > capacity:
                limit = s if capacity >= sizes.max_message_bytes else sizes.max_message_bytes
                capacity = min(capacity * 2, max(limit, sizes.max_io_buffer))
            read += s
            at, size = int(c.at[i]), int(c.size[i])
            if at < 0:
                continue
            chunk[0].append(bytes(c.data[at:at + size]))
            chunk[1] = max(chunk[1], int(c.max_offset[i]))
            if c.max_timestamp[i] > chunk[2]:
                chunk[2], chunk[3] = int(c.max_timestamp[i]), int(c.offset_of_max_timestamp[i])
            written += size
            if written > capacity:
                end()
    end()
    return appends


def chunk_out(segment: str, batches: list[tuple], rng: np.random.Generator) -> ChunkOut:
    """Batches (input size, output size or None: dropped, max offset, max timestamp, its offset,
    records) as rendered: the kept ones' random bytes one after another."""
    cols = [np.array([b[k] or 0 for b in batches], np.int64) for k in range(6)]
    in_size, size, max_offset, max_ts, ts_offset, records = cols
    kept = np.array([b[1] is not None for b in batches], bool)
    size = np.where(kept, size, 0)
    at = np.where(kept, np.cumsum(size) - size, -1)
    data = rng.integers(0, 256, int(size.sum()), dtype=np.uint8)
    return ChunkOut(segment, in_size, data, at, size, max_offset, max_ts, ts_offset, records)


BATCH = st.tuples(st.integers(1, 300), st.one_of(st.none(), st.integers(1, 300)), st.integers(0, 50),
                  st.integers(-1, 6), st.integers(0, 50), st.integers(0, 9))
OUTS = st.lists(st.tuples(st.sampled_from(["s0", "s1", "s2"]), st.lists(BATCH, max_size=12)), max_size=10)


def written(outs: list[ChunkOut], sizes: BufferSizes) -> tuple[list, bytes, int, int]:
    Recorder.made.clear()
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(cleaned, "SegmentWriter", Recorder):
        group = write_group(tmp, 0, iter(outs), [], 1_700_000_000_000, 0, sizes, index_per_batch=False)
        log = Path(group.files[0]).read_bytes()
    (recorder,) = Recorder.made
    return recorder.appends, log, group.batches, group.records


@settings(max_examples=400, deadline=None)
@given(OUTS, st.integers(20, 200), st.integers(1, 600), st.integers(1, 600), st.integers(0, 2**32))
def test_appends_are_the_cleaners_read_chunks(spec, initial, max_message_bytes, max_io_buffer, seed):
    rng = np.random.default_rng(seed)
    outs = [chunk_out(segment, batches, rng) for segment, batches in spec]
    sizes = BufferSizes(initial, max_message_bytes, max_io_buffer)
    appends, log, batches, records = written(outs, sizes)
    expected = reference(outs, sizes)
    assert appends == expected
    assert log == b"".join(a[0] for a in expected)
    kept = [b for _, bs in spec for b in bs if b[1] is not None]
    assert (batches, records) == (len(kept), sum(b[5] for b in kept))


def test_kept_batches_out_of_place_fail():
    out = chunk_out("s0", [(10, 10, 1, 1, 1, 1), (10, 10, 2, 2, 2, 1)], np.random.default_rng(0))
    swapped = ChunkOut(out.segment, out.in_size, out.data, out.at[::-1].copy(), out.size, out.max_offset,
                       out.max_timestamp, out.offset_of_max_timestamp, out.records)
    with pytest.raises(ValueError, match="not right after the kept batches before it"):
        written([swapped], BufferSizes(100, 100, 100))
