"""logdir.listing.scan_log_dir over hand-made log dirs and the Kafka-written fixture."""

from __future__ import annotations

import posixpath
from pathlib import Path

import pytest

from kcompact.logdir.listing import parse_partition_dir, scan_log_dir
from tests.support import FIXTURE_INPUT, MTIME_MS, make_log_dir


@pytest.fixture
def log_dir(tmp_path):
    return make_log_dir(tmp_path / "logs")


def test_partitions_sorted_by_topic_then_number(log_dir):
    found = scan_log_dir(str(log_dir))
    assert [(p.topic, p.partition) for p in found.partitions] == [
        ("a.b-c", 0), ("empty-partition", 5), ("my-topic.v2", 12), ("orders", 7), ("orders", 10), ("orphan", 1)]
    assert found.partitions[0].name == "a.b-c-0"


def test_segments_sorted_with_sizes_and_mtimes(log_dir):
    orders = {p.name: p for p in scan_log_dir(str(log_dir)).partitions}["orders-7"]
    assert [s.base_offset for s in orders.segments] == [0, 200, 1200]
    assert [s.size for s in orders.segments] == [1000, 900, 700]
    assert [(s.index is not None, s.timeindex is not None, s.txnindex is not None) for s in orders.segments] == [
        (True, True, False), (False, False, False), (True, True, True)]
    last = orders.segments[-1]
    assert (last.index.size, last.timeindex.size, last.txnindex.size) == (16, 24, 34)
    assert {s.log.mtime_ms for s in orders.segments} == {MTIME_MS}
    assert orders.active is last
    assert orders.segments[0].log.path == str(log_dir / "orders-7" / "00000000000000000000.log")
    assert orders.problems == [] and orders.leftovers == []


def test_not_live_dirs_are_skipped(log_dir):
    found = scan_log_dir(str(log_dir))
    assert sorted(posixpath.basename(s) for s in found.skipped) == [
        "orders-3.0f1e2dc3b4a5-delete", "orders-4.9a8b7c6d5e4f-future", "orders-5.1234abcd-stray"]
    assert [p.partition for p in found.partitions if p.topic.startswith("orders")] == [7, 10]
    assert not any(suffix in problem.path for problem in found.problems for suffix in ("-delete", "-future", "-stray"))


def test_leftovers_and_misnamed_files_reported(log_dir):
    part = {p.name: p for p in scan_log_dir(str(log_dir)).partitions}["my-topic.v2-12"]
    assert [s.base_offset for s in part.segments] == [0]
    assert sorted(posixpath.basename(i.path) for i in part.leftovers) == [
        "00000000000000000000.timeindex.deleted", "00000000000000000500.index.swap",
        "00000000000000000500.log.cleaned"]
    assert {i.size for i in part.leftovers} == {12, 8, 100}
    # LogLoader parses a base offset out of a .log name (refused); it passes over notes.txt
    assert [posixpath.basename(p.path) for p in part.problems] == ["123.log"]
    assert [posixpath.basename(p.path) for p in part.notes] == ["notes.txt"]


def test_index_without_log_is_a_note(log_dir):
    """LogLoader deletes an orphaned index file: named, not refused."""
    orphan = {p.name: p for p in scan_log_dir(str(log_dir)).partitions}["orphan-1"]
    assert orphan.segments == [] and orphan.active is None and orphan.problems == []
    assert len(orphan.notes) == 1 and "00000000000000000100.log" in orphan.notes[0].what


def test_unparseable_dir_names_reported(log_dir):
    found = scan_log_dir(str(log_dir))
    assert sorted(posixpath.basename(p.path) for p in found.problems) == ["lost+found", "orders-x"]


def test_checkpoints_found(log_dir):
    found = scan_log_dir(str(log_dir) + "/")
    assert found.checkpoints == {
        name: str(log_dir / name) for name in (
            "cleaner-offset-checkpoint", "log-start-offset-checkpoint",
            "recovery-point-offset-checkpoint", "replication-offset-checkpoint")}


@pytest.mark.parametrize("name, expected", [
    ("orders-7", ("orders", 7)), ("my-topic.v2-12", ("my-topic.v2", 12)), ("a-b-c-0", ("a-b-c", 0)),
    ("__consumer_offsets-49", ("__consumer_offsets", 49)),
    ("orders", None), ("orders-", None), ("-3", None), ("orders-x", None), ("orders--1", ("orders-", 1)),
])
def test_partition_dir_names(name, expected):
    assert parse_partition_dir(name) == expected


def test_fixture_log_dir_listing_matches_the_filesystem():
    found = scan_log_dir(str(FIXTURE_INPUT))
    assert [p.name for p in found.partitions] == sorted(d.name for d in FIXTURE_INPUT.iterdir() if d.is_dir())
    assert found.problems == found.skipped == []
    assert list(found.checkpoints) == ["cleaner-offset-checkpoint"]
    for part in found.partitions:
        logs = sorted((Path(part.path)).glob("*.log"))
        assert [s.base_offset for s in part.segments] == [int(p.stem) for p in logs]
        for seg, log in zip(part.segments, logs):
            st = log.stat()
            assert (seg.log.path, seg.size) == (str(log), st.st_size)
            assert abs(seg.log.mtime_ms - st.st_mtime_ns // 1_000_000) <= 1
            assert seg.index.size == log.with_suffix(".index").stat().st_size
        assert part.problems == [] and part.leftovers == []


def test_broker_load_imports_no_listing():
    """broker_load holds Kafka's rules as pure functions of listing facts; it imports no listing,
    not even for type hints (the two once imported each other)."""
    import ast

    import kcompact.logdir.broker_load as broker_load

    tree = ast.parse(Path(broker_load.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not {name for name in imported if name and name.startswith("kcompact.logdir")}, imported
