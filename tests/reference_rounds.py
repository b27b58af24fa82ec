"""Cleaning rounds run twice on copies of one log dir, by the product (``kcompact compact``) and
by the reference model (tests/reference), and every difference a broker could see listed.

Compared after each round: the partition dirs and their Kafka files (segment names, the bytes of
every .log, .index, .timeindex, .txnindex and .snapshot, the modification times of .log, .index
and .timeindex), the four root checkpoints (the cleaner's parsed, the others byte for byte) and
which partitions were left uncleanable. A .log that differs is described by its first differing
batch (every header field) or record (offset, timestamp, key, value, headers).

Every divergence the model found is fixed; each has a named regression test
(tests/e2e/test_reference_regressions.py).
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kcompact.conf import releases
from kcompact.conf.releases import Release
from kcompact.jobs.cli import main
from kcompact.logdir.listing import CHECKPOINTS, METADATA_DIR
from kcompact.operations import states
from kcompact.readers import checkpoint
from kcompact.readers.segment import iter_batches
from kcompact.tools import generator
from kcompact.writers.checkpoint import render_checkpoint
from tests.reference.config import Config
from tests.reference.manager import Broker, RoundResult

KAFKA_FILE = re.compile(r"^\d{20}\.(log|index|timeindex|txnindex|snapshot)$")
MTIME_KINDS = (".log", ".index", ".timeindex")


@dataclass
class Rounds:
    """Two copies of a generated log dir: ``ours`` for the product, ``model`` for the reference."""

    root: Path
    spec: dict
    seed: int
    config: Config
    release: Release = releases.DEFAULT  # the Kafka release both reproduce (``--kafka-version``)
    broker: Broker | None = None
    results: list[RoundResult] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    @property
    def ours(self) -> Path:
        return self.root / "ours"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @classmethod
    def generate(cls, root: Path, spec: dict, seed: int, stray_entries: dict[tuple[str, int], int] | None = None,
                 release: Release = releases.DEFAULT) -> Rounds:
        """``stray_entries``: cleaner checkpoint entries of partitions the log dir does not hold
        (a topic deleted or moved away since)."""
        spec = generator.validate(spec)
        generator.generate(str(root / "ours"), spec, seed=seed)
        if stray_entries:
            path = root / "ours" / "cleaner-offset-checkpoint"
            path.write_bytes(render_checkpoint(checkpoint.parse(str(path), path.read_bytes()) | stray_entries))
        shutil.copytree(root / "ours", root / "model")  # copy2: modification times come along
        config = Config({t["name"]: dict(t["config"]) for t in spec["topics"]})
        rounds = cls(root, spec, seed, config, release)
        rounds.broker = Broker(str(rounds.model), config, release)
        return rounds

    def clean(self, now: int) -> list[str]:
        """One round on both copies; the differences found (empty: none)."""
        before = self.root / f"before-{len(self.results)}"
        shutil.copytree(self.ours, before)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(["compact", str(self.ours), "--now", str(now), "--kafka-version", self.release.name])
        self.outputs.append(out.getvalue())
        result = self.broker.clean_round(now)
        self.results.append(result)
        problems = [] if code in (0, 4, 5) else [f"kcompact compact exited with {code}:\n{out.getvalue()[-3000:]}"]
        return problems + differences(self.ours, self.model, before, result)

    def append(self) -> None:
        """The records the spec held back, appended to both copies as producers would."""
        for path in (self.ours, self.model):
            generator.append(str(path), self.spec, self.seed)
        self.broker.observe_appends()


def _kafka_files(pdir: Path) -> dict[str, Path]:
    return {p.name: p for p in pdir.iterdir() if KAFKA_FILE.match(p.name)}


def _leftovers(pdir: Path) -> list[str]:
    return [p.name for p in pdir.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]


def _mtime(path: Path) -> int:
    return path.stat().st_mtime_ns // 1_000_000


def differences(ours: Path, model: Path, before: Path, result: RoundResult) -> list[str]:
    """Everything a broker could tell apart between the product's and the model's log dirs. A
    partition the model's Kafka failed on (an exception inside the round) is expected as the
    product leaves it: untouched (issue 14 item 3) and marked uncleanable."""
    found = []
    parts = sorted(p.name for p in ours.iterdir() if p.is_dir() and p.name != METADATA_DIR)
    model_parts = sorted(p.name for p in model.iterdir() if p.is_dir() and p.name != METADATA_DIR)
    if parts != model_parts:
        return [f"partition dirs differ: ours {parts}, model {model_parts}"]
    failed = {f"{t}-{p}" for t, p in result.failed}
    for name in parts:
        expected_dir = before / name if name in failed else model / name
        found += _partition_differences(ours / name, expected_dir)
        state, _ = states.read(str(ours / name))
        ours_uncleanable = state.state == states.UNCLEANABLE
        if ours_uncleanable != (name in failed):
            found.append(f"{name}: uncleanable in ours: {ours_uncleanable}, Kafka failed it this round: "
                         f"{result.failed.get(_tp(name))}")
    for name in CHECKPOINTS:
        a, b = ours / name, model / name
        if name == "cleaner-offset-checkpoint":
            expected = checkpoint.parse(str(b), b.read_bytes())
            got = checkpoint.parse(str(a), a.read_bytes())
            if got != expected:
                keys = sorted(set(got) | set(expected))
                found.append(f"{name} differs: " + ", ".join(
                    f"{t}-{p}: ours {got.get((t, p))}, Kafka {expected.get((t, p))}"
                    for t, p in keys if got.get((t, p)) != expected.get((t, p))))
        elif a.read_bytes() != b.read_bytes():
            found.append(f"{name} differs")
    return found


def _tp(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("-")
    return topic, int(partition)


def _partition_differences(ours: Path, expected: Path) -> list[str]:
    found = []
    if _leftovers(ours):
        found.append(f"{ours.name}: leftovers {_leftovers(ours)}")
    a, b = _kafka_files(ours), _kafka_files(expected)
    if sorted(a) != sorted(b):
        segs = lambda files: sorted(n[:20].lstrip("0") or "0" for n in files if n.endswith(".log"))  # noqa: E731
        found.append(f"{ours.name}: files differ: only ours {sorted(set(a) - set(b))}, only Kafka "
                     f"{sorted(set(b) - set(a))} (segments ours {segs(a)}, Kafka {segs(b)})")
    for name in sorted(set(a) & set(b)):
        da, db = a[name].read_bytes(), b[name].read_bytes()
        if da != db:
            found.append(f"{ours.name}/{name}: bytes differ" + (_log_difference(a[name], b[name])
                                                                  if name.endswith(".log") else
                                                                  f" (ours {da.hex()[:160]}, Kafka {db.hex()[:160]})"))
        elif name.endswith(MTIME_KINDS) and _mtime(a[name]) != _mtime(b[name]):
            found.append(f"{ours.name}/{name}: modification time ours {_mtime(a[name])}, Kafka {_mtime(b[name])}")
    return found


def batch_fields(batch) -> tuple:
    return (batch.magic, batch.base_offset, batch.last_offset, batch.count, batch.codec, batch.attributes,
            batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.max_timestamp,
            batch.delete_horizon_ms, batch.partition_leader_epoch, batch.position, batch.size)


BATCH_FIELDS = ("magic", "base", "last", "count", "codec", "attributes", "pid", "epoch", "seq", "maxTs",
                "deleteHorizon", "leaderEpoch", "position", "size")


def _log_difference(ours: Path, kafka: Path) -> str:
    """The first batch (or record) where two .log files part."""
    def read(path: Path) -> list:
        with open(path, "rb") as f:
            return list(iter_batches(f, str(path)))

    a, b = read(ours), read(kafka)
    for x, y in zip(a, b):
        fx, fy = batch_fields(x), batch_fields(y)
        if fx != fy:
            diff = {n: (u, v) for n, u, v in zip(BATCH_FIELDS, fx, fy) if u != v}
            return f": batch at offset {x.base_offset} differs (ours, Kafka): {diff}"
        rx, ry = x.records(), y.records()
        if rx != ry:
            for r, s in zip(rx, ry):
                if r != s:
                    return f": record differs (ours, Kafka): {r} != {s}"
            return f": batch at {x.base_offset}: {len(rx)} records in ours, {len(ry)} in Kafka's"
        if bytes(x.data) != bytes(y.data):
            return f": batch at offset {x.base_offset}: same fields and records, other bytes"
    return f": {len(a)} batches in ours, {len(b)} in Kafka's (first extra at offset " \
           f"{(a[len(b)] if len(a) > len(b) else b[len(a)]).base_offset})"
