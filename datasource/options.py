"""The ``kafka-log`` source's options, parsed: which paths and mode, and the ``Selection`` of
partitions and offset bounds a read returns (options first; pushed filters narrow it later).
The options themselves are described in ``datasource.kafka_log``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from kcompact import errors
from kcompact.datasource import spark_options as spark
from kcompact.datasource.bounds import OffsetBound, PartitionKey
from kcompact.datasource.schemas import MODES
from kcompact.logdir.listing import parse_partition_dir
from kcompact.logdir.splits import DEFAULT_MAX_SPLIT_BYTES, OffsetRange

Resolve = Callable[[int, bool], int | None]  # a negative bound (EARLIEST, LATEST), starting or not -> offset


@dataclass(frozen=True, slots=True)
class Selection:
    """The partitions and offsets a read returns: options, then pushed filters, all ANDed."""

    topics: frozenset[str] | None = None
    partitions: tuple[frozenset[PartitionKey], ...] = ()  # a partition must match each set
    starts: tuple[OffsetBound, ...] = ()
    ends: tuple[OffsetBound, ...] = ()

    def selects(self, topic: str, partition: int) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        return all((topic, partition) in keys or (None, partition) in keys for keys in self.partitions)

    def offsets(self, topic: str, partition: int, resolve: Resolve | None = None) -> OffsetRange:
        """The offset range; ``resolve`` turns EARLIEST and LATEST into the partition's offsets."""
        out = OffsetRange()
        for bound in self.starts:
            out = out.narrowed(_resolved(bound.of(topic, partition), True, resolve), None)
        for bound in self.ends:
            out = out.narrowed(None, _resolved(bound.of(topic, partition), False, resolve))
        return out

    def sentinels(self) -> bool:
        """Whether a bound needs the partition's earliest or latest offset."""
        return any(
            v is not None and v < 0 for b in self.starts + self.ends for v in (b.default, *dict(b.overrides).values())
        )

    def with_topics(self, topics: frozenset[str]) -> Selection:
        return replace(self, topics=topics if self.topics is None else self.topics & topics)

    def with_partitions(self, numbers: frozenset[int]) -> Selection:
        return replace(self, partitions=self.partitions + (frozenset((None, n) for n in numbers),))

    def with_offsets(self, start: int | None, end: int | None) -> Selection:
        """Narrowed by a pushed filter's plain offsets (never read as EARLIEST or LATEST)."""
        start = None if start is None or start <= 0 else start
        end = None if end is None else max(end, 0)
        return replace(
            self,
            starts=self.starts + ((OffsetBound(start),) if start is not None else ()),
            ends=self.ends + ((OffsetBound(end),) if end is not None else ()),
        )


def _resolved(value: int | None, starting: bool, resolve: Resolve | None) -> int | None:
    if value is None or value >= 0:
        return value
    if resolve is None:
        raise errors.UsageError(f"offset {value} needs the partition's offsets")
    return resolve(value, starting)


@dataclass(frozen=True, slots=True)
class Settings:
    """The parsed options: plain data, pickled to executors with the reader."""

    paths: tuple[str, ...]
    mode: str
    selection: Selection
    max_split_bytes: int
    push_filters: bool
    dirs: tuple[tuple[str, int | None], ...] = ()
    named_topics: frozenset[str] | None = None  # the ``topics`` option (pushed filters narrow ``selection`` alone)
    start_times: OffsetBound | None = None  # milliseconds: from the first offset at or after
    end_times: OffsetBound | None = None
    isolation: str = spark.ISOLATION_LEVELS[0]
    include_headers: bool = True
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None

    @property
    def committed(self) -> bool:
        return self.isolation == "read_committed"

    @classmethod
    def parse(cls, options: dict[str, str]) -> Settings:
        paths = [p for p in [options.get("path", "")] + options.get("paths", "").split(",") if p.strip()]
        dirs = _partition_dirs(options.get("partitionDirs"))
        if not paths and not dirs:
            raise errors.UsageError(
                "kafka-log needs a path: load(path), option('paths', 'a,b') or option('partitionDirs', ...)"
            )
        mode = options.get("mode", "records").lower()
        if mode not in MODES:
            raise errors.UsageError(f"kafka-log mode must be one of {', '.join(MODES)}, not {mode!r}")
        max_split = int(options.get("maxSplitBytes", DEFAULT_MAX_SPLIT_BYTES))
        if max_split <= 0:
            raise errors.UsageError(f"maxSplitBytes must be positive, not {max_split}")
        push = spark.flag(options, "pushFilters", False)
        selection = _selection(options)
        start_times = _times(options, "startingTimestamp", "startingOffsetsByTimestamp")
        end_times = _times(options, "endingTimestamp", "endingOffsetsByTimestamp")
        return cls(
            tuple(p.strip() for p in paths), mode, selection, max_split, push, dirs, selection.topics,
            start_times=start_times, end_times=end_times,
            isolation="read_committed" if mode == "table" else spark.isolation(options),
            include_headers=spark.flag(options, "includeHeaders", True),
            fail_on_data_loss=spark.flag(options, "failOnDataLoss", True),
            max_offsets_per_trigger=spark.positive(options, "maxOffsetsPerTrigger"),
            max_bytes_per_trigger=spark.positive(options, "maxBytesPerTrigger"),
        )


