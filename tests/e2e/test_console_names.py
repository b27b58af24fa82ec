"""The console names what it means (issue 33 item 10): the way out of a state with its log dir and
partition, a partition in several log dirs with its log dir, commits numbered without gaps, a
partition paused during a run in that run's paused line, and progress by the step under way.
"""

from __future__ import annotations

import json
import re

from kcompact.jobs.cli import main
from tests.e2e.test_operator_inputs import dirty

NOW = 1_720_300_000_000
COMPACT = ["--topic-config", "*:cleanup.policy=compact"]


def test_status_way_out_names_the_log_dir_and_the_partition(tmp_path, capsys):
    log_dir = tmp_path / "logs"
    for n in range(3):
        dirty(log_dir / f"orders-{n}")
    (log_dir / "kcompact-state.orders-1.json").write_text(json.dumps({"state": "paused", "pause_count": 2}))
    (log_dir / "kcompact-state.orders-2.json").write_text(
        json.dumps({"state": "uncleanable", "reason": "x.log: byte 0: bad", "since_ms": NOW}))
    assert main(["status", str(log_dir)]) == 0
    out = capsys.readouterr().out
    assert f"-> 'kcompact resume {log_dir} orders-1' 2x (each pause needs its resume)" in out, out
    assert f"then 'kcompact reset-uncleanable {log_dir} orders-2'" in out, out
    # the way out, as printed, works: twice, then the partition is idle
    for _ in range(2):
        assert main(["resume", str(log_dir), "orders-1"]) == 0
    assert not (log_dir / "kcompact-state.orders-1.json").exists()


def test_a_partition_in_two_log_dirs_is_named_with_its_log_dir(tmp_path, spark, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    dirty(a / "orders-1")
    dirty(b / "orders-1")
    assert main(["compact", str(a), str(b), "--now", str(NOW), *COMPACT, "--allow-duplicate-partitions"]) == 0
    out = capsys.readouterr().out
    for log_dir in (a, b):
        assert f"committed orders-1 in {log_dir} (" in out, out
        assert f"Log cleaner thread 0 cleaned log orders-1 in {log_dir} (dirty section = [0, 3])" in out, out


def test_commits_are_numbered_without_a_gap_and_a_pause_during_the_run_is_listed(tmp_path, spark, capsys,
                                                                                 monkeypatch):
    """An operator pauses orders-1 while it is being cleaned (``kcompact pause``: the job is asked to
    abort it): the commits of the others count 1, 2 and the summary lists orders-1 as paused."""
    from kcompact.compaction.pipeline import job
    from kcompact.operations import states

    log_dir = tmp_path / "logs"
    for n in range(3):
        dirty(log_dir / f"orders-{n}")
    real = job.commit_partitions

    def paused_first(*args, **kwargs):
        states.pause(str(log_dir / "orders-1"))
        return real(*args, **kwargs)

    monkeypatch.setattr(job, "commit_partitions", paused_first)
    assert main(["compact", str(log_dir), "--now", str(NOW), *COMPACT]) == 0
    out = capsys.readouterr().out
    assert re.findall(r"committed (orders-\d) \((\d)/\d\)", out) == [("orders-0", "1"), ("orders-2", "2")], out
    assert "aborted orders-1: old segments kept" in out, out
    assert f"paused partitions: {log_dir}: 1 (orders-1) -> 'kcompact resume {log_dir} orders-1'" in out, out


def test_run_progress_names_the_step_under_way(tmp_path, spark):
    import contextlib

    import kcompact
    from kcompact.conf import resolve

    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    steps = []

    class Steps(kcompact.Observer):
        @contextlib.contextmanager
        def watch(self, what, total_bytes=None):
            steps.append(what)
            yield

    kcompact.run(spark, [str(log_dir)], now=NOW, config=resolve.build(topic_args=["*:cleanup.policy=compact"]),
                 progress=lambda line: None, observer=Steps())
    assert steps == ["retention", "planning", "cleaning"]
