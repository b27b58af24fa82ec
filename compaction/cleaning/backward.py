"""One partition cleaned in a single pass from its last record back, its offset map made on the way.

A partition read whole by one task (``compaction.pipeline.whole``) is read from its last batch back: every
record that can supersede a record comes after it, so the map made on the way (``KeyTable.backward``)
gives each record its fate as it is read, and no batch is decoded twice. The chunk-level steps
(locating records, fates, what each batch becomes) are ``compaction.cleaning.rewrite``'s; here are the
order of the pass, its threads (key shards, ranges decoded ahead and rendered behind, a group
written while the one before it is read), and the bound on the output it holds in memory.
"""

from __future__ import annotations

import collections
import io
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import numpy as np
from numba import njit

from kcompact import storage
from kcompact.compaction.cleaning.offset_map import EMPTY as NOT_MAPPED
from kcompact.compaction.cleaning.offset_map import KeyTable, record_hashes
from kcompact.compaction.cleaning.results import ABORTED_BY_OPERATOR, REASON_OF_CODE, GroupResult, task_failure
from kcompact.compaction.cleaning.rewrite import (
    Decoded,
    GroupJob,
    GroupPlans,
    Rewriter,
    failed,
    feeding,
    succeeded,
    unwritten,
    write_outputs,
)
from kcompact.errors import FormatError
from kcompact.errors.failure import Failure
from kcompact.logdir.listing import segment_name
from kcompact.operations.cleaned import ChunkOut
from kcompact.readers import walk

RANGE_BYTES = 16 << 20  # a partition read from its end back is read in ranges of about this


def _ranges(segment: np.ndarray, size: np.ndarray) -> list[tuple[int, int]]:
    """Batch plans cut into ranges [lo, hi) of one segment each and about ``RANGE_BYTES``."""
    starts = _range_starts(segment, size, RANGE_BYTES)
    return list(zip(starts.tolist(), starts[1:].tolist() + [len(segment)])) if len(segment) else []


@njit(cache=True, nogil=True)
def _range_starts(segment, size, limit):
    """Where each range starts: a new segment, or a batch that would take the range past ``limit``."""
    starts = np.zeros(len(segment), np.int64)
    n, total = 1, 0
    for i in range(len(segment)):
        if i > starts[n - 1] and (segment[i] != segment[starts[n - 1]] or total + size[i] > limit):
            starts[n] = i
            n, total = n + 1, 0
        total += size[i]
    return starts[:n]


OUTPUT_MEMORY = 128 << 20  # the most of a group's output the backward pass holds in memory


class _Outputs:
    """A group's chunk outputs as the backward pass makes them, last first; given back in file
    order. Past ``OUTPUT_MEMORY`` bytes they go to a temporary file, so a task holds at most that
    much of a group's output, however large the group."""

    def __init__(self):
        self.made: list[ChunkOut] = []
        self.held = 0
        self.spill = None

    def add(self, out: ChunkOut) -> None:
        self.made.append(out)
        self.held += len(out.data)
        while self.held > OUTPUT_MEMORY:
            oldest = next(i for i, o in enumerate(self.made) if isinstance(o.data, np.ndarray) and len(o.data))
            self._spill(oldest)

    def _spill(self, i: int) -> None:
        if self.spill is None:
            self.spill = tempfile.TemporaryFile()
        out = self.made[i]
        at = self.spill.seek(0, io.SEEK_END)
        try:
            self.spill.write(memoryview(out.data))
        except OSError as exc:  # the file has no name: say where it is (a full disk names it)
            raise OSError(
                exc.errno, exc.strerror, f"{tempfile.gettempdir()}/(a spill file of the group's output)"
            ) from exc
        self.held -= len(out.data)
        self.made[i] = replace(out, data=(at, len(out.data)))

    def in_order(self) -> Iterator[ChunkOut]:
        for out in reversed(self.made):
            if isinstance(out.data, tuple):
                at, size = out.data
                self.spill.seek(at)
                out = replace(out, data=np.frombuffer(self.spill.read(size), np.uint8))
            yield out

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()


