"""The log dir around the partitions: ``generate`` writes every partition, the KRaft metadata
log that carries the topics' ids and configs, and the root checkpoint files of a cleanly stopped
broker; ``append`` adds what a spec held back and moves the checkpoints to the new log ends."""

from __future__ import annotations

import base64
import bisect
import hashlib
import io
import multiprocessing
import os
import posixpath
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kcompact import errors, storage
from kcompact.logdir.listing import METADATA_DIR, segment_name
from kcompact.readers import checkpoint
from kcompact.readers.records import Record
from kcompact.storage import bulk
from kcompact.tools.generator import broker_states, progress
from kcompact.tools.generator.broker_states import ROOT_CHECKPOINTS
from kcompact.tools.generator.partition import Write, _append_partition, _write_partition
from kcompact.tools.generator.spec import validate
from kcompact.tools.generator.truth import GenResult, PartitionTruth
from kcompact.writers import metadata
from kcompact.writers.batch import encode_batch
from kcompact.writers.checkpoint import render_checkpoint
from kcompact.writers.segment import SegmentWriter

FORK_FROM = 64  # partitions from which local generation forks a worker per core


def topic_id(seed: int, topic: str) -> str:
    """A Kafka-style topic id (a v4 UUID in unpadded URL-safe base64) that depends only on seed and topic."""
    attempt = 0
    while True:
        raw = bytearray(hashlib.sha256(f"{seed}:{topic}:{attempt}".encode()).digest()[:16])
        raw[6] = (raw[6] & 0x0F) | 0x40
        raw[8] = (raw[8] & 0x3F) | 0x80
        text = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
        if not text.startswith("-"):  # Kafka never hands out ids that start with '-'
            return text
        attempt += 1


def _position(truth: PartitionTruth, position: float | dict[str, int], log_start: int) -> int:
    """A spec's cleaner checkpoint position as an offset (see ``spec._checkpoint_positions``)."""
    if not isinstance(position, dict):
        return _batch_boundary(truth, position)
    form, n = next(iter(position.items()))
    if form == "offset":
        return n
    if form == "segment":
        return truth.segments[n].base_offset
    if form == "past_end":
        return truth.log_end_offset + n
    return log_start - n


def _log_start(truth: PartitionTruth, fraction: float) -> int:
    """The start of the batch holding ``fraction`` of the first segment's offsets (a DeleteRecords
    that stayed inside the first segment, so retention has nothing to delete)."""
    first = truth.segments[0]
    target = first.base_offset + int(fraction * (first.last_offset + 1 - first.base_offset))
    starts = [b.base_offset for b in truth.batches if b.base_offset <= target]
    return starts[-1] if starts else first.base_offset


def _batch_boundary(truth: PartitionTruth, fraction: float) -> int:
    """The start of the batch holding ``fraction`` of the log end offset (the end itself for 1)."""
    target = int(fraction * truth.log_end_offset)
    if target >= truth.log_end_offset:
        return truth.log_end_offset
    starts = [b.base_offset for b in truth.batches]
    return starts[bisect.bisect_right(starts, target) - 1]


def _checkpoints(topics: list[dict[str, Any]], parts: dict[tuple[str, int], PartitionTruth]) -> dict[str, dict]:
    """What a cleanly stopped broker leaves: recovery point and high watermark at the log
    end, log-start entries only where the spec moved a log start (inside the first segment),
    and the spec's cleaner positions."""
    ends = {tp: p.log_end_offset for tp, p in parts.items()}
    starts = {
        (t["name"], partition): _log_start(parts[t["name"], partition], t["log_start"])
        for t in topics if t["log_start"] is not None
        for partition in range(t["partitions"])
    }
    cleaner = {
        (t["name"], partition): _position(
            parts[t["name"], partition],
            position,
            starts.get((t["name"], partition), parts[t["name"], partition].segments[0].base_offset),
        )
        for t in topics
        for partition, position in t["checkpoint"].items()
    }
    return {
        "cleaner-offset-checkpoint": cleaner,
        "log-start-offset-checkpoint": starts,
        "recovery-point-offset-checkpoint": dict(ends),
        "replication-offset-checkpoint": dict(ends),
    }


