"""Generate realistic Kafka log dirs, and the truth of what they hold.

A generated dir is what a Kafka 3.x broker leaves after a clean shutdown: v2
batches from plain, idempotent and transactional producers (with commits,
aborts, epoch bumps and optionally one transaction left open), optionally after
an old broker's magic-0/1 messages, segments rolled at ``segment.bytes`` or a
full index with the broker's index rules, ``.txnindex`` files, per-partition
metadata and the log-dir checkpoints. ``GenResult`` says record by record what
was written, so tests can use it as their expected answer. A spec may hold
records back (``append_records``): ``append`` writes them later, as producers
would between two cleaning rounds.

Same spec and seed give the same bytes: every random choice comes from a
``random.Random`` seeded per partition, nothing reads the clock, and all I/O
goes through ``storage`` (local paths and ``s3://`` alike).
"""

from __future__ import annotations

import base64
import bisect
import copy
import dataclasses
import hashlib
import io
import json
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import storage
from logdir.listing import METADATA_DIR
from readers import checkpoint, codecs, snapshot
from readers.indexes import AbortedTxn
from logdir.listing import segment_name
from readers.records import ABORT, COMMIT, Header, Record, control_key, control_value
from readers.batch import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP
from writers import legacy, metadata
from writers.batch import encode_batch
from writers.segment import DEFAULT_INDEX_INTERVAL_BYTES, SegmentFiles, SegmentWriter
from writers.checkpoint import render_checkpoint
from writers.snapshot import render_snapshot

IDEMPOTENT_PID_BASE = 598000
TRANSACTIONAL_PID_BASE = 598500
DEFAULT_SEGMENT_BYTES = 1 << 30
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024
LOG_APPEND_DELAY_MS = 5  # log_append_time topics: the broker appends a batch this long after its last record
DEFAULT_START_MS = 1720000000000
COORDINATOR_EPOCH = 0
def _leader_epoch_checkpoint(epochs: dict[int, int]) -> bytes:
    """leader-epoch-checkpoint: version 0, the count, then ``epoch start-offset`` per epoch."""
    return (f"0\n{len(epochs)}\n" + "".join(f"{e} {o}\n" for e, o in sorted(epochs.items()))).encode()
ROOT_CHECKPOINTS = (
    "cleaner-offset-checkpoint",
    "log-start-offset-checkpoint",
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
)
_INT32_MAX = (1 << 31) - 1
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_WORDS = (
    "alfa", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "0", "1", "2", "3", "42", "1000",
)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"

DEMO_SPEC: dict[str, Any] = {
    "start_ms": DEFAULT_START_MS,
    "topics": [
        {
            "name": "orders",
            "partitions": 4,
            "config": {"cleanup.policy": "compact", "segment.bytes": 65536, "index.interval.bytes": 4096,
                       "delete.retention.ms": 600000, "min.cleanable.dirty.ratio": 0.5},
            "records": 3000,
            "keys": 400,
            "key_distribution": "skewed",
            "key_skew": 1.2,
            "key_size": 12,
            "value_size": [10, 150],
            "tombstone_fraction": 0.06,
            "keyless_fraction": 0.01,
            "headers": 1,
            "codecs": {"none": 2, "gzip": 1, "snappy": 1, "lz4": 2, "zstd": 1},
            "batch_records": [1, 25],
            "timestamp_step_ms": 25,
            "idempotent_fraction": 0.35,
            "idempotent_producers": 3,
            "transactional_fraction": 0.3,
            "transactional_producers": 3,
            "txn_batches": [1, 3],
            "abort_ratio": 0.35,
            "open_transaction": True,
            "checkpoint": {"1": 0.3, "2": 0.6},
        },
        {
            "name": "clicks",
            "partitions": 2,
            "config": {"cleanup.policy": "delete", "segment.bytes": 32768, "retention.ms": 604800000},
            "records": 2000,
            "keys": 1000,
            "value_size": [20, 80],
            "codecs": {"none": 1, "lz4": 1, "zstd": 1},
            "batch_records": [5, 40],
            "timestamp_step_ms": 50,
        },
        {
            "name": "users",
            "partitions": 2,
            "config": {"cleanup.policy": "compact,delete", "segment.bytes": 65536, "retention.ms": 604800000},
            "records": 1500,
            "keys": 300,
            "key_distribution": "uniform",
            "key_size": 8,
            "value_size": [30, 200],
            "tombstone_fraction": 0.1,
            "codecs": {"none": 1, "snappy": 1},
            "batch_records": [1, 10],
            "timestamp_step_ms": 60,
            "idempotent_fraction": 1.0,
            "idempotent_producers": 2,
            "checkpoint": {"0": 0.5},
        },
    ],
}