AHEAD = 2  # ranges decoded ahead of the map, and chunks rendered behind it, per partition


class _Inline:
    """An executor that runs each task as it is submitted (one thread: nothing to overlap)."""

    @staticmethod
    def submit(fn, *args) -> Future:
        done = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever takes the result, as a pool would
            done.set_exception(exc)
        return done

    def shutdown(self, cancel_futures: bool = False) -> None:
        pass


class _Pools:
    """The threads one partition is cleaned with: ``work`` reads, decodes and renders chunks,
    ``maps`` runs the key shards past the first (the calling thread runs that one), ``writes``
    writes a group's files. The compiled kernels, the codecs and file I/O release the GIL, so
    ``threads`` cores share the work."""

    def __init__(self, threads: int):
        self.work = ThreadPoolExecutor(threads, "kcompact-work") if threads > 1 else _Inline()
        self.maps = ThreadPoolExecutor(threads - 1, "kcompact-map") if threads > 1 else _Inline()
        self.writes = ThreadPoolExecutor(1, "kcompact-write") if threads > 1 else _Inline()

    def __enter__(self) -> _Pools:
        return self

    def __exit__(self, *exc) -> None:
        for pool in (self.work, self.maps, self.writes):
            pool.shutdown(cancel_futures=True)


class _Backward(Rewriter):
    """A group's rewriter that reads it from its end back and makes the map on the way, rather
    than looking the map's offsets up (``lookup`` unused)."""

    def backward(self, tables: list[KeyTable], outs: _Outputs, pools: _Pools) -> None:
        """The group read from its end back, a range of batches at a time, the map made on the way
        (``KeyTable.backward`` into ``tables``, one per key shard: the partition's groups after
        this one were read before); what its batches become goes to ``outs``, last first. Ranges
        are read and decoded ahead, and rendered behind, by ``pools.work``; the map, which must
        see the records in order, is made by the calling thread and ``pools.maps``, a shard each."""
        ranges = _ranges(self.plans.segment, self.plans.size)[::-1]
        ahead = collections.deque(pools.work.submit(self._decoded_range, lo, hi) for lo, hi in ranges[:AHEAD])
        behind: collections.deque = collections.deque()
        for r in range(len(ranges)):
            decoded = ahead.popleft().result()
            if r + AHEAD < len(ranges):
                ahead.append(pools.work.submit(self._decoded_range, *ranges[r + AHEAD]))
            for d, i in reversed(decoded):
                mapped = self._mapped_backward(tables, pools, d, i)
                behind.append(pools.work.submit(self._finish, d, mapped))
                while len(behind) > AHEAD:
                    self._take(behind.popleft().result(), outs)
        while behind:
            self._take(behind.popleft().result(), outs)

    def _take(self, done: tuple[ChunkOut | None, np.ndarray], outs: _Outputs) -> None:
        out, counts = done
        self.counts += counts
        if out is not None:
            outs.add(out)

    def _decoded_range(self, lo: int, hi: int) -> list[tuple[Decoded, int]]:
        """Batches [lo, hi) of the plans (one segment) read into one buffer and decoded; with the
        plan row of each chunk's first batch."""
        plans, sizes = self.plans, self.plans.size
        base = int(plans.segment[lo])
        path = storage.join(self.job.path, segment_name(base, "log"))
        start, end = int(plans.position[lo]), int(plans.position[hi - 1] + sizes[hi - 1])
        with storage.open_read(path, self.job.size_of(base)) as f:  # the range in one buffer: the chunks are kept
            chunks = list(walk.read_chunks(f, path, start, end, chunk_size=end - start))
        i, found = lo, []
        for chunk in chunks:
            self._check_plan(chunk, base, i)
            n = len(chunk.entries)
            found.append((self._decode(chunk, plans.flags[i:i + n]), i))
            i += n
        if i != hi:
            raise FormatError(path, end, "batch not in the file (the segment changed)")
        return found

    def _mapped_backward(self, tables: list[KeyTable], pools: _Pools, d: Decoded, i: int) -> np.ndarray:
        """The map's offset for each waiting record of a chunk, its records put in the map."""
        records = d.records
        feeds = feeding(self.plans.feeds[i + records.entry], records.control, records.offset, self.job.first_dirty)
        bufs = records.bufs(d.chunk)
        hashes = record_hashes(bufs, records.which, records.key_pos, records.key_len, 0)
        mapped = np.full(len(records.offset), NOT_MAPPED, np.int64)
        args = (bufs, records.which, records.key_pos, records.key_len, hashes, 0, records.offset, feeds, d.waits,
                mapped)
        shards = len(tables)
        others = [pools.maps.submit(tables[s].backward, *args, s, shards) for s in range(1, shards)]
        tables[0].backward(*args, 0, shards)
        for other in others:
            other.result()
        return mapped


