"""The effective configuration of each topic, and where every value came from.

Sources, weakest first: Kafka's defaults, the log dir's KRaft metadata
(cluster-wide broker defaults and topic configs), ``--config`` files, then the
command line (``--broker-config`` / ``--topic-config``). A topic-level value
always beats a broker-level one, as in Kafka; at one level the later source
wins, and within a source an exact topic name beats a glob pattern.

Properties files hold broker-level keys by their broker names
(``log.cleaner.min.cleanable.ratio=0.3``) and topic overrides as
``topic[<name or glob>].<topic-level key>=<value>``
(``topic[orders].cleanup.policy=compact,delete``, ``topic[logs-*].retention.ms=3600000``).

The Kafka release whose cleaner to reproduce (``conf.releases``) is chosen per log dir, strongest
first: ``--kafka-version`` (the API's ``kafka_version``), ``kafka.version`` in a ``--config``
file, the log dir's finalized ``metadata.version``, the default. What a release accepts differs
(KIP-1030's ``segment.bytes`` floors, ``internal.segment.bytes`` from 4.1, the message-format
settings removed in 4.0): ``Config.check`` refuses what the chosen release refuses, naming it.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

import javaproperties

from kcompact import storage
from kcompact.conf import releases
from kcompact.conf.policy import is_compacted, is_deleted
from kcompact.conf.releases import Choice, Release
from kcompact.conf.settings import (
    BROKER_MESSAGE_MAX_BYTES,
    BY_BROKER_NAME,
    BY_TOPIC_NAME,
    INT_MAX,
    OTHER_TOPIC_SETTINGS,
    RETENTION_ALIASES,
    SETTINGS,
    Setting,
    parse_value,
    policy_items,
)
from kcompact.errors import ConfigError, UnknownRelease

DEFAULT_SOURCE = "default"
METADATA_SOURCE = "kraft-metadata "  # how logdir.kraft names a metadata log as a source
KAFKA_VERSION = "kafka.version"  # a --config file's key naming the Kafka release
INTERNAL_SEGMENT_BYTES = "internal.segment.bytes"  # KAFKA-19080 (4.1+): overrides segment.bytes
# The message-format settings Kafka 4.0 removed (KIP-724): ignored by 3.9, refused from 4.0
MESSAGE_FORMAT_TOPIC = frozenset({"message.format.version", "message.downconversion.enable",
                                  "message.timestamp.difference.max.ms"})
MESSAGE_FORMAT_BROKER = frozenset({"log.message.format.version", "log.message.downconversion.enable",
                                   "log.message.timestamp.difference.max.ms"})
_TOPIC_KEY = re.compile(r"^topic\[(?P<topic>[^\]]+)\]\.(?P<key>.+)$")
_TOPIC_PATTERN = re.compile(r"^[A-Za-z0-9._\-*?\[\]]+$")


@dataclass(frozen=True, slots=True)
class Entry:
    """One configured value: parsed, with its source and, for topic entries, the pattern."""

    value: object
    source: str
    pattern: str | None = None

    @property
    def exact(self) -> bool:
        return self.pattern is not None and not any(c in self.pattern for c in "*?[")


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Effective values by topic-level name (broker-only settings by their broker name; the
    broker's own ``message.max.bytes`` too, beside the topic's ``max.message.bytes``)."""

    topic: str
    values: Mapping[str, object]
    sources: Mapping[str, str]

    def __getitem__(self, name: str) -> object:
        return self.values[name]

    @property
    def compact(self) -> bool:
        return is_compacted(self.values["cleanup.policy"])

    @property
    def delete(self) -> bool:
        return is_deleted(self.values["cleanup.policy"])

    def as_strings(self) -> dict[str, str]:
        """Values as Kafka's tools print them (lists comma-separated)."""
        return {name: ",".join(v) if isinstance(v, tuple) else str(v) for name, v in self.values.items()}