# -- spec validation -------------------------------------------------------------------

Check = Callable[[str, str, Any], Any]


def _fail(where: str, key: str, why: str) -> ValueError:
    return ValueError(f"spec{' ' + where if where else ''}: {key!r} {why}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(minimum: int, maximum: int | None = None) -> Check:
    def check(where: str, key: str, value: Any) -> int:
        if not _is_int(value) or value < minimum or (maximum is not None and value > maximum):
            span = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
            raise _fail(where, key, f"must be an integer {span}, got {value!r}")
        return value
    return check


def _number(minimum: float, maximum: float | None = None) -> Check:
    def check(where: str, key: str, value: Any) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or value < minimum or (maximum is not None and value > maximum):
            span = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
            raise _fail(where, key, f"must be a number {span}, got {value!r}")
        return value
    return check


def _pair(minimum: int) -> Check:
    def check(where: str, key: str, value: Any) -> list[int]:
        if (
            not isinstance(value, (list, tuple)) or len(value) != 2 or not all(_is_int(v) for v in value)
            or not minimum <= value[0] <= value[1]
        ):
            raise _fail(where, key, f"must be [min, max] integers with {minimum} <= min <= max, got {value!r}")
        return list(value)
    return check


def _choice(*options: str) -> Check:
    def check(where: str, key: str, value: Any) -> str:
        if value not in options:
            raise _fail(where, key, f"must be one of {', '.join(options)}, got {value!r}")
        return value
    return check


def _boolean(where: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(where, key, f"must be true or false, got {value!r}")
    return value


def _key_size(where: str, key: str, value: Any) -> int | list[int] | None:
    """None (``key-<n>``), a fixed size, or [min, max]: each key its own size in that range."""
    if value is None or _is_int(value):
        return None if value is None else _integer(1)(where, key, value)
    return _pair(1)(where, key, value)


def _optional_int(where: str, key: str, value: Any) -> int | None:
    return None if value is None else _integer(0)(where, key, value)


def _optional_size(where: str, key: str, value: Any) -> int | None:
    return None if value is None else _integer(14, _INT32_MAX)(where, key, value)


def _optional_fraction(where: str, key: str, value: Any) -> float | None:
    return None if value is None else _number(0, 1)(where, key, value)


def _codec_weights(where: str, key: str, value: Any) -> dict[str, float]:
    if not isinstance(value, dict) or not value:
        raise _fail(where, key, f"must be a non-empty object of codec name -> weight, got {value!r}")
    for name, weight in value.items():
        if name not in codecs.BY_NAME:
            raise _fail(where, key, f"names unknown codec {name!r} (known: {', '.join(codecs.BY_NAME)})")
        _number(0)(where, f"{key}.{name}", weight)
    if not sum(value.values()) > 0:
        raise _fail(where, key, "needs a positive weight")
    return dict(value)


_CHECKPOINT_FORMS = ("offset", "segment", "past_end", "below_start")


def _checkpoint_positions(where: str, key: str, value: Any) -> dict[int, float | dict[str, int]]:
    """partition -> a fraction of the log end (the start of the batch holding it), or one of
    {"offset": n}, {"segment": i} (base offset of segment i, -1 the active one),
    {"past_end": d} (log end + d), {"below_start": d} (log start - d)."""
    if not isinstance(value, dict):
        raise _fail(where, key, f"must be an object of partition -> position, got {value!r}")
    out: dict[int, float | dict[str, int]] = {}
    for partition, position in value.items():
        text = str(partition)
        if not text.isdigit():
            raise _fail(where, key, f"has partition {partition!r}, not a partition number")
        name = f"{key}.{text}"
        if isinstance(position, dict):
            if len(position) != 1 or next(iter(position)) not in _CHECKPOINT_FORMS:
                raise _fail(where, name, f"must be a fraction or one of {{{', '.join(_CHECKPOINT_FORMS)}: n}}, "
                                         f"got {position!r}")
            form, n = next(iter(position.items()))
            if form == "segment":
                check = _integer(-(1 << 31), _INT32_MAX)
            elif form == "offset":
                check = _integer(0)
            else:
                check = _integer(1)
            out[int(text)] = {form: check(where, f"{name}.{form}", n)}
        else:
            out[int(text)] = _number(0, 1)(where, name, position)
    return dict(sorted(out.items()))


_LEGACY_CODECS = ("none", "gzip", "snappy", "lz4")  # Kafka refuses zstd below magic 2


def _legacy(where: str, key: str, value: Any) -> dict[str, Any] | None:
    """Messages of old brokers before the v2 batches: ``magic0`` then ``magic1`` messages, each an
    entry of its own (codec none) or in compressed wrappers of ``wrapper_records`` messages."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail(where, key, f"must be an object, got {value!r}")
    fields = {"magic0": (_integer(0), 0), "magic1": (_integer(0), 0), "codecs": (_codec_weights, {"none": 1}),
              "wrapper_records": (_pair(1), [1, 10])}
    for name in value:
        if name not in fields:
            raise _fail(where, f"{key}.{name}", f"is not a legacy key (known: {', '.join(fields)})")
    out = {name: check(where, f"{key}.{name}", value[name]) if name in value else copy.deepcopy(default)
           for name, (check, default) in fields.items()}
    for name in out["codecs"]:
        if name not in _LEGACY_CODECS:
            raise _fail(where, f"{key}.codecs", f"names {name!r}: magic 0/1 messages take {', '.join(_LEGACY_CODECS)}")
    return out


def _cleanup_policy(where: str, key: str, value: Any) -> str:
    parts = value.split(",") if isinstance(value, str) else []
    if not parts or any(p.strip() not in ("compact", "delete") for p in parts):
        raise _fail(where, key, f"must be compact, delete or compact,delete, got {value!r}")
    return value


_CONFIG_CHECKS: dict[str, Check] = {
    "cleanup.policy": _cleanup_policy,
    "segment.bytes": _integer(14, _INT32_MAX),
    "segment.index.bytes": _integer(4, _INT32_MAX),
    "index.interval.bytes": _integer(0, _INT32_MAX),
    "delete.retention.ms": _integer(0),
    "min.compaction.lag.ms": _integer(0),
    "max.compaction.lag.ms": _integer(1),
    "min.cleanable.dirty.ratio": _number(0, 1),
    "max.message.bytes": _integer(0, _INT32_MAX),
    "retention.ms": _integer(-1),
    "retention.bytes": _integer(-1),
}


def _topic_config(where: str, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, key, f"must be an object of Kafka topic configs, got {value!r}")
    for name, setting in value.items():
        if name not in _CONFIG_CHECKS:
            raise _fail(where, f"{key}.{name}", "is not a topic config this generator knows")
        _CONFIG_CHECKS[name](where, f"{key}.{name}", setting)
    return dict(value)


# key -> (check, default); timestamp_start_ms defaults to the spec's start_ms.
_TOPIC_FIELDS: dict[str, tuple[Check, Any]] = {
    "partitions": (_integer(1, 10000), 1),
    "config": (_topic_config, {}),
    "records": (_integer(1), 1000),
    "keys": (_integer(1), 100),
    "key_distribution": (_choice("skewed", "uniform"), "uniform"),
    "key_skew": (_number(0), 1.0),
    "key_size": (_key_size, None),
    "value_size": (_pair(0), [10, 100]),
    "tombstone_fraction": (_number(0, 1), 0.0),
    "keyless_fraction": (_number(0, 1), 0.0),
    "headers": (_integer(0), 0),
    "codecs": (_codec_weights, {"none": 1}),
    "batch_records": (_pair(1), [1, 20]),
    "timestamp_start_ms": (_optional_int, None),
    "timestamp_step_ms": (_integer(0), 100),
    "idempotent_fraction": (_number(0, 1), 0.0),
    "idempotent_producers": (_integer(1, 500), 1),
    "transactional_fraction": (_number(0, 1), 0.0),
    "transactional_producers": (_integer(1, 500), 1),
    "txn_batches": (_pair(1), [1, 3]),
    "abort_ratio": (_number(0, 1), 0.0),
    "open_transaction": (_boolean, False),
    "checkpoint": (_checkpoint_positions, {}),
    "epoch_bump_ratio": (_number(0, 1), 0.0),
    "log_start": (_optional_fraction, None),
    "legacy": (_legacy, None),
    "append_records": (_integer(0), 0),
    "append_gap_ms": (_integer(0), 0),
    "log_append_time": (_boolean, False),
    "empty_active": (_boolean, False),
    "timestamp_jitter_ms": (_integer(0), 0),
    "leader_change_ratio": (_number(0, 1), 0.0),
    "layout_segment_bytes": (_optional_size, None),
}
_SPEC_KEYS = ("seed", "start_ms", "topics")


def _is_compacted(config: dict[str, Any]) -> bool:
    return "compact" in (p.strip() for p in config.get("cleanup.policy", "delete").split(","))


def _validate_topic(index: int, topic: Any, start_ms: int) -> dict[str, Any]:
    if not isinstance(topic, dict):
        raise ValueError(f"spec topics[{index}]: must be an object, got {topic!r}")
    name = topic.get("name")
    if not isinstance(name, str) or not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise _fail(f"topics[{index}]", "name", f"must be a Kafka topic name ([A-Za-z0-9._-], 1-249), got {name!r}")
    where = f"topics[{index}] ({name})"
    for key in topic:
        if key != "name" and key not in _TOPIC_FIELDS:
            raise _fail(where, key, "is not a known topic key")
    out: dict[str, Any] = {"name": name}
    for key, (check, default) in _TOPIC_FIELDS.items():
        out[key] = check(where, key, topic[key]) if key in topic else copy.deepcopy(default)
    if out["timestamp_start_ms"] is None:
        out["timestamp_start_ms"] = start_ms
    if out["idempotent_fraction"] + out["transactional_fraction"] > 1:
        raise _fail(where, "transactional_fraction", "plus idempotent_fraction must not exceed 1")
    for partition in out["checkpoint"]:
        if partition >= out["partitions"]:
            raise _fail(where, "checkpoint", f"names partition {partition}, but the topic has {out['partitions']}")
    if out["checkpoint"] and not _is_compacted(out["config"]):
        raise _fail(where, "checkpoint", "is only for topics whose cleanup.policy includes compact")
    return out


def validate(spec: Any) -> dict[str, Any]:
    """A normalized deep copy of ``spec`` with every default filled in; ValueError names a bad key."""
    if not isinstance(spec, dict):
        raise ValueError(f"spec must be a JSON object, got {type(spec).__name__}")
    for key in spec:
        if key not in _SPEC_KEYS:
            raise _fail("", key, f"is not a known spec key (known: {', '.join(_SPEC_KEYS)})")
    out: dict[str, Any] = {}
    if "seed" in spec:
        out["seed"] = _integer(0)("", "seed", spec["seed"])
    out["start_ms"] = _integer(0)("", "start_ms", spec.get("start_ms", DEFAULT_START_MS))
    topics = spec.get("topics")
    if not isinstance(topics, list) or not topics:
        raise _fail("", "topics", f"must be a non-empty list, got {topics!r}")
    out["topics"] = [_validate_topic(i, t, out["start_ms"]) for i, t in enumerate(topics)]
    names = [t["name"] for t in out["topics"]]
    for name in names:
        if names.count(name) > 1:
            raise _fail("", "topics", f"names topic {name!r} twice")
    return out


def load_spec(path: str | None) -> dict[str, Any]:
    """The spec in the JSON file ``path`` (local or s3://), or the built-in demo for None.

    A ``seed`` in the file is kept as a record of how a fixture was made; the
    seed given to ``generate`` is the one used.
    """
    if path is None:
        return validate(DEMO_SPEC)
    try:
        spec = json.loads(storage.read_bytes(path))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from None
    return validate(spec)


def override(
    spec: dict[str, Any],
    records: int | None = None,
    partitions: int | None = None,
    segment_bytes: int | None = None,
    start_ms: int | None = None,
) -> dict[str, Any]:
    """A new spec with the given values applied to every topic (None leaves a value as it is).

    Fewer partitions drop the checkpoint entries of the partitions that no longer exist.
    """
    out = validate(spec)
    if start_ms is not None:
        out["start_ms"] = start_ms
    for topic in out["topics"]:
        if records is not None:
            topic["records"] = records
        if partitions is not None:
            topic["partitions"] = partitions
            topic["checkpoint"] = {p: f for p, f in topic["checkpoint"].items() if p < partitions}
        if segment_bytes is not None:
            topic["config"]["segment.bytes"] = segment_bytes
        if start_ms is not None:
            topic["timestamp_start_ms"] = start_ms
    return validate(out)


# -- the truth -------------------------------------------------------------------------


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
            f"wrote {self.out} (seed {self.seed}): {len(self.topic_configs)} topics, {len(self.partitions)} partitions, "
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
    return sum(1 for p in parts for r in p.records if r.control is None)


# -- producing one partition's batches -------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Producer:
    producer_id: int
    epoch: int  # the first epoch; an epoch bump moves _PartitionProducer.epochs on
    transactional: bool


@dataclass(slots=True)
class _OpenTxn:
    first_offset: int
    batches_left: int


@dataclass(slots=True)
class _Encoded:
    data: bytes
    batch: WrittenBatch
    aborted: AbortedTxn | None = None
    wall_ms: int = 0  # when the broker appended it: its records' nominal time (magic 0 has no timestamps)


@dataclass(slots=True)
class _PartitionProducer:
    """Plays a partition's producers against one random stream, batch by batch. With
    ``append_records`` the stream goes on after ``records`` data records: ``cut`` is the index of
    the first batch written after that point (appended between cleaning rounds)."""

    topic: dict[str, Any]
    rng: random.Random
    keep_open: bool
    keep_records: bool = True  # False: no per-record truth (a benchmark corpus of millions)
    offset: int = 0
    records: list[WrittenRecord] = field(default_factory=list)
    encoded: list[_Encoded] = field(default_factory=list)
    sequences: dict[int, int] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)
    open_txns: dict[int, _OpenTxn] = field(default_factory=dict)
    cut: int | None = None
    leader_epoch: int = 0
    leader_epochs: dict[int, int] = field(default_factory=dict)  # epoch -> first offset (leader-epoch-checkpoint)
    _key_cdf: list[float] = field(default_factory=list)
    _key_sizes: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.topic["key_distribution"] == "skewed":
            s = self.topic["key_skew"]
            self._key_cdf = list(accumulate((k + 1) ** -s for k in range(self.topic["keys"])))

    def run(self) -> None:
        t = self.topic
        if t["legacy"]:
            self._legacy()
        plain = _Producer(-1, -1, False)
        idempotent = [_Producer(IDEMPOTENT_PID_BASE + i, 0, False) for i in range(t["idempotent_producers"])]
        txn = [_Producer(TRANSACTIONAL_PID_BASE + i, 1 + i, True) for i in range(t["transactional_producers"])]
        remaining = t["records"] + t["append_records"]
        before_cut = t["records"] if t["append_records"] else remaining  # data records before the cut
        while remaining:
            force_txn = self.keep_open and not self.open_txns and remaining <= t["batch_records"][1]
            draw = self.rng.random()
            if force_txn or draw < t["transactional_fraction"]:
                producer = self.rng.choice(txn)
            elif draw < t["transactional_fraction"] + t["idempotent_fraction"]:
                producer = self.rng.choice(idempotent)
            else:
                producer = plain
            state = self.open_txns.get(producer.producer_id)
            if state is not None and state.batches_left == 0:
                self._end_txn(producer)
                continue
            n = min(self.rng.randint(*t["batch_records"]), remaining, before_cut if before_cut > 0 else remaining)
            self._data_batch(producer, n)
            remaining -= n
            before_cut -= n
            if before_cut == 0 and remaining and self.cut is None:
                self.cut = len(self.encoded)
        self._end_all(txn)

    def _end_all(self, producers: list[_Producer]) -> None:
        """Close every transaction, except the latest one when one must stay open."""
        keep = max(self.open_txns, key=lambda pid: self.open_txns[pid].first_offset) if self.keep_open else None
        for producer in producers:
            if producer.producer_id in self.open_txns and producer.producer_id != keep:
                self._end_txn(producer)

    def _epoch(self, producer: _Producer) -> int:
        return self.epochs.get(producer.producer_id, producer.epoch)

    def _maybe_bump_epoch(self, producer: _Producer) -> bool:
        """With ``epoch_bump_ratio``, the producer's epoch moves on (its sequence restarts at 0);
        no random draw when the ratio is 0, so older specs give the same bytes."""
        ratio = self.topic["epoch_bump_ratio"]
        if not ratio or self.rng.random() >= ratio:
            return False
        self.epochs[producer.producer_id] = self._epoch(producer) + 1
        self.sequences[producer.producer_id] = 0
        return True

    def _data_batch(self, producer: _Producer, n: int) -> None:
        t = self.topic
        pid = producer.producer_id
        if producer.transactional:
            state = self.open_txns.get(pid)
            if state is None:
                state = self.open_txns[pid] = _OpenTxn(self.offset, self.rng.randint(*t["txn_batches"]))
            state.batches_left -= 1
        elif pid >= 0:
            self._maybe_bump_epoch(producer)  # an idempotent producer re-initialised (KIP-360)
        records = [self._record(pid, producer.transactional) for _ in range(n)]
        codec = codecs.BY_NAME[self.rng.choices(list(t["codecs"]), weights=list(t["codecs"].values()))[0]]
        sequence = self.sequences.get(pid, 0) if pid >= 0 else -1
        if pid >= 0:
            self.sequences[pid] = (sequence + n) % (_INT32_MAX + 1)
        self._append(records, codec, producer, self._epoch(producer), sequence)

    def _end_txn(self, producer: _Producer) -> None:
        kind = ABORT if self.rng.random() < self.topic["abort_ratio"] else COMMIT
        # the coordinator may end the transaction with a bumped epoch (a timeout, or a
        # transaction version that bumps at every end): the marker carries the new epoch
        self._maybe_bump_epoch(producer)
        state = self.open_txns.pop(producer.producer_id)
        marker = WrittenRecord(
            self.offset, self._timestamp(self.offset), control_key(kind), control_value(COORDINATOR_EPOCH),
            (), producer.producer_id, True, kind,
        )
        self.offset += 1
        aborted = None
        if kind == ABORT:
            stable = min((o.first_offset for o in self.open_txns.values()), default=marker.offset + 1)
            aborted = AbortedTxn(producer.producer_id, state.first_offset, marker.offset, stable)
        self._append([marker], codecs.NONE, producer, self._epoch(producer), -1, aborted)

    def _append(
        self, records: list[WrittenRecord], codec: int, producer: _Producer, epoch: int, sequence: int,
        aborted: AbortedTxn | None = None,
    ) -> None:
        control = records[0].control is not None
        if self.topic["leader_change_ratio"] and self.rng.random() < self.topic["leader_change_ratio"]:
            self.leader_epoch += 1  # a new leader appends from here on
        self.leader_epochs.setdefault(self.leader_epoch, records[0].offset)
        max_timestamp = max(r.timestamp for r in records)
        stamp = {}
        if self.topic["log_append_time"]:  # the broker stamps the batch: every record reads as its append time
            max_timestamp += LOG_APPEND_DELAY_MS
            stamp = {"timestamp_type": LOG_APPEND_TIME, "max_timestamp": max_timestamp}
        data = encode_batch(
            [Record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records],
            base_offset=records[0].offset, codec=codec, producer_id=producer.producer_id,
            producer_epoch=epoch, base_sequence=sequence, partition_leader_epoch=self.leader_epoch,
            transactional=producer.transactional, control=control, **stamp,
        )
        batch = WrittenBatch(
            records[0].offset, records[-1].offset, codec, producer.producer_id, epoch, sequence,
            producer.transactional, control, max_timestamp, len(data),
        )
        if stamp:
            records = [dataclasses.replace(r, timestamp=max_timestamp) for r in records]
        if self.keep_records:
            self.records.extend(records)
        self.encoded.append(_Encoded(data, batch, aborted, max_timestamp))

    def _legacy(self) -> None:
        """Old brokers' messages first: magic 0, then magic 1; an uncompressed message is an
        entry of its own, compressed ones go in wrappers (CreateTime; magic 0 has no timestamp)."""
        spec = self.topic["legacy"]
        names = list(spec["codecs"])
        for magic, count in ((0, spec["magic0"]), (1, spec["magic1"])):
            while count:
                codec = codecs.BY_NAME[self.rng.choices(names, weights=list(spec["codecs"].values()))[0]]
                n = 1 if codec == codecs.NONE else min(self.rng.randint(*spec["wrapper_records"]), count)
                records = [self._legacy_record(magic) for _ in range(n)]
                if codec == codecs.NONE:
                    r = records[0]
                    message = legacy.encode_message(magic, 0, r.timestamp, r.key, r.value)
                    data = legacy.encode_entry(r.offset, message)
                else:
                    data = legacy.encode_wrapper(magic, codec, CREATE_TIME,
                                                 [Record(r.offset, r.timestamp, r.key, r.value) for r in records])
                batch = WrittenBatch(records[0].offset, records[-1].offset, codec, -1, -1, -1, False, False,
                                     max(r.timestamp for r in records), len(data), magic)
                if self.keep_records:
                    self.records.extend(records)
                self.encoded.append(_Encoded(data, batch, None, self._timestamp(records[-1].offset)))
                count -= n

    def _legacy_record(self, magic: int) -> WrittenRecord:
        key = None if self.rng.random() < self.topic["keyless_fraction"] else self._key()
        value = None if key is not None and self.rng.random() < self.topic["tombstone_fraction"] else self._value()
        ts = self._timestamp(self.offset) if magic == 1 else NO_TIMESTAMP
        record = WrittenRecord(self.offset, ts, key, value, (), -1, False, None)
        self.offset += 1
        return record

    def _record(self, producer_id: int, transactional: bool) -> WrittenRecord:
        t = self.topic
        key = None if self.rng.random() < t["keyless_fraction"] else self._key()
        value = None if key is not None and self.rng.random() < t["tombstone_fraction"] else self._value()
        headers = tuple((f"h{i}", self._letters(self.rng.randint(1, 12))) for i in range(t["headers"]))
        timestamp = self._timestamp(self.offset)
        if t["timestamp_jitter_ms"]:  # producers' clocks disagree: timestamps go back and forth
            timestamp = max(0, timestamp + self.rng.randint(-t["timestamp_jitter_ms"], t["timestamp_jitter_ms"]))
        record = WrittenRecord(self.offset, timestamp, key, value, headers, producer_id, transactional, None)
        self.offset += 1
        return record

    def _timestamp(self, offset: int) -> int:
        """Records' times step with their offsets; those appended after the cut come
        ``append_gap_ms`` later (the time that passed between the cleaning rounds)."""
        gap = self.topic["append_gap_ms"] if self.cut is not None else 0
        return self.topic["timestamp_start_ms"] + offset * self.topic["timestamp_step_ms"] + gap

    def _key(self) -> bytes:
        if self._key_cdf:
            k = bisect.bisect_left(self._key_cdf, self.rng.random() * self._key_cdf[-1])
            k = min(k, len(self._key_cdf) - 1)
        else:
            k = self.rng.randrange(self.topic["keys"])
        key = b"key-%d" % k
        size = self.topic["key_size"]
        if isinstance(size, list):  # each key keeps one size, chosen by its number
            size = self._key_sizes.setdefault(k, random.Random(f"key-size:{k}").randint(*size))
        return key if size is None else key[:size].ljust(size, b".")

    def _value(self) -> bytes:
        """Word salad: compressible like real payloads, unlike random bytes."""
        size = self.rng.randint(*self.topic["value_size"])
        words, length = [], 0
        while length < size:
            word = self.rng.choice(_WORDS)
            words.append(word)
            length += len(word) + 1
        return " ".join(words).encode()[:size]

    def _letters(self, n: int) -> bytes:
        return "".join(self.rng.choices(_LETTERS, k=n)).encode()


# -- laying batches out in segments and writing them -----------------------------------


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


def _write_segment(pdir: str, laid: _Laid) -> tuple[WrittenSegment, int]:
    files = laid.files
    contents = {"log": laid.log, "index": files.offset_index, "timeindex": files.time_index}
    if files.txn_index:
        contents["txnindex"] = files.txn_index
    for kind, data in contents.items():
        path = storage.join(pdir, segment_name(files.base_offset, kind))
        storage.write_durable(path, data)
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


def _produce(topic: dict[str, Any], partition: int, seed: int, keep_records: bool = True) -> _PartitionProducer:
    producer = _PartitionProducer(topic, random.Random(f"{seed}:{topic['name']}:{partition}"),
                                  keep_open=topic["open_transaction"] and partition == 0, keep_records=keep_records)
    producer.run()
    return producer


def _write_snapshots(pdir: str, encoded: list[_Encoded], offsets: list[int]) -> int:
    written = 0
    for offset, data in _producer_snapshots(encoded, offsets).items():
        path = storage.join(pdir, segment_name(offset, "snapshot"))
        storage.write_durable(path, data)
        storage.set_mtime(path, max(e.wall_ms for e in encoded if e.batch.last_offset < offset))
        written += len(data)
    return written


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


def _write_partition(out: str, topic: dict[str, Any], partition: int, seed: int, tid: str,
                     keep_records: bool) -> tuple[PartitionTruth, int]:
    """The partition as it was before the cut (all of it without ``append_records``)."""
    producer = _produce(topic, partition, seed, keep_records)
    encoded = producer.encoded[:producer.cut]
    pdir = storage.join(out, f"{topic['name']}-{partition}")
    storage.makedirs(pdir)
    segments, written = [], 0
    laid_out = _laid_before(producer, topic)
    for laid in laid_out:
        segment, size = _write_segment(pdir, laid)
        segments.append(segment)
        written += size
    end = encoded[-1].batch.last_offset + 1
    written += _write_snapshots(pdir, encoded, [laid.files.base_offset for laid in laid_out[1:]] + [end])
    metadata = f"version: 0\ntopic_id: {tid}\n".encode()
    epochs = _leader_epoch_checkpoint({e: o for e, o in producer.leader_epochs.items() if o < end})
    storage.write_atomic(storage.join(pdir, "leader-epoch-checkpoint"), epochs)
    storage.write_atomic(storage.join(pdir, "partition.metadata"), metadata)
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
        raise ValueError(f"{path}: not the active segment this spec and seed wrote; cannot append to it")
    laid_out = [laid for laid in after if laid.files.base_offset >= active.files.base_offset]
    segments = [_write_segment(pdir, laid)[0] for laid in laid_out]
    _write_snapshots(pdir, producer.encoded, [laid.files.base_offset for laid in laid_out[1:]] + [producer.offset])
    storage.write_atomic(storage.join(pdir, "leader-epoch-checkpoint"), _leader_epoch_checkpoint(producer.leader_epochs))
    return _truth(topic, partition, producer.encoded, producer.records, segments)


def _position(truth: PartitionTruth, position: float | dict[str, int], log_start: int) -> int:
    """A spec's cleaner checkpoint position as an offset (see ``_checkpoint_positions``)."""
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
        (t["name"], partition): _position(parts[t["name"], partition], position,
                                          starts.get((t["name"], partition), parts[t["name"], partition].segments[0].base_offset))
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
        raise ValueError(f"{out}: exists and is not an empty directory; choose a new --out")


def _write_metadata_log(out: str, spec: dict[str, Any], ids: dict[str, str]) -> int:
    """``__cluster_metadata-0`` as a KRaft controller leaves it: per topic a TopicRecord and
    a ConfigRecord per override, so the log dir carries its own topic configuration."""
    pdir = storage.join(out, METADATA_DIR)
    storage.makedirs(pdir)
    log, offset, ts = io.BytesIO(), 0, spec["start_ms"] - 60_000
    writer = SegmentWriter(log, 0)
    for topic in spec["topics"]:
        values = [metadata.topic_record(topic["name"], ids[topic["name"]])]
        values += [metadata.topic_config_record(topic["name"], key, _config_text(value))
                   for key, value in sorted(topic["config"].items())]
        data = encode_batch([Record(offset + i, ts, None, v) for i, v in enumerate(values)], base_offset=offset)
        writer.append(data, offset + len(values) - 1, ts, offset + len(values) - 1)
        offset += len(values)
    files = writer.close()
    contents = {"log": log.getvalue(), "index": files.offset_index, "timeindex": files.time_index}
    for kind, data in contents.items():
        path = storage.join(pdir, segment_name(0, kind))
        storage.write_durable(path, data)
        storage.set_mtime(path, ts)
    return sum(len(d) for d in contents.values())


def _config_text(value: Any) -> str:
    """A config value as Kafka stores it (lists comma-separated)."""
    return ",".join(value) if isinstance(value, (list, tuple)) else str(value)


def generate(out: str, spec: dict[str, Any], seed: int, keep_records: bool = True) -> GenResult:
    """Write a Kafka log dir at ``out`` (must not exist or be empty) and return its truth
    (``keep_records`` False: without the per-record truth, which a corpus of millions cannot afford;
    the bytes written are the same)."""
    spec = validate(spec)
    out = out.rstrip("/")
    _refuse_non_empty(out)
    storage.makedirs(out)
    parts: dict[tuple[str, int], PartitionTruth] = {}
    ids, written = {}, 0
    for topic in spec["topics"]:
        ids[topic["name"]] = topic_id(seed, topic["name"])
        for partition in range(topic["partitions"]):
            truth, size = _write_partition(out, topic, partition, seed, ids[topic["name"]], keep_records)
            parts[topic["name"], partition] = truth
            written += size
    written += _write_metadata_log(out, spec, ids)
    files = _checkpoints(spec["topics"], parts)
    for name in ROOT_CHECKPOINTS:
        data = render_checkpoint(files[name])
        storage.write_atomic(storage.join(out, name), data)
        written += len(data)
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
