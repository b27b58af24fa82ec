"""Rewrite one segment group on an executor, from the decisions already made.

Input: the group (which segments, its base offset and modification time, the aborted
transactions its .txnindex must list), the batch plans of its batches and the keep
flag of each of their records. The segments are read once, in order; every batch is
copied, rebuilt, emptied or dropped, and the ``.cleaned`` files are written. Nothing
is renamed here: the driver alone commits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

import storage
from compaction.decisions import BatchPlan, batch_outcome
from compaction.model import BatchInfo
from readers import scan
from readers.batch import Batch
from readers.errors import FormatError
from readers.indexes import AbortedTxn
from readers.logdir import segment_name
from readers.segment import iter_batches
from writers.cleaned import WrittenGroup, write_group


@dataclass(frozen=True, slots=True)
class GroupJob:
    """What the driver knows of one output segment group."""

    path: str  # the partition dir
    group: int
    base_offset: int
    segments: tuple[int, ...]
    mtime_ms: int
    aborted: tuple[AbortedTxn, ...]
    index_interval_bytes: int
    delete_retention_ms: int
    now: int


PLAN_FLAGS = ("delete", "discard_records", "retain_empty", "retain_deletes", "marker_for_empty_txn")


def _plans(batches: pa.Table) -> dict[tuple[int, int], dict]:
    return {(r["segment"], r["position"]): r for r in batches.to_pylist()}


def _keep_masks(records: pa.Table) -> dict[tuple[int, int], np.ndarray]:
    """Keep flags per batch, in stored record order."""
    if records.num_rows == 0:
        return {}
    seg = records.column("segment").to_numpy()
    pos = records.column("position").to_numpy()
    idx = records.column("record_index").to_numpy()
    keep = records.column("keep").to_numpy(zero_copy_only=False)
    order = np.lexsort((idx, pos, seg))
    seg, pos, keep = seg[order], pos[order], keep[order]
    cuts = np.flatnonzero((np.diff(seg) != 0) | (np.diff(pos) != 0)) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [len(seg)]))
    return {(int(seg[a]), int(pos[a])): keep[a:b] for a, b in zip(starts, ends)}


def _items(job: GroupJob, plans: dict, masks: dict) -> Iterator[tuple[Batch, object, np.ndarray | None]]:
    for base in job.segments:
        path = storage.join(job.path, segment_name(base, "log"))
        with storage.open_read(path) as f:
            for batch in iter_batches(f, path):
                row = plans[(base, batch.position)]
                plan = BatchPlan(BatchInfo.of(batch, base), job.group, *(row[k] for k in PLAN_FLAGS))
                keep = masks.get((base, batch.position))
                if (keep is None and batch.count and not plan.delete) or (keep is not None and len(keep) != batch.count):
                    # never guess: a batch whose records were not all decided is not rewritten
                    got = 0 if keep is None else len(keep)
                    raise FormatError(path, batch.position, f"{got} keep flags for {batch.count} records")
                kept = int(keep.sum()) if keep is not None else 0
                outcome = batch_outcome(plan, kept, _kept_tombstone(batch, keep), job.now, job.delete_retention_ms)
                yield batch, outcome, keep


def _kept_tombstone(batch: Batch, keep: np.ndarray | None) -> bool:
    if keep is None or not keep.any() or batch.magic != 2:
        return False
    _, _, cols = batch.scan_records()
    return bool((cols[keep, scan.VALUE_POS] < 0).any())


RESULT_SCHEMA = pa.schema([
    ("path", pa.string()), ("group", pa.int32()), ("base_offset", pa.int64()), ("size", pa.int64()),
    ("batches", pa.int64()), ("records", pa.int64()), ("files", pa.list_(pa.string())),
    ("seconds", pa.float64()), ("error", pa.string()),
])


def rewrite_group(job: GroupJob, batches: pa.Table, records: pa.Table) -> dict:
    """Write the group's ``.cleaned`` files; on bad input, remove what was written and say why."""
    started = time.monotonic()
    try:
        written: WrittenGroup = write_group(
            job.path, job.base_offset, _items(job, _plans(batches), _keep_masks(records)),
            list(job.aborted), job.mtime_ms, job.index_interval_bytes,
        )
    except (FormatError, OSError, ValueError) as exc:  # ValueError: a legacy entry that cannot be rebuilt
        for kind in ("log", "index", "timeindex", "txnindex"):
            leftover = storage.join(job.path, segment_name(job.base_offset, kind) + ".cleaned")
            if storage.exists(leftover):
                storage.remove(leftover)
        return {"path": job.path, "group": job.group, "base_offset": job.base_offset, "size": 0, "batches": 0,
                "records": 0, "files": [], "seconds": time.monotonic() - started, "error": str(exc)}
    return {"path": job.path, "group": job.group, "base_offset": job.base_offset, "size": written.size,
            "batches": written.batches, "records": written.records, "files": list(written.files),
            "seconds": time.monotonic() - started, "error": None}
