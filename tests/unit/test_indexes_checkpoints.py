"""Index files and checkpoint files from hand-built bytes (struct.pack, literal text)."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact import storage
from kcompact.errors import FormatError
from kcompact.readers import checkpoint
from kcompact.readers.indexes import (
    OFFSET_ENTRY,
    AbortedTxn,
    OffsetEntry,
    TimeEntry,
    parse_offset_index,
    parse_time_index,
    parse_txn_index,
    used_entries,
)
from kcompact.writers.checkpoint import render_checkpoint
from kcompact.writers.indexes import encode_offset_index, encode_time_index, encode_txn_index
from tests.support import patch_storage

OFFSETS = [(17, 4102), (35, 8230), (61, 12400)]
TIMES = [(1_720_000_000_500, 17), (1_720_000_001_000, 35), (1_720_000_002_750, 64)]
TXNS = [(4242, 100, 130, 90), (4243, 120, 131, 131)]


def offset_bytes(rows) -> bytes:
    return b"".join(struct.pack(">ii", *row) for row in rows)


def time_bytes(rows) -> bytes:
    return b"".join(struct.pack(">qi", *row) for row in rows)


def txn_bytes(rows, version: int = 0) -> bytes:
    return b"".join(struct.pack(">hqqqq", version, *row) for row in rows)


# -- offset and time indexes ------------------------------------------------------------------
def test_offset_index_parses_and_encodes():
    data = offset_bytes(OFFSETS)
    entries = parse_offset_index("x.index", data)
    assert entries == [OffsetEntry(*row) for row in OFFSETS]
    assert encode_offset_index(entries) == data


def test_time_index_parses_and_encodes():
    data = time_bytes(TIMES)
    entries = parse_time_index("x.timeindex", data)
    assert entries == [TimeEntry(*row) for row in TIMES]
    assert encode_time_index(entries) == data


@pytest.mark.parametrize("zero_entries", [1, 7, 1000])
def test_zero_filled_preallocation_is_not_data(zero_entries):
    assert parse_offset_index("a.index", offset_bytes(OFFSETS) + bytes(8 * zero_entries)) == [
        OffsetEntry(*row) for row in OFFSETS]
    assert parse_time_index("a.timeindex", time_bytes(TIMES) + bytes(12 * zero_entries)) == [
        TimeEntry(*row) for row in TIMES]


def test_an_entry_ending_in_zero_bytes_is_data():
    """Only whole zero entries are preallocation: a last entry whose low bytes are zero counts."""
    rows = [(1_720_000_000_000, 0), (1 << 40, 0)]
    assert parse_time_index("a.timeindex", time_bytes(rows) + bytes(12 * 3)) == [TimeEntry(*r) for r in rows]
    assert parse_offset_index("a.index", struct.pack(">ii", 1 << 24, 0) + bytes(8)) == [OffsetEntry(1 << 24, 0)]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=12), st.integers(0, 20))
def test_the_preallocation_is_the_trailing_run_of_zero_entries(rows, zeros):
    """Against a count entry by entry: up to the last entry with a non-zero byte, zero ones among
    the data included."""
    data = b"".join(struct.pack(">ii", a, b) for a, b in rows) + bytes(8 * zeros)
    entries = [data[i:i + 8] for i in range(0, len(data), 8)]
    used = max((i + 1 for i, e in enumerate(entries) if e != bytes(8)), default=0)
    assert used_entries("a.index", data, OFFSET_ENTRY) == used


def test_fully_preallocated_and_empty_indexes_hold_no_entries():
    assert parse_offset_index("a.index", bytes(10 << 10)) == []
    assert parse_time_index("a.timeindex", bytes(12 * 100)) == []
    assert parse_offset_index("a.index", b"") == parse_time_index("a.timeindex", b"") == []


@pytest.mark.parametrize("extra", [1, 5, 7])
def test_offset_index_size_not_a_multiple_of_8(extra):
    data = offset_bytes(OFFSETS) + b"\x01" * extra
    with pytest.raises(FormatError) as err:
        parse_offset_index("seg.index", data)
    assert err.value.path == "seg.index"
    assert err.value.position == 8 * len(OFFSETS)


@pytest.mark.parametrize("extra", [4, 8, 11])
def test_time_index_size_not_a_multiple_of_12(extra):
    with pytest.raises(FormatError) as err:
        parse_time_index("seg.timeindex", time_bytes(TIMES) + bytes(extra))
    assert (err.value.path, err.value.position) == ("seg.timeindex", 12 * len(TIMES))


# -- transaction index ------------------------------------------------------------------------
def test_txn_index_parses_and_encodes():
    data = txn_bytes(TXNS)
    entries = parse_txn_index("x.txnindex", data)
    assert entries == [AbortedTxn(*row) for row in TXNS]
    assert all(e.version == 0 for e in entries)
    assert encode_txn_index(entries) == data
    assert parse_txn_index("x.txnindex", b"") == []


def test_txn_index_unknown_version_names_the_entry():
    data = txn_bytes(TXNS[:1]) + txn_bytes(TXNS[1:], version=1)
    with pytest.raises(FormatError) as err:
        parse_txn_index("x.txnindex", data)
    assert (err.value.path, err.value.position) == ("x.txnindex", 34)


def test_txn_index_size_not_a_multiple_of_34():
    with pytest.raises(FormatError) as err:
        parse_txn_index("x.txnindex", txn_bytes(TXNS) + bytes(10))
    assert err.value.position == 68


# -- checkpoints --------------------------------------------------------------------------------
def test_checkpoint_parses_kafka_text():
    text = b"0\n3\norders 7 1200\nmy-topic.v2 0 55\n__consumer_offsets 49 0\n"
    assert checkpoint.parse("cleaner-offset-checkpoint", text) == {
        ("orders", 7): 1200, ("my-topic.v2", 0): 55, ("__consumer_offsets", 49): 0}


def test_checkpoint_empty_and_round_trip():
    assert checkpoint.parse("c", b"0\n0\n") == {}
    assert render_checkpoint({}) == b"0\n0\n"
    entries = {("b-topic", 3): 9, ("a.topic", 10): 1, ("a.topic", 2): 1 << 40}
    rendered = render_checkpoint(entries)
    assert rendered == b"0\n3\na.topic 2 1099511627776\na.topic 10 1\nb-topic 3 9\n"
    assert checkpoint.parse("c", rendered) == entries


MALFORMED = {
    # name: (text, byte position of the bad line)
    "bad-version": (b"1\n1\norders 0 5\n", 0),
    "non-numeric-version": (b"v0\n0\n", 0),
    "count-too-high": (b"0\n2\norders 0 5\n", 2),
    "count-too-low": (b"0\n1\norders 0 5\norders 1 6\n", 2),
    "non-numeric-count": (b"0\ntwo\norders 0 5\n", 2),
    "non-numeric-offset": (b"0\n2\norders 0 5\norders 1 x6\n", 15),
    "non-numeric-partition": (b"0\n1\norders p 5\n", 4),
    "missing-field": (b"0\n2\norders 0 5\norders 1\n", 15),
    "extra-field": (b"0\n1\norders 0 5 9\n", 4),
    "not-utf8": (b"0\n1\n\xff\xfe 0 5\n", 4),
    "leading-space": (b"0\n1\n orders 0 5\n", 4),  # Java's split keeps the empty field before it
    "partition-past-int": (b"0\n1\norders 2147483648 5\n", 4),
    "blank-line": (b"0\n1\norders 0 5\n\n", 15),  # an entry line, empty: malformed before the count is
}
NUMBER_FAULTS = ("non-numeric-offset", "non-numeric-partition", "partition-past-int")


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_checkpoint_names_the_bad_line(name):
    text, position = MALFORMED[name]
    with pytest.raises(FormatError) as err:
        checkpoint.parse("/logs/cleaner-offset-checkpoint", text)
    assert err.value.path == "/logs/cleaner-offset-checkpoint"
    assert err.value.position == position
    assert f"byte {position}" in str(err.value)
    # NumberFormatException in Kafka's reader, IOException for the rest (logdir.broker_load tells them apart)
    assert isinstance(err.value, checkpoint.EntryNumberError) == (name in NUMBER_FAULTS)


ACCEPTED = {
    # name: (text, entries) as CheckpointReadBuffer reads them: BufferedReader.readLine ends a line at
    # '\n', '\r' or '\r\n' and returns a last line without one; fields split on \s+; Integer.parseInt and
    # Long.parseLong take a sign; the entries go into a map (a repeated partition: its last line)
    "no-newline-at-the-end": (b"0\n2\norders 0 5\norders 1 6", {("orders", 0): 5, ("orders", 1): 6}),
    "count-without-newline": (b"0\n0", {}),
    "version-without-newline": (b"0", {}),
    "crlf": (b"0\r\n1\r\norders 0 5\r\n", {("orders", 0): 5}),
    "cr": (b"0\r1\rorders 0 5\r", {("orders", 0): 5}),
    "tabs-and-runs-of-spaces": (b"0\n1\norders\t0   5 \n", {("orders", 0): 5}),
    "signs": (b"+0\n+1\norders +0 -5\n", {("orders", 0): -5}),
    "repeated": (b"0\n3\na 0 1\nb 0 2\na 0 3\n", {("a", 0): 3, ("b", 0): 2}),
    "negative-partition": (b"0\n1\norders -1 5\n", {("orders", -1): 5}),
}


@pytest.mark.parametrize("text, entries", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_checkpoint_reads_what_kafkas_reader_reads(text, entries):
    assert checkpoint.parse("/logs/cleaner-offset-checkpoint", text) == entries


def test_an_empty_checkpoint_has_no_entries():
    """As Kafka's CheckpointFile reads one: a broker creates the file empty at start-up (issue 40)."""
    assert checkpoint.parse("/logs/cleaner-offset-checkpoint", b"") == {}
    assert checkpoint.parse("/logs/cleaner-offset-checkpoint", b"0\n") == {}


