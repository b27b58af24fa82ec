"""Every decision reads a failure's kind, never its message (issue 34): the same log dirs planned,
compacted and put through retention twice, once as they are and once with every message the
driver sees reworded (the plan's skip reasons, problems and fault, each failed row's error), end
with the same exit codes, the same cleaning states, the same cleaner checkpoints and the same
fate for every partition.

The log dirs hold what each decision is about: a corrupt batch the job meets (uncleanable), one
the planner meets (uncleanable, the run fails it), a group whose write fails with an I/O error
(transient: left idle), a sound partition (cleaned) and a delete-policy partition with a stray
``.log`` file that no base offset names (bad input: retention is blocked, the runs partial).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from kcompact.compaction.pipeline import job
from kcompact.jobs.cli import main
from kcompact.planner import build
from tests.e2e.test_compaction_bad_input import NOW, cleaner_checkpoint, corrupt_partition, recs
from tests.support import write_partition

TOPICS = ["*:cleanup.policy=compact,min.cleanable.dirty.ratio=0.01", "logs:cleanup.policy=delete,retention.ms=1000"]
PLAN_TEXT = ("skip_reason", "retention_skip_reason", "fault")
IO_FAILURE = {"error": "I/O error (transient, retried next run): no space left on /x", "failure": "I/O"}


def reword(text: str | None) -> str | None:
    return None if text is None else "zzz something else entirely"


def run(*args: str) -> int:
    return main([*args, "--now", str(NOW), "--allow-unknown-topics"]  # one list of overrides for every log dir
                + [a for t in TOPICS for a in ("--topic-config", t)])


def log_dirs(root: Path) -> Path:
    d = root / "d"
    corrupt_partition(d / "crc-0")
    corrupt_partition(d / "crcplan-0", snapshot=False)
    for name in ("good-0", "io-0"):
        write_partition(d / name, [(0, [recs(0, [b"a", b"a", b"b"])]), (3, [recs(3, [b"c"])])])
    write_partition(d / "logs-0", [(0, [recs(0, [b"a"], ts=0)]), (1, [recs(1, [b"b"])])])
    (d / "logs-0" / "stray.log").write_bytes(b"x")  # named like a segment, no base offset: a broker refuses it
    return d


def outcome(root: Path, monkeypatch, reworded: bool) -> dict:
    """Exit codes, states, checkpoints and each partition's fate after plan, compact and retention."""
    d = log_dirs(root)
    ranked, clean_groups, batch_plans = build.ranked, job._clean_groups, job.batch_plans

    def plan_rows(*args):
        table = ranked(*args)
        if not reworded:
            return table
        for name in PLAN_TEXT:
            table = table.set_column(table.schema.get_field_index(name), name,
                                     pa.array([reword(v) for v in table.column(name).to_pylist()], pa.string()))
        problems = [[reword(p) for p in ps] if ps else ps for ps in table.column("problems").to_pylist()]
        return table.set_column(table.schema.get_field_index("problems"), "problems",
                                pa.array(problems, pa.list_(pa.string())))

    def groups(*args):
        written = [w.but(**IO_FAILURE) if w.path.endswith("io-0") else w for w in clean_groups(*args)]
        return [w.but(error=reword(w.error)) for w in written] if reworded else written

    def plans(*args):
        table = batch_plans(*args)
        if not reworded:
            return table
        errors = [reword(e) for e in table.column("error").to_pylist()]
        return table.set_column(table.schema.get_field_index("error"), "error", pa.array(errors, pa.string()))

    monkeypatch.setattr(build, "ranked", plan_rows)
    monkeypatch.setattr(job, "_clean_groups", groups)
    monkeypatch.setattr(job, "batch_plans", plans)
    report = root / "report.json"
    codes = [run("plan", str(d)), run("compact", str(d), "--report", str(report)), run("retain", str(d))]
    monkeypatch.undo()
    fates = {p["path"].rstrip("/").rsplit("/", 1)[1]: (p["committed"], p["error"] is None, p["skipped"] is None)
             for p in json.loads(report.read_text())["partitions"]}
    states = {f.name: json.loads(f.read_text())["state"] for f in sorted(d.glob("kcompact-state.*.json"))}
    logs = sorted(p.name for p in (d / "logs-0").iterdir())
    return {"codes": codes, "states": states, "checkpoint": cleaner_checkpoint(d), "fates": fates, "logs": logs}


@pytest.mark.slow
def test_rewording_every_message_changes_no_exit_code_and_no_state(spark, tmp_path, monkeypatch):
    plain = outcome(tmp_path / "plain", monkeypatch, reworded=False)
    assert plain["codes"] == [4, 4, 4]  # bad input and failures make every run partial
    assert plain["states"] == {"kcompact-state.crc-0.json": "uncleanable",
                               "kcompact-state.crcplan-0.json": "uncleanable"}  # io-0 is left idle
    assert plain["fates"]["good-0"] == (True, True, True) and plain["fates"]["io-0"] == (False, False, True)
    assert outcome(tmp_path / "reworded", monkeypatch, reworded=True) == plain
