"""Kafka's forced cleaner checkpoint update: which partitions of a plan count for it, and the
update itself, in one function (``reset_checkpoints``)."""

from __future__ import annotations

from kcompact.contracts.plan_row import PlanRow
from kcompact.errors import FormatError
from kcompact.operations.checkpoints import update_cleaner_offsets
from kcompact.operations.states import IDLE


def reset_checkpoints(plan: list[PlanRow], taken: list[PlanRow], progress) -> list[dict]:
    """Kafka's grabFilthiestCompactedLog writes the log start as the cleaner checkpoint entry of
    every compacted partition it considers (not being cleaned, paused or aborted elsewhere, not
    uncleanable) whose entry lies below the log start or past the log end (forceUpdateCheckpoint;
    the planner's ``checkpoint_reset`` says which and why), before it drops the logs with nothing
    to clean: so do we, for every such partition of the plan, the selected ones this job took
    (``taken``) included. An entry that changed since planning (another job cleaned the partition
    meanwhile) is left alone: the change is compare-and-swap. Returns the resets written."""
    mine = {row.path for row in taken}
    wanted: dict[str, list[dict]] = {}
    for row in plan:
        considered = (row.state == IDLE or row.path in mine) and row.compacted
        if (considered and row.checkpoint_offset is not None and row.checkpoint_reset is not None
                and (not row.selected or row.path in mine)):
            wanted.setdefault(row.log_dir, []).append(
                {"log_dir": row.log_dir, "topic": row.topic, "partition": row.partition,
                 "from": row.checkpoint_offset, "offset": row.first_dirty_offset, "why": row.checkpoint_reset})
    written = []
    for log_dir, resets in wanted.items():
        done = []

        def change(entries: dict, resets=resets, done=done) -> dict:
            done.clear()
            for r in resets:
                if entries.get((r["topic"], r["partition"])) == r["from"]:
                    entries[(r["topic"], r["partition"])] = r["offset"]
                    done.append(r)
            return entries

        try:
            update_cleaner_offsets(log_dir, change)
        except (FormatError, OSError) as exc:
            progress(f"  cleaner checkpoints of {log_dir} not reset: {exc}")
            continue
        for r in done:
            written.append(r)
            progress(f"  reset the cleaner checkpoint of {r['topic']}-{r['partition']}: {r['why']}; "
                     f"now the log start {r['offset']}")
    return written
