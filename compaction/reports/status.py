"""``kcompact status``: every partition's cleaning state, why a job would pass it over, and the
way out, so that no state strands a partition unnoticed."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from kcompact.errors import FormatError
from kcompact.logdir.listing import scan_log_dir
from kcompact.operations import states
from kcompact.storage import lock


@dataclass(frozen=True, slots=True)
class Row:
    partition: str
    path: str
    state: str
    detail: str
    way_out: str

    def as_dict(self) -> dict:
        return {"partition": self.partition, "path": self.path, "state": self.state, "detail": self.detail,
                "way_out": self.way_out}


def _row(part, state: states.CleaningState, locked_by: Callable[[], str | None]) -> Row:
    """``locked_by()``: who holds the log dir's ``.lock`` (asked only where it matters)."""
    name = part.name
    target = f"{part.path.rstrip('/').rpartition('/')[0]} {name}"  # what a state command takes: LOGDIR PARTITION
    live = state.state in (states.IN_PROGRESS, states.ABORTED) and not state.lapsed()
    if part.leftovers and not live:
        files = ", ".join(sorted(f.path.rsplit("/", 1)[-1] for f in part.leftovers)[:3])
        holder = locked_by()
        if holder is not None:  # a job or a broker at work: its files are its own, not an interruption's
            return Row(name, part.path, "in use", f"being cleaned or loaded by {holder} (its files: {files})",
                       "wait for it to end")
        return Row(name, part.path, "interrupted", f"files of an unfinished swap: {files}",
                   "'kcompact recover' (or any compaction job) finishes or undoes it")
    if state.state in (states.IN_PROGRESS, states.ABORTED):
        if state.expired():
            return Row(name, part.path, f"{state.state} (lease expired)",
                       f"{state.holder} stopped renewing its lease at {states.utc(state.heartbeat_ms)}",
                       f"none needed: the next job takes it over ('kcompact abort {target}' clears it now)")
        if state.holder_gone():
            return Row(name, part.path, f"{state.state} (holder gone)",
                       f"{state.holder}: that process no longer runs on this host; {state.lease_end}",
                       f"none needed: the next job takes it over ('kcompact abort {target}' clears it now)")
        pause = f", {state.pause_count} pause(s) requested" if state.pause_count else ""
        return Row(name, part.path, state.state,
                   f"being cleaned by {state.holder}, started {states.utc(state.started_ms)}, {state.lease_end}{pause}",
                   f"wait, or 'kcompact abort {target}' (stops at the next segment group)")
    if state.state == states.PAUSED:
        times = f" {state.pause_count}x (each pause needs its resume)" if state.pause_count > 1 else ""
        return Row(name, part.path, "paused", f"paused {state.pause_count}x", f"'kcompact resume {target}'{times}")
    if state.state == states.UNCLEANABLE:
        return Row(name, part.path, "uncleanable", f"{state.reason} (since {states.utc(state.since_ms)})",
                   f"fix or remove the named file, then 'kcompact reset-uncleanable {target}'")
    return Row(name, part.path, "idle", "", "")


def status(paths: list[str], show_idle: bool = False) -> list[Row]:
    rows = []
    for log_dir in paths:
        locked_by = functools.cache(lambda log_dir=log_dir: lock.holder(log_dir))
        for part in scan_log_dir(log_dir).partitions:
            try:
                state, _ = states.read(part.path)
            except FormatError as exc:
                rows.append(Row(part.name, part.path, "unreadable", str(exc),
                                "fix or delete the state file (deleting it makes the partition idle)"))
                continue
            row = _row(part, state, locked_by)
            if show_idle or row.state != "idle":
                rows.append(row)
    return rows


def render(rows: list[Row]) -> str:
    if not rows:
        return "every partition is idle"
    width = max(len(r.partition) for r in rows)
    state_width = max(len(r.state) for r in rows)
    return "\n".join(
        f"{r.partition:<{width}}  {r.state:<{state_width}}  {r.detail}" + (f"  -> {r.way_out}" if r.way_out else "")
        for r in rows
    )
