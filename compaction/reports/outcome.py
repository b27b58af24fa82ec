"""What a command's report leads with (``outcome``, the JSON report's first key, the page's first
block): its exit code and what that means, then what the run left undone, by subject, each
partition with why and what to do.

The exit code is the process's: the command line decides it before it writes the report and
returns that same code. An operator reads the outcome first, so it names everything that makes
a run partial (failed, held back until fixed, held by another job, a log dir in use or empty),
and what leaves the exit code alone but must not go unnoticed (paused, uncleanable, skipped).
Rows are built from the steps' reports: ``compaction_undone``, ``retention_undone``,
``recovery_undone``; ``outcome`` joins them with the command line's log dirs.
"""

from __future__ import annotations

import posixpath

from kcompact.compaction.reports.report import Report
from kcompact.errors import EXIT_FAILED, EXIT_OK, EXIT_PARTIAL
from kcompact.errors.failure import Failure
from kcompact.operations.recover import RecoveryReport
from kcompact.operations.retention import RetentionReport

# README, "Exit codes": the codes a command that writes a report ends with
MEANING = {EXIT_OK: ("done", "all that was asked was done"),
           EXIT_PARTIAL: ("partial", "some of the work asked was left undone: what and why below"),
           EXIT_FAILED: ("failed", "everything attempted failed: what and why below")}
# The subjects, in the order the page shows them, and how the verdict counts each
SUBJECTS = {"failed": "failed", "held_back": "held back until fixed", "held": "held by another job",
            "log_dirs": "not worked on", "uncleanable": "uncleanable", "paused": "paused", "skipped": "skipped"}
RETRIED = "none: the next run tries it again"


def _row(step: str, partition: str, log_dir: str, why: str, way_out: str, **more) -> dict:
    return {"step": step, "partition": partition, "log_dir": log_dir, "why": why, "way_out": way_out, **more}


def _log_dir_of(path: str) -> str:
    return path.rstrip("/").rpartition("/")[0]


def failure_way_out(kind: Failure | None, log_dir: str, name: str, marked: bool) -> str:
    """What to do about a partition that failed of ``kind``; ``marked``: this run marked it uncleanable."""
    if marked:
        return (f"'kcompact verify {log_dir}' names the bad bytes; bring the file back from a replica (or remove "
                f"the partition dir for the broker to fetch it), then 'kcompact reset-uncleanable {log_dir} {name}'")
    if kind is Failure.UNREADABLE:
        return "let the job's user read the named file: the next run tries it again"
    if kind is Failure.MEMORY:
        return "give the Python workers more memory (the error says which setting), then run again"
    if kind is Failure.ABORTED:
        return "none: an operator aborted it; the next run cleans it"
    return RETRIED


def compaction_undone(report: Report, step: str = "compaction") -> dict[str, list[dict]]:
    """What a compaction left undone, by subject (``SUBJECTS``)."""
    out: dict[str, list[dict]] = {subject: [] for subject in SUBJECTS}
    marked = set(report.marked)
    for p in report.partitions:
        name, log_dir = f"{p.topic}-{p.partition}", _log_dir_of(p.path)
        if p.error and not p.skipped:
            out["failed"].append(_row(step, name, log_dir, p.error,
                                      failure_way_out(p.failure, log_dir, name, p.path in marked),
                                      kind=p.failure and str(p.failure)))
    out["held_back"] += [_row(step, b["partition"], b["log_dir"], b["why"], b["way_out"]) for b in report.blocked]
    for h in report.held:
        until = f"lease until {h['until']}" if h["until"] else "no heartbeat recorded"
        out["held"].append(_row(step, h["partition"], h["log_dir"],
                                f"cleaned by {h['owner']} (host {h['host']}, pid {h['pid']}, {until})",
                                "none: cleaned once that job ends or its lease lapses ('kcompact status' shows it)"))
    out["paused"] += _paused(step, report.paused)
    why = {r.path: r.skip_reason for r in report.planned or []}
    why |= {p.path: p.error for p in report.partitions if p.error}
    for log_dir, paths in report.uncleanable.items():
        for path in paths:
            name = path.rstrip("/").rpartition("/")[2]
            out["uncleanable"].append(_row(step, name, log_dir, why.get(path) or "marked uncleanable",
                                           f"'kcompact status {log_dir}' shows why and since when; fix or remove the "
                                           f"named file, then 'kcompact reset-uncleanable {log_dir} {name}'"))
    listed = {(r["log_dir"], r["partition"]) for subject in out.values() for r in subject}
    for p in report.partitions:
        name, log_dir = f"{p.topic}-{p.partition}", _log_dir_of(p.path)
        if p.skipped and (log_dir, name) not in listed:
            out["skipped"].append(_row(step, name, log_dir, str(p.skipped), skip_way_out(p.failure, log_dir, name)))
    return out


