"""Options as Spark's Kafka source spells them, parsed into this source's terms: ``subscribe``,
``assign``, ``startingOffsets``/``endingOffsets`` (``earliest``, ``latest`` or JSON
{"topic":{"0":23,"1":-2}}, -2 earliest, -1 latest), ``startingTimestamp``/``endingTimestamp``,
``startingOffsetsByTimestamp``/``endingOffsetsByTimestamp`` (JSON {"topic":{"0":ms}}),
``kafka.isolation.level``, ``includeHeaders``, ``failOnDataLoss``, ``maxOffsetsPerTrigger`` and
``maxBytesPerTrigger``."""

from __future__ import annotations

import json

from kcompact import errors
from kcompact.datasource.bounds import EARLIEST, LATEST, OffsetBound, PartitionKey

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def per_partition_json(name: str, text: str, negatives: tuple[int, ...] = ()) -> OffsetBound:
    """{"topic": {"partition": number}} as per-partition overrides; numbers below 0 only from
    ``negatives``."""
    try:
        given = json.loads(text)
        overrides: list[tuple[PartitionKey, int]] = []
        for topic, partitions in given.items():
            for number, value in partitions.items():
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError
                overrides.append(((str(topic), int(number)), value))
    except (ValueError, TypeError, AttributeError):
        raise errors.UsageError(f'{name} must be JSON like {{"topic":{{"0":23}}}}, not {text!r}') from None
    for (topic, number), value in overrides:
        if value < 0 and value not in negatives:
            raise errors.UsageError(f"{name}: {topic}-{number}: {value} is neither a position nor one of {negatives}")
    return OffsetBound(None, tuple(overrides))


def spark_offsets(name: str, text: str) -> OffsetBound:
    """``startingOffsets``/``endingOffsets``: ``earliest``, ``latest`` or per-partition JSON."""
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return OffsetBound(EARLIEST if word == "earliest" else LATEST)
    return per_partition_json(name, text, (EARLIEST, LATEST))


def timestamp(name: str, text: str) -> OffsetBound:
    try:
        value = int(text)
    except ValueError:
        raise errors.UsageError(f"{name} must be milliseconds since the epoch, not {text!r}") from None
    if value < 0:
        raise errors.UsageError(f"{name} must not be negative, not {value}")
    return OffsetBound(value)


def assigned(text: str) -> frozenset[PartitionKey]:
    """``assign``: JSON {"topic":[0,1]}."""
    try:
        given = json.loads(text)
        keys = frozenset((str(topic), int(n)) for topic, numbers in given.items() for n in numbers)
    except (ValueError, TypeError, AttributeError):
        raise errors.UsageError(f'assign must be JSON like {{"topic":[0,1]}}, not {text!r}') from None
    return keys


def flag(options: dict[str, str], name: str, default: bool) -> bool:
    text = options.get(name, str(default)).strip().lower()
    if text not in ("true", "false"):
        raise errors.UsageError(f"{name} must be true or false, not {options[name]!r}")
    return text == "true"


def positive(options: dict[str, str], name: str) -> int | None:
    if name not in options:
        return None
    try:
        value = int(options[name])
    except ValueError:
        value = 0
    if value <= 0:
        raise errors.UsageError(f"{name} must be a positive integer, not {options[name]!r}")
    return value


def isolation(options: dict[str, str]) -> str:
    level = options.get("kafka.isolation.level", options.get("isolationLevel", ISOLATION_LEVELS[0])).strip().lower()
    if level not in ISOLATION_LEVELS:
        raise errors.UsageError(f"kafka.isolation.level must be one of {', '.join(ISOLATION_LEVELS)}, not {level!r}")
    return level
