"""The gzip header's OS byte, per log dir: Java 8 and 11 write 0, Java 16 and later 255 (JDK-8244706).

A 3.9 log dir shows its broker's JVM in the gzip batches its cleaner wrote (a delete horizon set):
the one with the latest horizon decides; else ``--gzip-os``; else 255. 4.x brokers run Java 17 or
later. Batches here are built by hand: records sections by kafka-python, gzip streams with zlib and
struct as Java's GZIPOutputStream lays them out, batch headers with struct.
"""

from __future__ import annotations

import gzip
import html
import json
import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from kcompact.compaction.cleaning.backward import clean_partition
from kcompact.compaction.cleaning.partition_batches import PartitionBatches
from kcompact.compaction.pipeline import batch_plans, job
from kcompact.compaction.pipeline.to_clean import PartitionToClean
from kcompact.compaction.reports.report import Report
from kcompact.compaction.reports.report_html import render
from kcompact.compaction.rules.cleaner_config import CleanerConfig
from kcompact.conf import resolve
from kcompact.conf.resolve import Config
from kcompact.contracts.plan_row import PlanRow
from kcompact.planner import gzip_os
from kcompact.planner.build import PLAN_SCHEMA, plan_task, tasks_for
from kcompact.planner.output import describe
from kcompact.readers.codecs import GZIP
from kcompact.readers.records import Record
from kcompact.writers.codecs import compress, compress_legacy
from tests.support import hand_v2_batch, kp_batches, kp_build, kp_keyed, write_partition

NOW = 1_720_001_000_000
TS = NOW - 7_200_000
GZIP_RECORDS = 1