def _times(options: dict[str, str], one: str, each: str) -> OffsetBound | None:
    """A timestamp bound: one for every partition, or JSON per partition (not both)."""
    if one in options and each in options:
        raise errors.UsageError(f"give {one} or {each}, not both")
    if one in options:
        return spark.timestamp(one, options[one])
    return spark.per_partition_json(each, options[each]) if each in options else None


def _partition_dirs(text: str | None) -> tuple[tuple[str, int | None], ...]:
    if not text:
        return ()
    try:
        given = json.loads(text)
        dirs = tuple((str(d).rstrip("/"), None if end is None else int(end)) for d, end in given.items())
    except (ValueError, TypeError, AttributeError):
        raise errors.UsageError(
            f"partitionDirs must be a JSON object {{dir: ending offset or null}}, not {text!r}") from None
    for d, _ in dirs:
        if parse_partition_dir(d.rsplit("/", 1)[-1]) is None:
            raise errors.UsageError(f"partitionDirs: {d!r} is not a <topic>-<partition> dir")
    return dirs


def _selection(options: dict[str, str]) -> Selection:
    def given(name: str, parse: Callable[[str], object]) -> tuple:
        return (parse(options[name]),) if name in options else ()

    for ours, theirs in (("topics", "subscribe"), ("partitions", "assign"), ("startingOffset", "startingOffsets"),
                         ("endingOffset", "endingOffsets")):
        if ours in options and theirs in options:
            raise errors.UsageError(f"{ours} and {theirs} mean the same: give one")
    topic_list = options.get("topics", options.get("subscribe"))
    topics = frozenset(_items(topic_list)) if topic_list is not None else None
    partitions = given("partitions", lambda text: frozenset(map(_partition_key, _items(text))))
    partitions += given("assign", spark.assigned)
    if "assign" in options and topics is None:
        topics = frozenset(topic for topic, _ in partitions[-1])
    starts = given("startingOffset", _offset_bound) + given(
        "startingOffsets", lambda t: spark.spark_offsets("startingOffsets", t)
    )
    ends = given("endingOffset", _offset_bound) + given(
        "endingOffsets", lambda t: spark.spark_offsets("endingOffsets", t)
    )
    return Selection(topics, partitions, starts, ends)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _partition_key(text: str) -> PartitionKey:
    topic, sep, number = text.rpartition(":")
    if not number.strip().isdigit() or (sep and not topic):
        raise errors.UsageError(f"a partition is 'topic:N' or 'N', not {text!r}")
    return (topic if sep else None), int(number)


def _offset_bound(text: str) -> OffsetBound:
    default, overrides = None, []
    for item in _items(text):
        key, sep, value = item.rpartition("=")
        try:
            if sep:
                overrides.append((_partition_key(key), int(value)))
            else:
                default = int(value)
        except ValueError:
            raise errors.UsageError(f"an offset is 'N', 'topic:P=N' or 'P=N', not {item!r}") from None
    return OffsetBound(default, tuple(overrides))
