"""Spark's log is kept and named only when it says more than every JVM prints as it starts (issue
43 item 8: a 55-byte log of one JVM warning was kept and named on every non-zero exit)."""

from __future__ import annotations

import pytest

from kcompact.jobs import spark


@pytest.mark.parametrize("text, says", [
    ("WARNING: Using incubator modules: jdk.incubator.vector\n", False),
    ("Picked up JAVA_TOOL_OPTIONS: -Xss4m\nWARNING: Using incubator modules: jdk.incubator.vector\n\n", False),
    ("", False),
    ("WARNING: Using incubator modules: jdk.incubator.vector\n"
     "26/12/02 03:00:00 ERROR Executor: Exception in task 0.0\n", True),
    ("java.lang.OutOfMemoryError: Java heap space\n", True),
])
def test_a_log_says_something_beyond_the_jvms_start(monkeypatch, tmp_path, text, says):
    log = tmp_path / "kcompact-spark-1.log"
    log.write_text(text)
    monkeypatch.setattr(spark, "_LOG", [str(log)])
    monkeypatch.delenv("KCOMPACT_SPARK_LOG", raising=False)
    assert spark.log_says_something() is says
    spark.close_log(keep=True)  # a failed command
    assert log.exists() is says


def test_no_log_says_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(spark, "_LOG", [])
    assert not spark.log_says_something()
    monkeypatch.setattr(spark, "_LOG", [str(tmp_path / "gone.log")])
    assert not spark.log_says_something()


def test_the_default_log_is_the_users_and_a_dead_processs_leftover_starts_afresh(monkeypatch, tmp_path):
    """A pid is reused: a file root left under it made another user's command fail with EACCES,
    and one of the same user's would have been named as this command's log."""
    import os

    monkeypatch.delenv("KCOMPACT_SPARK_LOG", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(spark.tempfile, "tempdir", None)  # gettempdir reads TMPDIR again
    path = spark.log_path()
    assert path == str(tmp_path / f"kcompact-spark-{os.getuid()}-{os.getpid()}.log")
    (tmp_path / os.path.basename(path)).write_text("26/12/01 ERROR an earlier process's\n")
    with spark._jvm_output(path):
        os.write(2, b"this one's\n")
    assert (tmp_path / os.path.basename(path)).read_text() == "this one's\n"


def test_a_log_asked_for_is_appended_to(monkeypatch, tmp_path):
    import os

    log = tmp_path / "asked.log"
    log.write_text("before\n")
    monkeypatch.setenv("KCOMPACT_SPARK_LOG", str(log))
    with spark._jvm_output(spark.log_path()):
        os.write(2, b"after\n")
    assert log.read_text() == "before\nafter\n"