HELD_EVERY_S = 5.0


def clean_partition(groups: list[tuple[GroupJob, GroupPlans]], render: bool, held=lambda path: True,
                    threads: int = 1, keys: int = 0) -> list[GroupResult]:
    """Every group of one partition read once, from the last record back, the offset map made on
    the way (``KeyTable.backward``): each record's fate is known when it is read, since every
    record that could supersede it was read before. Then each group's ``.cleaned`` files (or,
    not ``render``ing, its fate counts), written while the group before it is read. ``held(path)``:
    the job still holds the partition's lease (asked before the first group and then at a group
    boundary once ``HELD_EVERY_S`` passed since it was last asked: an abort stops the partition at
    a group boundary that soon, and a partition read in less time asks once; on an object store
    each question is a request). A group that fails stops the partition: the groups before it are not
    written. ``threads``: cores to use, the map split in as many key shards; ``keys``: at most
    how many keys the map will hold (the tables are sized for them up front rather than grown)."""
    tables = [KeyTable.for_keys(-(-keys // threads)) for _ in range(threads)]
    results: list[dict] = []
    writing = None  # the group being written while the next one is read
    asked = None
    with _Pools(threads) as pools:
        for job, plans in reversed(groups):
            started, base = time.monotonic(), unwritten(job)
            due = render and (asked is None or started - asked >= HELD_EVERY_S)
            asked = started if due else asked
            if due and not held(job.path):
                if _written(writing, results):
                    results.append(base.but(error=ABORTED_BY_OPERATOR, failure=Failure.ABORTED.value,
                                            codes=(0,) * len(REASON_OF_CODE)))
                writing = None
                break
            rewriter, outs = _Backward(job, plans, render), _Outputs()
            try:
                rewriter.backward(tables, outs, pools)
            except (FormatError, OSError, ValueError, MemoryError, RuntimeError) as exc:  # ValueError: a legacy entry
                if not task_failure(exc):
                    raise
                outs.close()
                if _written(writing, results):
                    results.append(failed(job, base, started, rewriter, exc))
                writing = None
                break
            if not _written(writing, results):
                outs.close()
                writing = None
                break
            writing = None
            if render:
                writing = (job, base, started, rewriter, outs, pools.writes.submit(write_outputs, job, outs.in_order()))
            else:
                results.append(base.but(seconds=time.monotonic() - started, codes=tuple(rewriter.counts.tolist())))
        _written(writing, results)
    return results[::-1]


def _written(writing, results: list[dict]) -> bool:
    """Wait for the group being written (if any) and add its result; False when it failed."""
    if writing is None:
        return True
    job, base, started, rewriter, outs, future = writing
    try:
        written = future.result()
    except (FormatError, OSError, ValueError, MemoryError, RuntimeError) as exc:
        if not task_failure(exc):
            raise
        results.append(failed(job, base, started, rewriter, exc))
        return False
    finally:
        outs.close()
    results.append(succeeded(base, written, started, rewriter))
    return True