@dataclass(slots=True)
class Config:
    """All sources, in the order they were added within each level (later wins)."""

    broker: dict[str, list[Entry]] = field(default_factory=dict)
    topics: dict[str, list[Entry]] = field(default_factory=dict)
    release: Choice | None = None  # named by an option or a --config file (the later wins)
    # log dir -> (level, where); where None: the log dir holds no KRaft metadata
    detections: dict[str, tuple[int | None, str | None]] = field(default_factory=dict)
    removed_keys: list[tuple[str, str]] = field(default_factory=list)  # (key, where): settings 4.0 removed
    gzip_os: int | None = None  # --gzip-os: the gzip header's OS byte where a log dir does not show it
    repeated_lists: list[tuple[str, str]] = field(default_factory=list)  # (key, where): a list naming a value twice

    def name_release(self, version: str, source: str, where: str) -> None:
        try:
            self.release = Choice(releases.resolve(version), source, where, named=str(version).strip())
        except UnknownRelease as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def release_for(self, log_dir: str) -> Choice:
        """The release reproduced on ``log_dir``, and why."""
        if self.release is not None:
            return self.release
        level, where = self.detections.get(log_dir.rstrip("/"), (None, log_dir))
        if where is None:  # the log dir holds no KRaft metadata partition
            return releases.undetected(None, log_dir.rstrip("/"), metadata=False)
        return releases.detected(level, where) or releases.undetected(level, where)

    def check(self, release: Release) -> None:
        """What ``release`` refuses of the configuration given to kcompact (files, options): a
        ConfigError naming the key, where it came from and the release. Values a log dir's KRaft
        metadata recorded are taken as recorded: the cluster's own release validated them."""
        if release.message_format_removed and self.removed_keys:
            key, where = self.removed_keys[0]
            raise ConfigError(f"{where}: {key} was removed in Kafka 4.0 (KIP-724): Kafka {release.name} refuses it")
        if release.unique_lists and self.repeated_lists:
            key, where = self.repeated_lists[0]
            raise ConfigError(f"{where}: {key} names a value twice: Kafka {release.name} refuses it (KAFKA-19112)")
        for entry in self.topics.get(INTERNAL_SEGMENT_BYTES, []):
            if not release.internal_segment_bytes and not _recorded(entry):
                raise ConfigError(f"{entry.source}: {INTERNAL_SEGMENT_BYTES} for topic {entry.pattern!r}: Kafka "
                                  f"{release.name} has no such topic config (it exists from 4.1, KAFKA-19080)")
        for entry in self.topics.get("segment.bytes", []):
            _floor(entry, "segment.bytes", release.topic_segment_bytes_floor, release)
        for entry in self.broker.get("segment.bytes", []):
            _floor(entry, "log.segment.bytes", release.broker_segment_bytes_floor, release)

    def add_broker(self, key: str, raw: str, source: str, where: str | None = None) -> None:
        """``where``: the place errors name (a file and line), when more precise than ``source``."""
        setting, value = _broker_value(key, raw, where or source)
        self._note_repeats(setting, key, raw, where or source)
        self.broker.setdefault(setting.name, []).append(Entry(value, source))

    def add_topic(self, pattern: str, key: str, raw: str, source: str, where: str | None = None) -> None:
        where = where or source
        if not _TOPIC_PATTERN.match(pattern):
            raise ConfigError(f"{where}: {pattern!r} is not a topic name or glob pattern")
        if key == INTERNAL_SEGMENT_BYTES:
            value = parse_value(BY_TOPIC_NAME["segment.bytes"], raw, key, where)
            self.topics.setdefault(key, []).append(Entry(value, source, pattern))
            return
        setting = BY_TOPIC_NAME.get(key)
        if setting is None:
            if key in MESSAGE_FORMAT_TOPIC:
                self.removed_keys.append((key, where))
            if key in OTHER_TOPIC_SETTINGS:
                return
            hint = f" (the topic-level name is {BY_BROKER_NAME[key].topic_name})" if key in BY_BROKER_NAME else ""
            raise ConfigError(f"{where}: unknown topic-level key {key!r} for topic {pattern!r}{hint}")
        value = parse_value(setting, raw, key, where)
        self._note_repeats(setting, key, raw, where)
        self.topics.setdefault(setting.name, []).append(Entry(value, source, pattern))

    def _note_repeats(self, setting, key: str, raw: str, where: str) -> None:
        """A cleanup.policy naming a value twice, given to kcompact (``check`` refuses it for 4.2 on);
        KRaft metadata's values are taken as the cluster recorded them."""
        recorded = where.startswith(METADATA_SOURCE)
        if setting.name == "cleanup.policy" and not recorded and len(set(items := policy_items(raw))) != len(items):
            self.repeated_lists.append((key, where))

    def for_topic(self, topic: str) -> TopicConfig:
        values, sources = {}, {}
        for setting in SETTINGS:
            entry = _topic_entry(self.topics.get(setting.name, []), topic) if setting.topic_name else None
            if entry is None:
                entries = self.broker.get(setting.name)
                entry = entries[-1] if entries else Entry(setting.default, DEFAULT_SOURCE)
            values[setting.name] = entry.value
            sources[setting.name] = entry.source + (f" topic[{entry.pattern}]" if entry.pattern else "")
        internal = _topic_entry(self.topics.get(INTERNAL_SEGMENT_BYTES, []), topic)
        if internal is not None:  # LogConfig.segmentSize(): the internal override when set (Config.check)
            values["segment.bytes"] = internal.value
            sources["segment.bytes"] = f"{internal.source} topic[{internal.pattern}].{INTERNAL_SEGMENT_BYTES}"
        entries = self.broker.get(BY_BROKER_NAME[BROKER_MESSAGE_MAX_BYTES].name)
        broker = entries[-1] if entries else Entry(BY_BROKER_NAME[BROKER_MESSAGE_MAX_BYTES].default, DEFAULT_SOURCE)
        values[BROKER_MESSAGE_MAX_BYTES], sources[BROKER_MESSAGE_MAX_BYTES] = broker.value, broker.source
        return TopicConfig(topic, values, sources)


