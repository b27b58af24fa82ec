"""Rules the product holds in two forms, held together by property tests on random logs.

The cleaner decides a chunk's records and batches with vectorised or compiled code; the same rules
also exist one record or one batch at a time (in the reference model of Kafka's cleaner, in the
test oracles of ``tests/oracles.py``, or in the product itself where it still needs them). Each
test below draws logs (kafka-python v2 batches of every codec, with and without producers, delete
horizons and LogAppendTime; hand-built transaction markers; emptied headers; magic 0/1 messages
and compressed wrappers) and says the two forms agree:

- ``fate_codes`` (every record of a chunk at once) and Kafka's shouldRetainRecord record by record
  (``tests.reference.cleaner.LogFilter.should_retain_record``, and the oracle ``keep_record``);
- ``compaction.cleaning.rewrite._outcomes`` (v2 batches at once) and ``compaction.rules.decisions.batch_outcome``
  (one batch; the product runs it on legacy entries);
- the rewrite's rendering of a chunk (``_outcomes``, one compiled splice of every rebuilt batch,
  compiled compression and framing) and the same batches one at a time (``batch_outcome``, then
  ``writers.cleaned.output_bytes``: ``writers.rebuild.rebuild`` / ``empty``);
- ``compaction.cleaning.partition_scan``'s batch table (columns from the chunk's header matrix) and
  ``BatchInfo.of`` per batch; ``BatchInfo._of_v2`` and the same values through ``Batch``'s properties.
"""

from __future__ import annotations

import io
import struct

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcompact.compaction.cleaning import partition_scan
from kcompact.compaction.cleaning.offset_map import EMPTY as NOT_MAPPED
from kcompact.compaction.cleaning.results import KEPT_TOMBSTONE
from kcompact.compaction.cleaning.rewrite import (
    COPY,
    DROP,
    EMPTY_HEADER,
    REBUILD,
    GroupJob,
    Records,
    Rewriter,
    _outcomes,
    fate_codes,
    undecided,
)
from kcompact.compaction.rules.decisions import (
    DELETE,
    DISCARD,
    MARKER_FOR_EMPTY_TXN,
    PLAN_FLAGS,
    RETAIN_DELETES,
    RETAIN_EMPTY,
    BatchPlan,
    batch_outcome,
    plan_partition,
)
from kcompact.compaction.rules.model import BatchInfo, SegmentInfo, table_of
from kcompact.readers import codecs, walk
from kcompact.readers.batch import ATTR_DELETE_HORIZON, Batch
from kcompact.readers.records import ABORT, COMMIT, Record
from kcompact.writers import cleaned
from kcompact.writers.chunks import BufferSizes
from tests.oracles import encode_like, keep_record
from tests.reference.cleaner import CleanedTransactionMetadata, LogFilter, OffsetMap
from tests.support import V2_HEADER, hand_control_batch, kp_build, read_batches, read_one, recompute_crc32c
from tests.unit.test_legacy import legacy_message_set

NOW = 1_720_000_000_000
DAY = 86_400_000
RET = 600_000  # delete.retention.ms
PAD = b"0123456789abcdef" * 4  # compressible: kafka-python keeps the codec more often
KEYS = [b"k0", b"k1", b"k2", b""]
V2_CODECS = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]
LEGACY_CODECS = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4]
PRODUCERS = [{}, dict(producer_id=7, producer_epoch=1, base_sequence=0),
             dict(producer_id=8, producer_epoch=0, base_sequence=5, transactional=True)]
TWINS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- random logs ---------------------------------------------------------------------------------
def stamped(data: bytes, horizon: int | None) -> bytes:
    """A v2 batch given a delete horizon (attribute bit 6, the base timestamp holding it)."""
    if horizon is None:
        return data
    buf = bytearray(data)
    fields = list(V2_HEADER.unpack_from(buf))
    fields[5] |= ATTR_DELETE_HORIZON
    fields[7] = horizon
    V2_HEADER.pack_into(buf, 0, *fields)
    return bytes(recompute_crc32c(buf))


def horizons():
    return st.none() | st.integers(NOW - 2, NOW + 2)


def values():
    return st.none() | st.binary(max_size=6).map(lambda b: b + PAD)


