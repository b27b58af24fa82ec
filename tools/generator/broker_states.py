"""The states real brokers leave on disk, on request (a spec's ``broker_state``): checkpoint files
created empty or not at all, closed segments without their indexes, index files whose ``.log`` is
gone, the active segment's indexes still preallocated after an unclean shutdown, the KRaft
``quorum-state`` and a metadata snapshot, a stale segment overlapping the one before it.

The bytes are this generator's own, written here by Kafka's rules (AbstractIndex, LogSegment.append,
FileQuorumStateStore, RecordsSnapshotWriter), never by the code a test checks."""

from __future__ import annotations

import json
import struct
from typing import Any

from kcompact import errors, storage
from kcompact.logdir.listing import METADATA_DIR, segment_name
from kcompact.readers import checkpoint
from kcompact.readers.records import Record
from kcompact.tools.generator.truth import _Encoded
from kcompact.writers.batch import encode_batch

ROOT_CHECKPOINTS = (checkpoint.CLEANER_OFFSET, checkpoint.LOG_START_OFFSET, checkpoint.RECOVERY_POINT,
                    checkpoint.REPLICATION_OFFSET)
PARTITION_FILES = ("leader-epoch-checkpoint", "partition.metadata")
INDEX_KINDS = ("index", "timeindex")
_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
QUORUM_STATE = "quorum-state"
NODE_ID = 1  # the broker (and controller) that the quorum-state names as leader
# KRaft control record types (ControlRecordType) and their value schemas' version 0
SNAPSHOT_HEADER, SNAPSHOT_FOOTER = 3, 4


def validate_log_dir(where: str, value: Any) -> dict[str, Any]:
    """The spec's top-level ``broker_state``, every key filled in."""
    fields = {"empty_checkpoints": [], "missing_checkpoints": [], "quorum_state": False, "metadata_snapshot": False}
    out = _fields(where, "broker_state", value, fields)
    for key in ("empty_checkpoints", "missing_checkpoints"):
        _names(where, f"broker_state.{key}", out[key], ROOT_CHECKPOINTS)
    for key in ("quorum_state", "metadata_snapshot"):
        if not isinstance(out[key], bool):
            raise _fail(where, f"broker_state.{key}", f"must be true or false, got {out[key]!r}")
    return out


def validate_topic(where: str, key: str, value: Any) -> dict[str, Any]:
    """A topic's ``broker_state`` (for every partition of it), every key filled in."""
    fields = {"missing_index": [], "missing_timeindex": [], "orphan_indexes": [], "preallocated_indexes": False,
              "stale_segment": None, "empty_files": [], "missing_files": []}
    out = _fields(where, key, value, fields)
    for name in ("missing_index", "missing_timeindex", "orphan_indexes"):
        if not isinstance(out[name], list) or not all(_is_int(i) for i in out[name]):
            raise _fail(where, f"{key}.{name}", f"must be a list of integers, got {out[name]!r}")
    if any(i < 0 for i in out["orphan_indexes"]):
        raise _fail(where, f"{key}.orphan_indexes", "must hold base offsets >= 0")
    if not isinstance(out["preallocated_indexes"], bool):
        raise _fail(where, f"{key}.preallocated_indexes", "must be true or false")
    if out["stale_segment"] is not None and not _is_int(out["stale_segment"]):
        raise _fail(where, f"{key}.stale_segment", f"must be a segment number, got {out['stale_segment']!r}")
    for name in ("empty_files", "missing_files"):
        _names(where, f"{key}.{name}", out[name], PARTITION_FILES)
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fail(where: str, key: str, why: str) -> errors.UsageError:
    return errors.UsageError(f"spec{' ' + where if where else ''}: {key!r} {why}")


def _fields(where: str, key: str, value: Any, fields: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, key, f"must be an object, got {value!r}")
    for name in value:
        if name not in fields:
            raise _fail(where, f"{key}.{name}", f"is not a broker state (known: {', '.join(fields)})")
    return {**fields, **value}


def _names(where: str, key: str, value: Any, known: tuple[str, ...]) -> None:
    if not isinstance(value, list) or any(v not in known for v in value):
        raise _fail(where, key, f"must be a list of names among {', '.join(known)}, got {value!r}")


NONE = validate_topic("", "broker_state", {})  # a topic's default: the files of a cleanly stopped broker


# -- a partition dir ------------------------------------------------------------------------------
def leave_partition(pdir: str, state: dict[str, Any], bases: list[int], encoded: list[_Encoded],
                    config: dict[str, Any], write) -> None:
    """Leave the topic's ``broker_state`` in the partition dir just written: ``bases`` its segments'
    base offsets, ``encoded`` its batches, ``write`` how a file is written."""
    if state == NONE:
        return
    if any(not -len(bases) <= i < len(bases) for key in ("missing_index", "missing_timeindex") for i in state[key]) \
            or (state["stale_segment"] is not None and not -len(bases) <= state["stale_segment"] < len(bases)):
        raise errors.UsageError(f"{pdir}: broker_state names a segment it does not have ({len(bases)} segments)")

    def pick(numbers: list[int]) -> set[int]:
        return {bases[i] for i in numbers}

    for kind in INDEX_KINDS:
        for base in pick(state[f"missing_{kind}"]):
            storage.remove(storage.join(pdir, segment_name(base, kind)))
    for base in state["orphan_indexes"]:
        if base in bases:
            raise errors.UsageError(f"{pdir}: broker_state orphan_indexes names {base}, a segment's base offset")
        for kind in INDEX_KINDS:  # a segment's own indexes after its .log was deleted: empty ones here
            write(storage.join(pdir, segment_name(base, kind)), b"")
    if state["preallocated_indexes"]:
        _preallocate(pdir, bases[-1], config.get("segment.index.bytes", 10 * 1024 * 1024), write)
    if state["stale_segment"] is not None:
        if bases[state["stale_segment"]] == bases[-1]:
            raise errors.UsageError(f"{pdir}: broker_state stale_segment must name a closed segment")
        lo = bases[state["stale_segment"]]
        hi = bases[bases.index(lo) + 1]
        batches = [e for e in encoded if lo <= e.batch.base_offset < hi]
        _stale_copy(pdir, batches, config.get("index.interval.bytes", 4096), write)
    for name in state["missing_files"]:
        storage.remove(storage.join(pdir, name))
    for name in state["empty_files"]:
        write(storage.join(pdir, name), b"")


