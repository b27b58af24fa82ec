"""The truth of a generated log dir: record by record, batch by batch and segment by segment
what was written, for tests to use as their expected answer."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kcompact.readers.indexes import AbortedTxn
from kcompact.readers.records import Header


@dataclass(frozen=True, slots=True)
class WrittenRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    producer_id: int
    transactional: bool
    control: int | None  # ABORT (0) / COMMIT (1) for a transaction marker


@dataclass(frozen=True, slots=True)
class WrittenBatch:
    base_offset: int
    last_offset: int
    codec: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    control: bool
    max_timestamp: int
    size: int
    magic: int = 2


@dataclass(slots=True)
class _Encoded:
    """A batch as the producer wrote it, with what the truth needs of it."""

    data: bytes
    batch: WrittenBatch
    aborted: AbortedTxn | None = None
    wall_ms: int = 0  # when the broker appended it: its records' nominal time (magic 0 has no timestamps)



@dataclass(frozen=True, slots=True)
class WrittenSegment:
    base_offset: int
    size: int
    last_offset: int
    max_timestamp: int


@dataclass(slots=True)
class PartitionTruth:
    """Everything written to one partition, in offset order: the expected answer for readers and cleaners."""

    topic: str
    partition: int
    records: list[WrittenRecord]
    batches: list[WrittenBatch]
    segments: list[WrittenSegment]
    aborted: list[AbortedTxn]
    open_txn_first_offset: int | None
    log_end_offset: int


@dataclass(slots=True)
class GenResult:
    """The truth of a generated log dir; ``checkpoints`` holds each root checkpoint file's entries."""

    out: str
    seed: int
    topic_configs: dict[str, dict[str, Any]]
    topic_ids: dict[str, str]
    partitions: dict[tuple[str, int], PartitionTruth]
    checkpoints: dict[str, dict[tuple[str, int], int]]
    bytes_written: int

    def summary(self) -> str:
        parts = self.partitions.values()
        lines = [
            f"wrote {self.out} (seed {self.seed}): {len(self.topic_configs)} topics, "
            f"{len(self.partitions)} partitions, "
            f"{sum(len(p.segments) for p in parts)} segments, {_data_count(parts):,} records, "
            f"{self.bytes_written / 1e6:.1f} MB"
        ]
        for topic, config in self.topic_configs.items():
            mine = [p for p in parts if p.topic == topic]
            lines.append(
                f"  {topic}: cleanup.policy={config.get('cleanup.policy', 'delete')}, {len(mine)} partitions, "
                f"{sum(len(p.segments) for p in mine)} segments, {_data_count(mine):,} records, "
                f"{sum(s.size for p in mine for s in p.segments) / 1e6:.2f} MB of .log, "
                f"{sum(len(p.aborted) for p in mine)} aborted txns, "
                f"{sum(p.open_txn_first_offset is not None for p in mine)} open txn"
            )
        return "\n".join(lines)


def _data_count(parts: Iterable[PartitionTruth]) -> int:
    """Data records, from the batches (a generated batch's offsets have no gaps): a truth made
    without its records (``keep_records``) counts the same."""
    return sum(b.last_offset - b.base_offset + 1 for p in parts for b in p.batches if not b.control)


def _truth(topic: dict[str, Any], partition: int, encoded: list[_Encoded], records: list[WrittenRecord],
           segments: list[WrittenSegment]) -> PartitionTruth:
    end = encoded[-1].batch.last_offset + 1
    open_txns: dict[int, int] = {}
    for e in encoded:
        b = e.batch
        if b.control:
            open_txns.pop(b.producer_id, None)
        elif b.transactional:
            open_txns.setdefault(b.producer_id, b.base_offset)
    return PartitionTruth(
        topic["name"], partition, [r for r in records if r.offset < end], [e.batch for e in encoded], segments,
        [e.aborted for e in encoded if e.aborted is not None], min(open_txns.values(), default=None), end,
    )
