"""The generator's spec: the built-in demo, validation with every default filled in, loading
from a JSON file, and overrides for every topic at once.

A bad spec is refused with a ValueError naming the key; what passes is a normalized deep copy,
the only form the rest of the generator reads.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

from kcompact import errors, storage
from kcompact.conf.policy import is_compacted
from kcompact.readers import codecs
from kcompact.tools.generator import broker_states

DEFAULT_START_MS = 1720000000000
_INT32_MAX = (1 << 31) - 1
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

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


def _fail(where: str, key: str, why: str) -> errors.UsageError:
    return errors.UsageError(f"spec{' ' + where if where else ''}: {key!r} {why}")


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
    "broker_state": (broker_states.validate_topic, broker_states.NONE),
}
_SPEC_KEYS = ("seed", "start_ms", "topics", "broker_state")


def _is_compacted(config: dict[str, Any]) -> bool:
    return is_compacted(config.get("cleanup.policy", "delete"))


def _validate_topic(index: int, topic: Any, start_ms: int) -> dict[str, Any]:
    if not isinstance(topic, dict):
        raise errors.UsageError(f"spec topics[{index}]: must be an object, got {topic!r}")
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
        raise errors.UsageError(f"spec must be a JSON object, got {type(spec).__name__}")
    for key in spec:
        if key not in _SPEC_KEYS:
            raise _fail("", key, f"is not a known spec key (known: {', '.join(_SPEC_KEYS)})")
    out: dict[str, Any] = {}
    if "seed" in spec:
        out["seed"] = _integer(0)("", "seed", spec["seed"])
    out["start_ms"] = _integer(0)("", "start_ms", spec.get("start_ms", DEFAULT_START_MS))
    out["broker_state"] = broker_states.validate_log_dir("", spec.get("broker_state", {}))
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
        raise errors.UsageError(f"{path}: not valid JSON: {exc}") from None
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