def check_topics(config: Config, held: Callable[[], Collection[str]]) -> None:
    """A topic override given to kcompact (an option, a --config file) naming a topic that none of
    the log dirs holds (``held()``: their topics, asked only when a topic is named) is a ConfigError
    naming the nearest topics: most often a typo, which would leave the topic cleaned by other
    settings without a word. Glob patterns, and what a log dir's KRaft metadata recorded (the
    cluster's topics, held by other brokers too), are not checked."""
    named = [entry for entries in config.topics.values() for entry in entries if entry.exact and not _recorded(entry)]
    topics = set(held()) if named else set()
    for entry in named:
        if entry.pattern not in topics:
            near = difflib.get_close_matches(entry.pattern, sorted(topics), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(repr(t) for t in near)}?" if near else ""
            raise ConfigError(f"{entry.source}: no topic {entry.pattern!r} in the log dirs{hint} "
                              "(--allow-unknown-topics takes it as a topic that appears later)")


def _recorded(entry: Entry) -> bool:
    """Whether ``entry`` came from a log dir's KRaft metadata (``logdir.kraft``)."""
    return entry.source.startswith(METADATA_SOURCE)


def _floor(entry: Entry, key: str, floor: int, release: Release) -> None:
    if entry.value < floor and not _recorded(entry):
        where = entry.source + (f" topic[{entry.pattern}]" if entry.pattern else "")
        raise ConfigError(f"{where}: {key}={entry.value}: Kafka {release.name} requires at least {floor}"
                          + (" (KIP-1030)" if floor > releases.LEGACY_SEGMENT_BYTES_FLOOR else ""))


def _topic_entry(entries: list[Entry], topic: str) -> Entry | None:
    """The last matching entry, exact names beating patterns within the same source."""
    best: Entry | None = None
    for entry in entries:
        if not (entry.pattern == topic or fnmatch.fnmatchcase(topic, entry.pattern)):
            continue
        same_source_exact = best is not None and best.source == entry.source and best.exact and not entry.exact
        if not same_source_exact:
            best = entry
    return best


