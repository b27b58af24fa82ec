"""The ends a read stops at (``datasource.positions``): a read_committed query stops at the last
stable offset, which the batch headers' replay finds. A corrupt batch stops that replay: the ends
it found would be short, and a query bounded by them would silently read less, so it fails
naming the file and byte instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcompact.datasource.positions import Positions
from kcompact.logdir.listing import scan_partition
from tests.support import make_batches, seg_path, write_partition


def _partition(tmp_path: Path) -> Path:
    return write_partition(tmp_path / "orders-0", [(0, make_batches(0, 4)), (20, make_batches(20, 2))])


def test_the_ends_of_a_sound_partition(tmp_path):
    part = _partition(tmp_path)
    positions = Positions(scan_partition(str(part), "orders", 0))
    assert (positions.log_end, positions.last_stable) == (30, 30)  # no open transaction: the LSO is the end


def test_a_corrupt_batch_fails_the_ends_naming_file_and_byte(tmp_path):
    part = _partition(tmp_path)
    log = seg_path(part, 0, "log")
    data = bytearray(log.read_bytes())
    second = len(make_batches(0, 1)[0])  # the second batch starts here
    data[second + 70] ^= 0xFF  # a byte of its records: the CRC no longer matches
    log.write_bytes(bytes(data))
    positions = Positions(scan_partition(str(part), "orders", 0))
    with pytest.raises(ValueError, match=rf"orders-0: .*{log}: byte {second}: .*CRC"):
        _ = positions.last_stable