def _refuse_non_empty(out: str) -> None:
    if not storage.exists(out):
        return
    files, dirs = storage.list_dir(out)
    if files or dirs:
        raise errors.UsageError(f"{out}: exists and is not an empty directory; choose a new --out")


def _write_metadata_log(out: str, spec: dict[str, Any], ids: dict[str, str], write: Write) -> int:
    """``__cluster_metadata-0`` as a KRaft controller leaves it: per topic a TopicRecord and
    a ConfigRecord per override, so the log dir carries its own topic configuration."""
    pdir = storage.join(out, METADATA_DIR)
    storage.makedirs(pdir)
    log, offset, ts = io.BytesIO(), 0, spec["start_ms"] - 60_000
    writer = SegmentWriter(log, 0)
    for values in _metadata_values(spec, ids):
        data = encode_batch([Record(offset + i, ts, None, v) for i, v in enumerate(values)], base_offset=offset)
        writer.append(data, offset + len(values) - 1, ts, offset + len(values) - 1)
        offset += len(values)
    files = writer.close()
    contents = {"log": log.getvalue(), "index": files.offset_index, "timeindex": files.time_index}
    for kind, data in contents.items():
        path = storage.join(pdir, segment_name(0, kind))
        write(path, data)
        storage.set_mtime(path, ts)
    return sum(len(d) for d in contents.values())


def _metadata_values(spec: dict[str, Any], ids: dict[str, str]) -> list[list[bytes]]:
    """The metadata log's records, a batch per topic: its TopicRecord, then a ConfigRecord per override."""
    return [[metadata.topic_record(topic["name"], ids[topic["name"]])]
            + [metadata.topic_config_record(topic["name"], key, _config_text(value))
               for key, value in sorted(topic["config"].items())]
            for topic in spec["topics"]]


def _config_text(value: Any) -> str:
    """A config value as Kafka stores it (lists comma-separated)."""
    return ",".join(value) if isinstance(value, (list, tuple)) else str(value)


def generate(out: str, spec: dict[str, Any], seed: int, keep_records: bool = True,
             say: Callable[[str], None] | None = None) -> GenResult:
    """Write a Kafka log dir at ``out`` (must not exist or be empty) and return its truth
    (``keep_records`` False: without the per-record truth, which a corpus of millions cannot afford;
    the bytes written are the same). ``say``: told the size to be written up front, and progress.

    On local disk the log dir is written under a sibling name (``<out>.gen-<pid>.tmp``) and renamed
    into place when it is whole; on an object store, where a rename is a copy, in place. Either
    way, what was written is removed when generation stops part way (an error, a signal): a
    partial log dir is a valid one that ``verify`` cannot tell from a whole one.

    Files are written without an fsync each; the tree is synced once, before the rename (locally),
    and the rename made durable. Many local partitions are written by forked workers, one per core
    (each partition's bytes depend on its own seeded generator alone, so the bytes are the same)."""
    spec = validate(spec)
    out = out.rstrip("/")
    _refuse_non_empty(out)
    partitions = sum(t["partitions"] for t in spec["topics"])
    if say is not None:
        say(f"gen: {len(spec['topics'])} topics, {partitions} partitions, about "
            f"{progress.size_text(progress.estimate(spec))} of records (before compression) into {out}")
    local = storage.is_local_path(out)
    target = f"{out}.gen-{os.getpid()}.tmp" if local else out
    try:
        records = sum((t["records"] + t["append_records"]) * t["partitions"] for t in spec["topics"])
        shown = progress.Progress(say, partitions, records)
        try:
            result = _generate(target, spec, seed, keep_records, shown, local)
        finally:
            shown.stop()
        if local:
            bulk.sync_tree(target)
            storage.rename(target, out)  # over an empty dir too: rename(2) replaces one
            storage.fsync_dir(posixpath.dirname(out) or ".")
    except BaseException:
        storage.remove_tree(target)
        raise
    result.out = out
    return result


