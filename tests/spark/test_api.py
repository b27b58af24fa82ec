"""The public Python API (``import kcompact``) on a small generated log dir.

The expected answers come from outside the product: what Kafka's cleaner would clean in one
round at ``NOW`` and the cleaner checkpoint it would leave, from the reference model of Kafka's
cleaner (tests/reference) run on a copy of the same log dir; the records the data source reads,
from the generator's record-by-record truth.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kcompact
from kcompact.operations import last_run
from kcompact.readers import checkpoint
from kcompact.tools import generator
from tests.reference.config import Config
from tests.reference.manager import Broker

NOW = 1_720_001_000_000  # 1000 s after the generated records: retention is inert, compaction is not
QUIET = dict(progress=lambda line: None)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """(a pristine generated log dir, its generator truth, the model's round on a copy of it)."""
    root = tmp_path_factory.mktemp("api")
    spec = generator.override(generator.load_spec(None), records=300, partitions=2, segment_bytes=8192)
    truth = generator.generate(str(root / "pristine"), spec, seed=3)
    shutil.copytree(root / "pristine", root / "model")  # copy2: modification times come along
    broker = Broker(str(root / "model"), Config({t["name"]: dict(t["config"]) for t in spec["topics"]}))
    round_ = broker.clean_round(NOW)
    assert round_.cleaned and not round_.failed
    return root / "pristine", truth, round_, root / "model"


def copy_of(generated, tmp_path: Path) -> str:
    shutil.copytree(generated[0], tmp_path / "logs")
    return str(tmp_path / "logs")


def cleaner_checkpoint(log_dir) -> dict:
    path = Path(log_dir) / checkpoint.CLEANER_OFFSET
    return checkpoint.parse(str(path), path.read_bytes())


def files(log_dir) -> dict[str, bytes]:
    return {str(p.relative_to(log_dir)): p.read_bytes() for p in sorted(Path(log_dir).rglob("*")) if p.is_file()}


def test_import_loads_no_spark_until_a_function_needs_it(generated, tmp_path):
    log_dir = copy_of(generated, tmp_path)
    code = ("import sys, kcompact\n"
            "assert 'pyspark' not in sys.modules, 'import kcompact imported pyspark'\n"
            f"report = kcompact.recover([{log_dir!r}], progress=lambda line: None)\n"
            "assert 'pyspark' not in sys.modules, 'kcompact.recover imported pyspark'\n"
            "print(len(report.partitions), report.failed)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(len(generated[1].partitions)), "0"]


def test_plan_selects_the_partitions_kafka_would_clean(spark, generated):
    pristine, truth, model, _ = generated
    rows = kcompact.plan(spark, [str(pristine)], now=NOW).table.to_pylist()
    assert sorted((r["topic"], r["partition"]) for r in rows) == sorted(truth.partitions)
    selected = {(r["topic"], r["partition"]): (r["first_dirty_offset"], r["first_uncleanable_dirty_offset"])
                for r in rows if r["selected"]}
    assert selected == model.cleaned
    assert not (pristine / last_run.FILE).exists() and not (pristine / ".lock").exists()  # a plan writes nothing


def test_configuration_by_kafkas_names(spark, generated):
    pristine, _, model, _ = generated
    rows = kcompact.plan(spark, [str(pristine)], now=NOW, topic_config={"orders": {"min.cleanable.dirty.ratio": 1}},
                         broker_config={"log.cleaner.min.cleanable.ratio": 0.5}).table.to_pylist()
    orders = [r for r in rows if r["topic"] == "orders"]  # a ratio is at most 1, and must exceed the minimum
    assert orders and not any(r["selected"] for r in orders)
    assert all(dict(r["config_sources"])["min.cleanable.dirty.ratio"] == "topic_config= topic[orders]" for r in orders)
    users = [r for r in rows if r["topic"] == "users"]
    assert all(dict(r["config_sources"])["min.cleanable.dirty.ratio"] == "broker_config=" for r in users)
    assert {(r["topic"], r["partition"]) for r in rows if r["selected"]} == {tp for tp in model.cleaned
                                                                              if tp[0] != "orders"}
    with pytest.raises(ValueError, match="not both"):
        kcompact.plan(spark, [str(pristine)], config=object(), topic_config={"orders": {"segment.bytes": 1 << 20}})
    with pytest.raises(ValueError, match="log_dirs or a plan"):
        kcompact.compact(spark)


def test_a_dry_run_compacts_nothing_and_writes_no_stamp(spark, generated, tmp_path):
    log_dir = copy_of(generated, tmp_path)
    before = files(log_dir)
    result = kcompact.compact(spark, [log_dir], now=NOW, dry_run=True, **QUIET)
    report, plan = result.report, result.plan
    assert isinstance(result, kcompact.CompactionResult) and result.recovery is None  # a dry run recovers nothing
    assert {(p.topic, p.partition): (p.dirty_start, p.dirty_end) for p in report.partitions} == generated[2].cleaned
    assert report.dry_run and plan.table.num_rows == len(generated[1].partitions)
    assert files(log_dir) == before


def test_compact_cleans_them_as_kafka_and_writes_the_last_run_stamp(spark, generated, tmp_path):
    _, _, model, model_dir = generated
    log_dir = copy_of(generated, tmp_path)
    result = kcompact.compact(spark, [log_dir], now=NOW, **QUIET)
    report = result.report
    assert report.totals["failed"] == result.failed == 0
    assert result.recovery is not None and not any(p.changed for p in result.recovery.partitions)
    assert {(p.topic, p.partition): (p.dirty_start, p.dirty_end) for p in report.partitions if p.committed} \
        == model.cleaned
    assert cleaner_checkpoint(log_dir) == cleaner_checkpoint(model_dir)
    stamp = json.loads((Path(log_dir) / last_run.FILE).read_text())
    assert stamp == {"began_choosing_ms": report.began_choosing_ms}
    assert report.previous_runs == {log_dir: None}

    # again, on the plan it followed: nothing left to clean, the previous stamp read back
    again = kcompact.compact(spark, plan=kcompact.plan(spark, [log_dir], now=NOW), now=NOW, **QUIET).report
    assert again.previous_runs == {log_dir: report.began_choosing_ms}
    assert not [p for p in again.partitions if p.committed]
    assert last_run.read(log_dir) == again.began_choosing_ms >= report.began_choosing_ms


def test_run_is_the_night(spark, generated, tmp_path):
    _, _, model, model_dir = generated
    log_dir = copy_of(generated, tmp_path)
    said = []

    class Summaries(kcompact.Observer):
        def summary(self, text):
            said.append(text)

    night = kcompact.run(spark, [log_dir], now=NOW, progress=lambda line: None, observer=Summaries())
    assert isinstance(night, kcompact.NightlyReport) and night.recovery is not None
    assert night.retention.totals["deleted"] == 0 and night.failed == 0
    assert {(p.topic, p.partition) for p in night.compaction.partitions if p.committed} == set(model.cleaned)
    assert cleaner_checkpoint(log_dir) == cleaner_checkpoint(model_dir)
    assert last_run.read(log_dir) == night.compaction.began_choosing_ms
    assert said == [night.recovery.text(), night.retention.text()]


def test_register_data_source_reads_every_record(spark, generated):
    pristine, truth, _, _ = generated
    kcompact.register_data_source(spark)
    counts = {
        (r["topic"], r["partition"]): r["count"]
        for r in spark.read.format("kafka-log").load(str(pristine)).groupBy("topic", "partition").count().collect()
    }
    assert counts == {tp: len(p.records) for tp, p in truth.partitions.items()}
