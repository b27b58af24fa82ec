"""The compaction job's Spark settings are one typed object, read once (issue 44 item 3): the
routing of partitions reads its limits from it, and no module variable is changed to steer it."""

from __future__ import annotations

import pytest

from kcompact import errors
from kcompact.compaction.pipeline import routing
from kcompact.compaction.pipeline.settings import STEP, WHOLE, JobSettings, check_setting
from kcompact.compaction.pipeline.tasks import STEP_BYTES

MiB = 1 << 20


def settings(**changes) -> JobSettings:
    base = dict(map_memory=2 << 30, worker_cap=None, threads=None, cores=2, direct_writes=True)
    return JobSettings(**(base | changes))


def test_small_partitions_are_read_whole_unless_the_setting_says_otherwise():
    sizes, keys, largest = [10 * MiB, 300 * MiB], [1_000, 50_000_000], {0: 10 * MiB, 1: 64 * MiB}
    default = routing.route(settings().limits, [0, 1], sizes, keys, largest)
    assert (default.whole, default.shared) == ([0], [1])  # 50 M keys need 4.8 GB of map: over 2 GiB
    assert settings().limits.whole_bytes == routing.WHOLE_BYTES == 256 * MiB
    none = routing.route(settings(whole_bytes=0, map_memory=0).limits, [0, 1], sizes, keys, largest)
    assert (none.whole, none.shared) == ([], [0, 1])  # as the tests' "shared" path sets it


def test_the_whole_bytes_setting_is_checked_as_a_size():
    check_setting(WHOLE, "64m")
    with pytest.raises(errors.SettingError, match=r"^spark.kcompact.whole.bytes: 'lots' is not a size"):
        check_setting(WHOLE, "lots")


def test_the_step_bytes_setting_is_a_size_of_at_least_a_byte():
    """The cleaning stages' smallest task (``spark.kcompact.step.bytes``) is the session's
    setting, read into the typed object, not a module variable a caller assigns."""
    assert settings().step_bytes == STEP_BYTES == 16 * MiB
    check_setting(STEP, "1k")
    check_setting(STEP, "4m")
    with pytest.raises(errors.SettingError, match=r"^spark.kcompact.step.bytes: 'tiny' is not a size"):
        check_setting(STEP, "tiny")
    with pytest.raises(errors.SettingError, match=r"^spark.kcompact.step.bytes='0': a task of the cleaning"):
        check_setting(STEP, "0")