# -- atomic writes ----------------------------------------------------------------------------
def test_write_atomic_goes_through_tmp_and_rename(tmp_path, monkeypatch):
    target = str(tmp_path / "cleaner-offset-checkpoint")
    (tmp_path / "cleaner-offset-checkpoint").write_bytes(b"old contents\n")
    renames, real_rename = [], storage.rename

    def spy_rename(src, dst):
        assert open(src, "rb").read() == b"0\n0\n", "the temp file is complete before the rename"
        renames.append((src, dst))
        real_rename(src, dst)

    patch_storage(monkeypatch, "rename", spy_rename)
    storage.write_atomic(target, b"0\n0\n")

    assert renames == [(target + ".tmp", target)]
    assert open(target, "rb").read() == b"0\n0\n"
    assert sorted(os.listdir(tmp_path)) == ["cleaner-offset-checkpoint"]


def test_write_atomic_creates_and_replaces(tmp_path):
    target = str(tmp_path / "log-start-offset-checkpoint")
    storage.write_atomic(target, render_checkpoint({("t", 0): 1}))
    storage.write_atomic(target, render_checkpoint({("t", 0): 2}))
    assert checkpoint.parse(target, open(target, "rb").read()) == {("t", 0): 2}
    assert os.listdir(tmp_path) == ["log-start-offset-checkpoint"]


def test_a_log_start_checkpoint_kafka_loads_without_is_replaced_on_write(tmp_path):
    """LogManager loads a log dir without a log-start-offset-checkpoint it reads a
    NumberFormatException in, and its next checkpoint replaces the file; any other fault takes the
    log dir offline, and the write is refused."""
    from kcompact.operations.checkpoints import update_log_starts

    (tmp_path / "t-0").mkdir()
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_bytes(b"0\n1\nt 0 x5\n")
    update_log_starts(str(tmp_path), lambda entries: {**entries, ("t", 0): 7})
    assert path.read_bytes() == b"0\n1\nt 0 7\n"
    path.write_bytes(b"1\n0\n")
    with pytest.raises(FormatError):
        update_log_starts(str(tmp_path), lambda entries: {**entries, ("t", 0): 8})
    assert path.read_bytes() == b"1\n0\n"
