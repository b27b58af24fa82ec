"""The reference model's own acceptance test: on the Kafka-written fixture it keeps what Kafka's
cleaner kept in both rounds (the fixture README's settings and clocks), record by record and
batch by batch, and writes Kafka's cleaner checkpoint.

The model (tests/reference) shares no code with the product's cleaner; this is what makes it a
trustworthy second opinion for the property tests (test_reference_properties.py).
"""

from __future__ import annotations

import shutil
import stat

import pytest

from tests.reference.config import Config
from tests.reference.manager import Broker
from tests.support import FIXTURE_DIR, FIXTURE_INPUT, assert_same_lines, batch_lines, log_segments, record_lines

ACCOUNTS = {"cleanup.policy": "compact", "segment.bytes": 131072, "delete.retention.ms": 600000,
            "min.cleanable.dirty.ratio": 0.5}
CLICKS = {"cleanup.policy": "delete", "segment.bytes": 65536}
ROUNDS = {1: (1720000420000, 260000), 2: (1720087421000, 0)}  # now, accounts' min.compaction.lag.ms


@pytest.fixture(scope="module")
def model_rounds(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("model") / "logs"
    shutil.copytree(FIXTURE_INPUT, work)
    for path in [work, *work.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    broker = Broker(str(work), Config())
    out = {}
    for n, (now, lag) in ROUNDS.items():
        broker.config = Config({"accounts": ACCOUNTS | {"min.compaction.lag.ms": lag}, "clicks": CLICKS})
        result = broker.clean_round(now)
        segments = log_segments(work)
        out[n] = {
            "result": result,
            "records": [line for seg in segments for line in record_lines(seg)],
            "batches": [line for seg in segments for line in batch_lines(seg)],
            "checkpoint": (work / "cleaner-offset-checkpoint").read_bytes(),
        }
    return out


@pytest.mark.parametrize("n", [1, 2])
def test_model_keeps_kafkas_records(model_rounds, n):
    assert_same_lines(
        model_rounds[n]["records"], (FIXTURE_DIR / f"after-round{n}.records.tsv").read_text().splitlines()
    )


@pytest.mark.parametrize("n", [1, 2])
def test_model_writes_kafkas_batches(model_rounds, n):
    assert_same_lines(
        model_rounds[n]["batches"], (FIXTURE_DIR / f"after-round{n}.batches.tsv").read_text().splitlines()
    )


@pytest.mark.parametrize("n", [1, 2])
def test_model_writes_kafkas_checkpoint(model_rounds, n):
    assert model_rounds[n]["checkpoint"] == (FIXTURE_DIR / f"after-round{n}.cleaner-offset-checkpoint").read_bytes()


def test_model_cleans_what_the_readme_says(model_rounds):
    """Round 1 cleans accounts-0 only (accounts-1's ratio 0.334 <= 0.5), dirty section [0, 3583)."""
    assert model_rounds[1]["result"].cleaned == {("accounts", 0): (0, 3583)}
    assert model_rounds[2]["result"].cleaned == {("accounts", 0): (3583, 7224), ("accounts", 1): (2080, 7119)}
    assert not model_rounds[1]["result"].failed and not model_rounds[2]["result"].failed
