"""Google's snappy through ``writers.snappy_library``, and what a run says without it.

Kafka's own snappy bytes are checked in test_kafka_compression.py; here: the library is found (make
install puts it there), ``KCOMPACT_LIBSNAPPY`` turns it off or points elsewhere, the cramjam
fallback still writes Kafka's framing with blocks kafka-python decodes, and the plan, the console
summary and the JSON and HTML reports then say the snappy batches are not Kafka's bytes.
"""

from __future__ import annotations

import json
import struct

import pytest
from kafka import codec as kp

from kcompact.compaction.reports.report import PartitionReport, Report
from kcompact.compaction.reports.report_html import render
from kcompact.conf import resolve
from kcompact.planner.build import plan_task, tasks_for
from kcompact.planner.output import describe
from kcompact.readers.codecs import SNAPPY
from kcompact.writers import snappy_library
from kcompact.writers.codecs import compress
from tests.support import kp_keyed, write_partition

NOW = 1_720_001_000_000
TEXT = b"".join(b"line %d of a log, partition leader elected\n" % (i % 37) for i in range(2000))  # 3 blocks


@pytest.fixture
def without_libsnappy(monkeypatch):
    """The library turned off as an operator turns it off, then the process's own choice back."""
    monkeypatch.setenv(snappy_library.ENV, "none")
    snappy_library.library.cache_clear()
    yield
    monkeypatch.undo()
    snappy_library.library.cache_clear()


def test_google_snappy_is_loaded():
    assert snappy_library.library() is not None, "libsnappy.so.1 not found: make install installs libsnappy1v5"
    assert snappy_library.missing() is None


@pytest.mark.parametrize("setting", ["none", "NONE", "/nowhere/libsnappy.so.1", "libc.so.6"])
def test_setting_none_a_missing_file_or_another_library_means_no_library(monkeypatch, setting):
    monkeypatch.setenv(snappy_library.ENV, setting)
    snappy_library.library.cache_clear()
    try:
        assert snappy_library.library() is None
        assert snappy_library.missing() == "snappy batches: not byte-identical (libsnappy not found)"
    finally:
        monkeypatch.undo()
        snappy_library.library.cache_clear()
    assert snappy_library.library() is not None


def test_without_the_library_cramjam_writes_kafkas_framing(without_libsnappy):
    out = compress(SNAPPY, TEXT)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, sizes = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        sizes.append(kp.snappy_decode(out[pos + 4:pos + 4 + n]) if n else b"")
        pos += 4 + n
    assert [len(s) for s in sizes] == [32768, 32768, len(TEXT) - 65536]
    assert kp.snappy_decode(out) == TEXT


def _plan_rows(tmp_path, policy: str):
    log_dir = tmp_path / "logs"
    write_partition(log_dir / "orders-0", [(0, [kp_keyed(0, [b"a", b"a", b"b"], NOW - 3_600_000)]),
                                           (3, [kp_keyed(3, [b"c"], NOW - 60_000)])])
    config = resolve.build(topic_args=[f"orders:cleanup.policy={policy}"], log_dirs=[str(log_dir)])
    return [plan_task(t, NOW) for t in tasks_for(str(log_dir), config)]


def test_the_plan_the_summary_and_the_reports_say_so(tmp_path, without_libsnappy):
    rows = _plan_rows(tmp_path, "compact")
    assert snappy_library.NOT_EXACT in rows[0].notes
    assert f"note: {snappy_library.NOT_EXACT}" in describe(rows + rows).splitlines()  # once, not per partition
    report = Report(now=NOW, dry_run=False, partitions=[PartitionReport("orders", 0, rows[0].path, 0, 3)])
    report.observe_plan(rows + rows)
    assert report.text().splitlines().count(snappy_library.NOT_EXACT) == 1
    assert report.to_json()["notes"] == [snappy_library.NOT_EXACT]
    assert snappy_library.NOT_EXACT in render(json.loads(json.dumps(report.to_json())))  # the HTML page


def test_with_the_library_or_without_compaction_nothing_is_said(tmp_path, without_libsnappy):
    assert _plan_rows(tmp_path / "d", "delete")[0].notes == ()  # nothing rewritten
    snappy_library.library.cache_clear()
    with pytest.MonkeyPatch.context() as m:
        m.delenv(snappy_library.ENV)
        rows = _plan_rows(tmp_path / "c", "compact")
        assert rows[0].notes == ()
        report = Report(now=NOW, dry_run=False, partitions=[PartitionReport("orders", 0, rows[0].path, 0, 3)])
        report.observe_plan(rows)
        assert report.notes == [] and snappy_library.NOT_EXACT not in report.text()
        snappy_library.library.cache_clear()
