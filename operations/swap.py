"""Replace a partition's segments by its cleaned ones with Kafka's swap protocol, by renames alone.

The cleaner checkpoint is not moved here: the commit step (``operations.commit``), which chooses this
swap on a local disk, moves it after.

Steps, each made durable (directory fsync) before the next:
1. every ``.cleaned`` file becomes ``.swap``, the highest base offset first;
2. every replaced segment's files become ``.deleted``;
3. every ``.swap`` file takes its final name;
4. the ``.deleted`` files are removed: by the caller, once it has committed every partition
   (``operations.deleted``); a broker, or ``kcompact recover``, removes any left.

A broker loading the dir deletes ``.cleaned`` files and any ``.swap`` whose base offset
is at or above the smallest ``.cleaned`` one, then completes the remaining swaps. With
step 1 in descending order, a crash inside it leaves only swaps above every remaining
``.cleaned`` file, so recovery returns the old contents; once step 1 is done, recovery
completes every group. The partition therefore changes whole or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from kcompact import storage
from kcompact.logdir.listing import Segment
from kcompact.operations.cleaned import CLEANED, WrittenGroup

SWAP, DELETED = ".swap", ".deleted"


def _segment_files(seg: Segment) -> list[str]:
    return [info.path for info in (seg.log, seg.index, seg.timeindex, seg.txnindex) if info is not None]


def commit_partition(partition_dir: str, written: Sequence[WrittenGroup], replaced: Sequence[Segment]) -> list[str]:
    """Swap ``written`` groups in for the ``replaced`` segments (all of them, or none); returns
    the ``.deleted`` files to remove (step 4)."""
    storage.fsync_dir(partition_dir)
    swaps = []
    for group in sorted(written, key=lambda g: -g.base_offset):
        for path in group.files:
            swap = path.removesuffix(CLEANED) + SWAP
            storage.rename(path, swap)
            swaps.append(swap)
    storage.fsync_dir(partition_dir)
    deleted = []
    for seg in replaced:
        for path in _segment_files(seg):
            storage.rename(path, path + DELETED)
            deleted.append(path + DELETED)
    storage.fsync_dir(partition_dir)
    for swap in swaps:
        storage.rename(swap, swap.removesuffix(SWAP))
    storage.fsync_dir(partition_dir)
    return deleted