@st.composite
def logs(draw) -> bytes:
    """A segment's bytes: a few entries of every kind, offsets increasing (with gaps)."""
    offset = draw(st.integers(0, 1000))
    entries = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["v2", "v2", "v2", "marker", "emptied", "legacy"]))
        if kind == "marker":
            entries.append(stamped(hand_control_batch(
                draw(st.sampled_from([COMMIT, ABORT])), offset=offset, timestamp=NOW - 5,
                producer_id=draw(st.integers(0, 2)), producer_epoch=0, coordinator_epoch=1), draw(horizons())))
            offset += 1
            continue
        records = []
        for _ in range(draw(st.integers(1, 5))):
            records.append(Record(offset, NOW + draw(st.integers(-DAY, DAY)), draw(st.none() | st.sampled_from(KEYS)),
                                  draw(values())))
            offset += draw(st.integers(1, 3))
        if kind == "legacy":
            magic = draw(st.sampled_from([0, 1]))
            if magic == 0:
                records = [Record(r.offset, -1, r.key, r.value) for r in records]
            entries.append(legacy_message_set(magic, draw(st.sampled_from(LEGACY_CODECS)), records))
            continue
        data = kp_build(records, codec=draw(st.sampled_from(V2_CODECS)), base_offset=records[0].offset,
                        leader_epoch=draw(st.integers(0, 3)), require_codec=False,
                        log_append_time=draw(st.none() | st.just(NOW - 1)), **draw(st.sampled_from(PRODUCERS)))
        if kind == "emptied":  # an earlier cleaning left the header alone (Kafka's has no horizon)
            entries.append(encode_like(read_one(data), []))
        else:
            entries.append(stamped(data, draw(horizons())))
    return b"".join(entries)


def chunk_of(data: bytes) -> walk.Chunk:
    (chunk,) = walk.read_chunks(io.BytesIO(data), "mem.log")
    return chunk


# -- the decisions a chunk's records are decided under ------------------------------------------
@st.composite
def cleanings(draw):
    """A log, and what the per-record rule is told of it: the offset map (its latest offset, the
    offset of some keys), ``now``, the segment's modification time (legacy tombstones stay while it
    is after the legacy horizon, 0 here: nothing is clean before the segment) and which batches'
    records are discarded (aborted data, markers past their horizon)."""
    data = draw(logs())
    chunk = chunk_of(data)
    n = len(chunk.entries)
    end = int((chunk.entries[:, walk.BASE_OFFSET] + chunk.entries[:, walk.LAST_OFFSET_DELTA]).max()) + 1
    first = int(chunk.entries[0, walk.BASE_OFFSET])
    offsets: dict[bytes, list[int]] = {}  # where each key occurs (the map holds one of them, mostly its last)
    for batch in read_batches(data):
        for r in [] if batch.is_control else batch.records():
            if r.key is not None:
                offsets.setdefault(r.key, []).append(r.offset)
    mapped = {k: draw(st.sampled_from(offsets.get(k, [first]) + offsets.get(k, [first])[-1:] * 2)
                      | st.integers(first - 1, end + 1))
              for k in KEYS if draw(st.booleans())}
    return dict(data=data, latest=draw(st.integers(first - 1, end)), mapped=mapped, now=NOW + draw(st.integers(-1, 1)),
                mtime=draw(st.sampled_from([0, NOW - DAY])),
                discard=np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool))


def planned_flags(chunk: walk.Chunk, now: int, mtime: int, discard: np.ndarray) -> np.ndarray:
    """The batch plan flags of the chunk's batches, as ``plan_partition`` makes them for a log of this
    one segment (then an empty active one) cleaned whole; the drawn discard decisions instead of
    the transactions' (the batch level is not what is tested here)."""
    infos = [BatchInfo.of(chunk.batch(k), 0) for k in range(len(chunk.entries))]
    end = max(b.last_offset for b in infos) + 1
    segments = [SegmentInfo(0, len(chunk.buf), mtime), SegmentInfo(end, 0, mtime)]
    plan = plan_partition(segments, table_of(infos), log_start=0, first_dirty=0, first_uncleanable=end, now=now,
                          delete_retention_ms=RET, segment_bytes=1 << 30, segment_index_bytes=1 << 20,
                          producer_expiration_ms=DAY, retain_last_empty_at=end)
    flags = plan.flags.copy()
    assert (plan.group == 0).all()
    flags[:, DISCARD] = discard
    flags[:, DELETE] = discard & ~flags[:, RETAIN_EMPTY]
    return flags


def reference_filter(case: dict) -> LogFilter:
    """The reference cleaner's filter over the same map and clock; legacy tombstones retained as
    ``Cleaner.clean`` decides with no segment before the first dirty offset (legacy horizon 0)."""
    return LogFilter(OffsetMap(dict(case["mapped"]), case["latest"]), case["mtime"] > 0, RET,
                     CleanedTransactionMetadata(), {}, 0, case["now"])


