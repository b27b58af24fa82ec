"""Which path a partition takes, by the memory of a Python worker: read whole by one task, or shared.

How a partition too big for one worker's memory is routed: to the shared path
(``compaction.pipeline.shared``). There many tasks read its byte ranges and ship (segment group, key)
facts by key hash; a task per hash bucket holds only its bucket's share of the offset map, with
as many buckets as keep each share within a task's map memory. So no task ever holds the whole
map, and a key set may exceed any one worker's memory.

The rule (``reads_whole``), per partition:
- one of at most ``whole_limit`` (the Spark setting ``spark.kcompact.whole.bytes``, by default
  ``WHOLE_BYTES``: ``compaction.pipeline.settings``) is read whole (``compaction.pipeline.whole``):
  one task reads it once, from its end back, and makes its map on the way;
- a larger one is read whole too when its map fits a task's map memory (``map_memory``: a key
  costs ``MAP_BYTES_PER_KEY``, a partition has at most as many keys as records feeding its map)
  and, under a worker cap (``spark.executor.pyspark.memory``, which caps the worker's address
  space), when the cap also holds the worker's imports and all that reading it whole holds
  (``whole_bytes``);
- any other takes the shared path, which its map budget bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from kcompact.compaction.cleaning.backward import OUTPUT_MEMORY
from kcompact.compaction.cleaning.offset_map import KeyTable

WHOLE_BYTES = 256 << 20  # by default a partition of at most this is read by one task, which makes its map too
# A task's map memory (``settings.MAP_MEMORY``): by default a quarter of the Python worker's cap
# (Python, numba and Arrow take a good part of the cap before any data) or, uncapped,
# DEFAULT_MAP_MEMORY. A key costs the map at most MAP_BYTES_PER_KEY (a 40-byte row, two index
# slots, up to 40 bytes of key).
DEFAULT_MAP_MEMORY = 2 << 30
MAP_BYTES_PER_KEY = 96
MIN_BUCKET_BYTES = 64 << 20  # the least map memory a hash bucket of the shared path is given
# What a worker holds reading a partition whole, beside its imports (WORKER_IMPORTS): its map
# tables, sized up front for every feeding record; the output of two segment groups (the one read
# and the one being written, each spilled past OUTPUT_MEMORY); and the ranges decoded ahead and
# rendered behind the map, WHOLE_FIXED plus WHOLE_PER_THREAD a thread. The constants are drawn
# from measured peaks of a worker's address space (docs/benchmarks.md, "Memory of a worker"):
# WHOLE_FIXED from the largest partition measured, beside its tables and outputs.
WORKER_IMPORTS = 560 << 20
WHOLE_FIXED = 350 << 20
WHOLE_PER_THREAD = 140 << 20
# The least cap a worker cleans with: its imports, then one thread reading a partition of up to
# WHOLE_BYTES whole (its map, its two groups' output; measured: 8 partitions of 16 MB cleaned under
# 700m, none under 600m, where the first table's allocation fails). Each thread more takes
# WHOLE_PER_THREAD, so under a cap a task uses only the threads the cap holds.
MIN_WORKER_MEMORY = 700 << 20


@dataclass(frozen=True, slots=True)
class Routes:
    """The partitions of a job by path, each list in the order given."""

    whole: list[int]
    shared: list[int]
    shared_map_bytes: int  # the shared partitions' maps together, at most
    budget: int  # a task's map memory


@dataclass(frozen=True, slots=True)
class Limits:
    """What routing asks of a job's settings (``settings.JobSettings.limits``)."""

    whole_bytes: int  # a partition of at most this is read whole
    budget: int  # a task's map memory
    cap: int | None  # a Python worker's address space, None: uncapped
    threads: int  # threads of a task reading a partition whole


def route(limits: Limits, pids: list[int], sizes: list[int], keys: list[int],
          largest_group: dict[int, int]) -> Routes:
    """Partitions ``pids`` to the whole path or the shared path (``reads_whole``): ``sizes``,
    ``keys`` (at most, per partition) and ``largest_group`` (its largest segment group's bytes)."""
    budget = limits.budget
    read_whole = [reads_whole(size, keys[pid], largest_group.get(pid, 0), budget, limits.cap, limits.threads,
                              limits.whole_bytes) for pid, size in enumerate(sizes)]
    shared = [pid for pid in pids if not read_whole[pid]]
    return Routes([pid for pid in pids if read_whole[pid]], shared,
                  sum(keys[pid] for pid in shared) * MAP_BYTES_PER_KEY, budget)


def reads_whole(size: int, keys: int, largest_group: int, budget: int, cap: int | None, threads: int,
                whole_limit: int = WHOLE_BYTES) -> bool:
    """Whether a task reads a partition of ``size`` bytes whole (its map made as it is rewritten),
    rather than by the shared path: when it is small (at most ``whole_limit``), or when its map fits
    the map ``budget`` and, under a worker ``cap``, the cap holds the worker's imports and all that
    reading it whole holds."""
    return size <= whole_limit or (keys * MAP_BYTES_PER_KEY <= budget and (
        cap is None or WORKER_IMPORTS + whole_bytes(keys, largest_group, threads) <= cap))


def whole_bytes(keys: int, largest_group: int, threads: int) -> int:
    """What a task holds beside its imports while it reads a partition whole (the comment at
    WORKER_IMPORTS): the map's tables for ``keys`` keys, one per thread, two groups' output of at
    most ``OUTPUT_MEMORY`` each, and its ranges in flight."""
    return (threads * KeyTable.nbytes_for(-(-keys // threads)) + 2 * min(largest_group, OUTPUT_MEMORY)
            + WHOLE_FIXED + threads * WHOLE_PER_THREAD)