def _preallocate(pdir: str, base: int, index_bytes: int, write) -> None:
    """The active segment's indexes as an unclean shutdown leaves them: preallocated to
    segment.index.bytes rounded down to whole entries (AbstractIndex), zeros after the entries."""
    for kind, entry in (("index", _OFFSET_ENTRY.size), ("timeindex", _TIME_ENTRY.size)):
        path = storage.join(pdir, segment_name(base, kind))
        data = storage.read_bytes(path)
        size = max(index_bytes // entry * entry, len(data))
        write(path, data + bytes(size - len(data)))


def _stale_copy(pdir: str, batches: list[_Encoded], interval: int, write) -> None:
    """A stale segment beside segment ``batches``: its second half again, named by the base offset
    of its middle batch, with the offset and time index LogSegment.append gives it."""
    if len(batches) < 2:
        raise errors.UsageError(f"{pdir}: broker_state stale_segment needs a segment of two batches or more")
    tail = batches[len(batches) // 2:]
    base = tail[0].batch.base_offset
    log, index, timeindex = bytearray(), bytearray(), bytearray()
    since, max_ts, max_ts_offset, last_ts = 0, -1, base, None
    for item in tail:
        b = item.batch
        if b.max_timestamp > max_ts:
            max_ts, max_ts_offset = b.max_timestamp, b.last_offset
        if since > interval:  # LogSegment.append: an entry once index.interval.bytes were appended since the last
            index += _OFFSET_ENTRY.pack(b.last_offset - base, len(log))
            if last_ts is None or max_ts > last_ts:
                timeindex += _TIME_ENTRY.pack(max_ts, max_ts_offset - base)
                last_ts = max_ts
            since = 0
        since += len(item.data)
        log += item.data
    if last_ts is None or max_ts > last_ts:  # onBecomeInactiveSegment: the largest timestamp's entry
        timeindex += _TIME_ENTRY.pack(max_ts, max_ts_offset - base)
    for kind, data in (("log", log), ("index", index), ("timeindex", timeindex)):
        write(storage.join(pdir, segment_name(base, kind)), bytes(data))


# -- the log dir ------------------------------------------------------------------------------------
def leave_log_dir(out: str, state: dict[str, Any], metadata_values: list[list[bytes]], start_ms: int,
                  write) -> None:
    """Leave the spec's top-level ``broker_state`` in the log dir at ``out``: ``metadata_values``
    the metadata log's records, batch by batch, as ``_write_metadata_log`` wrote them."""
    for name in state["missing_checkpoints"]:
        storage.remove(storage.join(out, name))
    for name in state["empty_checkpoints"]:
        write(storage.join(out, name), b"")
    mdir = storage.join(out, METADATA_DIR)
    if state["quorum_state"]:
        write(storage.join(mdir, QUORUM_STATE), quorum_state(NODE_ID, 1))
    if state["metadata_snapshot"]:
        end = sum(len(v) for v in metadata_values)
        name = f"{end:020d}-{0:010d}.checkpoint"
        write(storage.join(mdir, name), metadata_snapshot(metadata_values, start_ms))


def quorum_state(leader: int, epoch: int) -> bytes:
    """FileQuorumStateStore's JSON (data_version 0, as 3.x writes it): the leader and its epoch."""
    return json.dumps({"clusterId": "", "leaderId": leader, "leaderEpoch": epoch, "votedId": -1,
                       "appliedOffset": 0, "currentVoters": [{"voterId": leader}], "data_version": 0},
                      separators=(",", ":")).encode()


def _control(offset: int, kind: int, value: bytes, ts: int) -> bytes:
    key = struct.pack(">hh", 0, kind)  # ControlRecordType's key: version 0, type
    return encode_batch([Record(offset, ts, key, value)], base_offset=offset, control=True)


def metadata_snapshot(values: list[list[bytes]], ts: int) -> bytes:
    """A snapshot as RecordsSnapshotWriter writes one: a SnapshotHeader control batch (version,
    LastContainedLogTimestamp, no tags) at offset 0, the records from offset 1, a SnapshotFooter."""
    out, offset = [_control(0, SNAPSHOT_HEADER, struct.pack(">hqB", 0, ts, 0), ts)], 1
    for batch in values:
        out.append(encode_batch([Record(offset + i, ts, None, v) for i, v in enumerate(batch)], base_offset=offset))
        offset += len(batch)
    out.append(_control(offset, SNAPSHOT_FOOTER, struct.pack(">hB", 0, 0), ts))
    return b"".join(out)
