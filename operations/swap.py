"""Replace partitions' segments by their cleaned ones with Kafka's swap protocol, by renames alone,
many partitions of a log dir at once (a wave).

The cleaner checkpoint is not moved here: the commit step (``operations.commit``), which chooses this
swap on a local disk, moves it once the wave's swaps are durable.

Steps, each done for every partition of the wave and then made durable (each partition dir
fsynced once, ``storage.fsync_dirs``) before the next begins:
0. (the ``.cleaned`` files' creation made durable);
1. every ``.cleaned`` file becomes ``.swap``, the highest base offset first;
2. every replaced segment's files become ``.deleted``;
3. every ``.swap`` file takes its final name;
4. the ``.deleted`` files are removed: by the caller, once it has committed every partition
   (``operations.deleted``); a broker, or ``kcompact recover``, removes any left.

A broker loading the dir deletes ``.cleaned`` files and any ``.swap`` whose base offset
is at or above the smallest ``.cleaned`` one, then completes the remaining swaps. With
step 1 in descending order, a crash inside it leaves only swaps above every remaining
``.cleaned`` file, so recovery returns the old contents; once step 1 is done, recovery
completes every group. Each partition therefore changes whole or not at all, wherever in the
wave a crash stops it: the steps of one partition never depend on another's. A partition whose
rename or fsync fails leaves the wave there (its files as that step left them, for recovery);
the others go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kcompact import storage
from kcompact.logdir.listing import Segment
from kcompact.operations.cleaned import CLEANED, WrittenGroup

SWAP, DELETED = ".swap", ".deleted"


@dataclass(frozen=True, slots=True)
class Swap:
    """One partition's part of a wave: its cleaned groups and the segments they replace."""

    partition_dir: str
    written: Sequence[WrittenGroup]
    replaced: Sequence[Segment]


def _segment_files(seg: Segment) -> list[str]:
    return [info.path for info in (seg.log, seg.index, seg.timeindex, seg.txnindex) if info is not None]


def swap_wave(swaps: Sequence[Swap], threads: int = 1) -> list[list[str] | OSError]:
    """Swap each partition's ``written`` groups in for its ``replaced`` segments (all of them, or
    none); the renames on this thread, the fsyncs of each step's dirs on ``threads`` threads. Per
    partition, in order: the ``.deleted`` files to remove (step 4), or the error that stopped its
    swap part way (its files left for recovery, which finishes or undoes the swap). A rename is a
    few microseconds of kernel work: on several threads each one then waits about as long again
    for the interpreter's lock, so the renames go faster on one thread than on several."""
    failed: dict[int, OSError] = {}
    swapped: dict[int, list[str]] = {}
    deleted: dict[int, list[str]] = {}

    def step(action: Callable[[int], None] | None) -> None:
        """``action`` for every partition still in the wave, then each of their dirs fsynced once."""
        def attempt(i: int) -> None:
            try:
                action(i)
            except OSError as exc:
                failed[i] = exc

        live = [i for i in range(len(swaps)) if i not in failed]
        if action is not None:
            for i in live:
                attempt(i)
        dirs = {swaps[i].partition_dir: i for i in live if i not in failed}
        for path, exc in storage.fsync_dirs(list(dirs), threads).items():
            failed[dirs[path]] = exc

    def to_swap(i: int) -> None:
        names = swapped[i] = []
        for group in sorted(swaps[i].written, key=lambda g: -g.base_offset):
            for path in group.files:
                name = path.removesuffix(CLEANED) + SWAP
                storage.rename(path, name)
                names.append(name)

    def to_deleted(i: int) -> None:
        names = deleted[i] = []
        for seg in swaps[i].replaced:
            for path in _segment_files(seg):
                storage.rename(path, path + DELETED)
                names.append(path + DELETED)

    def to_final(i: int) -> None:
        for name in swapped[i]:
            storage.rename(name, name.removesuffix(SWAP))

    for action in (None, to_swap, to_deleted, to_final):
        step(action)
    return [failed[i] if i in failed else deleted[i] for i in range(len(swaps))]
