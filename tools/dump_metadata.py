"""``kcompact dump`` of a KRaft metadata partition dir (``__cluster_metadata-0``), as
``kafka-dump-log --cluster-metadata-decoder`` shows it: segments and ``*.checkpoint``
snapshots batch by batch, each metadata record's payload decoded where ``readers.metadata``
decodes it (the records configuration and the release depend on) and otherwise named as not
decoded (its apiKey and version); KRaft's control records by their type; ``quorum-state``
(the raft election state, a JSON file) printed as it is. Nothing else of the dir is read.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re

from kcompact import errors, storage
from kcompact.errors import FormatError, Problem
from kcompact.readers import metadata
from kcompact.readers.batch import Batch
from kcompact.readers.records import CONTROL_TYPES, Record, control_type

QUORUM_STATE = "quorum-state"
_SEGMENT = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
# ControlRecordType beyond the transaction markers: what the raft layer writes
KRAFT_CONTROL_TYPES = {**CONTROL_TYPES, 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                       5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
_NAMES = {metadata.TopicRecord: "TOPIC_RECORD", metadata.ConfigRecord: "CONFIG_RECORD",
          metadata.RemoveTopicRecord: "REMOVE_TOPIC_RECORD", metadata.FeatureLevelRecord: "FEATURE_LEVEL_RECORD"}


def files_of(path: str) -> tuple[list[str], list[str], list[str]]:
    """The metadata dir's segments and snapshots (sorted by offset) and its other files."""
    files, _ = storage.list_dir(path)
    logs, snapshots, other = [], [], []
    for info in sorted(files, key=lambda i: i.path):
        name = posixpath.basename(info.path)
        (logs if _SEGMENT.match(name) else snapshots if _SNAPSHOT.match(name) else other).append(info.path)
    return logs, snapshots, other


def is_snapshot(name: str) -> bool:
    """Whether ``name`` is a KRaft snapshot's (``<end offset>-<epoch>.checkpoint``)."""
    return _SNAPSHOT.match(name) is not None


def snapshot_offsets(path: str) -> tuple[int, int]:
    """(end offset, epoch) of a snapshot by its name."""
    match = _SNAPSHOT.match(posixpath.basename(path))
    return int(match[1]), int(match[2])


def payload(batch: Batch, record: Record) -> dict:
    """A record's fields beyond DumpLogSegments' common ones: the decoded payload, or what it is."""
    if batch.is_control:
        kind = control_type(record)
        return {"controlType": KRAFT_CONTROL_TYPES.get(kind, f"UNKNOWN({kind})")}
    if record.value is None:
        return {"payload": None}
    try:
        decoded = metadata.decode(record.value)
    except errors.MetadataError as exc:
        raise FormatError(batch.path, batch.position, f"metadata record at offset {record.offset}: byte "
                                                      f"{exc.position} of its value: {exc.what}") from None
    if isinstance(decoded, metadata.OtherRecord):
        return {"payload": {"apiKey": decoded.api_key, "version": decoded.version,
                            "data": "not decoded (kcompact decodes the topic, config and feature level records)"}}
    return {"payload": {"type": _NAMES[type(decoded)], "data": dataclasses.asdict(decoded)}}


def quorum_state(path: str) -> tuple[dict | None, Problem | None]:
    """``quorum-state``'s JSON (FileQuorumStateStore), or what is wrong with it."""
    data = storage.read_bytes(path)
    try:
        return json.loads(data), None
    except (ValueError, UnicodeDecodeError) as exc:
        return None, Problem(path, getattr(exc, "pos", None), f"not the JSON a quorum-state holds: {exc}")
