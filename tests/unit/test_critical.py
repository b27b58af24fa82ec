"""A stop asked for during a partition's commit waits for the commit, and is never lost."""

from __future__ import annotations

import pytest

from kcompact.operations import critical


def test_a_stop_outside_a_section_is_not_held():
    assert critical.hold(KeyboardInterrupt()) is False


def test_a_stop_waits_for_the_outermost_section():
    done = []
    with pytest.raises(KeyboardInterrupt), critical.section():
        with critical.section():
            assert critical.hold(KeyboardInterrupt())
            done.append("inner")
        done.append("outer")  # the inner section's end does not raise it yet
    assert done == ["inner", "outer"]


def test_a_held_stop_is_raised_even_when_the_section_fails():
    with pytest.raises(KeyboardInterrupt) as raised, critical.section():
        assert critical.hold(KeyboardInterrupt())
        raise OSError("no space left on device")
    assert isinstance(raised.value.__context__, OSError)
    with critical.section():  # nothing left held for the next section
        pass