def looked_up(chunk: walk.Chunk, records: Records, waits: np.ndarray, mapped: dict[bytes, int]) -> np.ndarray:
    """The map's offset of each waiting record's key (NOT_MAPPED for the others), as
    ``compaction.cleaning.rewrite.Lookup`` gives it, from the records' key columns."""
    bufs = records.bufs(chunk)
    out = np.full(len(records.offset), NOT_MAPPED, np.int64)
    for i in np.flatnonzero(waits).tolist():
        pos, length = int(records.key_pos[i]), int(records.key_len[i])
        out[i] = mapped.get(bytes(bufs[records.which[i]][pos:pos + length]), NOT_MAPPED)
    return out


# -- fate_codes and shouldRetainRecord -----------------------------------------------------------
@TWINS
@given(cleanings())
def test_fate_codes_agree_with_should_retain_record(case):
    """Every record's fate from ``fate_codes`` (one expression over the chunk, its inputs made as
    the rewrite makes them) against the reference cleaner's shouldRetainRecord and the oracle
    ``keep_record``, record by record; a kept tombstone coded apart (it needs a delete horizon)."""
    chunk = chunk_of(case["data"])
    n = len(chunk.entries)
    flags = planned_flags(chunk, case["now"], case["mtime"], case["discard"])
    records = Records.of(chunk, np.arange(n))
    has_key = records.key_pos >= 0
    discard = flags[records.entry, DISCARD]
    waits = undecided(discard, records.control, records.offset, case["latest"], has_key)
    mapped = looked_up(chunk, records, waits, case["mapped"])
    codes = fate_codes(discard, flags[records.entry, RETAIN_DELETES], records.control, records.offset, has_key,
                       records.tombstone, case["latest"], mapped)

    reference = reference_filter(case)
    expected, oracle, tombstones = [], [], []
    for k, batch in enumerate(read_batches(case["data"])):  # as the reference reads a segment
        reference.discard_batch_records = bool(case["discard"][k])
        plan = BatchPlan(BatchInfo.of(batch, 0), 0, *map(bool, flags[k]))
        for r in batch.records():
            expected.append(reference.should_retain_record(batch, r))
            oracle.append(keep_record(plan, case["latest"], r.offset, r.key is not None, r.value is None,
                                      None if r.key is None else case["mapped"].get(r.key)))
            tombstones.append(r.value is None)
    kept = codes <= KEPT_TOMBSTONE
    assert kept.tolist() == expected
    assert kept.tolist() == oracle
    assert (codes == KEPT_TOMBSTONE).tolist() == [k and t for k, t in zip(expected, tombstones, strict=True)]


# -- _outcomes and batch_outcome -----------------------------------------------------------------
@st.composite
def v2_batch_facts(draw):
    """What filterTo's batch rule sees of a v2 batch: its record count and delete horizon, how many
    records stay and whether a tombstone is among them, and its batch plan flags."""
    count = draw(st.integers(0, 5))
    flags = draw(st.lists(st.booleans(), min_size=len(PLAN_FLAGS), max_size=len(PLAN_FLAGS)))
    control = draw(st.booleans())
    flags[MARKER_FOR_EMPTY_TXN] &= control
    flags[DELETE] = flags[DISCARD] and not flags[RETAIN_EMPTY]
    kept = 0 if flags[DISCARD] else draw(st.integers(0, count))  # a discarded batch's records all go
    return dict(count=count, kept=kept, kept_tombstone=kept > 0 and draw(st.booleans()), control=control,
                horizon=draw(st.none() | st.integers(NOW - 2, NOW + 2)), flags=flags)


@TWINS
@given(st.lists(v2_batch_facts(), min_size=1, max_size=20))
def test_outcomes_agree_with_batch_outcome(facts):
    """``_outcomes`` over many v2 batches at once against ``batch_outcome`` one batch at a time:
    drop / copy / rebuild (with a horizon stamped or not) / empty header."""
    what, stamp = _outcomes(np.array([f["count"] for f in facts], np.int64),
                            np.array([f["kept"] for f in facts], np.int64),
                            np.array([f["kept_tombstone"] for f in facts], bool),
                            np.array([f["horizon"] is not None for f in facts], bool),
                            np.array([f["flags"] for f in facts], bool).reshape(len(facts), len(PLAN_FLAGS)))
    kinds = {DROP: cleaned.DROP, COPY: cleaned.COPY, REBUILD: cleaned.REWRITE, EMPTY_HEADER: cleaned.EMPTY}
    for f, w, s in zip(facts, what.tolist(), stamp.tolist(), strict=True):
        info = BatchInfo(0, 0, 61, 2, 10, 10 + max(f["count"], 1) - 1, 1, 0, f["control"], f["control"],
                         COMMIT if f["control"] and f["count"] else None, f["horizon"], NOW, f["count"])
        outcome = batch_outcome(BatchPlan(info, 0, *f["flags"]), f["kept"], f["kept_tombstone"], NOW, RET)
        assert (kinds[w], NOW + RET if s else None) == (outcome.kind, outcome.delete_horizon_ms), f


