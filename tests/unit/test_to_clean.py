"""What the compaction job takes of a plan (no Spark): a ``PartitionToClean`` per selected row, in
plan order, with its ``CleanerConfig`` typed once from the row's settings by Kafka's names."""

from __future__ import annotations

import pyarrow as pa

from kcompact.compaction.pipeline.to_clean import PartitionToClean, to_clean
from kcompact.compaction.rules.cleaner_config import CONFIG_KEYS, CleanerConfig
from kcompact.conf.resolve import Config
from kcompact.contracts.plan_row import PlanRow
from kcompact.planner.build import PLAN_SCHEMA
from kcompact.planner.plan import Plan

CONFIG_FIELDS = [name for name in CleanerConfig.__dataclass_fields__ if name not in ("index_per_batch", "legacy_to_v2",
                                                                                          "gzip_os")]


def strings(topic: str) -> dict[str, str]:
    config = Config()
    config.add_topic("orders", "segment.bytes", "4096", "test")
    return config.for_topic(topic).as_strings()


def row(topic: str, partition: int, selected: bool, rank: int | None, kafka_version: str = "4.3",
        high_watermark: int | None = None) -> dict:
    return {"topic": topic, "partition": partition, "log_dir": "/logs", "path": f"/logs/{topic}-{partition}",
            "log_start_offset": 3, "first_dirty_offset": 10, "first_uncleanable_dirty_offset": 20,
            "log_end_offset": 30, "total_bytes": 1000 + partition, "selected": selected, "rank": rank,
            "config": list(strings(topic).items()), "kafka_version": kafka_version, "high_watermark": high_watermark}


def test_cleaner_config_by_kafkas_names():
    given = strings("orders")
    config = CleanerConfig.of_topic(given)
    assert [getattr(config, name) for name in CONFIG_FIELDS] == [int(given[k]) for k in CONFIG_KEYS]
    assert config.index_per_batch == 1 and CleanerConfig.of_topic(given, index_per_batch=False).index_per_batch == 0
    assert config.legacy_to_v2 == 1 and CleanerConfig.of_topic(given, legacy_to_v2=False).legacy_to_v2 == 0
    assert config.gzip_os == 255 and CleanerConfig.of_topic(given, gzip_os=0).gzip_os == 0
    assert config.segment_bytes == 4096 and config.io_buffer_size == int(given["log.cleaner.io.buffer.size"])
    assert config.cleaner_threads == int(given["log.cleaner.threads"])
    assert CleanerConfig.of_topic(list(given.items())) == config  # a map as Arrow gives it
    travelled = pa.array([config.row()], CleanerConfig.struct()).to_pylist()[0]  # as Spark carries it
    assert travelled == dict(zip(CleanerConfig.schema().names, [*(int(given[k]) for k in CONFIG_KEYS), 1, 1, 255]))
    assert CleanerConfig.of(travelled) == config


def test_the_selected_rows_in_plan_order():
    plan = Plan(pa.Table.from_pylist([row("orders", 1, True, 1), row("users", 0, False, None),
                                      row("orders", 0, True, 2)], schema=PLAN_SCHEMA))
    got = to_clean(plan.rows)
    assert [(p.topic, p.partition) for p in got] == [("orders", 1), ("orders", 0)]
    assert got[0] == PartitionToClean(path="/logs/orders-1", log_dir="/logs", topic="orders", partition=1,
                                      log_start_offset=3, first_dirty_offset=10, first_uncleanable_dirty_offset=20,
                                      total_bytes=1001, config=CleanerConfig.of_topic(strings("orders")),
                                      retain_last_empty_at=20)
    assert plan.log_dirs == ["/logs"] and plan.within(["/other"]).table.num_rows == 0


def test_each_release_keeps_the_rounds_last_emptied_batch_at_its_own_offset():
    """checkBatchRetention: 3.9.0/3.9.1 never; 3.9.2-4.3 at the first uncleanable offset (20);
    4.4 at the high watermark, the log end offset (30) standing in when none was read."""
    cases = [("3.9.0", None, None, 0), ("3.9.1", None, None, 1), ("3.9.2", None, 20, 1), ("4.0.0", None, 20, 0),
             ("4.3", 25, 20, 1), ("4.4", 25, 25, 1), ("4.4", None, 30, 1)]
    for version, hw, expected, per_batch in cases:
        (got,) = to_clean(PlanRow.read(pa.Table.from_pylist([row("orders", 0, True, 1, version, hw)],
                                                            schema=PLAN_SCHEMA)))
        assert (got.retain_last_empty_at, got.config.index_per_batch) == (expected, per_batch), version