def skip_way_out(kind: Failure | None, log_dir: str, name: str) -> str:
    """What to do about a partition a job passed over for a state of ``kind``."""
    if kind is Failure.PAUSED:
        return f"'kcompact resume {log_dir} {name}'"
    if kind is Failure.UNCLEANABLE:
        return f"fix or remove the named file, then 'kcompact reset-uncleanable {log_dir} {name}'"
    if kind is Failure.BAD_INPUT:
        return f"'kcompact verify {log_dir}' lists every problem"
    if kind is Failure.LEASE_HELD:
        return "none: cleaned once that job ends or its lease lapses ('kcompact status' shows it)"
    return RETRIED


def _paused(step: str, paused: dict[str, list[str]]) -> list[dict]:
    return [_row(step, name, log_dir, "paused by an operator ('kcompact pause'): no job cleans it",
                 f"'kcompact resume {log_dir} {name}'") for log_dir, names in paused.items() for name in names]


def retention_undone(report: RetentionReport, step: str = "retention") -> dict[str, list[dict]]:
    """What retention left undone, by subject."""
    out: dict[str, list[dict]] = {subject: [] for subject in SUBJECTS}
    for p in report.partitions:
        if p.error:
            out["failed"].append(_row(step, p.name, p.log_dir, p.error, f"{RETRIED}; should it fail again, "
                                      f"'kcompact verify {p.log_dir}' lists the log dir's problems", kind=None))
    for p in report.blocked:
        out["held_back"].append(_row(step, p.name, p.log_dir, p.skipped, skip_way_out(p.skip_kind, p.log_dir, p.name)))
    out["paused"] += _paused(step, report.paused)
    return out


def recovery_undone(report: RecoveryReport, log_dirs: list[str], step: str = "recovery") -> dict[str, list[dict]]:
    """What recovery of ``log_dirs`` left undone, by subject: partitions with problems or skipped
    failed; a log dir skipped (another process holds its ``.lock``) not worked on."""
    out: dict[str, list[dict]] = {subject: [] for subject in SUBJECTS}
    for p in report.partitions:
        if p.problems:
            log_dir = _log_dir_of(p.path)
            out["failed"].append(_row(step, posixpath.basename(p.path.rstrip("/")), log_dir, "; ".join(p.problems),
                                      f"'kcompact verify {log_dir}' lists every problem; a corrupt closed segment "
                                      "must come back from a replica", kind=None))
    for path, why in report.skipped.items():
        if path not in log_dirs:
            out["failed"].append(_row(step, posixpath.basename(path.rstrip("/")), _log_dir_of(path), why, RETRIED,
                                      kind=None))
        else:
            out["log_dirs"].append(log_dir_row(step, path, why, "stop what holds it (a broker, another job), then "
                                                                "run again"))
    for path, why in report.held.items():
        out["held"].append(_row(step, posixpath.basename(path.rstrip("/")), _log_dir_of(path), why,
                                "none: recovered by the next job or 'kcompact recover' once that job ends"))
    return out


def log_dir_row(step: str, log_dir: str, why: str, way_out: str) -> dict:
    """A log dir the command did not work on (in use, or holding no partition)."""
    return _row(step, None, log_dir, why, way_out)


def outcome(code: int, *undone: dict[str, list[dict]], log_dirs: list[dict] = ()) -> dict:
    """The report's ``outcome``: the exit code, its meaning, a one-line verdict, then the rows of
    every step's ``undone`` and ``log_dirs`` (``log_dir_row``), by subject."""
    rows = {subject: [r for u in undone for r in u[subject]] for subject in SUBJECTS}
    rows["log_dirs"] = list(log_dirs) + rows["log_dirs"]
    counts = []
    for subject, label in SUBJECTS.items():
        n = len({(r["log_dir"], r["partition"]) for r in rows[subject]})  # one held back in two steps: once
        if n:
            noun = "log dir" if subject == "log_dirs" else "partition"
            counts.append(f"{n:,d} {noun}{'' if n == 1 else 's'} {label}")
    word, sentence = MEANING[code]
    verdict = f"Exit {code} ({word}): {', '.join(counts) or 'nothing left undone'}"
    return {"exit_code": code, "meaning": f"{word}: {sentence}", "verdict": verdict, **rows}
