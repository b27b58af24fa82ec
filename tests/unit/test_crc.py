"""readers.crc: many CRC-32C ranges in one compiled call, against the standard check value and
the crc32c library's own function."""

import crc32c
import numpy as np
import pytest

from kcompact.readers import crc


def _ranges(seed: int):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, 200_000, dtype=np.uint8)
    starts = rng.integers(0, 190_000, 300)
    ends = starts + rng.integers(0, 10_000, 300)
    return data, starts, ends


def test_check_value():
    """CRC-32C("123456789") is 0xE3069283 (RFC 3720, appendix B.4)."""
    data = np.frombuffer(b"xx123456789", np.uint8)
    assert crc.crcs(data, np.array([2]), np.array([11])).tolist() == [0xE3069283]


@pytest.mark.parametrize("compiled", [True, False])
def test_every_range_as_the_library_computes_it(monkeypatch, compiled):
    """The compiled routine and the fallback (a crc32c without the exported routine) agree with
    ``crc32c.crc32c`` on every range, empty ones included."""
    if not compiled:
        monkeypatch.setattr(crc, "_ADDRESS", None)
    data, starts, ends = _ranges(7)
    ends[:3] = starts[:3]
    expected = [crc32c.crc32c(data[s:e]) for s, e in zip(starts.tolist(), ends.tolist())]
    got = crc.crcs(data, starts, ends)
    assert got.dtype == np.uint32
    assert got.tolist() == expected
    assert crc.crcs(data, starts[:0], ends[:0]).tolist() == []


def test_compiled_routine_found():
    """The crc32c version we install exports its routine: the compiled path is the one in use."""
    assert crc._ADDRESS is not None
