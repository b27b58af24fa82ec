"""A plan gone stale because another job cleaned the partition says how its cleaner checkpoint
entry moved, in words when there was none (was "checkpoint None -> 2436")."""

from __future__ import annotations

from kcompact.compaction.pipeline.taking import cleaned_since_plan
from kcompact.contracts.plan_row import PlanRow


def row(checkpoint: int | None) -> PlanRow:
    return PlanRow(topic="orders", partition=0, path="/logs/orders-0", checkpoint_offset=checkpoint)


def test_an_unmoved_entry_is_not_stale():
    assert cleaned_since_plan(row(120), {("orders", 0): 120}) is None
    assert cleaned_since_plan(row(None), {}) is None


def test_a_moved_entry_is_told_in_words():
    assert cleaned_since_plan(row(None), {("orders", 0): 2436}) == (
        "cleaned by another job since it was planned (its cleaner checkpoint went from no entry to 2436); "
        "planned again next run")
    assert "went from 120 to 2436)" in cleaned_since_plan(row(120), {("orders", 0): 2436})
    assert "went from 120 to no entry)" in cleaned_since_plan(row(120), {})
    assert cleaned_since_plan(row(1), "cleaner-offset-checkpoint: byte 0: bad") == (
        "cleaner-offset-checkpoint: byte 0: bad; planned again next run")
