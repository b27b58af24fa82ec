"""What ``gen`` says while it works: the size it is about to write, said up front, and a line
every so often on a long run (millions of records take minutes, and a silent command looks hung).

The size is an estimate from the spec alone (records times their mean key and value size, plus
the record and batch headers), before compression: an upper bound for compressed topics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

RECORD_OVERHEAD = 8  # attributes, timestamp and offset deltas, key and value lengths, header count: varints
BATCH_OVERHEAD = 61  # a v2 batch's header
EVERY_S = 10.0


def _mean(size: Any) -> float:
    if size is None:
        return 0.0
    if isinstance(size, (list, tuple)):
        return sum(size) / len(size)
    return float(size)


def estimate(spec: dict[str, Any]) -> int:
    """Bytes of record batches a validated spec makes, uncompressed (indexes and checkpoints aside)."""
    total = 0.0
    for topic in spec["topics"]:
        per_record = RECORD_OVERHEAD + _mean(topic.get("key_size")) + _mean(topic.get("value_size"))
        per_record += BATCH_OVERHEAD / max(_mean(topic.get("batch_records", 1)), 1.0)
        records = topic["records"] + topic.get("append_records", 0)
        legacy = topic.get("legacy") or {}
        records += legacy.get("magic0", 0) + legacy.get("magic1", 0)
        total += per_record * records * topic["partitions"]
    return int(total)


def size_text(size: float) -> str:
    """As the console says sizes everywhere: MB of 2^20 bytes."""
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


class Progress:
    """Says where ``generate`` is (partitions done, bytes written) at most every ``EVERY_S`` seconds."""

    def __init__(self, say: Callable[[str], None] | None, partitions: int):
        self._say, self._partitions = say, partitions
        self._started = self._last = time.monotonic()
        self.done = 0

    def partition_done(self, written: int) -> None:
        self.done += 1
        now = time.monotonic()
        if self._say is not None and now - self._last >= EVERY_S and self.done < self._partitions:
            self._last = now
            self._say(f"gen: {self.done}/{self._partitions} partitions, {size_text(written)} written "
                      f"({now - self._started:.0f} s)")
