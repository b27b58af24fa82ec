"""conf.resolve: every source of a topic's configuration, its precedence and its errors.

Weakest first: Kafka's defaults, KRaft metadata, ``--config`` files, ``--broker-config`` and
``--topic-config``. A topic-level value beats any broker-level one; at one level the later
source wins; within one source an exact topic name beats a glob. Expected values are Kafka's
(defaults from Kafka's own docs) written out by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kcompact.conf.resolve import (
    Config,
    add_broker_arg,
    add_properties_file,
    add_topic_arg,
    build,
    check_topics,
    split_assignments,
)
from kcompact.errors import ConfigError

KAFKA_DEFAULTS = {
    "cleanup.policy": ("delete",),
    "min.cleanable.dirty.ratio": 0.5,
    "delete.retention.ms": 86_400_000,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": 9_223_372_036_854_775_807,
    "segment.bytes": 1_073_741_824,
    "segment.index.bytes": 10_485_760,
    "index.interval.bytes": 4096,
    "max.message.bytes": 1_048_588,
    "retention.ms": 604_800_000,  # 168 h
    "retention.bytes": -1,
    "producer.id.expiration.ms": 86_400_000,
    "log.cleaner.io.buffer.size": 524_288,  # 512 KiB
    "log.cleaner.threads": 1,
    "message.max.bytes": 1_048_588,  # the broker's own, beside the topic's max.message.bytes
}
META = "kraft-metadata /logs/__cluster_metadata-0"


def props(tmp_path: Path, text: str, name: str = "kcompact.properties") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_are_kafkas():
    tc = Config().for_topic("orders")
    assert dict(tc.values) == KAFKA_DEFAULTS
    assert set(tc.sources.values()) == {"default"}
    assert not tc.compact and tc.delete
    assert tc.as_strings()["cleanup.policy"] == "delete"


# -- precedence ---------------------------------------------------------------------------------
def test_broker_level_later_source_wins(tmp_path):
    meta = ({"log.cleaner.min.cleanable.ratio": "0.1", "log.segment.bytes": "1000",
             "log.cleaner.delete.retention.ms": "5"}, {}, META)
    path = props(tmp_path, "log.cleaner.min.cleanable.ratio=0.2\nlog.segment.bytes=2000\n")
    config = build(files=[path], broker_args=["log.cleaner.min.cleanable.ratio=0.3"], metadata=[meta])
    tc = config.for_topic("orders")
    # metadata < file < --broker-config
    assert (tc["min.cleanable.dirty.ratio"], tc.sources["min.cleanable.dirty.ratio"]) == (0.3, "--broker-config")
    assert (tc["segment.bytes"], tc.sources["segment.bytes"]) == (2000, path)
    assert (tc["delete.retention.ms"], tc.sources["delete.retention.ms"]) == (5, f"{META} (cluster default)")
    assert (tc["retention.bytes"], tc.sources["retention.bytes"]) == (-1, "default")


def test_topic_level_beats_broker_level_whatever_the_source():
    # the weakest source's topic value beats the strongest source's broker default, as in Kafka
    meta = ({}, {"orders": {"min.cleanable.dirty.ratio": "0.1"}}, META)
    config = build(broker_args=["log.cleaner.min.cleanable.ratio=0.9"], metadata=[meta])
    orders, other = config.for_topic("orders"), config.for_topic("other")
    assert (orders["min.cleanable.dirty.ratio"], orders.sources["min.cleanable.dirty.ratio"]) == (
        0.1,
        f"{META} topic[orders]",
    )
    assert (other["min.cleanable.dirty.ratio"], other.sources["min.cleanable.dirty.ratio"]) == (0.9, "--broker-config")


def test_topic_level_later_source_wins(tmp_path):
    meta = ({}, {"orders": {"segment.bytes": "100", "retention.ms": "1", "retention.bytes": "7"}}, META)
    path = props(tmp_path, "topic[orders].segment.bytes=200\ntopic[orders].retention.ms=2\n")
    config = build(files=[path], topic_args=["orders:segment.bytes=300"], metadata=[meta])
    tc = config.for_topic("orders")
    assert (tc["segment.bytes"], tc.sources["segment.bytes"]) == (300, "--topic-config topic[orders]")
    assert (tc["retention.ms"], tc.sources["retention.ms"]) == (2, f"{path} topic[orders]")
    assert (tc["retention.bytes"], tc.sources["retention.bytes"]) == (7, f"{META} topic[orders]")


def test_two_files_later_wins(tmp_path):
    first = props(tmp_path, "log.cleaner.min.cleanable.ratio=0.2\ntopic[o*].retention.ms=5\n", "a.properties")
    second = props(tmp_path, "log.cleaner.min.cleanable.ratio=0.4\n", "b.properties")
    tc = build(files=[first, second]).for_topic("orders")
    assert (tc["min.cleanable.dirty.ratio"], tc.sources["min.cleanable.dirty.ratio"]) == (0.4, second)
    assert (tc["retention.ms"], tc.sources["retention.ms"]) == (5, f"{first} topic[o*]")


@pytest.mark.parametrize("order", ["exact-first", "glob-first"])
def test_exact_topic_beats_glob_within_a_source(tmp_path, order):
    lines = ["topic[orders].retention.ms=1", "topic[ord*].retention.ms=2"]
    if order == "glob-first":
        lines.reverse()
    path = props(tmp_path, "\n".join(lines) + "\n")
    config = build(files=[path])
    assert (config.for_topic("orders")["retention.ms"], config.for_topic("orders").sources["retention.ms"]) == (
        1, f"{path} topic[orders]")
    assert (config.for_topic("ordinal")["retention.ms"], config.for_topic("ordinal").sources["retention.ms"]) == (
        2, f"{path} topic[ord*]")
    assert config.for_topic("logs").sources["retention.ms"] == "default"
    # the same on the command line (one source, however many --topic-config)
    args = ["orders:retention.ms=1", "ord*:retention.ms=2"]
    tc = build(topic_args=args if order == "exact-first" else args[::-1]).for_topic("orders")
    assert (tc["retention.ms"], tc.sources["retention.ms"]) == (1, "--topic-config topic[orders]")


def test_glob_of_a_later_source_beats_exact_of_an_earlier_one(tmp_path):
    path = props(tmp_path, "topic[orders].retention.ms=1\n")
    tc = build(files=[path], topic_args=["ord?rs:retention.ms=2"]).for_topic("orders")
    assert (tc["retention.ms"], tc.sources["retention.ms"]) == (2, "--topic-config topic[ord?rs]")


def test_later_glob_wins_among_globs_of_one_source():
    tc = build(topic_args=["*:retention.ms=1", "o*:retention.ms=2", "x*:retention.ms=3"]).for_topic("orders")
    assert (tc["retention.ms"], tc.sources["retention.ms"]) == (2, "--topic-config topic[o*]")


def test_glob_forms():
    config = build(topic_args=["logs-[0-9]:retention.ms=5", "a.b?c:retention.ms=6"])
    assert config.for_topic("logs-3")["retention.ms"] == 5
    assert config.for_topic("logs-x")["retention.ms"] == 604_800_000
    assert config.for_topic("a.bxc")["retention.ms"] == 6
    assert config.for_topic("A.bxc")["retention.ms"] == 604_800_000  # case-sensitive, as topic names


# -- values -------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, policy", [
    ("[compact,delete]", ("compact", "delete")),
    ("[delete, compact]", ("compact", "delete")),  # Kafka's order does not matter; ours is fixed
    ("compact", ("compact",)),
    ("[Compact]", ("compact",)),
])
def test_policy_lists(raw, policy):
    tc = build(topic_args=[f"orders:cleanup.policy={raw},retention.ms=10"]).for_topic("orders")
    assert tc["cleanup.policy"] == policy and tc["retention.ms"] == 10
    assert tc.as_strings()["cleanup.policy"] == ",".join(policy)
    assert tc.compact and tc.delete == ("delete" in policy)


def test_policy_list_in_a_file_needs_no_brackets(tmp_path):
    path = props(tmp_path, "log.cleanup.policy=compact,delete\ntopic[t].cleanup.policy=[compact]\n")
    config = build(files=[path])
    assert config.for_topic("orders")["cleanup.policy"] == ("compact", "delete")
    assert config.for_topic("t")["cleanup.policy"] == ("compact",)


def test_unbracketed_list_on_the_command_line_is_an_error():
    # ``compact,delete`` splits into two assignments, the second without '=': say so
    with pytest.raises(ConfigError, match=r"--topic-config: 'delete' is not KEY=VALUE"):
        build(topic_args=["orders:cleanup.policy=compact,delete"])


def test_the_apis_values_are_taken_as_they_are_and_named_as_given():
    # values, not kafka-configs text: a list, numbers; the source names the API's parameter
    config = build(topic_values={"orders": {"cleanup.policy": ["delete", "compact"], "min.cleanable.dirty.ratio": 0.75},
                                 "o*": {"retention.ms": 10}},
                   broker_values={"log.cleaner.min.compaction.lag.ms": 5, "log.retention.hours": 1,
                                  "log.retention.minutes": 2})
    tc = config.for_topic("orders")
    assert (tc["cleanup.policy"], tc["min.cleanable.dirty.ratio"]) == (("compact", "delete"), 0.75)
    assert tc["retention.ms"] == 10
    assert tc.sources["min.cleanable.dirty.ratio"] == "topic_config= topic[orders]"
    assert tc.sources["retention.ms"] == "topic_config= topic[o*]"
    others = config.for_topic("users")
    assert (others["min.compaction.lag.ms"], others.sources["min.compaction.lag.ms"]) == (5, "broker_config=")
    assert others["retention.ms"] == 120_000  # one source: minutes beat hours, as on the command line


def test_a_value_of_the_api_is_one_value_whatever_its_characters():
    # text made of the values would split at the comma and read a second key=value
    with pytest.raises(ConfigError, match=r"topic_config=.*cleanup\.policy"):
        build(topic_values={"orders": {"cleanup.policy": "compact,retention.ms=1"}})
    with pytest.raises(ConfigError, match=r"topic_config=: unknown topic-level key 'retention\.hours'"):
        build(topic_values={"orders": {"retention.hours": 1}})


@pytest.mark.parametrize("raw", ["compact,remove", "none"])  # an empty list is Kafka's too (test_empty_cleanup_policy)
def test_bad_policies(raw):
    with pytest.raises(ConfigError, match=r"cleanup\.policy"):
        build(topic_args=[f"orders:cleanup.policy=[{raw.strip('[]')}]"])


def test_split_assignments():
    assert split_assignments("a=1,b=[x,y], c = 2", "src") == [("a", "1"), ("b", "[x,y]"), ("c", "2")]
    with pytest.raises(ConfigError, match=r"unbalanced '\['"):
        split_assignments("a=[x,y", "src")
    with pytest.raises(ConfigError, match=r"unbalanced '\]'"):
        split_assignments("a=x]", "src")
    with pytest.raises(ConfigError, match=r"'=1' is not KEY=VALUE"):
        split_assignments("=1", "src")


def test_topic_arg_needs_a_topic():
    for arg in ("retention.ms=5", ":retention.ms=5"):
        with pytest.raises(ConfigError, match=r"is not TOPIC:KEY=VALUE"):
            add_topic_arg(Config(), arg)


# -- log.retention.{ms,minutes,hours} ---------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("log.retention.hours=2\n", 7_200_000),  # 2 h
    ("log.retention.minutes=3\n", 180_000),  # 3 min
    ("log.retention.hours=2\nlog.retention.minutes=3\n", 180_000),  # minutes beat hours
    ("log.retention.minutes=3\nlog.retention.hours=2\n", 180_000),  # whatever the order
    ("log.retention.ms=500\nlog.retention.minutes=3\nlog.retention.hours=2\n", 500),  # ms beats both
    ("log.retention.hours=2\nlog.retention.ms=500\n", 500),
    ("log.retention.hours=-1\n", -1),  # unlimited stays -1, not -3600000
])
def test_retention_aliases_in_a_file(tmp_path, text, expected):
    path = props(tmp_path, text)
    tc = build(files=[path]).for_topic("orders")
    assert (tc["retention.ms"], tc.sources["retention.ms"]) == (expected, path)


@pytest.mark.parametrize("args, expected", [
    (["log.retention.hours=1"], 3_600_000),
    (["log.retention.minutes=5,log.retention.hours=1"], 300_000),  # minutes beat hours
    (["log.retention.hours=1,log.retention.ms=7"], 7),
    (["log.retention.ms=7", "log.retention.hours=1"], 7),  # one source, however many options
])
def test_retention_aliases_on_the_command_line(args, expected):
    tc = build(broker_args=args).for_topic("orders")
    assert (tc["retention.ms"], tc.sources["retention.ms"]) == (expected, "--broker-config")


def test_retention_aliases_in_metadata():
    # a cluster-wide dynamic default may carry several synonyms; Kafka reads ms, then minutes, then hours
    meta = ({"log.retention.ms": "1000", "log.retention.hours": "5", "log.retention.minutes": "2"}, {}, META)
    assert build(metadata=[meta]).for_topic("orders")["retention.ms"] == 1000
    meta = ({"log.retention.hours": "5", "log.retention.minutes": "2"}, {}, META)
    assert build(metadata=[meta]).for_topic("orders")["retention.ms"] == 120_000


def test_retention_alias_of_a_later_source_beats_ms_of_an_earlier_one(tmp_path):
    # precedence among the synonyms holds within a source; across sources the later one wins
    path = props(tmp_path, "log.retention.ms=500\n")
    tc = build(files=[path], broker_args=["log.retention.hours=1"]).for_topic("orders")
    assert (tc["retention.ms"], tc.sources["retention.ms"]) == (3_600_000, "--broker-config")
    # and the topic-level retention.ms beats them all
    tc = build(files=[path], broker_args=["log.retention.hours=1"], topic_args=["orders:retention.ms=9"]).for_topic(
        "orders")
    assert tc["retention.ms"] == 9


def test_retention_alias_out_of_range(tmp_path):
    # log.retention.hours and .minutes are Java ints in Kafka
    path = props(tmp_path, "log.retention.hours=3000000000\n")
    with pytest.raises(ConfigError, match=r"log\.retention\.hours") as info:
        build(files=[path])
    assert path in str(info.value)
    with pytest.raises(ConfigError, match=r"log\.retention\.minutes"):
        build(broker_args=["log.retention.minutes=x"])


# -- errors name the key and the source ---------------------------------------------------------
@pytest.mark.parametrize("line, key", [
    ("log.cleaner.min.cleanable.ratio=1.5", "log.cleaner.min.cleanable.ratio"),
    ("log.cleaner.min.cleanable.ratio=NaN", "log.cleaner.min.cleanable.ratio"),
    ("log.segment.bytes=13", "log.segment.bytes"),  # Kafka: at least 14
    ("log.segment.bytes=2147483648", "log.segment.bytes"),  # an int
    ("log.cleaner.max.compaction.lag.ms=0", "log.cleaner.max.compaction.lag.ms"),  # at least 1
    ("log.cleaner.min.compaction.lag.ms=-1", "log.cleaner.min.compaction.lag.ms"),
    ("log.retention.ms=-2", "log.retention.ms"),
    ("log.retention.bytes=ten", "log.retention.bytes"),
    ("producer.id.expiration.ms=0", "producer.id.expiration.ms"),
    ("topic[orders].min.cleanable.dirty.ratio=-0.1", "min.cleanable.dirty.ratio"),
    ("topic[orders].segment.index.bytes=3", "segment.index.bytes"),
    ("topic[orders].delete.retention.ms=1.5", "delete.retention.ms"),
])
def test_out_of_range_values(tmp_path, line, key):
    path = props(tmp_path, line + "\n")
    with pytest.raises(ConfigError) as info:
        build(files=[path])
    message = str(info.value)
    assert path in message and key in message


def test_unknown_keys(tmp_path):
    path = props(tmp_path, "log.cleaner.threads.extra=1\n")
    with pytest.raises(ConfigError, match=r"unknown broker-level key 'log.cleaner.threads.extra'") as info:
        build(files=[path])
    assert str(info.value).startswith(path)
    path = props(tmp_path, "topic[orders].retention.mss=1\n")
    with pytest.raises(ConfigError, match=r"unknown topic-level key 'retention.mss' for topic 'orders'") as info:
        build(files=[path])
    assert str(info.value).startswith(path)
    with pytest.raises(ConfigError, match=r"^--topic-config: unknown topic-level key 'foo'"):
        build(topic_args=["orders:foo=1"])
    with pytest.raises(ConfigError, match=r"^--broker-config: unknown broker-level key 'foo'"):
        build(broker_args=["foo=1"])


def test_topic_level_name_at_broker_level_gets_a_hint(tmp_path):
    path = props(tmp_path, "min.cleanable.dirty.ratio=0.3\n")
    with pytest.raises(ConfigError) as info:
        build(files=[path])
    message = str(info.value)
    assert path in message and "'min.cleanable.dirty.ratio' is a topic-level name" in message
    assert "log.cleaner.min.cleanable.ratio" in message and "topic[<name>].min.cleanable.dirty.ratio" in message
    with pytest.raises(
        ConfigError, match=r"--broker-config: 'cleanup.policy' is a topic-level name.*log.cleanup.policy"
    ):
        add_broker_arg(Config(), "cleanup.policy=compact")


def test_broker_level_name_at_topic_level_gets_a_hint():
    with pytest.raises(ConfigError, match=r"'log.cleanup.policy'.*\(the topic-level name is cleanup.policy\)"):
        build(topic_args=["orders:log.cleanup.policy=compact"])


def test_other_kafka_topic_settings_are_accepted_and_ignored(tmp_path):
    path = props(tmp_path, "topic[orders].compression.type=zstd\ntopic[orders].segment.ms=1000\n")
    tc = build(files=[path], topic_args=["orders:min.insync.replicas=2"]).for_topic("orders")
    assert dict(tc.values) == KAFKA_DEFAULTS


def test_the_brokers_message_max_bytes_stands_beside_a_topic_override(tmp_path):
    tc = build(topic_args=["orders:max.message.bytes=1000"], broker_args=["message.max.bytes=2000000"]).for_topic(
        "orders"
    )
    assert (tc["max.message.bytes"], tc["message.max.bytes"]) == (1000, 2_000_000)
    assert tc.sources["message.max.bytes"] == "--broker-config"


@pytest.mark.parametrize("bad", ["log.cleaner.io.buffer.size=0", "log.cleaner.threads=0"])
def test_the_cleaners_buffer_settings_must_leave_it_a_buffer(bad):
    with pytest.raises(ConfigError, match=bad.split("=")[0]):
        build(broker_args=[bad])


def test_bad_topic_pattern(tmp_path):
    path = props(tmp_path, "topic[my\\ topic].retention.ms=1\n")  # '\ ': a space inside a properties key
    with pytest.raises(ConfigError, match=r"'my topic' is not a topic name or glob pattern") as info:
        build(files=[path])
    assert path in str(info.value)
    with pytest.raises(ConfigError, match=r"^--topic-config: 'my/topic' is not a topic name or glob pattern"):
        build(topic_args=["my/topic:retention.ms=1"])


def test_metadata_ignores_keys_cleaning_does_not_use_but_checks_the_ones_it_does():
    meta = ({"num.io.threads": "8", "some.future.setting": "x"},
            {"orders": {"compression.type": "zstd", "a.future.topic.setting": "1", "retention.ms": "5"}}, META)
    assert build(metadata=[meta]).for_topic("orders")["retention.ms"] == 5
    bad = ({}, {"orders": {"min.cleanable.dirty.ratio": "7"}}, META)
    with pytest.raises(ConfigError, match=rf"^{META}: min.cleanable.dirty.ratio='7'"):
        build(metadata=[bad])
    bad = ({"log.segment.bytes": "1"}, {}, META)
    with pytest.raises(ConfigError, match=rf"^{META} \(cluster default\): log.segment.bytes='1'"):
        build(metadata=[bad])


# -- properties files -----------------------------------------------------------------------------
def test_properties_file_syntax(tmp_path):
    # javaproperties: '#' and '!' comments, ':' or whitespace separators, '\' line continuations
    path = props(tmp_path, "\n".join([
        "# kcompact defaults",
        "! another comment style",
        "   log.cleaner.min.cleanable.ratio = 0.25",
        "log.cleanup.policy: compact,\\",
        "    delete",
        "log.segment.bytes 4096",
        "topic[orders].min.compaction.lag.ms=\\",
        "   60000",
        "topic[orders].cleanup.policy=delete",
        "",
    ]))
    config = build(files=[path])
    other, orders = config.for_topic("other"), config.for_topic("orders")
    assert other["min.cleanable.dirty.ratio"] == 0.25
    assert other["cleanup.policy"] == ("compact", "delete")
    assert other["segment.bytes"] == 4096
    assert (orders["min.compaction.lag.ms"], orders.sources["min.compaction.lag.ms"]) == (
        60000,
        f"{path} topic[orders]",
    )
    assert orders["cleanup.policy"] == ("delete",)
    assert orders.sources["segment.bytes"] == path


def test_unreadable_properties_file(tmp_path):
    path = tmp_path / "bad.properties"
    path.write_bytes(b"log.segment.bytes=\xff\xfe\n")
    with pytest.raises(ConfigError, match="not a readable properties file") as info:
        add_properties_file(Config(), str(path))
    assert str(path) in str(info.value)


def test_missing_properties_file_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        build(files=[str(tmp_path / "nope.properties")])


# -- a topic override naming no topic of the log dirs ---------------------------------------------
HELD = {"orders", "payments", "__consumer_offsets"}


def test_an_override_of_a_topic_no_log_dir_holds_is_refused_with_the_nearest_names(tmp_path):
    config = build(topic_args=["ordres:min.cleanable.dirty.ratio=0.01"])
    with pytest.raises(ConfigError) as err:
        check_topics(config, lambda: HELD)
    assert str(err.value) == ("--topic-config: no topic 'ordres' in the log dirs; did you mean 'orders'? "
                              "(--allow-unknown-topics takes it as a topic that appears later)")
    props = tmp_path / "c.properties"
    props.write_text("topic[paymnets].cleanup.policy=compact\n")
    with pytest.raises(ConfigError, match=rf"^{props}: no topic 'paymnets' in the log dirs; did you mean 'payments'"):
        check_topics(build(files=[str(props)]), lambda: HELD)
    with pytest.raises(ConfigError, match=r"no topic 'zzz' in the log dirs \(--allow"):  # nothing near
        check_topics(build(topic_args=["zzz:cleanup.policy=compact"]), lambda: HELD)


def test_known_topics_globs_and_recorded_topics_are_not_questioned():
    asked = []
    check_topics(build(topic_args=["orders-*:cleanup.policy=compact", "*:min.compaction.lag.ms=5"]),
                 lambda: asked.append(1) or HELD)
    assert asked == []  # no topic named exactly: the log dirs are not even listed
    check_topics(build(topic_args=["orders:cleanup.policy=compact"]), lambda: HELD)
    recorded = build(metadata=[({}, {"elsewhere": {"cleanup.policy": "compact"}}, "kraft-metadata x")])
    check_topics(recorded, lambda: HELD)  # the cluster's topic, held by another broker
