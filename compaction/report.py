"""What a compaction run did, per partition and in total: printed like Kafka's cleaner
summary and written as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import storage

REASONS = ("superseded", "tombstone", "aborted", "keyless", "marker")


@dataclass(slots=True)
class PartitionReport:
    topic: str
    partition: int
    path: str
    dirty_start: int
    dirty_end: int | None
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    removed: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    committed: bool = False
    error: str | None = None

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.seconds if self.seconds else 0.0

    @classmethod
    def failed(cls, row: dict) -> PartitionReport:
        return cls(row["topic"], row["partition"], row["path"], row["first_dirty"], None,
                   seconds=row.get("seconds") or 0.0, error=row["error"])

    @classmethod
    def of(cls, row: dict, counts: dict[tuple[str, str], int], groups: list[dict], committed: bool) -> PartitionReport:
        removed = {reason: counts.get((row["path"], reason), 0) for reason in REASONS}
        kept = counts.get((row["path"], "kept"), 0)
        return cls(
            row["topic"], row["partition"], row["path"], row["first_dirty"], row["latest_offset"] + 1,
            bytes_read=sum(b["size"] for b in row["batches"]),
            bytes_written=sum(g["size"] for g in groups),
            records_read=kept + sum(removed.values()), records_kept=kept, removed=removed,
            seconds=row["seconds"] + sum(g["seconds"] for g in groups), committed=committed,
        )

    def summary(self) -> str:
        """Kafka's cleaner summary, for one partition."""
        if self.error:
            return f"{self.topic}-{self.partition}: NOT cleaned, marked uncleanable: {self.error}"
        removed = ", ".join(f"{n} {reason}" for reason, n in self.removed.items() if n)
        verb = "cleaned" if self.committed else "would clean"
        return (f"{verb} log {self.topic}-{self.partition} (dirty section = [{self.dirty_start}, {self.dirty_end})): "
                f"{self.bytes_read / 1e6:.2f} MB processed in {self.seconds:.1f} s ({self.mb_per_s:.1f} MB/s), "
                f"start {self.records_read} records, end {self.records_kept} records"
                + (f" (removed: {removed})" if removed else "")
                + (f", {self.bytes_read / 1e6:.2f} MB -> {self.bytes_written / 1e6:.2f} MB" if self.committed else ""))


@dataclass(slots=True)
class Report:
    now: int
    dry_run: bool
    partitions: list[PartitionReport] = field(default_factory=list)
    seconds: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)  # wall seconds, back to back from session ready

    def totals(self) -> dict:
        done = [p for p in self.partitions if not p.error]
        removed = {reason: sum(p.removed.get(reason, 0) for p in done) for reason in REASONS}
        read = sum(p.bytes_read for p in done)
        return {
            "partitions": len(self.partitions), "cleaned": sum(p.committed for p in done),
            "failed": sum(1 for p in self.partitions if p.error),
            "bytes_read": read, "bytes_written": sum(p.bytes_written for p in done),
            "records_read": sum(p.records_read for p in done), "records_kept": sum(p.records_kept for p in done),
            "removed": removed, "seconds": self.seconds,
            "mb_per_s": read / 1e6 / self.seconds if self.seconds else 0.0,
            "records_per_s": sum(p.records_read for p in done) / self.seconds if self.seconds else 0.0,
        }

    def text(self) -> str:
        lines = [p.summary() for p in self.partitions]
        t = self.totals()
        lines.append(f"{t['partitions']} partitions: {t['cleaned']} cleaned, {t['failed']} failed; "
                     f"{t['bytes_read'] / 1e6:.2f} MB -> {t['bytes_written'] / 1e6:.2f} MB, "
                     f"{t['records_read']} -> {t['records_kept']} records in {t['seconds']:.1f} s "
                     f"({t['mb_per_s']:.1f} MB/s, {t['records_per_s']:.0f} records/s)")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"now": self.now, "dry_run": self.dry_run, "totals": self.totals(), "stages": self.stages,
                "partitions": [asdict(p) | {"mb_per_s": p.mb_per_s} for p in self.partitions]}

    def write(self, path: str) -> None:
        storage.write_durable(path, json.dumps(self.to_json(), indent=1).encode())