def java_gzip(data: bytes, os_byte: int) -> bytes:
    """GZIPOutputStream's stream: its 10-byte header (no time, no flags), raw deflate, CRC-32 and size."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = deflate.compress(data) + deflate.flush()
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00" + bytes([os_byte]) + body + struct.pack("<II", zlib.crc32(data),
                                                                                           len(data))


def cleaned_gzip_batch(base: int, keys: list[bytes], os_byte: int, horizon: int) -> bytes:
    """A gzip batch as a cleaner writes it: delete horizon set (attribute bit 6, first timestamp = horizon)."""
    made = kp_build([Record(base + i, TS, k, b"value %d " % i * 8) for i, k in enumerate(keys)], codec=GZIP,
                    base_offset=base)
    section = gzip.decompress(made[61:])
    return hand_v2_batch(java_gzip(section, os_byte), base_offset=base, count=len(keys),
                         last_offset_delta=len(keys) - 1, first_timestamp=horizon, max_timestamp=TS,
                         attributes=GZIP | 0x40)


def test_gzip_os_byte_is_the_only_difference():
    data = b"".join(b"record %d of a batch, " % i for i in range(400))
    java17, java11 = compress(GZIP, data), compress(GZIP, data, 0)
    assert java17[9] == 255 and java11[9] == 0 and java11[:9] + java11[10:] == java17[:9] + java17[10:]
    assert java11 == java_gzip(data, 0) and gzip.decompress(java11) == data
    assert compress_legacy(1, GZIP, data, 0) == java11


def _log_dir(root: Path, partitions: dict[str, list[bytes]]) -> Path:
    for name, closed in partitions.items():
        write_partition(root / name, [(0, closed), (100, [kp_keyed(100, [b"z"], NOW - 60_000)])])
    return root


def _rows(log_dir: Path, version: str, option: int | None = None) -> list[PlanRow]:
    config = resolve.build(topic_args=["*:cleanup.policy=compact"], kafka_version=version, log_dirs=[str(log_dir)],
                           gzip_os=option)
    planned = [plan_task(t, NOW) for t in tasks_for(str(log_dir), config)]
    table = pa.Table.from_pylist([r.row() for r in planned], schema=PLAN_SCHEMA)
    return PlanRow.read(gzip_os.apply(table, config.gzip_os))


def test_the_latest_cleaner_written_gzip_batch_of_the_log_dir_decides(tmp_path):
    # orders-0: cleaned under Java 11 (horizon H), orders-1 later under Java 17 (horizon H + 1 day)
    horizon = NOW - 86_400_000
    log_dir = _log_dir(tmp_path / "logs", {
        "orders-0": [cleaned_gzip_batch(0, [b"a", b"b"], 0, horizon), kp_keyed(2, [b"c"], TS)],
        "orders-1": [cleaned_gzip_batch(0, [b"a"], 255, horizon + 86_400_000),
                     cleaned_gzip_batch(1, [b"b"], 0, horizon - 1)],
    })
    rows = _rows(log_dir, "3.9.2")
    assert [r.gzip_os for r in rows] == [255, 255]
    second = log_dir / "orders-1" / f"{0:020d}.log"
    assert rows[0].gzip_os_source == (f"detected: the gzip batch this log dir's cleaner wrote last ({second} byte 0, "
                                      f"delete horizon {horizon + 86_400_000}) has OS byte 255: a broker on Java 16 "
                                      "or later")
    assert f"gzip header OS byte 255 ({rows[0].gzip_os_source})" in describe(rows).splitlines()
    report = Report(now=NOW, dry_run=True)
    report.observe_plan(rows)
    line = f"gzip header OS byte 255 ({rows[0].gzip_os_source})"
    assert report.text().splitlines().count(line) == 1  # the console summary, once per log dir's choice
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["gzip_headers"] == [{"log_dir": str(log_dir), "gzip_os": 255, "why": rows[0].gzip_os_source}]
    assert f"OS byte 255 ({rows[0].gzip_os_source})" in html.unescape(render(doc))


def test_java_11_detected_and_an_option_does_not_override_it(tmp_path):
    log_dir = _log_dir(tmp_path / "logs", {"orders-0": [cleaned_gzip_batch(0, [b"a", b"b"], 0, NOW - 1000)]})
    rows = _rows(log_dir, "3.9.1", option=255)
    assert rows[0].gzip_os == 0 and rows[0].gzip_os_source.startswith("detected:")
    assert rows[0].gzip_os_source.endswith("has OS byte 0: a broker on Java 8 or 11")


def test_producers_batches_do_not_count_then_the_option_then_the_default(tmp_path):
    # a producer's gzip batch with Java 11's header (no delete horizon), and a cleaned batch of Python's gzip header
    producer = hand_v2_batch(java_gzip(gzip.decompress(kp_build([Record(0, TS, b"a", b"v" * 64)], codec=GZIP)[61:]), 0),
                             base_offset=0, count=1, last_offset_delta=0, first_timestamp=TS, max_timestamp=TS,
                             attributes=GZIP)
    python = bytearray(cleaned_gzip_batch(1, [b"b"], 0, NOW))
    python[61 + 9] = 3  # Unix: no JVM's
    log_dir = _log_dir(tmp_path / "logs", {"orders-0": [producer, hand_v2_batch(
        bytes(python[61:]), base_offset=1, count=1, last_offset_delta=0, first_timestamp=NOW, max_timestamp=TS,
        attributes=GZIP | 0x40)]})
    assert _rows(log_dir, "3.9.2", option=0)[0].gzip_os == 0
    assert _rows(log_dir, "3.9.2", option=0)[0].gzip_os_source.startswith("option: --gzip-os 0 (a broker on Java 8")
    default = _rows(log_dir, "3.9.2")[0]
    assert (default.gzip_os, default.gzip_os_source) == (255, "default: Java 16 or later (no gzip batch written by "
                                                               "this log dir's cleaner; --gzip-os 0 for a broker on "
                                                               "Java 8 or 11)")


@pytest.mark.parametrize("version", ["4.0.0", "4.3"])
def test_a_4x_broker_runs_java_17(tmp_path, version):
    log_dir = _log_dir(tmp_path / "logs", {"orders-0": [cleaned_gzip_batch(0, [b"a", b"b"], 0, NOW - 1000)]})
    row = _rows(log_dir, version, option=0)[0]
    assert (row.gzip_os, row.gzip_os_source) == (255, f"Kafka {version[:3]} brokers run on Java 17 or later")


def test_the_rewrite_writes_the_log_dirs_os_byte(tmp_path):
    """A partition cleaned (no Spark) with gzip_os 0: its rewritten gzip batches carry 0, the rest is
    what kafka-python decodes (the batch CRC covers the header byte)."""
    batches = [kp_build([Record(o, TS, b"k%d" % (o % 3), b"value %d " % o * 8) for o in range(b, b + 6)], codec=GZIP,
                        base_offset=b) for b in range(0, 30, 6)]
    part = write_partition(tmp_path / "t-0", [(0, batches), (30, [kp_keyed(30, [b"z"], TS)])])
    config = Config()
    config.add_topic("t", "segment.bytes", str(1 << 20), "test")
    to_clean = PartitionToClean(path=str(part), log_dir=str(tmp_path), topic="t", partition=0, log_start_offset=0,
                                first_dirty_offset=0, first_uncleanable_dirty_offset=30,
                                total_bytes=sum(p.stat().st_size for p in part.glob("*.log")),
                                config=CleanerConfig.of_topic(config.for_topic("t").as_strings(), gzip_os=0),
                                retain_last_empty_at=30)
    planned = batch_plans.plan_one(to_clean, NOW)
    ok = PartitionBatches.table([planned])
    found = job.Batches.of(ok)
    jobs = job._group_jobs(PartitionBatches.read(ok), found, NOW, "owner", direct=True)
    results = clean_partition([jobs[g] for g in sorted(jobs)], render=True, threads=1, keys=found.map_keys(0))
    assert [r.error for r in results] == [None]
    data = next(part.glob("*.log.cleaned")).read_bytes()
    kept, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        assert data[pos + 22] & 7 == GZIP and data[pos + 61:pos + 71] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00"
        pos += 12 + length
    kept = [(r.offset, r.key) for batch in kp_batches(data) for r in batch]
    assert kept == [(27, b"k0"), (28, b"k1"), (29, b"k2")]


def test_a_plan_carries_its_byte_so_compact_refuses_the_option(tmp_path, capsys):
    from kcompact.jobs.cli import main

    code = main(["compact", str(tmp_path), "--plan", str(tmp_path / "p.json"), "--gzip-os", "0"])
    assert code != 0 and "give --gzip-os to 'kcompact plan' instead" in capsys.readouterr().err


def test_the_api_takes_the_byte_and_refuses_others(tmp_path):
    from kcompact import steps
    from kcompact.errors import ConfigError

    assert steps.configuration([str(tmp_path)], gzip_os=0).gzip_os == 0
    with pytest.raises(ConfigError, match=r"gzip_os=7: a gzip header's OS byte is 0 \(Java 8 or 11\) or 255"):
        steps.configuration([str(tmp_path)], gzip_os=7)
