"""What stage 1 of the compaction job reports per partition (``compaction.pipeline.batch_plans``):
its batch plans and segment groups, typed (``contracts.typed_rows``) for the driver, which builds the
segment groups' jobs, the report and the commit from them."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from kcompact.compaction.rules.cleaner_config import CleanerConfig
from kcompact.contracts.typed_rows import TypedRow, column, nested
from kcompact.readers.indexes import AbortedTxn

I32, I64 = pa.int32(), pa.int64()


@dataclass(frozen=True, slots=True)
class Aborted(TypedRow):
    """An aborted transaction a segment group's ``.txnindex`` must list (``readers.indexes.AbortedTxn``)."""

    producer_id: int = column(I64)
    first_offset: int = column(I64)
    last_offset: int = column(I64)
    last_stable_offset: int = column(I64)

    def txn(self) -> AbortedTxn:
        return AbortedTxn(self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


@dataclass(frozen=True, slots=True)
class SegmentGroup(TypedRow):
    """A segment group: the segments one output segment replaces (``segments``, with their
    ``sizes``), and the newest one's modification time, which the output keeps."""

    group: int = column(I32)
    base_offset: int = column(I64)
    segments: tuple[int, ...] = column(pa.list_(I64))
    sizes: tuple[int, ...] = column(pa.list_(I64))
    mtime_ms: int = column(I64)
    aborted: tuple[Aborted, ...] = nested(Aborted, many=True)


@dataclass(frozen=True, slots=True)
class PartitionBatches(TypedRow):
    """Stage 1's row of one partition: its batch plans (``batches``, a blob of ``BATCH_PLAN``) and
    segment groups, or the error (and its kind, ``failure``) that stopped it."""

    path: str = column(pa.string())
    log_dir: str = column(pa.string())
    topic: str = column(pa.string())
    partition: int = column(I32)
    first_dirty_offset: int = column(I64)
    first_uncleanable_dirty_offset: int = column(I64)
    latest_offset: int | None = column(I64)  # the last offset of the last batch read
    config: CleanerConfig | None = nested(CleanerConfig)
    seconds: float = column(pa.float64(), 0.0)
    error: str | None = column(pa.string())
    failure: str | None = column(pa.string())  # ``errors.failure.Failure``'s value
    batches: bytes = column(pa.binary(), b"")
    groups: tuple[SegmentGroup, ...] = nested(SegmentGroup, many=True)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def segments_read(self) -> list[int]:
        """The base offsets of the segments the cleaning replaces, in order."""
        return [base for g in self.groups for base in g.segments]
