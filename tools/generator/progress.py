"""What ``gen`` says while it works: the size it is about to write, said up front, and a line
every ``EVERY_S`` seconds on a long run (millions of records take minutes, and a silent command
looks hung).

The size is an estimate from the spec alone (records times their mean key and value size, plus
the record and batch headers), before compression: an upper bound for compressed topics.
"""

from __future__ import annotations

import multiprocessing
import threading
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
    """Says where ``generate`` is every ``EVERY_S`` seconds, from a thread of its own, whatever the
    partitions are doing: records made (counted as producers make them, in forked workers too),
    bytes of the partitions written, partitions done, and an ETA by records. Nothing per partition:
    20,000 of them would be 20,000 lines."""

    def __init__(self, say: Callable[[str], None] | None, partitions: int, records: int):
        global _made, _pending
        self._say, self._partitions, self._records = say, partitions, records
        self._started = time.monotonic()
        self.done = self.written = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # shared memory, created before any worker forks: every process's producers add to it
        _made, _pending = (multiprocessing.Value("q", 0) if say is not None else None), 0

    def partition_done(self, written: int) -> None:
        self.done += 1
        self.written = written

    def start(self) -> None:
        """The ticker's thread, once workers are forked (a fork copies only the calling thread)."""
        if self._say is not None and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="kcompact-gen-progress", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        global _made
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        _made = None

    def _loop(self) -> None:
        while not self._stop.wait(EVERY_S):
            self._say(self.line())

    def line(self) -> str:
        made = _made.value if _made is not None else 0
        elapsed = time.monotonic() - self._started
        line = (f"gen: {made:,} of {self._records:,} records, {size_text(self.written)} written, "
                f"{self.done}/{self._partitions} partitions done, {elapsed:.0f} s")
        if 0 < made < self._records:
            line += f", ETA {elapsed * (self._records - made) / made:.0f} s"
        return line


_made = None  # records made in every process while a Progress runs (a multiprocessing.Value)
_pending = 0  # this process's, not yet added to it
FLUSH_RECORDS = 10_000  # added in lots: a lock per batch would cost more than the count is worth


def made(records: int) -> None:
    """A producer made ``records`` data records (its partition's, in whichever process)."""
    global _pending
    if _made is None:
        return
    _pending += records
    if _pending >= FLUSH_RECORDS:
        flush()


def flush() -> None:
    """This process's records made, added to the shared count (a partition's end)."""
    global _pending
    if _made is not None and _pending:
        with _made.get_lock():
            _made.value += _pending
        _pending = 0
