"""One broker's log dir and its cleaner thread: LogCleanerManager.grabFilthiestCompactedLog with
its checkpoint resets, the cleaning of each log it hands out, doneCleaning's checkpoint, and the
uncleanable partitions.

A round is what one cleaner thread does at one instant ``now``: grab the filthiest log, clean
it, again, until no log is cleanable. Retention (``deleteOldSegments``, which the cleaner thread
also runs for compacted logs) is not modelled: test log dirs keep it inert.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from kcompact.conf import releases
from kcompact.conf.releases import Release
from kcompact.readers import checkpoint
from kcompact.writers.checkpoint import render_checkpoint
from tests.reference.cleaner import Cleaner
from tests.reference.config import Config
from tests.reference.log import CleaningFailed, Log

LONG_MAX = 2**63 - 1
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
NOT_LIVE = ("-delete", "-future", "-stray")
METADATA_TOPIC = "__cluster_metadata"  # KRaft's own log: not in the LogManager's pool of logs
CFG_KEYS = ("delete.retention.ms", "segment.bytes", "segment.index.bytes", "index.interval.bytes",
            "max.message.bytes", "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "max.compaction.lag.ms")


@dataclass(frozen=True)
class LogToClean:
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int  # rounded down to a segment base (calculateCleanableBytes)
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else float("nan")


@dataclass
class RoundResult:
    cleaned: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # tp -> (first dirty, end offset)
    failed: dict[tuple[str, int], str] = field(default_factory=dict)  # tp -> the exception's message
    reset: dict[tuple[str, int], int] = field(default_factory=dict)  # checkpoint entries reset by the grab


class Broker:
    """The logs of one log dir, with the producer state the broker holds for each."""

    def __init__(self, log_dir: str, config: Config, release: Release = releases.DEFAULT):
        self.log_dir = log_dir
        self.config = config
        self.release = release  # the Kafka release whose cleaner runs
        self.cleaner_class = Cleaner  # a test may stand a variant in (tests/reference_rounds.py)
        self.uncleanable: set[tuple[str, int]] = set()
        starts = self._read_checkpoint(checkpoint.LOG_START_OFFSET)
        self.logs: dict[tuple[str, int], Log] = {}
        for name in sorted(os.listdir(log_dir)):
            m = _PARTITION_DIR.match(name)
            path = os.path.join(log_dir, name)
            if not m or not os.path.isdir(path) or name.endswith(NOT_LIVE) or m["topic"] == METADATA_TOPIC:
                continue
            tp = (m["topic"], int(m["partition"]))
            log = Log.load(path, tp[0], tp[1], starts.get(tp))
            for segment in log.segments:
                for batch in segment.batches():
                    log.producers.append(batch)
            self.logs[tp] = log

    def observe_appends(self) -> None:
        """Producers appended to the logs (the files changed): the broker's producer state sees
        every new batch, in order."""
        for log in self.logs.values():
            end = log.log_end_offset()
            fresh = Log.load(log.dir, log.topic, log.partition, None)
            log.segments = fresh.segments
            for segment in log.segments:
                for batch in segment.batches():
                    if batch.base_offset_field >= end:
                        log.producers.append(batch)

    # -- checkpoints ----------------------------------------------------------------------------
    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        path = os.path.join(self.log_dir, name)
        if not os.path.exists(path):
            return {}
        with open(path, "rb") as f:
            return checkpoint.parse(path, f.read())

    def update_checkpoints(self, tp: tuple[str, int], offset: int) -> None:
        """LogCleanerManager.updateCheckpoints: entries of partitions the broker does not hold are
        dropped, the partition's entry set."""
        current = {k: v for k, v in self._read_checkpoint(checkpoint.CLEANER_OFFSET).items() if k in self.logs}
        current[tp] = offset
        path = os.path.join(self.log_dir, checkpoint.CLEANER_OFFSET)
        with open(path + ".tmp", "wb") as f:
            f.write(render_checkpoint(current))
        os.replace(path + ".tmp", path)

    # -- LogCleanerManager ------------------------------------------------------------------------
    def _cfg(self, topic: str) -> dict:
        return {key: self.config.topic(topic, key) for key in CFG_KEYS}

    def cleanable_offsets(self, log: Log, last_clean: int | None, now: int) -> tuple[int, int, bool]:
        """LogCleanerManager.cleanableOffsets: (firstDirtyOffset, firstUncleanableDirtyOffset,
        forceUpdateCheckpoint)."""
        start = log.log_start_offset
        checkpointed = last_clean if last_clean is not None else start
        if checkpointed < start or checkpointed > log.log_end_offset():
            first_dirty, force = start, True
        else:
            first_dirty, force = checkpointed, False
        cfg = self._cfg(log.topic)
        min_lag = max(cfg["min.compaction.lag.ms"], 0)
        candidates = [log.last_stable_offset(), log.active_segment.base_offset]
        if min_lag > 0:
            for seg in log.non_active_log_segments_from(first_dirty):
                if seg.largest_timestamp() > now - min_lag:
                    candidates.append(seg.base_offset)
                    break
        return first_dirty, max(first_dirty, min(candidates)), force

    @staticmethod
    def calculate_cleanable_bytes(log: Log, first_dirty: int, uncleanable: int) -> tuple[int, int]:
        following = log.non_active_log_segments_from(uncleanable)
        first_uncleanable = (following[0] if following else log.active_segment).base_offset
        cleanable = sum(s.size for s in log.log_segments(min(first_dirty, first_uncleanable), first_uncleanable))
        return first_uncleanable, cleanable

    def max_compaction_delay(self, log: Log, first_dirty: int, now: int) -> int:
        stamps = [s.first_batch_timestamp() for s in log.non_active_log_segments_from(first_dirty)]
        earliest = min((t for t in stamps if t > 0), default=LONG_MAX)
        clean_until = now - max(self._cfg(log.topic)["max.compaction.lag.ms"], 0)
        return clean_until - earliest if earliest < clean_until else 0

    def grab_filthiest_compacted_log(self, now: int, result: RoundResult) -> LogToClean | None:
        last_clean = self._read_checkpoint(checkpoint.CLEANER_OFFSET)
        dirty = []
        for tp, log in self.logs.items():
            if not self.config.compact(log.topic) or tp in self.uncleanable:
                continue
            first_dirty, uncleanable, force = self.cleanable_offsets(log, last_clean.get(tp), now)
            if force:  # written for every such log, cleaned or not
                self.update_checkpoints(tp, first_dirty)
                result.reset[tp] = first_dirty
            delay = self.max_compaction_delay(log, first_dirty, now)
            first_uncleanable, cleanable = self.calculate_cleanable_bytes(log, first_dirty, uncleanable)
            clean = sum(s.size for s in log.log_segments(-1, first_dirty))
            dirty.append(LogToClean(log, first_dirty, first_uncleanable, clean, cleanable, delay > 0))
        dirty = [ltc for ltc in dirty if ltc.total_bytes > 0]
        cleanable_logs = [
            ltc for ltc in dirty
            if (ltc.need_compaction_now and ltc.cleanable_bytes > 0)
            or ltc.cleanable_ratio > self._cfg(ltc.log.topic)["min.cleanable.dirty.ratio"]
        ]
        if not cleanable_logs:
            return None
        best = cleanable_logs[0]
        for ltc in cleanable_logs[1:]:
            if ltc.cleanable_ratio > best.cleanable_ratio:
                best = ltc
        return best

    # -- the cleaner thread -------------------------------------------------------------------------
    def clean_round(self, now: int) -> RoundResult:
        """Grab and clean until nothing is cleanable at ``now``; a cleaning that throws leaves the
        groups already swapped in place, sets the checkpoint to the first dirty offset
        (doneCleaning in cleanLog's finally) and marks the partition uncleanable."""
        result = RoundResult()
        cleaner = self.cleaner_class(self.config.io_buffer_size(), self.config.broker_value("message.max.bytes"),
                                     self.release)
        high_watermarks = self._read_checkpoint(checkpoint.REPLICATION_OFFSET)  # a stopped broker's
        while (ltc := self.grab_filthiest_compacted_log(now, result)) is not None:
            log = ltc.log
            tp = (log.topic, log.partition)
            if tp in result.cleaned:
                raise AssertionError(f"model: {log.name} became cleanable again within one round")
            active = log.producers.last_records_of_active_producers(
                now, self.config.broker_value("producer.id.expiration.ms"))
            try:
                end = cleaner.clean(log, self._cfg(log.topic), ltc.first_dirty_offset, ltc.first_uncleanable_offset,
                                    now, active, high_watermarks.get(tp))
            except CleaningFailed as exc:  # the thread's buffers stay as they were (no restoreBuffers)
                self.update_checkpoints(tp, ltc.first_dirty_offset)
                self.uncleanable.add(tp)
                result.failed[tp] = str(exc)
                continue
            self.update_checkpoints(tp, end)
            result.cleaned[tp] = (ltc.first_dirty_offset, end)
        return result
