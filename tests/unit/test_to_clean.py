"""What the compaction job takes of a plan (no Spark): a ``PartitionToClean`` per selected row, in
plan order, with its ``CleanerConfig`` typed once from the row's settings by Kafka's names."""

from __future__ import annotations

import pyarrow as pa

from kcompact.compaction.cleaner_config import CLEANER_CONFIG, CONFIG_KEYS, CleanerConfig
from kcompact.compaction.to_clean import PartitionToClean, to_clean
from kcompact.conf.resolve import Config
from kcompact.planner.build import PLAN_SCHEMA
from kcompact.planner.plan import Plan


def strings(topic: str) -> dict[str, str]:
    config = Config()
    config.add_topic("orders", "segment.bytes", "4096", "test")
    return config.for_topic(topic).as_strings()


def row(topic: str, partition: int, selected: bool, rank: int | None) -> dict:
    return {"topic": topic, "partition": partition, "log_dir": "/logs", "path": f"/logs/{topic}-{partition}",
            "log_start_offset": 3, "first_dirty_offset": 10, "first_uncleanable_dirty_offset": 20,
            "total_bytes": 1000 + partition, "selected": selected, "rank": rank,
            "config": list(strings(topic).items())}


def test_cleaner_config_by_kafkas_names():
    given = strings("orders")
    config = CleanerConfig.of(given)
    named = list(CleanerConfig.__dataclass_fields__)[:len(CONFIG_KEYS)]  # then the release's rules
    assert [getattr(config, name) for name in named] == [int(given[k]) for k in CONFIG_KEYS]
    assert config.legacy_to_v2 == 0 and CleanerConfig.of(given, legacy_to_v2=True).legacy_to_v2 == 1
    assert config.segment_bytes == 4096 and config.io_buffer_size == int(given["log.cleaner.io.buffer.size"])
    assert config.cleaner_threads == int(given["log.cleaner.threads"])
    assert CleanerConfig.of(list(given.items())) == config  # a map as Arrow gives it
    travelled = pa.array([config.struct()], CLEANER_CONFIG).to_pylist()[0]
    assert CleanerConfig.from_struct(travelled) == config


def test_the_selected_rows_in_plan_order():
    plan = Plan(pa.Table.from_pylist([row("orders", 1, True, 1), row("users", 0, False, None),
                                      row("orders", 0, True, 2)], schema=PLAN_SCHEMA))
    got = to_clean(plan.table)
    assert [(p.topic, p.partition) for p in got] == [("orders", 1), ("orders", 0)]
    assert got[0] == PartitionToClean(path="/logs/orders-1", log_dir="/logs", topic="orders", partition=1,
                                      log_start_offset=3, first_dirty_offset=10, first_uncleanable_dirty_offset=20,
                                      total_bytes=1001, config=CleanerConfig.of(strings("orders")))
    assert plan.log_dirs == ["/logs"] and plan.within(["/other"]).table.num_rows == 0
