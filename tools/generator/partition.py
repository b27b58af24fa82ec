"""One partition's files: batches laid out in segments as the broker rolls them (with their
offset, time and transaction indexes), producer-state snapshots at each roll and the log end,
the leader-epoch checkpoint and ``partition.metadata``; and the appends a later round adds to
the active segment."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcompact import errors, storage
from kcompact.logdir.listing import segment_name
from kcompact.readers import snapshot
from kcompact.tools.generator import broker_states
from kcompact.tools.generator.producers import COORDINATOR_EPOCH, _PartitionProducer, _produce
from kcompact.tools.generator.spec import _INT32_MAX
from kcompact.tools.generator.truth import PartitionTruth, WrittenSegment, _Encoded, _truth
from kcompact.writers.segment import DEFAULT_INDEX_INTERVAL_BYTES, SegmentFiles, SegmentWriter
from kcompact.writers.snapshot import render_snapshot

DEFAULT_SEGMENT_BYTES = 1 << 30
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024

Write = Callable[[str, bytes], None]  # how a file is written: durable in a live log dir, unsynced in a new tree


def _leader_epoch_checkpoint(epochs: dict[int, int]) -> bytes:
    """leader-epoch-checkpoint: version 0, the count, then ``epoch start-offset`` per epoch."""
    return (f"0\n{len(epochs)}\n" + "".join(f"{e} {o}\n" for e, o in sorted(epochs.items()))).encode()


@dataclass(slots=True)
class _Laid:
    """One segment as the broker left it: its .log bytes, indexes, and when it was last written."""

    log: bytes
    files: SegmentFiles
    wall_ms: int


def _layout(encoded: list[_Encoded], topic: dict[str, Any]) -> list[_Laid]:
    """Split batches into segments as the broker rolls them (LogSegment.shouldRoll): a new segment
    when the next batch would take a non-empty one past ``segment.bytes`` (``layout_segment_bytes``
    when the topic's segment.bytes changed since), or when its offset or time index is full
    (``segment.index.bytes``)."""
    config = topic["config"]
    segment_bytes = topic["layout_segment_bytes"] or config.get("segment.bytes", DEFAULT_SEGMENT_BYTES)
    index_bytes = config.get("segment.index.bytes", DEFAULT_SEGMENT_INDEX_BYTES)
    interval = config.get("index.interval.bytes", DEFAULT_INDEX_INTERVAL_BYTES)
    laid: list[_Laid] = []
    log = writer = None
    wall = 0
    for item in encoded:
        if writer is None or writer.size + len(item.data) > segment_bytes or writer.index_full(index_bytes):
            if writer is not None:
                laid.append(_Laid(log.getvalue(), writer.close(), wall))
            log = io.BytesIO()
            writer = SegmentWriter(log, item.batch.base_offset, interval)
        b = item.batch
        writer.append(item.data, b.last_offset, b.max_timestamp, b.last_offset)
        if item.aborted is not None:
            writer.add_aborted_txn(item.aborted)
        wall = item.wall_ms
    if writer is not None:
        laid.append(_Laid(log.getvalue(), writer.close(), wall))
    return laid


def _empty_segment(base_offset: int, wall_ms: int) -> _Laid:
    """The active segment a broker rolls (at a segment.ms deadline, say) before anything was
    appended to it: no bytes, no index entries."""
    return _Laid(b"", SegmentWriter(io.BytesIO(), base_offset).close(), wall_ms)


def _laid_before(producer: _PartitionProducer, topic: dict[str, Any]) -> list[_Laid]:
    """The segments before the cut (what ``generate`` writes). With ``empty_active`` the broker
    rolled an empty segment at the cut: the appends start there."""
    cut = len(producer.encoded) if producer.cut is None else producer.cut
    before = producer.encoded[:cut]
    laid = _layout(before, topic)
    if topic["empty_active"]:
        laid.append(_empty_segment(before[-1].batch.last_offset + 1, before[-1].wall_ms))
    return laid


def _laid_after(producer: _PartitionProducer, topic: dict[str, Any], before: list[_Laid]) -> list[_Laid]:
    """The segments after every append (what ``append`` leaves), given those ``before`` the cut."""
    if not topic["empty_active"]:
        return _layout(producer.encoded, topic)
    after = producer.encoded[len(producer.encoded) if producer.cut is None else producer.cut:]
    return before[:-1] + (_layout(after, topic) if after else before[-1:])


def _write_segment(pdir: str, laid: _Laid, write: Write = storage.write_durable) -> tuple[WrittenSegment, int]:
    files = laid.files
    contents = {"log": laid.log, "index": files.offset_index, "timeindex": files.time_index}
    if files.txn_index:
        contents["txnindex"] = files.txn_index
    for kind, data in contents.items():
        path = storage.join(pdir, segment_name(files.base_offset, kind))
        write(path, data)
        storage.set_mtime(path, laid.wall_ms)
    segment = WrittenSegment(files.base_offset, files.log_size, files.next_offset - 1, files.max_timestamp)
    return segment, sum(len(d) for d in contents.values())


def _producer_snapshots(encoded: list[_Encoded], offsets: list[int]) -> dict[int, bytes]:
    """Producer-state snapshots at each of ``offsets`` (segment rolls and the log end), as a
    broker takes them: per producer its last data batch, coordinator epoch and open
    transaction, counting the batches below the offset."""
    state: dict[int, snapshot.ProducerEntry] = {}
    out, pending = {}, sorted(offsets)
    for item in [*encoded, None]:
        while pending and (item is None or item.batch.last_offset >= pending[0]):
            out[pending.pop(0)] = render_snapshot([state[pid] for pid in sorted(state)])
        if item is None or item.batch.producer_id < 0:
            continue
        b, prev = item.batch, state.get(item.batch.producer_id)
        if b.control:
            state[b.producer_id] = dataclasses.replace(
                prev, producer_epoch=b.producer_epoch, timestamp=b.max_timestamp,
                coordinator_epoch=COORDINATOR_EPOCH, current_txn_first_offset=-1)
            continue
        delta = b.last_offset - b.base_offset
        open_txn = prev.current_txn_first_offset if prev is not None else -1
        if b.transactional and open_txn < 0:
            open_txn = b.base_offset
        state[b.producer_id] = snapshot.ProducerEntry(
            b.producer_id, b.producer_epoch, (b.base_sequence + delta) % (_INT32_MAX + 1), b.last_offset, delta,
            b.max_timestamp, prev.coordinator_epoch if prev is not None else -1, open_txn)
    return out


def _write_snapshots(pdir: str, encoded: list[_Encoded], offsets: list[int],
                     write: Write = storage.write_durable) -> int:
    written = 0
    for offset, data in _producer_snapshots(encoded, offsets).items():
        path = storage.join(pdir, segment_name(offset, "snapshot"))
        write(path, data)
        storage.set_mtime(path, max(e.wall_ms for e in encoded if e.batch.last_offset < offset))
        written += len(data)
    return written


def _write_partition(out: str, topic: dict[str, Any], partition: int, seed: int, tid: str,
                     keep_records: bool, write: Write) -> tuple[PartitionTruth, int]:
    """The partition as it was before the cut (all of it without ``append_records``), into a
    new tree: ``write`` need not sync (``generate`` syncs the tree before it is renamed into place)."""
    producer = _produce(topic, partition, seed, keep_records)
    encoded = producer.encoded[:producer.cut]
    pdir = storage.join(out, f"{topic['name']}-{partition}")
    storage.makedirs(pdir)
    segments, written = [], 0
    laid_out = _laid_before(producer, topic)
    for laid in laid_out:
        segment, size = _write_segment(pdir, laid, write)
        segments.append(segment)
        written += size
    end = encoded[-1].batch.last_offset + 1
    written += _write_snapshots(pdir, encoded, [laid.files.base_offset for laid in laid_out[1:]] + [end], write)
    metadata = f"version: 0\ntopic_id: {tid}\n".encode()
    epochs = _leader_epoch_checkpoint({e: o for e, o in producer.leader_epochs.items() if o < end})
    write(storage.join(pdir, "leader-epoch-checkpoint"), epochs)
    write(storage.join(pdir, "partition.metadata"), metadata)
    broker_states.leave_partition(pdir, topic["broker_state"], [laid.files.base_offset for laid in laid_out],
                                  encoded, topic["config"], write)
    truth = _truth(topic, partition, encoded, producer.records, segments)
    return truth, written + len(epochs) + len(metadata)


def _append_partition(out: str, topic: dict[str, Any], partition: int, seed: int) -> PartitionTruth:
    """The batches after the cut, appended as the broker appends them: into the active segment,
    rolling as it fills; snapshots at the new rolls and the new log end."""
    producer = _produce(topic, partition, seed)
    pdir = storage.join(out, f"{topic['name']}-{partition}")
    before = _laid_before(producer, topic)
    after = _laid_after(producer, topic, before)
    active = before[-1]
    path = storage.join(pdir, segment_name(active.files.base_offset, "log"))
    if not storage.exists(path) or storage.read_bytes(path) != active.log:
        raise errors.UsageError(f"{path}: not the active segment this spec and seed wrote; cannot append to it")
    laid_out = [laid for laid in after if laid.files.base_offset >= active.files.base_offset]
    segments = [_write_segment(pdir, laid)[0] for laid in laid_out]
    _write_snapshots(pdir, producer.encoded, [laid.files.base_offset for laid in laid_out[1:]] + [producer.offset])
    storage.write_atomic(
        storage.join(pdir, "leader-epoch-checkpoint"), _leader_epoch_checkpoint(producer.leader_epochs)
    )
    return _truth(topic, partition, producer.encoded, producer.records, segments)
