"""How many tasks a stage is cut into: a cleaning stage's large work into several per core, so
that the console's progress (tasks done) moves while it runs; small work as before."""

from types import SimpleNamespace

from kcompact.compaction.pipeline.tasks import STEP_BYTES, STEPS, task_count

MB = 1 << 20
TWO_CORES = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=2))  # a classic session's


def test_a_large_cleaning_stage_is_cut_into_several_tasks_per_core():
    # the run: 372.2 MB of 6,111 groups on 2 cores went as 2 tasks, 0/2 done until the end
    assert task_count(TWO_CORES, int(372.2 * MB), 6111) == 2
    assert task_count(TWO_CORES, int(372.2 * MB), 6111, step_bytes=STEP_BYTES) == 2 * STEPS
    assert task_count(TWO_CORES, 5 * STEP_BYTES, 6111, step_bytes=STEP_BYTES) == 4  # none smaller than STEP_BYTES


def test_a_cleaning_stage_is_cut_into_whole_rounds_of_the_cores():
    """Equal shares on two cores: a fifth task would run alone while the other core idles (three
    rounds where two and a half are work), so five steps' bytes go as four tasks, seven as six."""
    for steps, tasks in ((3, 2), (5, 4), (6, 6), (7, 6), (15, 14), (40, 2 * STEPS)):
        assert task_count(TWO_CORES, steps * STEP_BYTES + 1, 6111, step_bytes=STEP_BYTES) == tasks
    four = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=4))
    assert task_count(four, 7 * STEP_BYTES, 6111, step_bytes=STEP_BYTES) == 4
    assert task_count(four, 11 * STEP_BYTES, 6111, step_bytes=STEP_BYTES) == 8


def test_small_work_and_few_items_are_cut_as_before():
    assert task_count(TWO_CORES, 3 * MB, 100, step_bytes=STEP_BYTES) == 2
    assert task_count(TWO_CORES, int(372.2 * MB), 3, step_bytes=STEP_BYTES) == 3  # never more tasks than items
    assert task_count(TWO_CORES, 0, 0, step_bytes=STEP_BYTES) == 1