# -- the rewrite's rendering and rebuild, batch by batch ------------------------------------------
def group_job(case: dict, legacy_to_v2: bool = False) -> GroupJob:
    return GroupJob(path="mem", group=0, base_offset=0, segments=(0,), mtime_ms=case["mtime"], aborted=(),
                    index_interval_bytes=4096, max_index_bytes=1 << 20, buffers=BufferSizes(1 << 20, 1 << 20, 1 << 20),
                    delete_retention_ms=RET, now=case["now"], latest_offset=case["latest"], first_dirty=0,
                    legacy_to_v2=legacy_to_v2)


@TWINS
@given(cleanings(), st.booleans())
def test_rendered_chunk_agrees_with_rebuild_batch_by_batch(case, legacy_to_v2):
    """A chunk as the rewrite renders it (fates, ``_outcomes``, one compiled splice, compiled
    compression, one framing call) against each batch made alone: the reference cleaner's
    shouldRetainRecord for its records, ``batch_outcome``, then ``writers.cleaned.output_bytes``
    (``writers.rebuild.rebuild`` or ``empty`` for a v2 batch; a legacy entry kept as it is, or
    converted to v2 with ``legacy_to_v2``): the same bytes, batch for batch."""
    chunk = chunk_of(case["data"])
    flags = planned_flags(chunk, case["now"], case["mtime"], case["discard"])
    reference = reference_filter(case)
    expected, refused = [], False
    for k, batch in enumerate(read_batches(case["data"])):  # as the reference reads a segment
        if flags[k, DELETE]:
            expected.append((None, 0))
            continue
        reference.discard_batch_records = bool(case["discard"][k])
        records = batch.records()
        keep = np.array([reference.should_retain_record(batch, r) for r in records], bool)
        kept = int(keep.sum())
        kept_tombstone = any(r.value is None for r, kept_r in zip(records, keep) if kept_r)
        plan = BatchPlan(BatchInfo.of(batch, 0), 0, *map(bool, flags[k]))
        outcome = batch_outcome(plan, kept, kept_tombstone, case["now"], RET, kept > 0 and batch.inner_magic_differs,
                                legacy_to_v2)
        try:
            out = cleaned.output_bytes(batch, outcome, keep, legacy_to_v2)
        except ValueError:  # a legacy entry that must be kept empty: Kafka's cleaner fails on it
            refused = True
            break
        made = None if out is None else Batch("mem.log", out, 0, len(out), 0)
        expected.append((out, 0 if made is None else cleaned.records_written(batch, outcome, keep, made)))

    rewriter = Rewriter(group_job(case, legacy_to_v2), None, render=True)
    decoded = rewriter._decode(chunk, flags)
    mapped = looked_up(chunk, decoded.records, decoded.waits, case["mapped"])
    try:
        out, _ = rewriter._finish(decoded, mapped)
    except ValueError:
        assert refused
        return
    assert not refused
    got = [(None if at < 0 else bytes(out.data[at:at + size]), records if at >= 0 else 0)
           for at, size, records in zip(out.at.tolist(), out.size.tolist(), out.records.tolist(), strict=True)]
    assert got == expected


# -- the batch table and BatchInfo ---------------------------------------------------------------
@TWINS
@given(logs())
def test_batch_table_agrees_with_batch_info(data):
    """``partition_scan``'s batch table of a chunk (columns from the header matrix, legacy entries
    and markers through ``BatchInfo.of``) against ``BatchInfo.of`` batch by batch; for v2 batches,
    ``_of_v2`` (raw header fields) against the same values through ``Batch``'s properties."""
    chunk = chunk_of(data)
    base = int(struct.unpack_from(">q", data)[0])
    infos = [BatchInfo.of(chunk.batch(k), base) for k in range(len(chunk.entries))]
    assert partition_scan._table(chunk, base).tolist() == table_of(infos).tolist()
    for k in range(len(chunk.entries)):
        batch = chunk.batch(k)
        if batch.magic == 2:
            assert BatchInfo._of_v2(batch, base) == BatchInfo._of_properties(batch, base)
