"""planner.build.plan end to end: small log dirs built on disk (kafka-python batches, hand-built
transaction markers, producer snapshots and checkpoints), planned on Spark, and compared with
plans worked out by hand from Kafka's LogCleanerManager rules (never by calling planner code).

To keep Spark time low, every log dir is built once (module fixture) and planned in ONE
``plan()`` call: log dir A (rules, cleaning states, bad input), B (a corrupt cleaner
checkpoint), C (KRaft metadata) and the Kafka-written fixture. Budgets and the CLI use a
small log dir E. Sizes: every "plain" segment holds one batch of 10 records whose bytes are
identical in length (S bytes); active segments hold 5 records.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import struct
from pathlib import Path
from types import SimpleNamespace

import crc32c
import pytest
from chispa import assert_df_equality

from kcompact.conf import resolve
from kcompact.jobs import cli
from kcompact.logdir import kraft
from kcompact.planner import output
from kcompact.planner.build import plan
from kcompact.readers.records import Record
from tests.support import FIXTURE_INPUT, checkpoint_text, hand_control_batch, kp_build, write_partition
from tests.unit.test_kraft_metadata import BROKER, TOPIC, batch, config_value, topic_value, write_log

NOW = 1_720_000_420_000  # the Kafka-written fixture's round-1 time, used for every log dir
OLD_TS = NOW - 400_000  # record timestamps unless a test needs recent ones
OLD_MTIME = NOW - 900_000  # every file's mtime unless a rule reads it
ABORT, COMMIT = 0, 1


# -- builders ---------------------------------------------------------------------------------------
def data(first: int, n: int, ts: int = OLD_TS, **kw) -> bytes:
    """kafka-python batch of ``n`` records from offset ``first``: same-length keys and values, so
    every 10-record batch has the same size whatever its offsets and timestamp."""
    return kp_build([Record(o, ts, b"key-%04d" % o, b"v" * 20) for o in range(first, first + n)],
                    base_offset=first, **kw)


def txn(first: int, n: int, pid: int, seq: int = 0, ts: int = OLD_TS) -> bytes:
    return data(first, n, ts, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)


def marker(kind: int, offset: int, pid: int) -> bytes:
    return hand_control_batch(kind, offset=offset, timestamp=OLD_TS, producer_id=pid, producer_epoch=0,
                              coordinator_epoch=3)


S = len(data(0, 10))  # a plain segment
ACTIVE = len(data(0, 5))  # a plain active segment


def plain(bases: list[int], active: int, ts: int = OLD_TS) -> list[tuple[int, list[bytes]]]:
    """Closed segments of 10 records at ``bases``, then an active segment of 5 records."""
    return [(b, [data(b, 10, ts)]) for b in bases] + [(active, [data(active, 5, ts)])]


SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")  # Kafka's ProducerStateManager snapshot, version 1


def producer_snapshot(entries: list[tuple]) -> bytes:
    """version int16 = 1, CRC-32C (uint32) of all that follows, int32 count, then per producer:
    producerId int64, epoch int16, lastSequence int32, lastOffset int64, offsetDelta int32,
    timestamp int64, coordinatorEpoch int32, currentTxnFirstOffset int64 (-1: none open)."""
    body = struct.pack(">i", len(entries)) + b"".join(SNAPSHOT_ENTRY.pack(*e) for e in entries)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def txn_segments() -> list[tuple[int, list[bytes]]]:
    """Producer 7000's transaction opens at 15 and stays open; 7001 commits, 7002 aborts."""
    return [
        (0, [data(0, 10)]),
        (10, [data(10, 5), txn(15, 3, 7000), data(18, 2)]),
        (20, [txn(20, 3, 7001), txn(23, 2, 7002), marker(COMMIT, 25, 7001), marker(ABORT, 26, 7002)]),
        (27, [data(27, 5)]),
    ]


