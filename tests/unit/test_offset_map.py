"""compaction.cleaning.offset_map.KeyTable against a Python dict: exact (tag, key) -> largest offset."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.compaction.cleaning.offset_map import EMPTY, KeyTable, record_hashes


def laid_out(keys: list[bytes | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The keys end to end in one buffer: (buffer, positions (-1: no key), lengths)."""
    buf, pos, lengths = bytearray(), [], []
    for key in keys:
        pos.append(-1 if key is None else len(buf))
        lengths.append(0 if key is None else len(key))
        buf += key or b""
    return np.frombuffer(bytes(buf) or b"\0", np.uint8), np.array(pos, np.int64), np.array(lengths, np.int64)


keys = st.one_of(st.none(), st.binary(max_size=12), st.sampled_from([b"", b"a", b"ab", b"\0", b"\0\0"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(keys, st.integers(0, 3), st.integers(-5, 10**12)), max_size=300), min_size=1,
                max_size=4),
       st.lists(st.tuples(keys, st.integers(0, 3)), max_size=100))
def test_upserts_keep_the_largest_offset_of_each_exact_key(calls, probes):
    table, truth = KeyTable(entries=2, arena=4), {}
    for call in calls:
        buf, pos, lengths = laid_out([k for k, _, _ in call])
        tags = np.array([t for _, t, _ in call], np.int64)
        offsets = np.array([o for _, _, o in call], np.int64)
        table.upsert(buf, pos, lengths, tags, offsets, -offsets)
        for key, tag, offset in call:
            if key is not None:
                truth[tag, key] = max(truth.get((tag, key), offset), offset)
    assert len(table) == len(truth)
    e = table.entries()
    exported = {(int(e.tags[i]), bytes(e.keys[e.offsets[i]:e.offsets[i + 1]])): (int(e.high[i]), int(e.low[i]))
                for i in range(len(e))}
    assert exported == {k: (v, -v) for k, v in truth.items()}
    asked = [k for k, _ in probes] + [k for _, k in truth]
    tags = [t for _, t in probes] + [t for t, _ in truth]
    buf, pos, lengths = laid_out(asked)
    got = table.lookup(buf, pos, lengths, np.array(tags, np.int64))
    assert got.tolist() == [EMPTY if k is None else truth.get((t, k), EMPTY) for k, t in zip(asked, tags, strict=True)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(keys, st.integers(0, 3), st.integers(0, 10**6)), max_size=200), st.integers(0, 9))
def test_fill_takes_keys_until_the_table_is_full(call, capacity):
    """``fill`` never grows a table: it stops at the first key a full one cannot take, and a fresh
    table goes on from there; each table holds the largest offset of each key it took."""
    buf, pos, lengths = laid_out([k for k, _, _ in call])
    tags = np.array([t for _, t, _ in call], np.int64)
    offsets = np.array([o for _, _, o in call], np.int64)
    done = 0
    while True:
        table = KeyTable.for_keys(capacity)
        rows = len(table.rows)
        stop = table.fill(buf, pos, lengths, tags, offsets, None, done)
        assert stop > done or not call
        assert len(table.rows) == rows and (stop == len(call) or len(table) == rows)
        truth = {}
        for key, tag, offset in call[done:stop]:
            if key is not None:
                truth[tag, key] = max(truth.get((tag, key), offset), offset)
        e = table.entries()
        assert {(int(e.tags[i]), bytes(e.keys[e.offsets[i]:e.offsets[i + 1]])): int(e.high[i])
                for i in range(len(e))} == truth
        if stop == len(call):
            break
        done = stop


def test_fill_grows_an_empty_table_for_a_key_larger_than_its_arena():
    table = KeyTable(entries=1, arena=2)
    buf, pos, lengths = laid_out([b"larger"])
    assert table.fill(buf, pos, lengths, np.zeros(1, np.int64), np.array([7], np.int64)) == 1
    assert table.lookup(buf, pos, lengths, np.zeros(1, np.int64)).tolist() == [7]


def test_a_million_keys():
    n = 1_000_000
    data = b"".join(b"key-%09d" % i for i in range(n))  # 13 bytes each
    buf = np.frombuffer(data, np.uint8)
    pos = np.arange(n, dtype=np.int64) * 13
    lengths = np.full(n, 13, np.int64)
    tags = np.zeros(n, np.int64)
    table = KeyTable()
    table.upsert(buf, pos, lengths, tags, np.arange(n, dtype=np.int64))
    table.upsert(buf, pos[::2], lengths[::2], tags[::2], np.full(n // 2, 2 * n, np.int64))
    assert len(table) == n
    got = table.lookup(buf, pos, lengths, tags)
    expected = np.arange(n, dtype=np.int64)
    expected[::2] = 2 * n
    assert (got == expected).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(keys, st.booleans(), st.booleans()), max_size=200), st.integers(1, 5),
       st.sampled_from([1, 2, 4]))
def test_backward_gives_each_waiting_record_the_largest_feeding_offset_after_it(records, pieces, shards):
    """Records at offsets 0, 1, ...: each (key, feeds, waits). Read as chunks from the last one
    back, every waiting record must get the largest offset of a feeding record of its key after
    it, exactly as a map built first over every record and read afterwards would say for the
    records it supersedes."""
    tables = [KeyTable(entries=2, arena=2) for _ in range(shards)]
    got = [EMPTY] * len(records)
    bounds = [len(records) * k // pieces for k in range(pieces + 1)]
    for lo, hi in reversed(list(zip(bounds, bounds[1:]))):
        chunk = records[lo:hi]
        buf, pos, lengths = laid_out([k for k, _, _ in chunk])
        which = np.zeros(len(chunk), np.int64)
        hashes = record_hashes((buf, buf), which, pos, lengths, 7)
        mapped = np.full(len(chunk), EMPTY, np.int64)
        for shard, table in enumerate(tables):  # each shard's table sets the offsets of its own keys
            table.backward((buf, buf), which, pos, lengths, hashes, 7, np.arange(lo, hi, dtype=np.int64),
                           np.array([f for _, f, _ in chunk], bool), np.array([w for _, _, w in chunk], bool), mapped,
                           shard, len(tables))
        got[lo:hi] = mapped.tolist()
    expected = []
    for i, (key, _, waits) in enumerate(records):
        later = [j for j in range(i + 1, len(records)) if records[j][1] and records[j][0] == key]
        expected.append(max(later) if key is not None and waits and later else EMPTY)
    assert got == expected
