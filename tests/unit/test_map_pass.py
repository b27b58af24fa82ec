"""compaction.cleaning.map_pass: the offset map's distributed form against a brute force over the same facts.

A fact is (group, key, feeds, waits): the largest offset of a record of ``key`` in ``group`` that
feeds the map, the smallest of one whose fate waits on the map. The map's offset of a key is the
largest feeding offset in its partition; a group must receive exactly the keys whose map offset
supersedes one of its waiting records, with that offset, however the facts are split into blobs
and buckets."""

from __future__ import annotations

import functools
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.compaction.cleaning import map_pass
from kcompact.compaction.cleaning.offset_map import KeyTable
from kcompact.readers import walk
from tests.support import kp_batches, make_batches

facts = st.lists(st.tuples(st.integers(0, 5), st.sampled_from([b"a", b"b", b"", b"key-1", b"key-22"]),
                           st.one_of(st.just(map_pass.NO_OFFSET), st.integers(0, 100)),
                           st.one_of(st.just(map_pass.NO_WAIT), st.integers(0, 100))), max_size=60)


def table_of(rows: list[tuple[int, bytes, int, int]]):
    table = KeyTable(entries=2, arena=2)
    buf = np.frombuffer(b"".join(k for _, k, _, _ in rows) or b"\0", np.uint8)
    lengths = np.array([len(k) for _, k, _, _ in rows], np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64) if rows else np.empty(0, np.int64)
    table.upsert(buf, starts, lengths, np.array([g for g, _, _, _ in rows], np.int64),
                 np.array([f for _, _, f, _ in rows], np.int64), np.array([w for _, _, _, w in rows], np.int64))
    return table.entries()


def blobs_of(e, target: np.ndarray) -> list[tuple[int, object]]:
    """(target, entries) of each blob ``map_pass.packed`` makes, unpacked again."""
    return [(t, map_pass.unpack(blob)) for t, blob in map_pass.packed(e, target)]


def as_dict(e) -> dict:
    return {(int(e.tags[i]), bytes(e.keys[e.offsets[i]:e.offsets[i + 1]])): (int(e.high[i]), int(e.low[i]))
            for i in range(len(e))}


@settings(max_examples=150, deadline=None)
@given(st.lists(facts, min_size=1, max_size=4), st.integers(1, 4), st.booleans())
def test_groups_receive_the_keys_that_supersede_their_records(pieces, buckets, weak_hash):
    """``weak_hash``: the reducers sort by a hash that puts many keys together (by length alone),
    so the collisions an exact map must tell apart are everywhere."""
    partition_of = np.array([0, 0, 0, 1, 1, 2], np.int64)  # groups 0-2: partition 0; 3-4: 1; 5: 2
    blobs = [blob for piece in pieces for e in [table_of(piece)]
             for _, blob in blobs_of(e, map_pass.bucket_of(e, partition_of, buckets))]
    got = {}
    for bucket in range(buckets):
        mine = [b for b in blobs if len(b) and (map_pass.bucket_of(b, partition_of, buckets) == bucket).all()]
        if mine:
            weak = (lambda keys, offsets, tags: np.diff(offsets) % 3) if weak_hash else map_pass.key_hashes
            with mock.patch.object(map_pass, "key_hashes", weak):
                got |= {k: high for k, (high, _) in
                        as_dict(map_pass.reduce_bucket(map_pass.concat(mine), partition_of)).items()}
    every = [f for piece in pieces for f in piece]
    mapped = {}
    for group, key, feeds, _ in every:
        p = int(partition_of[group])
        mapped[p, key] = max(mapped.get((p, key), map_pass.NO_OFFSET), feeds)
    waits = {}
    for group, key, _, wait in every:
        waits[group, key] = min(waits.get((group, key), map_pass.NO_WAIT), wait)
    expected = {(g, k): mapped[int(partition_of[g]), k] for (g, k), w in waits.items()
                if w < mapped[int(partition_of[g]), k]}
    assert got == expected


@settings(max_examples=50, deadline=None)
@given(facts, st.integers(1, 4), st.randoms(use_true_random=False))
def test_blobs_unpack_to_the_entries_of_their_target(rows, targets, rnd):
    e = table_of(rows)
    target = np.array([rnd.randrange(targets) for _ in range(len(e))], np.int64)
    blobs = blobs_of(e, target)
    for t in range(targets):
        mine = [b for bt, b in blobs if bt == t]
        expected = [(int(e.tags[i]), bytes(e.keys[e.offsets[i]:e.offsets[i + 1]]), int(e.high[i]), int(e.low[i]))
                    for i in np.flatnonzero(target == t)]
        assert [(int(b.tags[i]), bytes(b.keys[b.offsets[i]:b.offsets[i + 1]]), int(b.high[i]), int(b.low[i]))
                for b in mine for i in range(len(b))] == expected
        assert all(len(b) for b in mine) and all(b.high.flags.aligned and b.offsets.flags.aligned for b in mine)


def test_large_sets_travel_in_blobs_of_bounded_size():
    n = 200_000
    rows = [(i % 3, b"key-%08d" % i, i, map_pass.NO_WAIT) for i in range(n)]
    e = table_of(rows)
    sizes = [len(blob) for _, blob in map_pass.packed(e, np.zeros(len(e), np.int64))]
    assert len(sizes) > 1 and max(sizes) <= map_pass.BLOB_BYTES
    assert sum(len(b) for _, b in blobs_of(e, np.zeros(len(e), np.int64))) == n


@pytest.mark.parametrize("table_bytes", [map_pass.TABLE_BYTES, 1])
def test_read_keys_against_kafka_python(tmp_path, monkeypatch, table_bytes):
    """A map task's facts of a byte range, per key: the largest offset feeding the map (from the
    first dirty offset on) and the smallest waiting on it (up to the map's latest offset), as
    kafka-python decodes the records; the same whether the table ships once or after every chunk."""
    monkeypatch.setattr(walk, "read_chunks", functools.partial(walk.read_chunks, chunk_size=4096))  # many chunks
    batches = make_batches(0, 40, per_batch=5, codecs=(0, 2, 3, 4))  # offsets 0..199, keys key-0..key-6
    data = b"".join(batches)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    positions = np.cumsum([0] + [len(b) for b in batches[:-1]]).astype(np.int64)
    start, end = int(positions[3]), int(positions[30])  # batches 3..29: offsets 15..149
    plans = map_pass.Planned(positions, np.ones(40, bool), np.zeros(40, bool), np.zeros(40, np.int64),
                             np.full(40, 5, np.int64))
    first_dirty, latest = 20, 120
    pieces = list(map_pass.read_keys(str(path), start, end, plans, first_dirty, latest, lambda e: e, table_bytes))
    got: dict[bytes, tuple[int, int]] = {}
    for e in pieces:
        for (_, key), (high, low) in as_dict(e).items():
            h, w = got.get(key, (map_pass.NO_OFFSET, map_pass.NO_WAIT))
            got[key] = (max(h, high), min(w, low))
    expected: dict[bytes, tuple[int, int]] = {}
    for batch in kp_batches(data)[3:30]:
        for r in batch:
            h, w = expected.get(r.key, (map_pass.NO_OFFSET, map_pass.NO_WAIT))
            expected[r.key] = (max(h, r.offset) if r.offset >= first_dirty else h,
                               min(w, r.offset) if r.offset <= latest else w)
    assert got == expected
    assert (len(pieces) > 1) == (table_bytes == 1)
