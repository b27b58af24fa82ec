"""Which Kafka release a run reproduces: an option beats kafka.version in a --config file (the later
file wins), which beats the log dir's metadata.version, which beats the default; and what each
release refuses of the configuration (KIP-1030's segment.bytes floors, KAFKA-19080's
internal.segment.bytes, the message-format settings KIP-724 removed), naming the release."""

from __future__ import annotations

import pytest

from kcompact.conf.resolve import build
from kcompact.contracts.plan_row import PlanRow
from kcompact.errors import ConfigError

DETECTED_41 = ({}, {}, "kraft-metadata /logs/__cluster_metadata-0", ("/logs", 27, "/logs/__cluster_metadata-0"))


def props(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_precedence_option_then_config_file_then_detected_then_default(tmp_path):
    first = props(tmp_path, "a.properties", "kafka.version=3.9.1\n")
    second = props(tmp_path, "b.properties", "log.cleaner.threads=1\nkafka.version=4.0.0\n")
    assert build().release_for("/logs").describe().startswith("Kafka 4.3 (default: no finalized metadata.version")
    assert build(metadata=[DETECTED_41]).release_for("/logs").describe().startswith(
        "Kafka 4.1 (detected: metadata.version 4.1-IV1 (level 27) in /logs/__cluster_metadata-0")
    by_file = build(files=[first, second], metadata=[DETECTED_41]).release_for("/logs")
    assert by_file.describe() == f"Kafka 4.0.0 (config file: {second}: line 2)"
    by_option = build(files=[first], metadata=[DETECTED_41], kafka_version="3.9.2").release_for("/logs")
    assert by_option.describe() == "Kafka 3.9.2 (option: --kafka-version 3.9.2)"
    api = build(kafka_version="4.1.2", kafka_version_source="kafka_version=").release_for("/logs")
    assert api.describe() == ("Kafka 4.1.2, cleaned as 4.1 (4.1.2: lz4-java moved to the at.yawk.lz4 fork "
                              "(KAFKA-19951: 1.8.0 to 1.10.1, liblz4 1.9.3 to 1.10.0): the same lz4 frames) "
                              "(option: kafka_version=4.1.2)")
    assert build(kafka_version="4.4").release_for("/x").describe().startswith("Kafka 4.4 (unreleased branch)")


def test_an_unknown_version_names_where_it_was_given(tmp_path):
    path = props(tmp_path, "k.properties", "\nkafka.version=3.8.0\n")
    with pytest.raises(ConfigError, match=rf"^{path}: line 2: Kafka version '3.8.0' is not one kcompact reproduces"):
        build(files=[path])
    with pytest.raises(ConfigError, match=r"^--kafka-version 4.0: Kafka version '4.0' is not one"):
        build(kafka_version="4.0")


@pytest.mark.parametrize(("release", "topic_ok", "broker_ok"), [
    ("3.9.0", True, True), ("3.9.2", True, True), ("4.0.0", True, False), ("4.0.1", True, False),
    ("4.1", False, False), ("4.3", False, False), ("4.4", False, False)])
def test_segment_bytes_floors_per_release(release, topic_ok, broker_ok):
    """LogConfig: atLeast(14) in 3.9; 4.0 raised log.segment.bytes to 1 MiB (KAFKA-16368), 4.1
    segment.bytes too (KAFKA-19080)."""
    topic = dict(topic_args=["orders:segment.bytes=65536"], kafka_version=release, log_dirs=["/logs"])
    broker = dict(broker_args=["log.segment.bytes=65536"], kafka_version=release, log_dirs=["/logs"])
    for ok, args, key in ((topic_ok, topic, "segment.bytes"), (broker_ok, broker, "log.segment.bytes")):
        if ok:
            build(**args)
        else:
            with pytest.raises(ConfigError, match=rf"{key}=65536: Kafka {release} requires at least 1048576 "
                                                  r"\(KIP-1030\)"):
                build(**args)
    build(topic_args=["orders:segment.bytes=1048576"], broker_args=["log.segment.bytes=1048576"], kafka_version="4.3",
          log_dirs=["/logs"])
    with pytest.raises(ConfigError, match=r"segment\.bytes='13'"):
        build(topic_args=["orders:segment.bytes=13"])


def test_values_the_cluster_recorded_are_taken_as_recorded():
    recorded = ({"log.segment.bytes": "4096"}, {"orders": {"segment.bytes": "4096"}},
                "kraft-metadata /logs/__cluster_metadata-0", ("/logs", 21, "/logs/__cluster_metadata-0"))
    config = build(metadata=[recorded], kafka_version="4.3", log_dirs=["/logs"])
    assert config.for_topic("orders")["segment.bytes"] == 4096


def test_internal_segment_bytes_exists_from_4_1_and_overrides_segment_bytes():
    args = ["orders:segment.bytes=1048576,internal.segment.bytes=3000"]
    config = build(topic_args=args, kafka_version="4.1", log_dirs=["/logs"])
    orders = config.for_topic("orders")
    assert orders["segment.bytes"] == 3000
    assert orders.sources["segment.bytes"] == "--topic-config topic[orders].internal.segment.bytes"
    assert config.for_topic("other")["segment.bytes"] == 1 << 30
    with pytest.raises(ConfigError, match=r"internal.segment.bytes for topic 'orders': Kafka 4.0.1 has no such "
                                          r"topic config \(it exists from 4.1, KAFKA-19080\)"):
        build(topic_args=args, kafka_version="4.0.1", log_dirs=["/logs"])


@pytest.mark.parametrize("release", ["4.0.0", "4.0.1", "4.1", "4.3", "4.4"])
def test_message_format_settings_are_refused_from_4_0(tmp_path, release):
    path = props(tmp_path, "k.properties", "log.message.format.version=3.0-IV1\n")
    with pytest.raises(ConfigError, match=rf"^{path}: line 1: log.message.format.version was removed in Kafka 4.0 "
                                          rf"\(KIP-724\): Kafka {release} refuses it"):
        build(files=[path], kafka_version=release, log_dirs=["/logs"])
    with pytest.raises(ConfigError, match=rf"message.format.version was removed in Kafka 4.0 \(KIP-724\): Kafka "
                                          rf"{release} refuses it"):
        build(topic_args=["orders:message.format.version=2.8"], kafka_version=release, log_dirs=["/logs"])


@pytest.mark.parametrize("release", ["3.9.0", "3.9.1", "3.9.2"])
def test_message_format_settings_are_accepted_and_ignored_by_3_9(tmp_path, release):
    path = props(tmp_path, "k.properties", "log.message.format.version=3.0-IV1\ntopic[o].message.format.version=2.8\n")
    config = build(files=[path], kafka_version=release, log_dirs=["/logs"])
    assert "message.format.version" not in config.for_topic("o").values


def test_the_release_and_why_in_the_plan_the_summary_and_the_report():
    import pyarrow as pa

    from kcompact.compaction.reports.report import Report
    from kcompact.planner.build import PLAN_SCHEMA
    from kcompact.planner.output import describe

    detected = "Kafka 4.1 (detected: metadata.version 4.1-IV1 (level 27) in /a/__cluster_metadata-0: line 4.1 (...))"
    default = "Kafka 4.3 (default: no finalized metadata.version in /b/__cluster_metadata-0; ...)"
    rows = [{"topic": "t", "partition": p, "log_dir": d, "path": f"{d}/t-{p}", "selected": False, "notes": [],
             "kafka_version": v, "kafka_version_source": why}
            for p, (d, v, why) in enumerate([("/a", "4.1", detected), ("/a", "4.1", detected), ("/b", "4.3", default)])]
    table = pa.Table.from_pylist(rows, schema=PLAN_SCHEMA)
    assert describe(PlanRow.read(table)).splitlines()[-2:] == [f"reproducing {detected}", f"reproducing {default}"]
    report = Report(now=0, dry_run=True)
    report.observe_plan(PlanRow.read(table))
    assert report.text().splitlines()[:2] == [f"reproducing {detected}", f"reproducing {default}"]
    assert report.to_json()["kafka_releases"] == [{"log_dir": "/a", "kafka_version": "4.1", "why": detected},
                                                  {"log_dir": "/b", "kafka_version": "4.3", "why": default}]
