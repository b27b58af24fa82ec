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
