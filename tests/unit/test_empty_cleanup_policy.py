"""An empty ``cleanup.policy``: accepted by every release (ConfigDef.ValidList.in allows an empty list),
neither compaction nor retention by time or size: UnifiedLog.deleteOldSegments deletes only segments
below the log start offset when ``delete`` is not named (KIP-1161 documents it from 4.2 as infinite
retention; its tiered-storage branch, local retention, is not a local log's). From 4.2 a list naming
a value twice is refused (KAFKA-19112's ValidList)."""

from __future__ import annotations

import pytest

from kcompact.conf import resolve
from kcompact.errors import ConfigError
from kcompact.planner.build import plan_task, tasks_for
from tests.support import kp_keyed, write_partition

NOW = 1_720_001_000_000
OLD = NOW - 30 * 86_400_000  # past the default retention.ms (7 days)


def _row(tmp_path, policy: str, version: str):
    log_dir = tmp_path / "logs"
    write_partition(log_dir / "orders-0", [(0, [kp_keyed(0, [b"a", b"a"], OLD)]), (2, [kp_keyed(2, [b"a"], OLD)]),
                                           (3, [kp_keyed(3, [b"b"], NOW - 1000)])])
    config = resolve.build(topic_args=[f"orders:cleanup.policy={policy}"], kafka_version=version,
                           log_dirs=[str(log_dir)])
    return plan_task(tasks_for(str(log_dir), config)[0], NOW)


@pytest.mark.parametrize("version", ["3.9.0", "4.1", "4.2", "4.4"])
@pytest.mark.parametrize("policy", ["", "[]"])
def test_empty_policy_keeps_every_segment_and_cleans_nothing(tmp_path, version, policy):
    row = _row(tmp_path, policy, version)
    assert row.cleanup_policy is None and not row.selected and row.retention_deletes == ()


def test_delete_deletes_the_same_segments(tmp_path):
    assert [d.base_offset for d in _row(tmp_path, "delete", "4.2").retention_deletes] == [0, 2]


@pytest.mark.parametrize(("version", "refused"), [("3.9.2", False), ("4.1", False), ("4.2", True), ("4.4", True)])
def test_a_policy_named_twice_is_refused_from_4_2(version, refused):
    args = {"topic_args": ["orders:cleanup.policy=[delete,delete]"], "kafka_version": version, "log_dirs": ["/x"]}
    if not refused:
        assert resolve.build(**args).for_topic("orders").values["cleanup.policy"] == ("delete",)
        return
    with pytest.raises(ConfigError, match=rf"--topic-config: cleanup.policy names a value twice: Kafka {version} "
                                          r"refuses it \(KAFKA-19112\)"):
        resolve.build(**args)
