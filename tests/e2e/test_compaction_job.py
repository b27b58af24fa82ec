"""``kcompact compact`` end to end, one partition per cleaning rule, expected results worked out by
hand from Kafka's Cleaner rules (docs/compaction-semantics.md), never from our code.

Inputs are built with kafka-python (v2 batches, LegacyRecordBatchBuilder for v0/v1) plus hand-built
transaction markers and .txnindex entries; indexes are laid out as a broker does
(tests/support.write_partition). Outputs are read back with kafka-python (CRC checked).

To stay fast, every partition of log dir A lives in ONE compact call per round (three rounds:
NOW1, NOW2 = NOW1 + delete.retention.ms, NOW3 = NOW2 + delete.retention.ms), with new active
segments appended by hand between rounds, as a broker rolls them. The two replica log dirs join
round 1; --plan / --dry-run use their own small log dir P.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kcompact.jobs.cli import main
from kcompact.readers import codecs
from kcompact.readers.records import Record
from kcompact.tools.verify import verify_log_dir
from tests.support import (
    JOB_PATHS,
    TIME_ENTRY,
    TXN_ENTRY,
    broker_indexes,
    checkpoint_text,
    hand_control_batch,
    kp_build,
    seg_path,
    use_job_path,
)

DAY = 86_400_000
RET = 600_000  # delete.retention.ms of every r-* topic
NOW1 = 1_720_300_000_000
NOW2 = NOW1 + RET  # a horizon stamped in round 1 is reached exactly: <= now, so it goes
NOW3 = NOW2 + RET
OLD = NOW1 - 2 * DAY  # record timestamps: producers with only these are expired (1 day)
RECENT = NOW1 - 1000  # an active producer's last batch
MTIME = NOW1 - DAY  # file modification times unless a rule reads them
ABORT, COMMIT = 0, 1
TOPIC_ARGS = [
    "r-*:cleanup.policy=compact,delete.retention.ms=600000,min.cleanable.dirty.ratio=0.01",
    "rep:cleanup.policy=compact",
    "p-*:cleanup.policy=compact",
]
# A real MD5 collision (Wang/Yu; Stevens' example): Kafka's SkimpyOffsetMap keys its map by MD5, so
# it would take these two distinct keys for one and drop the first record as superseded.
MD5_A = bytes.fromhex(
    "d131dd02c5e6eec4693d9a0698aff95c2fcab58712467eab4004583eb8fb7f8955ad340609f4b30283e488832571415a"
    "085125e8f7cdc99fd91dbdf280373c5bd8823e3156348f5bae6dacd436c919c6dd53e2b487da03fd02396306d248cda0"
    "e99f33420f577ee8ce54b67080a80d1ec69821bcb6a8839396f9652b6ff72a70")
MD5_B = bytes.fromhex(
    "d131dd02c5e6eec4693d9a0698aff95c2fcab50712467eab4004583eb8fb7f8955ad340609f4b30283e4888325f1415a"
    "085125e8f7cdc99fd91dbd7280373c5bd8823e3156348f5bae6dacd436c919c6dd53e23487da03fd02396306d248cda0"
    "e99f33420f577ee8ce54b67080280d1ec69821bcb6a8839396f965ab6ff72a70")
BIG_KEYS, BIG_OVERWRITES, BIG_STEP = 200_000, 2_000, 100


# -- builders -------------------------------------------------------------------------------------------
def recs(first: int, kv: list, ts: int = OLD, **kw) -> bytes:
    """A kafka-python batch at offsets first.. ; ``kv`` items are keys (value b"v<offset>") or
    (key, value) pairs; a None key is keyless, a None value a tombstone."""
    records = []
    for i, item in enumerate(kv):
        key, value = item if isinstance(item, tuple) else (item, b"v%d" % (first + i))
        records.append(Record(first + i, ts, key, value))
    return kp_build(records, base_offset=first, **kw)


def fixed_width(first: int) -> list[tuple[bytes, bytes]]:
    """10 distinct keys with values of one width: every such batch has the same size."""
    return [(b"g%03d" % o, b"value%03d" % o) for o in range(first, first + 10)]


def txn_data(first: int, keys: list[bytes], pid: int, ts: int = OLD) -> bytes:
    return recs(first, keys, ts, producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)


def marker(kind: int, offset: int, pid: int, ts: int = OLD) -> bytes:
    return hand_control_batch(kind, offset=offset, timestamp=ts, producer_id=pid, producer_epoch=0,
                              coordinator_epoch=1)


def legacy(magic: int, offset: int, key: bytes, value: bytes | None, ts: int = OLD) -> bytes:
    """One uncompressed v0/v1 message as a broker stores it (absolute offset)."""
    builder = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    builder.append(offset, timestamp=ts if magic else None, key=key, value=value)
    return bytes(builder.build())


@dataclass
class Part:
    """A partition dir being built: segments (base -> batch bytes); the last is active."""

    path: Path
    segments: dict[int, list[bytes]] = field(default_factory=dict)

    def write(
        self, txns: dict[int, list[tuple[int, int, int, int]]] | None = None, mtimes: dict[int, int] | None = None
    ):
        self.path.mkdir(parents=True, exist_ok=True)
        bases = sorted(self.segments)
        for base in bases:
            self._write_segment(base, closed=base != bases[-1], mtime=(mtimes or {}).get(base, MTIME))
        for base, entries in (txns or {}).items():
            seg_path(self.path, base, "txnindex").write_bytes(b"".join(TXN_ENTRY.pack(0, *e) for e in entries))
            _set_mtime(seg_path(self.path, base, "txnindex"), MTIME)
        return self

    def _write_segment(self, base: int, closed: bool, mtime: int) -> None:
        batches = self.segments[base]
        if all(b[16] == 2 for b in batches):
            index, timeindex = broker_indexes(batches, base, closed)
        else:  # legacy entries: tiny segments get no offset-index entry (index.interval.bytes 4096);
            # a closed v1 segment gets its closing time-index entry (max timestamp, its offset)
            stamped = [
                (struct.unpack_from(">q", b, 18)[0], struct.unpack_from(">q", b, 0)[0]) for b in batches if b[16] == 1
            ]
            index = b""
            timeindex = b""
            if closed and stamped:
                ts, off = max(stamped, key=lambda t: t[0])
                timeindex = TIME_ENTRY.pack(ts, off - base)
        for kind, data in (("log", b"".join(batches)), ("index", index), ("timeindex", timeindex)):
            seg_path(self.path, base, kind).write_bytes(data)
            _set_mtime(seg_path(self.path, base, kind), mtime)

    def roll(self, base: int, batches: list[bytes]) -> None:
        """What a broker does at a roll: the active segment is closed (its time index gets the closing
        entry) and a new active segment starts at ``base``. The closed segment's .log is untouched."""
        old = max(self.segments)
        assert base > old
        self.segments[base] = batches
        _, timeindex = broker_indexes(self.segments[old], old, closed=True)
        seg_path(self.path, old, "timeindex").write_bytes(timeindex)
        self._write_segment(base, closed=False, mtime=MTIME)