def _broker_value(key: str, raw: str, source: str) -> tuple[Setting, object]:
    if key in RETENTION_ALIASES:
        setting = BY_BROKER_NAME["log.retention.ms"]
        value = parse_value(setting, raw, key, source)
        if value > INT_MAX:  # log.retention.hours and .minutes are Java ints in Kafka
            raise ConfigError(f"{source}: {key}={raw!r}: must be between -1 and {INT_MAX}")
        return setting, value if value == -1 else value * RETENTION_ALIASES[key]
    setting = BY_BROKER_NAME.get(key)
    if setting is None:
        if key in BY_TOPIC_NAME:
            raise ConfigError(
                f"{source}: {key!r} is a topic-level name; set it for all topics as "
                f"{BY_TOPIC_NAME[key].broker_name} or for some as topic[<name>].{key}"
            )
        raise ConfigError(f"{source}: unknown broker-level key {key!r}")
    return setting, parse_value(setting, raw, key, source)


# -- sources -------------------------------------------------------------------------------------
def add_properties_file(config: Config, path: str) -> None:
    """A ``--config`` file; retention aliases apply in Kafka's precedence (ms > minutes > hours).
    Errors name the file and the line of the key; a key given twice counts where it is last."""
    try:
        props, lines = _properties(storage.read_bytes(path).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable properties file: {exc}") from None
    aliases = sorted((k for k in props if k in RETENTION_ALIASES), key=lambda k: -RETENTION_ALIASES[k])
    if "log.retention.ms" in props:
        aliases = []
    try:
        for key in aliases[-1:]:
            config.add_broker(key, props[key], path, f"{path}: line {lines[key]}")
        for key, raw in props.items():
            match = _TOPIC_KEY.match(key)
            if key == KAFKA_VERSION:
                config.name_release(raw, "config file", f"{path}: line {lines[key]}")
            elif key in MESSAGE_FORMAT_BROKER:
                config.removed_keys.append((key, f"{path}: line {lines[key]}"))
            elif match:
                config.add_topic(match["topic"], match["key"], raw, path, f"{path}: line {lines[key]}")
            elif key not in RETENTION_ALIASES:
                config.add_broker(key, raw, path, f"{path}: line {lines[key]}")
    except ConfigError as exc:
        if " #" in str(exc) or " !" in str(exc):
            raise ConfigError(f"{exc} (a .properties file has no comments after a value: the '#' and what follows "
                              "are part of it; put the comment on a line of its own)") from None
        raise


def _properties(text: str) -> tuple[dict[str, str], dict[str, int]]:
    """The key-value pairs of a properties text, and the line each key was (last) given on."""
    props, lines, line = {}, {}, 1
    for element in javaproperties.parse(text):
        if isinstance(element, javaproperties.KeyValue):
            props[element.key], lines[element.key] = element.value, line
        line += element.source.count("\n")
    return props, lines


def split_assignments(text: str, source: str) -> list[tuple[str, str]]:
    """``a=1,b=[x,y]`` -> [("a", "1"), ("b", "[x,y]")]; commas inside brackets stay."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth < 0:
            raise ConfigError(f"{source}: unbalanced ']' in {text!r}")
        current.append(ch)
    if depth:
        raise ConfigError(f"{source}: unbalanced '[' in {text!r}")
    parts.append("".join(current))
    pairs = []
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"{source}: {part!r} is not KEY=VALUE")
        pairs.append((key.strip(), value.strip()))
    return pairs


def add_topic_arg(config: Config, arg: str) -> None:
    """``--topic-config TOPIC:KEY=VALUE[,KEY=VALUE...]``, as kafka-configs' --add-config."""
    source = "--topic-config"
    topic, colon, rest = arg.partition(":")
    if not colon or not topic:
        raise ConfigError(f"{source}: {arg!r} is not TOPIC:KEY=VALUE[,KEY=VALUE...]")
    for key, raw in split_assignments(rest, source):
        config.add_topic(topic, key, raw, source)


def _shadowed_retention_keys(keys: Iterable[str]) -> set[str]:
    """The retention synonyms one source gives that Kafka does not read: it takes
    log.retention.ms, else log.retention.minutes, else log.retention.hours."""
    keys = set(keys)
    given = [k for k in ("log.retention.ms", *sorted(RETENTION_ALIASES, key=RETENTION_ALIASES.get)) if k in keys]
    return set(given[1:])


def add_broker_args(config: Config, args: Iterable[str]) -> None:
    """Every ``--broker-config``: one source, so the retention synonyms follow Kafka's precedence."""
    _add_broker_pairs(config, [pair for arg in args for pair in split_assignments(arg, "--broker-config")],
                      "--broker-config")


def _add_broker_pairs(config: Config, pairs: list[tuple[str, str]], source: str) -> None:
    shadowed = _shadowed_retention_keys(key for key, _ in pairs)
    for key, raw in pairs:
        if key in MESSAGE_FORMAT_BROKER:
            config.removed_keys.append((key, source))
        elif key not in shadowed:
            config.add_broker(key, raw, source)


def kafka_text(value: object) -> str:
    """A Python value as Kafka's configs write one: ``compact,delete``, ``0.5``."""
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def add_broker_arg(config: Config, arg: str) -> None:
    """``--broker-config KEY=VALUE[,KEY=VALUE...]`` with broker-level names."""
    add_broker_args(config, [arg])


def add_metadata(config: Config, broker_defaults: Mapping[str, str], topics: Mapping[str, Mapping[str, str]],
                 source: str) -> None:
    """Configs a KRaft controller recorded: cluster-wide broker defaults and per-topic values.
    Kafka validated every key it recorded, so keys cleaning does not use are passed over
    (a newer broker's settings must not stop the plan); values of the keys used are checked."""
    shadowed = _shadowed_retention_keys(broker_defaults)
    for key, raw in broker_defaults.items():
        if (key in BY_BROKER_NAME or key in RETENTION_ALIASES) and key not in shadowed:
            config.add_broker(key, raw, f"{source} (cluster default)")
    for topic, values in topics.items():
        for key, raw in values.items():
            if key in BY_TOPIC_NAME or key == INTERNAL_SEGMENT_BYTES:
                config.add_topic(topic, key, raw, source)


def build(
    files: Iterable[str] = (),
    topic_args: Iterable[str] = (),
    broker_args: Iterable[str] = (),
    metadata: Iterable[tuple] = (),
    kafka_version: str | None = None,
    kafka_version_source: str = "--kafka-version",
    log_dirs: Iterable[str] = (),
    gzip_os: int | None = None,
    broker_values: Mapping[str, object] | None = None,
    topic_values: Mapping[str, Mapping[str, object]] | None = None,
) -> Config:
    """A configuration from every source, weakest first. ``metadata``: (broker defaults, topics,
    source[, (log dir, metadata.version level, where)]) per log dir (``logdir.kraft.metadata_sources``);
    ``topic_args``, ``broker_args``: the command line's text; ``broker_values``
    (``{"log.cleaner.min.cleanable.ratio": 0.3}``), ``topic_values`` (by topic name or glob): the
    API's values, each taken as it is (``kafka_text``), named ``broker_config=``/``topic_config=``;
    ``kafka_version``: the release named by an option (``kafka_version_source`` says which); each of
    ``log_dirs`` is checked against the release chosen for it (``Config.check``)."""
    if gzip_os not in (None, 0, 255):
        raise ConfigError(f"gzip_os={gzip_os!r}: a gzip header's OS byte is 0 (Java 8 or 11) or 255 (Java 16 on)")
    config = Config(gzip_os=gzip_os)
    for broker_defaults, topics, source, *detection in metadata:
        add_metadata(config, broker_defaults, topics, source)
        for log_dir, level, where in detection:
            config.detections[log_dir] = (level, where)
    for path in files:
        add_properties_file(config, path)
    add_broker_args(config, broker_args)
    _add_broker_pairs(config, [(key, kafka_text(value)) for key, value in (broker_values or {}).items()],
                      "broker_config=")
    for arg in topic_args:
        add_topic_arg(config, arg)
    for pattern, values in (topic_values or {}).items():
        for key, value in values.items():
            config.add_topic(pattern, key, kafka_text(value), "topic_config=")
    if kafka_version is not None:
        sep = "" if kafka_version_source.endswith("=") else " "
        config.name_release(kafka_version, "option", f"{kafka_version_source}{sep}{kafka_version}")
    for log_dir in log_dirs:
        config.check(config.release_for(log_dir).release)
    return config
