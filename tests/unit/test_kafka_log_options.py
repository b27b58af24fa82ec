"""The ``kafka-log`` source's Spark-named options, parsed without Spark, and how a stream's
limit is shared among partitions (Spark's Kafka source's rule, written out here)."""

from __future__ import annotations

import pytest

from kcompact.datasource.bounds import EARLIEST, LATEST
from kcompact.datasource.options import Settings
from kcompact.datasource.streaming import _spread


def parse(**options) -> Settings:
    return Settings.parse({"path": "/logs", **options})


def test_starting_offsets_json_and_words():
    s = parse(startingOffsets='{"orders":{"0":23,"1":-2}}', endingOffsets="latest")
    assert s.selection.starts[0].of("orders", 0) == 23 and s.selection.starts[0].of("orders", 1) == EARLIEST
    assert s.selection.ends[0].default == LATEST
    resolve = {(EARLIEST, True): None, (LATEST, False): None}.get
    offsets = s.selection.offsets("orders", 1, lambda v, starting: resolve((v, starting)))
    assert (offsets.start, offsets.end) == (None, None)
    assert s.selection.offsets("orders", 0, lambda v, starting: None).start == 23


def test_subscribe_and_assign_are_topics_and_partitions():
    s = parse(assign='{"orders":[0,2]}')
    assert s.named_topics == frozenset({"orders"})
    assert s.selection.selects("orders", 2) and not s.selection.selects("orders", 1)
    assert parse(subscribe="a, b").named_topics == frozenset({"a", "b"})


def test_timestamps_isolation_headers_and_table():
    s = parse(startingTimestamp="1720000000000", endingOffsetsByTimestamp='{"t":{"3":1720000009999}}')
    assert s.start_times.of("x", 0) == 1720000000000 and s.end_times.of("t", 3) == 1720000009999
    assert s.end_times.of("t", 4) is None
    assert not parse().committed and parse(**{"kafka.isolation.level": "READ_COMMITTED"}).committed
    assert parse(mode="table").committed and not parse(includeHeaders="false").include_headers


def test_pushed_filters_never_read_as_earliest_or_latest():
    s = parse().selection.with_offsets(-1, None).with_offsets(None, -2)
    offsets = s.offsets("t", 0)  # no resolver needed: plain offsets
    assert (offsets.start, offsets.end) == (None, 0)


@pytest.mark.parametrize("options, said", [
    ({"startingOffsets": "{bad"}, "startingOffsets must be JSON"),
    ({"endingOffsets": '{"t":{"0":-3}}'}, "neither a position"),
    ({"startingOffsetsByTimestamp": '{"t":{"0":-1}}'}, "neither a position"),
    ({"startingTimestamp": "1", "startingOffsetsByTimestamp": '{"t":{"0":1}}'}, "not both"),
    ({"assign": '["t"]'}, "assign must be JSON"),
    ({"maxOffsetsPerTrigger": "0"}, "positive integer"),
    ({"failOnDataLoss": "maybe"}, "true or false"),
])
def test_bad_values_are_refused_naming_the_option(options, said):
    with pytest.raises(ValueError, match=said):
        parse(**options)


def test_a_limit_is_shared_in_proportion_to_what_each_partition_has_to_read():
    spans = [("a", 0, 300), ("b", 100, 200), ("c", 5, 5)]
    assert _spread(spans, 100, lambda pos: 1.0) == [("a", 0, 75), ("b", 100, 125), ("c", 5, 5)]
    assert _spread(spans, 1000, lambda pos: 1.0) == spans
    assert _spread([("a", 0, 1000), ("b", 0, 1)], 10, lambda pos: 1.0) == [("a", 0, 9), ("b", 0, 1)]
