"""A plan for people (a table) and for jobs (Parquet or JSON, local or ``s3://``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from kcompact import errors, storage
from kcompact.conf.units import MB, UNIT_NOTE
from kcompact.contracts.plan_row import PlanRow
from kcompact.errors.failure import Failure
from kcompact.planner.plan import Plan
from kcompact.planner.rules import ratio_text

TABLE_COLUMNS = ("rank", "partition", "ratio", "dirty MB", "total MB", "dirty range", "bound", "decision")


def selected_bytes(plan: Sequence[PlanRow]) -> int:
    """The cleanable bytes of the selected partitions: what a compaction of this plan reads."""
    return sum(r.cleanable_bytes or 0 for r in plan if r.selected)


def describe(plan: Sequence[PlanRow], each: bool = True) -> str:
    """One line per partition of ``plan`` (a plan's rows; none unless ``each``), selected first by
    rank, then the rest with their skip reason; then the totals and notes."""
    rows = [_line(r) for r in plan] if each else []
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(TABLE_COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(TABLE_COLUMNS, widths)).rstrip()] if each else []
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    selected = sum(1 for r in plan if r.selected)
    lines.append(f"{len(plan)} partition{'' if len(plan) == 1 else 's'}, {selected} selected, "
                 f"{selected_bytes(plan) / MB:.1f} MB to clean; {UNIT_NOTE}")
    lines += [f"note: {note}" for note in dict.fromkeys(note for r in plan for note in r.notes)]
    lines += [f"reproducing {why}" for why in dict.fromkeys(r.kafka_version_source for r in plan) if why]
    # where a broker may run Java 8 or 11 (3.9): which gzip header its cleaner writes, and why
    lines += [f"gzip header OS byte {os_byte} ({why})" for os_byte, why in dict.fromkeys(
        (r.gzip_os, r.gzip_os_source) for r in plan if (r.kafka_version or "").startswith("3.9") and r.gzip_os_source)]
    return "\n".join(lines)


RETENTION_COLUMNS = ("partition", "segments", "MB", "log start", "reasons")


def describe_retention(plan: Sequence[PlanRow], each: bool = True) -> str:
    """What retention deletes: one line per partition with segments to delete (or a retention
    skip for bad input, or for a cleaning state that holds back segments due; none unless
    ``each``), then a total."""
    rows = [r for r in plan if r.retention_deletes or r.retention_skip_kind == Failure.BAD_INPUT]
    lines = [_retention_line(r) for r in rows] if each else []
    widths = [max(len(c), *(len(r[i]) for r in lines)) if lines else len(c) for i, c in enumerate(RETENTION_COLUMNS)]
    out = ["retention:", "  ".join(c.ljust(w) for c, w in zip(RETENTION_COLUMNS, widths)).rstrip()] if each else []
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in lines]
    due = [r for r in rows if r.retention_skip_reason is None]
    segments = sum(len(r.retention_deletes) for r in due)
    mb = sum(r.retention_bytes_deleted or 0 for r in due) / MB
    out.append(f"{len(due)} partitions with {segments} segments ({mb:.1f} MB) to delete, "
               f"{len(rows) - len(due)} skipped")
    return "\n".join(out)


def _retention_line(r: PlanRow) -> list[str]:
    name = r.name if r.topic is not None else r.path
    deletes = r.retention_deletes
    counts: dict[str, int] = {}
    for d in deletes:
        counts[d.reason] = counts.get(d.reason, 0) + 1
    reasons = ", ".join(f"{reason} ({n})" for reason, n in counts.items())
    if r.retention_skip_reason is not None:
        reasons = f"skip: {r.retention_skip_reason}" + (f" [due: {reasons}]" if reasons else "")
    start = "" if r.retention_log_start is None else str(r.retention_log_start)
    mb = f"{(r.retention_bytes_deleted or 0) / MB:.2f}" if deletes else ""
    return [name, str(len(deletes)) if deletes else "", mb, start, reasons]


def _line(r: PlanRow) -> list[str]:
    name = r.name if r.topic is not None else r.path
    ratio = "" if r.cleanable_ratio is None else ratio_text(r.cleanable_ratio, r.min_cleanable_ratio)
    dirty = "" if r.cleanable_bytes is None else f"{r.cleanable_bytes / MB:.2f}"
    total = "" if r.total_bytes is None else f"{r.total_bytes / MB:.2f}"
    span = "" if r.first_dirty_offset is None else f"[{r.first_dirty_offset}, {r.first_uncleanable_dirty_offset})"
    decision = "clean" if r.selected else f"skip: {r.skip_reason}"
    return [str(r.rank or ""), name, ratio, dirty, total, span, r.uncleanable_bound or "", decision]


def write(plan: Plan, path: str) -> None:
    """``.parquet`` as Parquet, ``.json`` as a JSON array of one object per partition; its log
    dirs named absolutely (``storage.absolute``), so that a job started from another working
    directory (a scheduler's) finds them."""
    plan = plan.renamed({log_dir: storage.absolute(log_dir) for log_dir in plan.log_dirs})
    if path.endswith(".parquet"):
        fs, fs_path = storage.resolve(path)
        pq.write_table(plan.table, fs_path, filesystem=fs)
    elif path.endswith(".json"):
        # unindented, as the report: json's compiled encoder takes only that
        storage.write_durable(path, json.dumps([row.row() for row in plan.rows]).encode())
    else:
        raise errors.UsageError(f"{path}: the plan is written as .parquet or .json")


def read(path: str) -> Plan:
    """A plan written by ``write`` (the compaction job takes one with ``--plan``); anything else is
    a ValueError naming the file."""
    not_a_plan = f"{path}: not a plan written by 'kcompact plan --output'"
    if path.endswith(".parquet"):
        fs, fs_path = storage.resolve(path)
        try:
            table = pq.read_table(fs_path, filesystem=fs)
        except pa.ArrowException as exc:
            raise errors.UsageError(f"{not_a_plan} ({exc})") from None
        columns = set(table.column_names)
    elif path.endswith(".json"):
        try:
            rows = json.loads(storage.read_bytes(path))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise errors.UsageError(f"{not_a_plan} (not JSON: {exc})") from None
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise errors.UsageError(f"{not_a_plan} (not a list of partitions)")
        columns = set(rows[0]) if rows else set()
        try:
            table = pa.Table.from_pylist(rows, schema=PlanRow.schema())
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise errors.UsageError(f"{not_a_plan} ({exc})") from None
    else:
        raise errors.UsageError(f"{path}: a plan is read from .parquet or .json")
    if "log_dir" not in table.column_names or None in table.column("log_dir").to_pylist():
        raise errors.UsageError(f"{not_a_plan} (a partition without its log dir)")
    return _complete(path, Plan(table), columns)


def _complete(path: str, plan: Plan, columns: set[str]) -> Plan:
    """``plan`` when it has every column of a plan (``columns``: those the file held) and every
    partition's configuration names every setting the job reads; a plan written by another
    version of kcompact may lack some, and guessing them would clean wrongly."""
    from kcompact.conf.settings import BROKER_MESSAGE_MAX_BYTES, SETTINGS

    lacking = [name for name in PlanRow.schema().names if name not in columns]
    if lacking and plan.table.num_rows:
        raise errors.UsageError(f"{path}: a plan from another kcompact version (no {', '.join(lacking)} column); "
                                "plan again")

    needed = {s.name for s in SETTINGS} | {BROKER_MESSAGE_MAX_BYTES}
    for row in plan.rows:
        if row.config is None:
            continue
        missing = needed - set(row.config)
        if missing:
            raise errors.UsageError(f"{path}: the configuration of {row.name} lacks "
                             f"{', '.join(sorted(missing))}: a plan from another kcompact version; plan again")
        if row.kafka_version is None:
            raise errors.UsageError(f"{path}: {row.name} names no Kafka release (kafka_version): "
                             "a plan from another kcompact version; plan again")
    return plan