def _set_mtime(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000,) * 2)


# -- readers (kafka-python) -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Out:
    """One batch of a cleaned partition, as kafka-python reads it."""

    segment: int
    base: int
    last: int
    count: int
    kind: str  # "d" data, "ABORT" / "COMMIT" markers
    records: tuple  # (offset, key, value)
    timestamps: tuple
    batch: object
    raw: bytes


def read_part(part: Path) -> list[Out]:
    out = []
    for log in sorted(part.glob("*.log")):
        data = log.read_bytes()
        pos = 0
        for b in MemoryRecords(data):
            assert b.validate_crc(), f"{log}: kafka-python rejects a CRC"
            size = b.size_in_bytes
            raw = data[pos:pos + size]
            pos += size
            read = list(b)
            records = tuple((r.offset, r.key, r.value) for r in read)
            timestamps = tuple(r.timestamp for r in read)
            if b.magic == 2:
                kind = "d"
                if b.is_control_batch:
                    kind = (
                        {ABORT: "ABORT", COMMIT: "COMMIT"}[struct.unpack(">hh", records[0][1])[1]] if records else "E"
                    )
                out.append(
                    Out(int(log.stem), b.base_offset, b.last_offset, b.records_count, kind, records, timestamps, b, raw)
                )
            else:
                out.append(Out(int(log.stem), b.base_offset, b.base_offset, 1, "d", records, timestamps, b, raw))
        assert pos == len(data)
    return out


def data_offsets(part: Path) -> list[int]:
    return [r[0] for o in read_part(part) if o.kind == "d" for r in o.records]


def shape(part: Path) -> list[tuple]:
    """(segment, base, last, record offsets, kind) per batch."""
    return [(o.segment, o.base, o.last, [r[0] for r in o.records], o.kind) for o in read_part(part)]


def horizon(o: Out) -> int | None:
    """The delete horizon (attributes bit 6 set: baseTimestamp is the horizon)."""
    return o.batch.first_timestamp if o.batch.attributes & 0x40 else None


def cleaner_checkpoint(log_dir: Path) -> dict[tuple[str, int], int]:
    lines = (log_dir / "cleaner-offset-checkpoint").read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2
    return {(t, int(p)): int(o) for t, p, o in (line.split(" ") for line in lines[2:])}


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def compact(paths: list[Path], now: int, *extra: str) -> int:
    # the rounds' log dirs are copies that hold the same partitions (no broker's). Kafka 3.9.2's
    # cleaner: its legacy entries keep their magic (4.0 on rewrites them as v2: test_legacy_rebuild.py
    # and tests/unit/test_legacy_conversion.py); its other rules are 4.3's, the default
    args = ["compact", *map(str, paths), "--now", str(now), "--allow-duplicate-partitions", "--kafka-version", "3.9.2",
            "--allow-unknown-topics", *extra]  # one list of overrides for every round's log dirs
    # r-empty: one 2-record segment per group (S + S > S); 3.9 takes a segment.bytes that small
    for t in TOPIC_ARGS + [f"r-empty:segment.bytes={len(recs(0, [b'a', b'b']))}"]:
        args += ["--topic-config", t]
    return main(args)


