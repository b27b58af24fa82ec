"""Topic configurations recorded in a log dir's KRaft metadata log (``__cluster_metadata-0``),
so that a broker's own log dir needs no hand-written configuration, and the finalized
``metadata.version``, which names the cluster's Kafka release line (``conf.releases.detected``).

The controller keeps the metadata log as segments (``<base offset>.log``) and snapshots
(``<end offset>-<epoch>.checkpoint``, record batches too) whose records describe the state
of every offset below the end offset; older segments may already be deleted. The state is
rebuilt as a broker rebuilds it: the latest snapshot, then the log from its end offset.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from kcompact import errors, storage
from kcompact.errors import FormatError
from kcompact.logdir.listing import METADATA_DIR
from kcompact.readers import metadata
from kcompact.readers.batch import Batch
from kcompact.readers.records import Record
from kcompact.readers.segment import iter_batches
from kcompact.storage import FileInfo

_SEGMENT = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")

# what a log dir says of its release: (the log dir, its finalized metadata.version level or None,
# where it was looked for)
Detection = tuple[str, int | None, str]
MetadataSource = tuple[dict[str, str], dict[str, dict[str, str]], str, Detection]


@dataclass(slots=True)
class MetadataConfigs:
    """Configurations as of the end of the metadata log.

    ``broker_defaults`` are the cluster-wide broker configs (empty resource name);
    ``per_broker`` holds the configs of single brokers by id, which are not defaults of anything.
    """

    source: str
    broker_defaults: dict[str, str] = field(default_factory=dict)
    topics: dict[str, dict[str, str]] = field(default_factory=dict)
    topic_ids: dict[str, str] = field(default_factory=dict)
    per_broker: dict[str, dict[str, str]] = field(default_factory=dict)
    metadata_version: int | None = None  # the finalized metadata.version level
    _names: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)  # id -> name

    def as_source(self, log_dir: str, metadata_dir: str) -> MetadataSource:
        """What ``conf.resolve.build(metadata=[...])`` takes."""
        return self.broker_defaults, self.topics, self.source, (log_dir, self.metadata_version, metadata_dir)

    def apply(self, record: metadata.MetadataRecord) -> None:
        if isinstance(record, metadata.TopicRecord):
            self.topic_ids[record.name] = record.topic_id
            self._names[record.topic_id] = record.name
            self.topics.setdefault(record.name, {})
        elif isinstance(record, metadata.RemoveTopicRecord):
            name = self._names.pop(record.topic_id, None)
            if name is not None:  # a removal of an unknown id changes nothing, as in Kafka
                self.topic_ids.pop(name, None)
                self.topics.pop(name, None)
        elif isinstance(record, metadata.ConfigRecord):
            self._apply_config(record)
        elif isinstance(record, metadata.FeatureLevelRecord) and record.name == metadata.METADATA_VERSION:
            self.metadata_version = record.feature_level or None  # level 0 removes it

    def _apply_config(self, record: metadata.ConfigRecord) -> None:
        if record.resource_type == metadata.RESOURCE_TOPIC:
            values = self.topics.setdefault(record.resource_name, {})
        elif record.resource_type == metadata.RESOURCE_BROKER and not record.resource_name:
            values = self.broker_defaults
        elif record.resource_type == metadata.RESOURCE_BROKER:
            values = self.per_broker.setdefault(record.resource_name, {})
        else:  # loggers, client metrics, groups: nothing cleaning reads
            return
        if record.value is None:
            values.pop(record.name, None)
        else:
            values[record.name] = record.value


def _listing(metadata_dir: str) -> tuple[list[tuple[int, FileInfo]], list[tuple[int, int, FileInfo]]]:
    """Segments (base offset, file) and snapshots (end offset, epoch, file), sorted."""
    files, _ = storage.list_dir(metadata_dir)
    segments, snapshots = [], []
    for info in files:
        name = posixpath.basename(info.path)
        if match := _SEGMENT.match(name):
            segments.append((int(match[1]), info))
        elif match := _SNAPSHOT.match(name):
            snapshots.append((int(match[1]), int(match[2]), info))
    return sorted(segments, key=lambda s: s[0]), sorted(snapshots, key=lambda s: s[:2])


def _segments_from(segments: list[tuple[int, FileInfo]], start: int) -> list[FileInfo]:
    """The segments that may hold offsets >= ``start`` (a segment ends where the next begins)."""
    return [info for i, (_, info) in enumerate(segments) if i + 1 == len(segments) or segments[i + 1][0] > start]


def _decode(batch: Batch, record: Record) -> metadata.MetadataRecord:
    where = f"batch at offset {batch.base_offset_field}: metadata record at offset {record.offset}"
    if record.value is None:
        raise FormatError(batch.path, batch.position, f"{where} has no value")
    try:
        return metadata.decode(record.value)
    except errors.MetadataError as exc:
        raise FormatError(
            batch.path, batch.position, f"{where}: byte {exc.position} of its value: {exc.what}"
        ) from None


def _replay(state: MetadataConfigs, info: FileInfo, start: int) -> None:
    """Apply the records at offsets >= ``start`` of one file; control batches (leader changes,
    snapshot headers and footers, voter sets) carry no configuration."""
    path = info.path
    with storage.open_read(path, info.size) as f:
        for batch in iter_batches(f, path):
            if batch.is_control or batch.last_offset < start:
                continue
            for record in batch.records():
                if record.offset >= start:
                    state.apply(_decode(batch, record))


def read_metadata(metadata_dir: str) -> MetadataConfigs | None:
    """The configurations a metadata partition dir records; None when it holds no log or snapshot."""
    segments, snapshots = _listing(metadata_dir)
    if not segments and not snapshots:
        return None
    state = MetadataConfigs(f"kraft-metadata {metadata_dir}")
    start = 0
    if snapshots:
        start, _, snapshot = snapshots[-1]
        _replay(state, snapshot, 0)
    for info in _segments_from(segments, start):
        _replay(state, info, start)
    return state


def metadata_sources(logdir_paths: list[str]) -> list[MetadataSource]:
    """The ``conf.resolve.build(metadata=...)`` source of each log dir: what its metadata log
    records (nothing when it holds none)."""
    sources = []
    for path in logdir_paths:
        _, dirs = storage.list_dir(path)  # the root listing only: partition dirs need not be listed
        metadata_dir = next((d for d in dirs if posixpath.basename(d.rstrip("/")) == METADATA_DIR), None)
        configs = read_metadata(metadata_dir) if metadata_dir else None
        log_dir = path.rstrip("/")
        if configs is not None:
            sources.append(configs.as_source(log_dir, metadata_dir.rstrip("/")))
        else:
            sources.append(({}, {}, log_dir, (log_dir, None, None)))  # no KRaft metadata to read
    return sources
