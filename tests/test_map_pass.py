"""compaction.map_pass: the offset map's distributed form against a brute force over the same facts.

A fact is (group, key, feeds, waits): the largest offset of a record of ``key`` in ``group`` that
feeds the map, the smallest of one whose fate waits on the map. The map's offset of a key is the
largest feeding offset in its partition; a group must receive exactly the keys whose map offset
supersedes one of its waiting records, with that offset, however the facts are split into blobs
and buckets."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction import map_pass
from compaction.offset_map import KeyTable

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


def as_dict(e) -> dict:
    return {(int(e.tags[i]), bytes(e.keys[e.offsets[i]:e.offsets[i + 1]])): (int(e.high[i]), int(e.low[i]))
            for i in range(len(e))}


@settings(max_examples=150, deadline=None)
@given(st.lists(facts, min_size=1, max_size=4), st.integers(1, 4))
def test_groups_receive_the_keys_that_supersede_their_records(pieces, buckets):
    partition_of = np.array([0, 0, 0, 1, 1, 2], np.int64)  # groups 0-2: partition 0; 3-4: 1; 5: 2
    blobs = [map_pass.unpack(map_pass.pack(part)) for piece in pieces for e in [table_of(piece)]
             for _, part in map_pass.split_by(e, map_pass.bucket_of(e, partition_of, buckets), buckets)]
    got = {}
    for bucket in range(buckets):
        mine = [b for b in blobs if len(b) and (map_pass.bucket_of(b, partition_of, buckets) == bucket).all()]
        got |= {k: high for k, (high, _) in as_dict(map_pass.reduce_bucket(mine, partition_of)).items()}
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
@given(facts)
def test_a_blob_unpacks_to_what_was_packed(rows):
    e = table_of(rows)
    assert as_dict(map_pass.unpack(map_pass.pack(e))) == as_dict(e)


def test_large_sets_travel_in_blobs_of_bounded_size():
    n = 200_000
    rows = [(i % 3, b"key-%08d" % i, i, map_pass.NO_WAIT) for i in range(n)]
    e = table_of(rows)
    parts = list(map_pass.split_by(e, np.zeros(len(e), np.int64), 1))
    assert len(parts) > 1 and all(len(map_pass.pack(p)) <= 2 * map_pass.BLOB_BYTES for _, p in parts)
    assert sum(len(p) for _, p in parts) == n