# -- log dir A: one partition per rule ------------------------------------------------------------------
def build_a(a: Path) -> dict[str, Part]:
    p: dict[str, Part] = {}

    def part(name: str, segments: dict[int, list[bytes]], **kw) -> Part:
        p[name] = Part(a / f"r-{name}-0", segments).write(**kw)
        return p[name]

    part("sup", {0: [recs(0, [b"a", b"b", b"a", None])], 4: [recs(4, [b"b", b"c", None])], 7: [recs(7, [b"a"])]})
    part("grp", {base: [recs(base, fixed_width(base))] for base in (0, 10, 20, 30)},
         mtimes={0: MTIME - 3000, 10: MTIME - 2000, 20: MTIME - 1000})
    part("tomb", {0: [recs(0, [(b"k1", b"v"), (b"k2", b"v"), (b"k1", None)])],
                  3: [recs(3, [(b"k3", b"v"), (b"k2", None)])], 5: [recs(5, [b"k4"])]})
    part("abort", {0: [txn_data(0, [b"x1", b"x2"], 100), marker(ABORT, 2, 100), recs(3, [b"q1", b"q2"])],
                   5: [recs(5, [b"q3"])]},
         txns={0: [(100, 0, 2, 0)]})
    part("commit", {0: [txn_data(0, [b"y1", b"y2"], 200), marker(COMMIT, 2, 200), marker(COMMIT, 3, 201),
                        recs(4, [b"y1", b"y2"])], 6: [recs(6, [b"y3"])]})
    part("active", {0: [recs(0, [b"a1", b"a2"], RECENT, producer_id=300, producer_epoch=5, base_sequence=0),
                        recs(2, [b"b1", b"b2"], OLD, producer_id=301, producer_epoch=0, base_sequence=0),
                        recs(4, [b"a1", b"a2", b"b1", b"b2"])],
                    8: [recs(8, [b"c"])]})
    part("roundend", {0: [recs(0, [b"k1", b"k2"])], 2: [recs(2, [None, None])], 4: [recs(4, [b"k3"])]})
    big_value = b"compressible value " * 8
    part("codec", {0: [recs(0, [(k, big_value) for k in (b"a", b"b", b"c", b"d", b"e")], codec=codecs.GZIP),
                       recs(5, [(k, big_value) for k in (b"a", b"f", b"g", b"h", b"i")], codec=codecs.LZ4)],
                   10: [recs(10, [(k, big_value) for k in (b"b", b"k", b"l", b"m", b"n")], codec=codecs.ZSTD),
                        recs(15, [(k, big_value) for k in (b"c", b"o", b"p", b"q", b"r")], codec=codecs.SNAPPY)],
                   20: [recs(20, [b"s"])]})
    part("legacy", {0: [legacy(0, 0, b"l1", b"old"), legacy(0, 1, b"l2", None)],
                    2: [legacy(1, 2, b"l3", None), legacy(1, 3, b"l4", b"v")],
                    4: [legacy(1, 4, b"l1", b"new"), legacy(1, 5, b"l5", None)],
                    6: [recs(6, [b"l6"])]},
         mtimes={0: MTIME - 2 * RET, 2: MTIME, 4: MTIME + 1000, 6: MTIME + 2000})
    long_keys = [b"p" * 200 + b"%04d" % i for i in range(1000)]
    part("keys", {0: [recs(0, [(MD5_A, b"first"), (MD5_B, b"second")]), recs(2, long_keys)],
                  1002: [recs(1002, long_keys[::2])], 1502: [recs(1502, [b"z"])]})
    big = [recs(base, [(b"key-%06d" % o, b"v") for o in range(base, base + 1000)]) for base in range(0, BIG_KEYS, 1000)]
    overwrite = [recs(BIG_KEYS, [(b"key-%06d" % (i * BIG_STEP), b"w") for i in range(BIG_OVERWRITES)])]
    part("big", {0: big, BIG_KEYS: overwrite, BIG_KEYS + BIG_OVERWRITES: [recs(BIG_KEYS + BIG_OVERWRITES, [b"end"])]})
    part("mid", {0: [recs(0, [b"a", b"d", b"c", b"b", b"e"]), recs(5, [b"h", b"c", b"i", b"h", b"j"])],
                 10: [recs(10, [b"d", b"k", b"l"])], 13: [recs(13, [b"m"])]})
    part("empty", {0: [recs(0, [b"a", b"b"])], 2: [recs(2, [b"a", b"b"])], 4: [recs(4, [b"c"])]},
         mtimes={0: MTIME - 5000})
    part("gap", {0: [recs(0, [b"a", b"b", b"c"])], 10: [recs(10, [b"a", b"d"])], 20: [recs(20, [b"e"])]})
    part("multi", {0: [recs(0, [(b"k1", b"a"), (b"k2", b"b"), (b"k1", b"c"), (b"k3", b"d"), (b"k7", None)])],
                   5: [recs(5, [(b"k2", b"e"), (b"k4", b"f")])]})
    (a / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("r-legacy", 0, 4), ("r-mid", 0, 7)]))
    return p