# What forked workers read: set by the parent just before it forks them (inherited, never pickled).
_FORKED: tuple | None = None


def _forked_partition(item: tuple[int, int]) -> tuple[PartitionTruth, int]:
    out, topics, seed, ids, keep_records = _FORKED
    topic = topics[item[0]]
    return _write_partition(out, topic, item[1], seed, ids[topic["name"]], keep_records, bulk.write_unsynced)


def _worker_signals() -> None:
    """A worker leaves Ctrl-C to the parent, which stops the pool and removes what was written, and
    ends quietly when the parent terminates it (not by the command line's handler it inherited)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _partitions(out: str, topics: list[dict[str, Any]], seed: int, ids: dict[str, str], keep_records: bool,
                local: bool, shown: progress.Progress) -> Iterator[tuple[PartitionTruth, int]]:
    """Every partition written, its truth and size in spec order: in forked workers when there are
    many on local disk and this process runs no other thread (a fork copies only the calling one);
    ``shown``'s thread starts once they are forked."""
    items = [(t, p) for t, topic in enumerate(topics) for p in range(topic["partitions"])]
    workers = min(os.cpu_count() or 1, len(items) // FORK_FROM)
    if not local or workers < 2 or threading.active_count() > 1:
        shown.start()
        for t, p in items:
            yield _write_partition(out, topics[t], p, seed, ids[topics[t]["name"]], keep_records, bulk.write_unsynced)
        return
    global _FORKED
    _FORKED = (out, topics, seed, ids, keep_records)
    pool = multiprocessing.get_context("fork").Pool(workers, _worker_signals)
    shown.start()
    try:
        yield from pool.imap(_forked_partition, items, chunksize=8)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
        _FORKED = None


def _generate(out: str, spec: dict[str, Any], seed: int, keep_records: bool, shown: progress.Progress,
              local: bool) -> GenResult:
    storage.makedirs(out)
    parts: dict[tuple[str, int], PartitionTruth] = {}
    ids = {topic["name"]: topic_id(seed, topic["name"]) for topic in spec["topics"]}
    written = 0
    for truth, size in _partitions(out, spec["topics"], seed, ids, keep_records, local, shown):
        parts[truth.topic, truth.partition] = truth
        written += size
        shown.partition_done(written)
    written += _write_metadata_log(out, spec, ids, bulk.write_unsynced)
    files = _checkpoints(spec["topics"], parts)
    for name in ROOT_CHECKPOINTS:
        data = render_checkpoint(files[name])
        bulk.write_unsynced(storage.join(out, name), data)
        written += len(data)
    broker_states.leave_log_dir(out, spec["broker_state"], _metadata_values(spec, ids), spec["start_ms"] - 60_000,
                                bulk.write_unsynced)
    return GenResult(
        out=out,
        seed=seed,
        topic_configs={t["name"]: dict(t["config"]) for t in spec["topics"]},
        topic_ids=ids,
        partitions=parts,
        checkpoints=files,
        bytes_written=written,
    )


def append(out: str, spec: dict[str, Any], seed: int) -> dict[tuple[str, int], PartitionTruth]:
    """Append what ``generate(out, spec, seed)`` held back: every topic's ``append_records``, to
    the active segments a broker left (cleaning between the two never touches them), and move
    the recovery-point and high-watermark checkpoints to the new log ends. Cleaner and log-start
    checkpoints are the broker's and stay. Returns the truth of each appended partition, whole."""
    spec = validate(spec)
    out = out.rstrip("/")
    parts = {
        (t["name"], p): _append_partition(out, t, p, seed)
        for t in spec["topics"] if t["append_records"] for p in range(t["partitions"])
    }
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        path = storage.join(out, name)
        entries = checkpoint.parse(path, storage.read_bytes(path))
        entries.update({tp: truth.log_end_offset for tp, truth in parts.items()})
        storage.write_atomic(path, render_checkpoint(entries))
    return parts
