"""The ``kafka-log`` source's options, parsed: which paths and mode, and the ``Selection`` of
partitions and offset bounds a read returns (options first; pushed filters narrow it later).
The options themselves are described in ``datasource.kafka_log``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from kcompact.datasource.schemas import MODES
from kcompact.logdir.listing import parse_partition_dir
from kcompact.logdir.splits import DEFAULT_MAX_SPLIT_BYTES, OffsetRange

PartitionKey = tuple[str | None, int]  # (None, n): partition n of every topic


@dataclass(frozen=True, slots=True)
class OffsetBound:
    """One offset per partition: a default and per-partition overrides (exact topic first)."""

    default: int | None = None
    overrides: tuple[tuple[PartitionKey, int], ...] = ()

    def of(self, topic: str, partition: int) -> int | None:
        found = dict(self.overrides)
        return found.get((topic, partition), found.get((None, partition), self.default))


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

    def offsets(self, topic: str, partition: int) -> OffsetRange:
        out = OffsetRange()
        for bound in self.starts:
            out = out.narrowed(bound.of(topic, partition), None)
        for bound in self.ends:
            out = out.narrowed(None, bound.of(topic, partition))
        return out

    def with_topics(self, topics: frozenset[str]) -> Selection:
        return replace(self, topics=topics if self.topics is None else self.topics & topics)

    def with_partitions(self, numbers: frozenset[int]) -> Selection:
        return replace(self, partitions=self.partitions + (frozenset((None, n) for n in numbers),))

    def with_offsets(self, start: int | None, end: int | None) -> Selection:
        return replace(
            self,
            starts=self.starts + ((OffsetBound(start),) if start is not None else ()),
            ends=self.ends + ((OffsetBound(end),) if end is not None else ()),
        )


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

    @classmethod
    def parse(cls, options: dict[str, str]) -> Settings:
        paths = [p for p in [options.get("path", "")] + options.get("paths", "").split(",") if p.strip()]
        dirs = _partition_dirs(options.get("partitionDirs"))
        if not paths and not dirs:
            raise ValueError("kafka-log needs a path: load(path), option('paths', 'a,b') or option('partitionDirs', ...)")
        mode = options.get("mode", "records").lower()
        if mode not in MODES:
            raise ValueError(f"kafka-log mode must be one of {', '.join(MODES)}, not {mode!r}")
        max_split = int(options.get("maxSplitBytes", DEFAULT_MAX_SPLIT_BYTES))
        if max_split <= 0:
            raise ValueError(f"maxSplitBytes must be positive, not {max_split}")
        push = options.get("pushFilters", "false").lower() == "true"
        selection = _selection(options)
        return cls(tuple(p.strip() for p in paths), mode, selection, max_split, push, dirs, selection.topics)


def _partition_dirs(text: str | None) -> tuple[tuple[str, int | None], ...]:
    if not text:
        return ()
    try:
        given = json.loads(text)
        dirs = tuple((str(d).rstrip("/"), None if end is None else int(end)) for d, end in given.items())
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"partitionDirs must be a JSON object {{dir: ending offset or null}}, not {text!r}") from None
    for d, _ in dirs:
        if parse_partition_dir(d.rsplit("/", 1)[-1]) is None:
            raise ValueError(f"partitionDirs: {d!r} is not a <topic>-<partition> dir")
    return dirs


def _selection(options: dict[str, str]) -> Selection:
    def given(name: str, parse: Callable[[str], object]) -> tuple:
        return (parse(options[name]),) if name in options else ()

    topics = frozenset(_items(options["topics"])) if "topics" in options else None
    partitions = given("partitions", lambda text: frozenset(map(_partition_key, _items(text))))
    return Selection(topics, partitions, given("startingOffset", _offset_bound), given("endingOffset", _offset_bound))


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _partition_key(text: str) -> PartitionKey:
    topic, sep, number = text.rpartition(":")
    if not number.strip().isdigit() or (sep and not topic):
        raise ValueError(f"a partition is 'topic:N' or 'N', not {text!r}")
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
            raise ValueError(f"an offset is 'N', 'topic:P=N' or 'P=N', not {item!r}") from None
    return OffsetBound(default, tuple(overrides))