def tree_state(root: Path) -> dict:
    """Every file (size, mtime, sha256) and directory (mtime) under ``root``."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.stat()
        rel = str(path.relative_to(root))
        if path.is_dir():
            out[rel + "/"] = st.st_mtime_ns
        else:
            out[rel] = (st.st_size, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def set_mtimes(root: Path, ms: int) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(ms * 1_000_000,) * 2)


def state_file(logdir: Path, name: str, doc: dict) -> None:
    (logdir / f"kcompact-state.{name}.json").write_text(json.dumps(doc))


COMPACT_TOPICS = ["gap", "ckpt-low", "ckpt-high", "ckpt-none", "mid", "txn", "txn-snap", "hanging", "empty", "emptyseg",
                  "paused", "broken", "noindex", "crc", "swap", "bb", "minlag", "minlag-mtime", "maxlag",
                  "maxlag-zero"]
TOPIC_ARGS = [f"{t}:cleanup.policy=compact" for t in COMPACT_TOPICS] + [
    "both:cleanup.policy=[compact,delete]",
    "minlag:min.compaction.lag.ms=100000",
    "minlag-mtime:min.compaction.lag.ms=100000",
    "maxlag:max.compaction.lag.ms=200000",
    "maxlag-zero:min.compaction.lag.ms=100000,max.compaction.lag.ms=200000",
    "meta2:min.cleanable.dirty.ratio=0.1",  # beats the metadata's 0.9
    "accounts:cleanup.policy=compact,segment.bytes=131072,delete.retention.ms=600000,min.compaction.lag.ms=260000",
]


def build_a(a: Path) -> None:
    """Log dir A: one partition per rule, cleaning states, bad input."""
    write_partition(a / "ckpt-low-0", plain([0, 10, 20], 30))
    write_partition(a / "ckpt-high-0", plain([0, 10], 20))
    write_partition(a / "ckpt-none-0", plain([0, 10], 20))
    write_partition(a / "mid-0", plain([0, 10, 20], 30))
    write_partition(a / "both-0", plain([0, 10], 20))
    write_partition(a / "logs-0", plain([0], 10))
    write_partition(a / "txn-0", txn_segments())
    write_partition(a / "txn-snap-0", txn_segments())
    # the snapshot at the active segment's base (27): 7000's transaction open since 15; 7001 and
    # 7002 ended (their entries carry -1)
    (a / "txn-snap-0" / f"{27:020d}.snapshot").write_bytes(producer_snapshot([
        (7000, 0, 2, 17, 2, OLD_TS, -1, 15),
        (7001, 0, 2, 25, 0, OLD_TS, 3, -1),
        (7002, 0, 1, 26, 0, OLD_TS, 3, -1),
    ]))
    # a hanging transaction: 7000 opened it at 5, in a segment retention has since deleted; only the
    # snapshot at 40 knows. Segment 10 is still there, below the log start 20 (log-start checkpoint).
    write_partition(a / "hanging-0", [
        (10, [data(10, 10)]), (20, [data(20, 10)]), (30, [data(30, 10)]),
        (40, [txn(40, 2, 7000, seq=1), data(42, 5)]),
    ])
    (a / "hanging-0" / f"{40:020d}.snapshot").write_bytes(producer_snapshot([
        (7000, 0, 0, 5, 0, OLD_TS, -1, 5),
        (7009, 0, 4, 9, 4, OLD_TS, -1, -1),
    ]))
    # min.compaction.lag.ms = 100 s: segment 20's records are 50 s old; 30's are old again
    write_partition(a / "minlag-0", [
        (0, [data(0, 10, NOW - 400_000)]), (10, [data(10, 10, NOW - 300_000)]), (20, [data(20, 10, NOW - 50_000)]),
        (30, [data(30, 10, NOW - 400_000)]), (40, [data(40, 5, NOW - 10_000)]),
    ])
    # segment 10's records carry no timestamp (-1): its .timeindex is empty, so its largest timestamp
    # is the .log's mtime, set to 30 s ago below
    write_partition(a / "minlag-mtime-0", [
        (0, [data(0, 10)]), (10, [data(10, 10, -1)]), (20, [data(20, 10)]), (30, [data(30, 5)]),
    ])
    assert (a / "minlag-mtime-0" / f"{10:020d}.timeindex").read_bytes() == b""
    # max.compaction.lag.ms = 200 s; checkpoint 20
    write_partition(a / "maxlag-0", [
        (0, [data(0, 10, NOW - 400_000)]), (10, [data(10, 10, NOW - 300_000)]), (20, [data(20, 10, NOW - 250_000)]),
        (30, [data(30, 5, NOW - 1000)]),
    ])
    # checkpoint 10; segment 10 starts 300 s ago (past the max lag) and ends 1 s ago (within the min lag)
    write_partition(a / "maxlag-zero-0", [
        (0, [data(0, 10)]), (10, [data(10, 5, NOW - 300_000), data(15, 5, NOW - 1000)]), (20, [data(20, 5, NOW - 500)]),
    ])
    # an older broker's cleaning removed offsets 5..9 at the end of segment 0; the active segment (10)
    # is empty, so Kafka's log end offset is its base offset 10, and the checkpoint 10 is valid
    write_partition(a / "gap-0", [(0, [data(0, 5)]), (10, [])])
    (a / "empty-0").mkdir()
    write_partition(a / "emptyseg-0", [(0, [])])
    write_partition(a / "paused-0", plain([0, 10], 20))
    state_file(a, "paused-0", {"state": "paused", "pause_count": 2})
    write_partition(a / "broken-0", plain([0, 10], 20))
    state_file(a, "broken-0", {"state": "uncleanable", "reason": "CRC mismatch at byte 77", "since_ms": NOW - 5})
    # bad input
    write_partition(a / "orders-x", plain([], 0))
    write_partition(a / "noindex-0", plain([0, 10], 20))
    (a / "noindex-0" / f"{10:020d}.index").unlink()
    write_partition(a / "crc-0", plain([0, 10], 20))
    seg10 = bytearray((a / "crc-0" / f"{10:020d}.log").read_bytes())
    seg10[S - 30] ^= 0x01  # a value byte of the first (only) batch: its CRC no longer matches
    (a / "crc-0" / f"{10:020d}.log").write_bytes(bytes(seg10))
    write_partition(a / "swap-0", plain([0, 10], 20))
    (a / "swap-0" / f"{0:020d}.log.swap").write_bytes((a / "swap-0" / f"{0:020d}.log").read_bytes())
    (a / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([
        ("ckpt-low", 0, 5), ("ckpt-high", 0, 40), ("mid", 0, 15), ("maxlag", 0, 20), ("maxlag-zero", 0, 10),
        ("gap", 0, 10),
    ]))
    (a / "log-start-offset-checkpoint").write_bytes(checkpoint_text([("ckpt-low", 0, 10), ("hanging", 0, 20)]))
    set_mtimes(a, OLD_MTIME)
    os.utime(a / "minlag-mtime-0" / f"{10:020d}.log", ns=((NOW - 30_000) * 1_000_000,) * 2)


def build_b(b: Path) -> None:
    """Log dir B: its cleaner-offset-checkpoint says 3 entries and holds 1."""
    write_partition(b / "bb-0", plain([0, 10], 20))
    write_partition(b / "bb-1", plain([0, 10], 20))
    (b / "cleaner-offset-checkpoint").write_bytes(b"0\n3\nbb 0 5\n")
    set_mtimes(b, OLD_MTIME)


def build_c(c: Path) -> Path:
    """Log dir C: configuration from its KRaft metadata log only."""
    mdir = write_log(c, {0: [
        batch(0, topic_value("meta", bytes([1] * 16)),
              config_value(TOPIC, "meta", "cleanup.policy", "compact"),
              config_value(TOPIC, "meta", "min.cleanable.dirty.ratio", "0.25")),
        batch(3, topic_value("meta2", bytes([2] * 16)),
              config_value(TOPIC, "meta2", "cleanup.policy", "compact"),
              config_value(TOPIC, "meta2", "min.cleanable.dirty.ratio", "0.9")),
        batch(6, config_value(BROKER, "", "log.cleaner.delete.retention.ms", "1000")),
    ]})
    for topic in ("meta", "meta2"):
        write_partition(c / f"{topic}-0", plain([0, 10, 20], 30))
    (c / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("meta", 0, 20), ("meta2", 0, 20)]))
    set_mtimes(c, OLD_MTIME)
    return mdir


@pytest.fixture(scope="module")
def planned(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("plan")
    a, b, c = root / "a", root / "b", root / "c"
    build_a(a)
    build_b(b)
    mdir = build_c(c)
    before = {d: tree_state(d) for d in (a, b, c, FIXTURE_INPUT)}
    paths = [str(a), str(b), str(c), str(FIXTURE_INPUT)]
    conf = resolve.build(topic_args=TOPIC_ARGS, metadata=kraft.metadata_sources(paths))
    made = plan(spark, paths, conf=conf, now=NOW)
    table, df = made.table, made.df(spark)
    after = {d: tree_state(d) for d in (a, b, c, FIXTURE_INPUT)}
    rows = {posixpath.basename(r["path"].rstrip("/")): r for r in table.to_pylist()}
    return SimpleNamespace(a=a, b=b, c=c, mdir=mdir, plan=made, df=df, table=table, rows=rows, before=before,
                           after=after)


DECISION_COLUMNS = ["topic", "partition", "log_start_offset", "log_end_offset", "checkpoint_offset",
                    "first_dirty_offset", "checkpoint_reset", "last_stable_offset", "active_base_offset",
                    "first_uncleanable_dirty_offset", "uncleanable_bound", "clean_bytes", "cleanable_bytes",
                    "total_bytes", "cleanable_ratio", "need_compaction_now", "max_compaction_delay_ms", "selected",
                    "skip_reason"]


def expected_row(topic, log_start, log_end, ckpt, first_dirty, reset, lso, active, unc, bound, clean, cleanable,
                 need_now=False, delay=0, selected=True, skip=None, partition=0):
    total = clean + cleanable
    return (topic, partition, log_start, log_end, ckpt, first_dirty, reset, lso, active, unc, bound, clean, cleanable,
            total, cleanable / total if total else 0.0, need_now, delay, selected, skip)


NO_CKPT = "no checkpoint entry"
BELOW = "below ratio: {:.3f} <= min.cleanable.dirty.ratio {}"
TXN_SEG = [len(data(0, 10)),
           len(data(10, 5)) + len(txn(15, 3, 7000)) + len(data(18, 2)),
           len(txn(20, 3, 7001)) + len(txn(23, 2, 7002)) + len(marker(COMMIT, 25, 7001)) + len(marker(ABORT, 26, 7002))]


def test_rules_applied_to_log_dirs(spark, planned):
    """Every partition whose plan follows from the rules, worked out by hand."""
    expected = [
        # log start = max(log-start checkpoint 10, first base 0) = 10; checkpoint 5 < 10 -> firstDirty 10;
        # bound = active 30; clean = segment 0 (S), cleanable = 10, 20 (2S) -> 2/3 > 0.5
        expected_row(
            "ckpt-low", 10, 35, 5, 10, "checkpoint 5 below log start 10", 35, 30, 30, "active segment", S, 2 * S
        ),
        # log end 25; checkpoint 40 > 25 -> firstDirty = log start 0; cleanable 0, 10 (2S), clean 0 -> 1.0
        expected_row(
            "ckpt-high", 0, 25, 40, 0, "checkpoint 40 above log end 25", 25, 20, 20, "active segment", 0, 2 * S
        ),
        expected_row("ckpt-none", 0, 25, None, 0, NO_CKPT, 25, 20, 20, "active segment", 0, 2 * S),
        # compact,delete is planned exactly like compact
        expected_row("both", 0, 25, None, 0, NO_CKPT, 25, 20, 20, "active segment", 0, 2 * S),
        # checkpoint 15 in segment 10: clean = 0, 10 (2S); cleanable = 10, 20 (2S) -> exactly 0.5, not > 0.5
        expected_row(
            "mid",
            0,
            35,
            15,
            15,
            None,
            35,
            30,
            30,
            "active segment",
            2 * S,
            2 * S,
            selected=False,
            skip=BELOW.format(0.5, 0.5),
        ),
        # open transaction of 7000 at 15 (7001 committed, 7002 aborted): LSO 15 -> rounded down to 10;
        # cleanable = segment 0 only
        expected_row("txn", 0, 32, None, 0, NO_CKPT, 15, 27, 10, "last stable offset", 0, TXN_SEG[0]),
        # the same, read from the producer snapshot at 27 (replay starts there)
        expected_row("txn-snap", 0, 32, None, 0, NO_CKPT, 15, 27, 10, "last stable offset", 0, TXN_SEG[0]),
        # snapshot: 7000 open since 5 -> LSO 5; log start 20 -> bound max(20, min(5, 40)) = 20;
        # clean = segment 10 (below 20), cleanable nothing -> 0.0. (Without the snapshot: bound 40, 2/3.)
        expected_row(
            "hanging",
            20,
            47,
            None,
            20,
            NO_CKPT,
            5,
            40,
            20,
            "last stable offset",
            S,
            0,
            selected=False,
            skip=BELOW.format(0.0, 0.5),
        ),
        # min lag 100 s: segment 20 (largest timestamp NOW - 50 s) is the first recent one -> bound 20
        expected_row("minlag", 0, 45, None, 0, NO_CKPT, 45, 40, 20, "min.compaction.lag.ms", 0, 2 * S),
        # segment 10 has no time index entry: its mtime NOW - 30 s is recent -> bound 10
        expected_row("minlag-mtime", 0, 35, None, 0, NO_CKPT, 35, 30, 10, "min.compaction.lag.ms", 0, S),
        # checkpoint 20: clean 0, 10 (2S), cleanable 20 (S) -> 1/3 <= 0.5, but segment 20's first batch
        # (NOW - 250 s) is (NOW - 200 s) - (NOW - 250 s) = 50 s past the max lag -> cleaned now
        expected_row(
            "maxlag", 0, 35, 20, 20, None, 35, 30, 30, "active segment", 2 * S, S, need_now=True, delay=50_000
        ),
        # checkpoint 10: segment 10 ends 1 s ago -> min-lag bound 10 -> nothing cleanable; its first batch
        # is 100 s past the max lag (need now) but with 0 cleanable bytes it is not cleaned
        expected_row(
            "maxlag-zero",
            0,
            25,
            10,
            10,
            None,
            25,
            20,
            10,
            "min.compaction.lag.ms",
            S,
            0,
            need_now=True,
            delay=100_000,
            selected=False,
            skip=BELOW.format(0.0, 0.5),
        ),
        # KRaft metadata: ratio 0.25 from the metadata, 0.1 from --topic-config (metadata says 0.9);
        # checkpoint 20: clean 2S, cleanable S -> 1/3
        expected_row("meta", 0, 35, 20, 20, None, 35, 30, 30, "active segment", 2 * S, S),
        expected_row("meta2", 0, 35, 20, 20, None, 35, 30, 30, "active segment", 2 * S, S),
    ]
    got = planned.df.select(*DECISION_COLUMNS).where(planned.df.topic.isin([r[0] for r in expected]))
    assert_df_equality(got, spark.createDataFrame(expected, schema=got.schema), ignore_row_order=True,
                       ignore_nullable=True)


def test_ranks_highest_ratio_first(planned):
    # ratio 1.0: accounts-0 (261114 bytes), then 2S (both, ckpt-high, ckpt-none, minlag, noindex by
    # name: a missing index is rebuilt by a broker, not bad input), then S (minlag-mtime, txn,
    # txn-snap); 2/3: ckpt-low; 1/3: maxlag, meta, meta2 (S each, by name)
    ranked = sorted((r for r in planned.rows.values() if r["rank"] is not None), key=lambda r: r["rank"])
    assert [r["topic"] for r in ranked] == ["accounts", "both", "ckpt-high", "ckpt-none", "minlag", "noindex",
                                            "minlag-mtime", "txn", "txn-snap", "ckpt-low", "maxlag", "meta", "meta2"]
    assert [r["rank"] for r in ranked] == list(range(1, 14))
    assert all(r["selected"] and r["skip_reason"] is None for r in ranked)
    # the table comes sorted by rank, unranked rows last
    ranks = planned.table.column("rank").to_pylist()
    assert ranks[:13] == list(range(1, 14)) and set(ranks[13:]) == {None}


def test_not_compacted_and_empty(planned):
    rows = planned.rows
    assert rows["logs-0"]["skip_reason"] == "not compacted (cleanup.policy has no compact)"
    assert rows["logs-0"]["cleanup_policy"] == "delete" and rows["logs-0"]["config_sources"] is not None
    assert rows["both-0"]["cleanup_policy"] == "compact,delete"
    # no segment at all, and one empty active segment (0 bytes: nothing clean, nothing cleanable)
    assert (rows["empty-0"]["skip_reason"], rows["empty-0"]["segments"], rows["empty-0"]["selected"]) == (
        "empty",
        [],
        False,
    )
    assert rows["emptyseg-0"]["skip_reason"] == "empty"
    assert (rows["emptyseg-0"]["total_bytes"], rows["emptyseg-0"]["log_end_offset"]) == (0, 0)
    assert all(rows[p]["rank"] is None for p in ("logs-0", "empty-0", "emptyseg-0"))


def test_log_end_of_an_empty_active_segment_is_its_base(planned):
    # LogSegment.readNextOffset of an empty segment is its base offset: log end 10, not 5. So the
    # checkpoint 10 stands (no reset to 0): clean = segment 0, cleanable nothing -> ratio 0
    row = planned.rows["gap-0"]
    assert (row["log_end_offset"], row["last_stable_offset"], row["active_base_offset"]) == (10, 10, 10)
    assert (row["first_dirty_offset"], row["checkpoint_reset"], row["first_uncleanable_dirty_offset"]) == (10, None, 10)
    assert (row["clean_bytes"], row["cleanable_bytes"], row["cleanable_ratio"]) == (ACTIVE, 0, 0.0)
    assert (row["selected"], row["skip_reason"]) == (False, BELOW.format(0.0, 0.5))


def test_cleaning_states(planned):
    rows = planned.rows
    assert rows["paused-0"]["state"] == "paused"
    assert rows["paused-0"]["skip_reason"] == "paused (2x; resume to clean)"
    assert rows["broken-0"]["state"] == "uncleanable"
    assert rows["broken-0"]["skip_reason"] == "uncleanable: CRC mismatch at byte 77 (reset-uncleanable after fixing)"
    for name in ("paused-0", "broken-0"):
        # the data itself would be cleaned (like ckpt-none): the state alone keeps it out
        assert (rows[name]["cleanable_ratio"], rows[name]["selected"], rows[name]["rank"]) == (1.0, False, None)
    assert rows["ckpt-none-0"]["state"] == "idle"


def test_config_from_kraft_metadata(planned):
    source = f"kraft-metadata {planned.c / '__cluster_metadata-0'}"
    meta, meta2 = planned.rows["meta-0"], planned.rows["meta2-0"]
    config, sources = dict(meta["config"]), dict(meta["config_sources"])
    assert (config["cleanup.policy"], sources["cleanup.policy"]) == ("compact", f"{source} topic[meta]")
    assert (config["min.cleanable.dirty.ratio"], sources["min.cleanable.dirty.ratio"]) == (
        "0.25",
        f"{source} topic[meta]",
    )
    assert (config["delete.retention.ms"], sources["delete.retention.ms"]) == ("1000", f"{source} (cluster default)")
    assert (config["segment.bytes"], sources["segment.bytes"]) == ("1073741824", "default")
    assert meta["min_cleanable_ratio"] == 0.25
    # --topic-config beats the metadata's 0.9; the metadata's policy stays
    config, sources = dict(meta2["config"]), dict(meta2["config_sources"])
    assert (config["min.cleanable.dirty.ratio"], sources["min.cleanable.dirty.ratio"]) == (
        "0.1", "--topic-config topic[meta2]")
    assert (config["cleanup.policy"], sources["cleanup.policy"]) == ("compact", f"{source} topic[meta2]")
    assert meta2["min_cleanable_ratio"] == 0.1
    # the metadata partition itself is not planned
    assert "__cluster_metadata-0" not in planned.rows


def test_kafka_written_fixture(planned):
    rows = planned.rows
    acc0, acc1, clicks = rows["accounts-0"], rows["accounts-1"], rows["clicks-0"]
    # accounts-0: no checkpoint -> 0; min lag 260 s bounds it at 3583, where Kafka's round 1 ended
    # (after-round1.cleaner-offset-checkpoint: accounts 0 3583). Cleanable = segments 0 + 1735.
    assert (acc0["first_dirty_offset"], acc0["first_uncleanable_dirty_offset"]) == (0, 3583)
    assert (acc0["clean_bytes"], acc0["cleanable_bytes"]) == (0, 130752 + 130362)
    assert acc0["selected"] and acc0["rank"] == 1
    # accounts-1: checkpoint 2080 (in segment 1819): clean = 0 + 1819 = 260814, cleanable = 1819 = 130770
    # (bound 3557) -> 130770 / 391584 = 0.334 <= 0.5, as in Kafka's round 1
    assert (acc1["first_dirty_offset"], acc1["first_uncleanable_dirty_offset"]) == (2080, 3557)
    assert (acc1["clean_bytes"], acc1["cleanable_bytes"]) == (130044 + 130770, 130770)
    assert acc1["cleanable_ratio"] == pytest.approx(0.334, abs=5e-4)
    assert acc1["skip_reason"] == "below ratio: 0.334 <= min.cleanable.dirty.ratio 0.5"
    assert clicks["skip_reason"] == "not compacted (cleanup.policy has no compact)"
    after1 = (FIXTURE_INPUT.parent / "after-round1.cleaner-offset-checkpoint").read_text().split("\n")
    assert "accounts 0 3583" in after1


# -- bad input ------------------------------------------------------------------------------------
def test_bad_input_is_reported_per_partition(planned):
    rows = planned.rows
    bad = {
        "orders-x": "directory name is not <topic>-<partition>",
        "crc-0": "CRC mismatch",
        "swap-0": f"{0:020d}.log.swap: leftover of an interrupted swap",
        "bb-0": "cleaner-offset-checkpoint",
        "bb-1": "cleaner-offset-checkpoint",
    }
    for name, what in bad.items():
        row = rows[name]
        assert row["skip_reason"].startswith("bad input: "), (name, row["skip_reason"])
        assert what in row["skip_reason"] and any(what in p for p in row["problems"]), (name, row["problems"])
        assert (row["selected"], row["rank"]) == (False, None)
    # LogLoader rebuilds a closed segment's missing index files: a note, and the partition is planned
    assert not (rows["noindex-0"]["skip_reason"] or "").startswith("bad input"), rows["noindex-0"]
    assert any(n.endswith(f"{10:020d}.index: missing for a closed segment: a broker rebuilds it from the .log on load")
               for n in rows["noindex-0"]["notes"]), rows["noindex-0"]["notes"]
    assert (rows["orders-x"]["topic"], rows["orders-x"]["partition"]) == (None, None)
    assert f"{10:020d}.log" in rows["crc-0"]["skip_reason"]  # names the file
    # the rest of log dir A, and log dirs C and the fixture, are planned as usual
    assert rows["ckpt-none-0"]["selected"] and rows["meta-0"]["selected"] and rows["accounts-0"]["selected"]


def test_planning_changes_nothing(planned):
    for d in (planned.a, planned.b, planned.c, FIXTURE_INPUT):
        assert planned.after[d] == planned.before[d], d
    assert not any(name.endswith(".tmp") for name in planned.after[planned.a])


def test_every_log_dir_is_planned(planned):
    by_dir = {}
    for r in planned.rows.values():
        by_dir.setdefault(r["log_dir"], set()).add(posixpath.basename(r["path"].rstrip("/")))
    assert by_dir[str(planned.b)] == {"bb-0", "bb-1"}
    assert by_dir[str(planned.c)] == {"meta-0", "meta2-0"}
    assert by_dir[str(FIXTURE_INPUT)] == {"accounts-0", "accounts-1", "clicks-0"}
    assert len(by_dir[str(planned.a)]) == 22
    assert planned.table.num_rows == 22 + 2 + 2 + 3
    assert planned.plan.log_dirs == sorted(by_dir)


# -- output -----------------------------------------------------------------------------------------
def test_output_round_trips(planned, tmp_path):
    expected = planned.table.to_pylist()
    for name in ("plan.json", "plan.parquet"):
        path = str(tmp_path / name)
        output.write(planned.plan, path)
        assert output.read(path).table.to_pylist() == expected, name
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert len(doc) == planned.table.num_rows
    assert doc[0]["config"]["cleanup.policy"] == "compact"  # maps as JSON objects
    with pytest.raises(ValueError, match=r"\.parquet or \.json"):
        output.write(planned.plan, str(tmp_path / "plan.csv"))


def test_describe_lists_every_partition(planned):
    text = output.describe(planned.plan.rows)
    lines = text.splitlines()
    log_dirs = sorted(set(planned.table.column("log_dir").to_pylist()))
    # the release reproduced on each log dir (none holds a metadata.version here), said last
    releases = ["reproducing Kafka 4.3 (default: " + (
        f"no finalized metadata.version in {d}/__cluster_metadata-0" if Path(d, "__cluster_metadata-0").is_dir() else
        f"{d} holds no KRaft metadata (no __cluster_metadata-0: a ZooKeeper-mode log dir, or not the broker's "
        "metadata log dir), so no metadata.version names the brokers' release"
    ) + "; the newest release, 4.3, taken (--kafka-version or kafka.version names another))" for d in log_dirs]
    assert sorted(lines[-len(releases):]) == sorted(releases)
    lines = lines[:-len(releases)]
    notes = [line for line in lines if line.startswith("note: ")]  # said after the table
    assert notes == [f"note: {n}" for r in planned.plan.rows for n in r.notes] and notes
    lines = [line for line in lines if not line.startswith("note: ")]
    assert len(lines) == planned.table.num_rows + 2  # header, one per partition, summary
    body = "\n".join(lines[1:-1])
    for r in planned.table.to_pylist():
        name = f"{r['topic']}-{r['partition']}" if r["topic"] is not None else r["path"]
        assert name in body
    assert lines[1].split()[:2] == ["1", "accounts-0"]
    assert lines[-1].startswith(f"{planned.table.num_rows} partitions, 13 selected, ")
    assert "skip: paused (2x; resume to clean)" in text


# -- budgets and the command line -------------------------------------------------------------------
@pytest.fixture(scope="module")
def budget_dir(tmp_path_factory) -> Path:
    """bud-a: clean 0, cleanable 2S (1.0); bud-b: checkpoint 10, clean S, cleanable 2S (2/3);
    bud-c: checkpoint 10, clean S, cleanable S (0.5, above its min ratio 0.4)."""
    e = tmp_path_factory.mktemp("budget")
    write_partition(e / "bud-a-0", plain([0, 10], 20))
    write_partition(e / "bud-b-0", plain([0, 10, 20], 30))
    write_partition(e / "bud-c-0", plain([0, 10], 20))
    (e / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("bud-b", 0, 10), ("bud-c", 0, 10)]))
    set_mtimes(e, OLD_MTIME)
    return e


BUDGET_ARGS = ["bud-*:cleanup.policy=compact", "bud-c:min.cleanable.dirty.ratio=0.4"]


def test_budgets(spark, budget_dir):
    # --top 2, --max-bytes 3S, filled greedily in rank order: bud-a (2S) fits; bud-b (2S) does not fit the S
    # left and is passed over; bud-c (S) fits and is the second
    df = plan(spark, [str(budget_dir)], conf=resolve.build(topic_args=BUDGET_ARGS), now=NOW, top=2,
              max_bytes=3 * S).df(spark)
    got = df.select("topic", "rank", "cleanable_bytes", "selected", "skip_reason")
    expected = [
        ("bud-a", 1, 2 * S, True, None),
        ("bud-b", 2, 2 * S, False,
         f"over budget: --max-bytes {3 * S} (its {2 * S} cleanable bytes do not fit in the {S} left)"),
        ("bud-c", 3, S, True, None),
    ]
    assert_df_equality(got, spark.createDataFrame(expected, schema=got.schema), ignore_nullable=True)


def test_cli_plan(spark, budget_dir, tmp_path, capsys):
    out = tmp_path / "plan.json"
    args = ["plan", str(budget_dir), "--now", str(NOW), "--output", str(out)]
    for arg in BUDGET_ARGS:
        args += ["--topic-config", arg]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "3 partitions, 3 selected" in printed and f"plan written to {out}" in printed
    doc = json.loads(out.read_text())
    assert [{k: r[k] for k in ("topic", "partition", "selected", "skip_reason", "rank")} for r in doc] == [
        {"topic": "bud-a", "partition": 0, "selected": True, "skip_reason": None, "rank": 1},
        {"topic": "bud-b", "partition": 0, "selected": True, "skip_reason": None, "rank": 2},
        {"topic": "bud-c", "partition": 0, "selected": True, "skip_reason": None, "rank": 3},
    ]
    assert [r["cleanable_ratio"] for r in doc] == [1.0, pytest.approx(2 / 3), 0.5]


def test_cli_plan_bad_topic_config(budget_dir, tmp_path, capsys):
    out = tmp_path / "plan.json"
    code = cli.main(["plan", str(budget_dir), "--topic-config", "bud-a:min.cleanable.dirty.ratio=1.5",
                     "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert "min.cleanable.dirty.ratio" in err and "--topic-config" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