def build_replicas(r1: Path, r2: Path) -> None:
    Part(r1 / "rep-0", {0: [recs(0, [b"a", b"a", b"b"])], 3: [recs(3, [b"c"])]}).write()
    Part(r2 / "rep-0", {0: [recs(0, [b"a", b"b", b"b"])], 3: [recs(3, [b"a", b"x"])], 5: [recs(5, [b"y"])]}).write()


# every path takes more than 20 s to set up (make test-fast leaves them out)
@pytest.fixture(scope="module", params=[pytest.param(path, marks=pytest.mark.slow) for path in JOB_PATHS])
def rounds(request, spark, tmp_path_factory):
    """Every rule by each path of the job (see tests/e2e/test_compaction_fixture.py's ``rounds``)."""
    use_job_path(request, spark)
    root = tmp_path_factory.mktemp("job")
    a, r1, r2 = root / "a", root / "r1", root / "r2"
    parts = build_a(a)
    build_replicas(r1, r2)
    inputs = {name: {base: list(batches) for base, batches in p.segments.items()} for name, p in parts.items()}
    out = SimpleNamespace(a=a, r1=r1, r2=r2, parts=parts, inputs=inputs, shapes={}, outs={}, codes={}, verify={},
                          checkpoints={}, reports={}, txnindex={})

    def snapshot(n: int) -> None:
        out.shapes[n] = {name: shape(p.path) for name, p in parts.items() if name != "big"}
        out.outs[n] = {name: read_part(p.path) for name, p in parts.items() if name not in ("big", "keys")}
        out.checkpoints[n] = cleaner_checkpoint(a)
        out.verify[n] = verify_log_dir(str(a))
        txnindex = seg_path(parts["abort"].path, 0, "txnindex")
        out.txnindex[n] = txnindex.read_bytes() if txnindex.exists() else None

    report = root / "report1.json"
    out.codes[1] = compact([a, r1, r2], NOW1, "--report", str(report))
    out.reports[1] = json.loads(report.read_text())
    snapshot(1)
    out.big_offsets = data_offsets(parts["big"].path)
    out.keys = read_part(parts["keys"].path)
    out.mtimes1 = {name: {int(f.stem): f.stat().st_mtime_ns // 1_000_000 for f in p.path.glob("*.log")}
                   for name, p in parts.items()}
    out.verify["replicas"] = verify_log_dir(str(r1)) + verify_log_dir(str(r2))
    # between rounds 1 and 2 the broker rolls four partitions: their active segment closes, a new one starts
    parts["tomb"].roll(6, [recs(6, [b"k5"])])
    parts["abort"].roll(6, [recs(6, [b"q4"])])
    parts["commit"].roll(7, [recs(7, [b"y4"])])
    parts["multi"].roll(7, [recs(7, [(b"k3", None), (b"k5", b"g")])])
    out.codes[2] = compact([a], NOW2)
    snapshot(2)
    parts["abort"].roll(7, [recs(7, [b"q5"])])
    parts["commit"].roll(8, [recs(8, [b"y5"])])
    parts["multi"].roll(9, [recs(9, [(b"k6", b"h")])])
    out.codes[3] = compact([a], NOW3)
    snapshot(3)
    return out


def test_every_round_succeeds_and_verifies(rounds):
    assert rounds.codes == {1: 0, 2: 0, 3: 0}
    assert rounds.verify == {1: [], 2: [], 3: [], "replicas": []}


# r-sup: 0 a, 1 b, 2 a, 3 keyless | 4 b, 5 c, 6 keyless | active 7 a. Map over [0, 7): a->2, b->4, c->5.
# Segments 0 and 4 merge (sizes far below 1 GiB) into one output segment named 0; the active one is untouched.
def sup_report(rounds) -> dict:
    part = next(p for p in rounds.reports[1]["partitions"] if p["topic"] == "r-sup")
    assert part["committed"] and (part["dirty_start"], part["dirty_end"]) == (0, 7)
    assert (part["records_read"], part["records_kept"]) == (7, 3)
    return part


def test_superseded_keys(rounds):
    # 0 (a, 0 < 2) and 1 (b, 1 < 4) are superseded; 2, 4, 5 hold their key's latest offset
    assert rounds.shapes[1]["sup"] == [(0, 0, 3, [2], "d"), (0, 4, 6, [4, 5], "d"), (7, 7, 7, [7], "d")]
    assert sup_report(rounds)["removed"]["superseded"] == 2


def test_keyless_records_dropped(rounds):
    # 3 and 6 have no key: dropped (Kafka counts them as invalid), although 6 is the round's last offset
    kept = {r[0] for o in rounds.outs[1]["sup"] for r in o.records}
    assert not kept & {3, 6}
    assert sup_report(rounds)["removed"]["keyless"] == 2


def test_kept_records_keep_their_fields(rounds):
    (first, second, _) = rounds.outs[1]["sup"]
    # rewritten batches keep base offset and last offset (delta 3 and 2), records keep key and value
    assert first.records == ((2, b"a", b"v2"),) and second.records == ((4, b"b", b"v4"), (5, b"c", b"v5"))
    assert first.timestamps == (OLD,) and first.batch.max_timestamp == OLD


def test_checkpoint_advanced_to_the_end_of_the_mapped_range(rounds):
    # dirty range ends at the active segment's base (or the gap's fast-forward, see test_offset_gap)
    expected = {"sup": 7, "grp": 30, "tomb": 5, "abort": 5, "commit": 6, "active": 8, "roundend": 4, "codec": 20,
                "legacy": 6, "keys": 1502, "big": BIG_KEYS + BIG_OVERWRITES, "mid": 13, "gap": 20, "multi": 5,
                "empty": 4}
    assert rounds.checkpoints[1] == {(f"r-{k}", 0): v for k, v in expected.items()}
    # rounds 2 and 3 clean only the rolled partitions (the others have no dirty bytes)
    assert rounds.checkpoints[2] == rounds.checkpoints[1] | {("r-tomb", 0): 6, ("r-abort", 0): 6,
                                                             ("r-commit", 0): 7, ("r-multi", 0): 7}
    assert rounds.checkpoints[3] == rounds.checkpoints[2] | {("r-abort", 0): 7, ("r-commit", 0): 8,
                                                             ("r-multi", 0): 9}


def test_grouping_merges_small_segments(rounds):
    # segment.bytes for r-grp is the default (1 GiB) here: see test_grouping_respects_segment_bytes
    # for the bound; every grp record has its own key, so nothing is removed
    assert [s[:3] for s in rounds.shapes[1]["grp"]] == [(0, 0, 9), (0, 10, 19), (0, 20, 29), (30, 30, 39)]


def test_unchanged_batches_copied_byte_for_byte(rounds):
    grp = rounds.inputs["grp"]
    assert (rounds.parts["grp"].path / f"{0:020d}.log").read_bytes() == grp[0][0] + grp[10][0] + grp[20][0]
    # output segment 0 takes the last input segment's modification time (segment 20's)
    assert rounds.mtimes1["grp"] == {0: MTIME - 1000, 30: MTIME}


def test_tombstone_survives_first_run_with_its_batch_stamped(rounds):
    # 0 k1, 1 k2, 2 k1=null | 3 k3, 4 k2=null | active 5. Map: k1->2, k2->4, k3->3.
    # Kept: 2 (tombstone, no horizon yet), 3, 4 (tombstone). Both batches keep a tombstone: rewritten with
    # the delete-horizon bit and baseTimestamp = NOW1 + delete.retention.ms
    b0, b3, active = rounds.outs[1]["tomb"]
    assert [(o.base, o.last, o.records) for o in (b0, b3)] == [
        (0, 2, ((2, b"k1", None),)), (3, 4, ((3, b"k3", b"v"), (4, b"k2", None)))]
    assert horizon(b0) == horizon(b3) == NOW1 + RET
    assert b3.timestamps == (OLD, OLD)  # record timestamps are unchanged
    assert active.raw == rounds.inputs["tomb"][5][0]


def test_tombstone_goes_after_its_horizon(rounds):
    # round 2 at NOW2 = NOW1 + RET (horizon <= now): after the roll, dirty [5, 6): map k4->5.
    # Batch 0..2: tombstone 2 goes (k1 unmapped, horizon passed), batch empty, not the round's last
    # (3 != 6) and no producer: dropped. Batch 3..4: 3 kept, tombstone 4 goes; the horizon stays.
    # Output segments 0 and 5 merge.
    assert rounds.shapes[2]["tomb"] == [(0, 3, 4, [3], "d"), (0, 5, 5, [5], "d"), (6, 6, 6, [6], "d")]
    assert horizon(rounds.outs[2]["tomb"][0]) == NOW1 + RET


def test_aborted_transaction_removed_and_abort_marker_listed(rounds):
    # pid 100 aborts 0..1 (ABORT at 2, .txnindex (100, 0, 2, lso 0)); 3..4 plain q1, q2; active 5.
    # The aborted batch goes (pid 100 expired: not kept empty); its ABORT marker stays (a batch of the
    # transaction was traversed) and the new segment's .txnindex lists the transaction.
    assert rounds.shapes[1]["abort"] == [(0, 2, 2, [2], "ABORT"), (0, 3, 4, [3, 4], "d"), (5, 5, 5, [5], "d")]
    marker_out = rounds.outs[1]["abort"][0]
    assert marker_out.raw == rounds.inputs["abort"][0][1] and horizon(marker_out) is None  # copied
    assert rounds.txnindex[1] == TXN_ENTRY.pack(0, 100, 0, 2, 0)


def test_abort_marker_removed_after_its_horizon(rounds):
    # round 2: the transaction's batches are gone, so the marker may go: it first gets a horizon
    # NOW2 + RET (like a tombstone); the .txnindex no longer lists the transaction (no batch met)
    assert rounds.shapes[2]["abort"] == [(0, 2, 2, [2], "ABORT"), (0, 3, 4, [3, 4], "d"), (0, 5, 5, [5], "d"),
                                         (6, 6, 6, [6], "d")]
    assert horizon(rounds.outs[2]["abort"][0]) == NOW2 + RET
    assert rounds.txnindex[2] in (None, b"")
    # round 3 at NOW3 = NOW2 + RET: horizon reached, the marker goes
    assert rounds.shapes[3]["abort"] == [(0, 3, 4, [3, 4], "d"), (0, 5, 5, [5], "d"), (0, 6, 6, [6], "d"),
                                         (7, 7, 7, [7], "d")]


def test_commit_marker_removal(rounds):
    # pid 200 commits 0..1 (y1, y2; COMMIT at 2); pid 201's COMMIT at 3 has no data; 4..5 y1, y2; active 6.
    # Round 1: batch 0..1 superseded (y1->4, y2->5), dropped (expired); COMMIT 2 stays (a batch of its
    # transaction was traversed); COMMIT 3 may go but has no horizon: stamped NOW1 + RET.
    assert rounds.shapes[1]["commit"] == [(0, 2, 2, [2], "COMMIT"), (0, 3, 3, [3], "COMMIT"),
                                          (0, 4, 5, [4, 5], "d"), (6, 6, 6, [6], "d")]
    c2, c3 = rounds.outs[1]["commit"][:2]
    assert (horizon(c2), horizon(c3)) == (None, NOW1 + RET)
    # Round 2 (NOW2): COMMIT 3's horizon reached: gone; COMMIT 2 now has no batch left: stamped NOW2 + RET
    assert rounds.shapes[2]["commit"] == [(0, 2, 2, [2], "COMMIT"), (0, 4, 5, [4, 5], "d"), (0, 6, 6, [6], "d"),
                                          (7, 7, 7, [7], "d")]
    assert horizon(rounds.outs[2]["commit"][0]) == NOW2 + RET
    # Round 3 (NOW3): COMMIT 2 goes
    assert [s[1] for s in rounds.shapes[3]["commit"]] == [4, 6, 7, 8]


def test_empty_batch_kept_for_active_producer_only(rounds):
    # 0..1 pid 300 (max ts RECENT: active), 2..3 pid 301 (OLD: expired), 4..7 supersede all four keys.
    # 0..1 is pid 300's last batch: kept as an empty header; 2..3 dropped.
    assert rounds.shapes[1]["active"] == [(0, 0, 1, [], "d"), (0, 4, 7, [4, 5, 6, 7], "d"), (8, 8, 8, [8], "d")]
    empty = rounds.outs[1]["active"][0].batch
    assert (empty.records_count, empty.producer_id, empty.producer_epoch, empty.base_sequence) == (0, 300, 5, 0)
    assert (empty.last_offset_delta, empty.max_timestamp, empty.first_timestamp) == (1, RECENT, -1)
    assert empty.attributes == 0  # no codec, CreateTime, no horizon
    assert len(rounds.outs[1]["active"][0].raw) == 61  # the bare header


def test_last_batch_of_the_round_kept_empty(rounds):
    # 0..1 k1, k2 | 2..3 keyless, keyless | active 4: batch 2..3 loses both records but 3 + 1 = 4 is
    # the first uncleanable offset: kept as an empty batch so the log end offset survives
    assert rounds.shapes[1]["roundend"] == [(0, 0, 1, [0, 1], "d"), (0, 2, 3, [], "d"), (4, 4, 4, [4], "d")]
    assert rounds.outs[1]["roundend"][0].raw == rounds.inputs["roundend"][0][0]


def test_compressed_batches_rewritten_with_their_codec(rounds):
    # gzip 0..4 (a b c d e), lz4 5..9 (a f g h i) | zstd 10..14 (b k l m n), snappy 15..19 (c o p q r)
    # map: a->5, b->10, c->15: batch 0..4 keeps 3, 4 and is rewritten, still gzip; the others are copied
    outs = rounds.outs[1]["codec"]
    assert [(o.base, o.last, [r[0] for r in o.records]) for o in outs] == [
        (0, 4, [3, 4]), (5, 9, list(range(5, 10))), (10, 14, list(range(10, 15))), (15, 19, list(range(15, 20))),
        (20, 20, [20])]
    assert [o.batch.compression_type for o in outs[:4]] == [codecs.GZIP, codecs.LZ4, codecs.ZSTD, codecs.SNAPPY]
    assert outs[0].records == ((3, b"d", b"compressible value " * 8), (4, b"e", b"compressible value " * 8))
    inputs = rounds.inputs["codec"]
    assert [o.raw for o in outs[1:4]] == [inputs[0][1], inputs[10][0], inputs[10][1]]


def test_legacy_entries_kept_intact_and_tombstones_by_legacy_horizon(rounds):
    # checkpoint 4: clean segments are 0 and 2 (bases < 4); the last, 2, has mtime MTIME: legacy horizon
    # = MTIME - RET. Segment 0 (mtime MTIME - 2 RET <= horizon): its tombstones may go; 2 and 4 keep theirs.
    # map over [4, 6): l1->4, l5->5. 0 (l1) superseded; 1 (l2 tombstone, unmapped) removed by the horizon;
    # 2 (l3 tombstone) kept: segment 2 is too recent; 3, 4, 5 kept. Entries copied byte for byte.
    legacy_in = rounds.inputs["legacy"]
    assert rounds.shapes[1]["legacy"] == [(0, 2, 2, [2], "d"), (0, 3, 3, [3], "d"), (0, 4, 4, [4], "d"),
                                          (0, 5, 5, [5], "d"), (6, 6, 6, [6], "d")]
    assert (rounds.parts["legacy"].path / f"{0:020d}.log").read_bytes() == b"".join(legacy_in[2] + legacy_in[4])
    assert [o.batch.magic for o in rounds.outs[1]["legacy"]] == [1, 1, 1, 1, 2]
    assert rounds.outs[1]["legacy"][0].records == ((2, b"l3", None),)
    assert rounds.mtimes1["legacy"][0] == MTIME + 1000  # segment 4's


def test_exact_keys(rounds):
    assert hashlib.md5(MD5_A).digest() == hashlib.md5(MD5_B).digest() and MD5_A != MD5_B
    # 0 MD5_A, 1 MD5_B (same MD5, different keys): both kept. 2..1001 long keys L0..L999 sharing a
    # 200-byte prefix; 1002..1501 overwrite L0, L2, ..., L998: the odd ones stay at 2 + i.
    kept = [r[:2] for o in rounds.keys if o.kind == "d" for r in o.records]
    long_keys = [b"p" * 200 + b"%04d" % i for i in range(1000)]
    expected = [(0, MD5_A), (1, MD5_B)] + [(2 + i, long_keys[i]) for i in range(1, 1000, 2)]
    expected += [(1002 + j, long_keys[2 * j]) for j in range(500)] + [(1502, b"z")]
    assert kept == expected


def test_dirty_range_beyond_one_offset_map_cleaned_in_one_run(rounds):
    # 200,000 distinct keys, then keys 0, 100, ..., 199,900 written again at 200,000..201,999:
    # one run covers the whole dirty range: checkpoint 202,000 and only the 2,000 overwritten go
    overwritten = set(range(0, BIG_OVERWRITES * BIG_STEP, BIG_STEP))
    expected = [o for o in range(BIG_KEYS) if o not in overwritten] + list(
        range(BIG_KEYS, BIG_KEYS + BIG_OVERWRITES + 1)
    )
    assert rounds.big_offsets == expected
    assert rounds.checkpoints[1][("r-big", 0)] == BIG_KEYS + BIG_OVERWRITES


def test_first_dirty_mid_batch(rounds):
    # checkpoint 7 lies inside batch 5..9. 0..4: a d c b e | 5..9: h c i h j | 10..12: d k l | active 13.
    # map over [7, 13): i->7, h->8, j->9, d->10, k->11, l->12 (5 and 6 are below 7: they do not feed it).
    # 1 (d) and 5 (h) superseded; c at 2 AND at 6 stay: c is not in the map.
    assert data_offsets(rounds.parts["mid"].path) == [0, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13]


def test_segment_emptied_by_cleaning_stays_as_an_empty_segment(rounds):
    # 0..1 a b | 2..3 a b | active 4, segment.bytes = one segment: groups [0] and [2]. Group [0] loses
    # every record and its batch is not the round's last (2 != 4): Kafka's cleanSegments still swaps
    # in the (empty) cleaned segment 0, with segment 0's modification time
    part = rounds.parts["empty"].path
    assert rounds.shapes[1]["empty"] == [(2, 2, 3, [2, 3], "d"), (4, 4, 4, [4], "d")]
    assert (part / f"{0:020d}.log").stat().st_size == 0
    assert rounds.mtimes1["empty"] == {0: MTIME - 5000, 2: MTIME, 4: MTIME}


def test_verify_accepts_the_empty_segment_kafka_leaves(rounds):
    assert [p for p in rounds.verify[1] if "/r-empty-0/" in p.path] == []


def test_offset_gap_fast_forwarded(rounds):
    # 0..2 a b c | 10..11 a d (3..9 gone) | active 20: map a->10, latest fast-forwarded to 19
    assert rounds.shapes[1]["gap"] == [(0, 0, 2, [1, 2], "d"), (0, 10, 11, [10, 11], "d"), (20, 20, 20, [20], "d")]
    assert rounds.checkpoints[1][("r-gap", 0)] == 20


def test_multi_round_scenario(rounds):
    # R1 (NOW1): 0..4 k1=a k2=b k1=c k3=d k7=null | active 5..6. map k1->2 k2->1 k3->3 k7->4:
    # 0 goes; the tombstone at 4 stays and stamps the batch with NOW1 + RET
    assert rounds.shapes[1]["multi"] == [(0, 0, 4, [1, 2, 3, 4], "d"), (5, 5, 6, [5, 6], "d")]
    assert horizon(rounds.outs[1]["multi"][0]) == NOW1 + RET
    # roll: 7..8 k3=null k5=g. R2 (NOW2): dirty [5, 7), map k2->5 k4->6: 1 (k2) goes; 4's horizon
    # NOW1 + RET <= NOW2: the tombstone goes
    assert rounds.shapes[2]["multi"] == [(0, 0, 4, [2, 3], "d"), (0, 5, 6, [5, 6], "d"), (7, 7, 8, [7, 8], "d")]
    # roll: 9 k6=h. R3 (NOW3): dirty [7, 9), map k3->7 k5->8: 3 (k3) goes; the fresh tombstone 7 stays
    # and its batch is stamped NOW3 + RET
    assert rounds.shapes[3]["multi"] == [(0, 0, 4, [2], "d"), (0, 5, 6, [5, 6], "d"), (0, 7, 8, [7, 8], "d"),
                                         (9, 9, 9, [9], "d")]
    assert horizon(rounds.outs[3]["multi"][2]) == NOW3 + RET
    assert rounds.outs[3]["multi"][2].records[0] == (7, b"k3", None)


def test_replicas_with_the_same_name_cleaned_independently(rounds):
    # r1/rep-0: 0 a, 1 a, 2 b | active 3  -> 0 superseded; checkpoint 3 in r1's own file
    # r2/rep-0: 0 a, 1 b, 2 b | 3 a, 4 x | active 5 -> map a->3 b->2 x->4: 0, 1 go; checkpoint 5
    assert data_offsets(rounds.r1 / "rep-0") == [1, 2, 3]
    assert data_offsets(rounds.r2 / "rep-0") == [2, 3, 4, 5]
    assert cleaner_checkpoint(rounds.r1) == {("rep", 0): 3}
    assert cleaner_checkpoint(rounds.r2) == {("rep", 0): 5}


# -- segment.bytes bound, --plan and --dry-run: log dir P ---------------------------------------------------
@pytest.fixture(scope="module")
def planned_dir(spark, tmp_path_factory):
    """p-a-0 and p-b-0: 0 a, 1 a, 2 b | active 3 c (ratio 1.0 each); p-g-0: four 1-batch segments of
    size S with segment.bytes = 2S."""
    root = tmp_path_factory.mktemp("plan")
    p = root / "p"
    for name in ("p-a-0", "p-b-0"):
        Part(p / name, {0: [recs(0, [b"a", b"a", b"b"])], 3: [recs(3, [b"c"])]}).write()
    grp = {base: [recs(base, fixed_width(base))] for base in (0, 10, 20, 30)}
    Part(p / "p-g-0", grp).write()
    size = len(grp[0][0])
    plan = root / "plan.json"
    args = ["plan", str(p), "--now", str(NOW1), "--top", "2", "--output", str(plan), "--allow-unknown-topics",
            "--topic-config",
            f"p-g:internal.segment.bytes={2 * size}"] + [a for t in TOPIC_ARGS for a in ("--topic-config", t)]
    plan_code = main(args)
    before = tree(p)
    dry_report = root / "dry.json"
    dry_code = main(["compact", str(p), "--plan", str(plan), "--dry-run", "--now", str(NOW1),
                     "--report", str(dry_report)])
    after_dry = tree(p)
    code = main(["compact", str(p), "--plan", str(plan), "--now", str(NOW1)])
    return SimpleNamespace(p=p, plan=json.loads(plan.read_text()), plan_code=plan_code, dry_code=dry_code,
                           before=before, after_dry=after_dry, dry=json.loads(dry_report.read_text()), code=code,
                           grp=grp, size=size, verify=verify_log_dir(str(p)))


def test_dry_run_writes_nothing_and_reports(planned_dir):
    assert planned_dir.plan_code == 0 and planned_dir.dry_code == 0
    assert planned_dir.after_dry == planned_dir.before  # every byte and mtime
    dry = planned_dir.dry
    assert dry["dry_run"] is True
    by_topic = {p["topic"]: p for p in dry["partitions"]}
    # --top 2: all three have ratio 1.0 (no checkpoint); ties go by cleanable bytes, then name: p-g
    # (3S) first, then p-a; p-b is over budget
    assert set(by_topic) == {"p-g", "p-a"}
    assert not any(p["committed"] for p in dry["partitions"])
    assert (by_topic["p-a"]["records_read"], by_topic["p-a"]["records_kept"]) == (3, 2)
    assert by_topic["p-a"]["removed"]["superseded"] == 1


def test_plan_file_is_honoured(planned_dir):
    assert planned_dir.code == 0 and planned_dir.verify == []
    selected = {r["topic"] for r in planned_dir.plan if r["selected"]}
    assert selected == {"p-a", "p-g"}
    p = planned_dir.p
    assert data_offsets(p / "p-a-0") == [1, 2, 3]
    assert cleaner_checkpoint(p) == {("p-a", 0): 3, ("p-g", 0): 30}
    # p-b was not selected by the plan: untouched although it is as dirty as p-a
    assert {k: v for k, v in tree(p).items() if k.startswith("p-b-0/")} == \
        {k: v for k, v in planned_dir.before.items() if k.startswith("p-b-0/")}


def test_grouping_respects_segment_bytes(planned_dir):
    # p-g: segments 0, 10, 20 of S bytes each, segment.bytes = 2S: S + S = 2S fits -> [0, 10];
    # + S = 3S > 2S -> [20] alone. Nothing removed: every batch copied byte for byte.
    p = planned_dir.p / "p-g-0"
    assert sorted(int(f.stem) for f in p.glob("*.log")) == [0, 20, 30]
    g = planned_dir.grp
    assert (p / f"{0:020d}.log").read_bytes() == g[0][0] + g[10][0]
    assert (p / f"{20:020d}.log").read_bytes() == g[20][0]
