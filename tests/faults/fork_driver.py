"""Run a compaction commit, or ``kcompact recover``, once per crash point, each in a forked
process that crash_points kills with SIGKILL at its point (tests only).

A Spark start costs seconds; a fork costs a millisecond. So the sweep over every mutation of
a commit runs the job's driver-side commit here, without Spark, on ``.cleaned`` files a real
``kcompact compact`` wrote (it was killed just before its first ``.swap`` rename): per
partition, in the job's order, one wave of the job's own commit step (``operations.commit.commit_wave``:
the swap of the segments below the cleaned range's end, then the cleaner checkpoint), on the
threads the task names (default 1, as the crash tests' jobs); then the removal of the
``.deleted`` files (``operations.deleted``) on those threads, as ``compaction.pipeline.job`` commits. The
``recover`` action runs the command line's own ``recover``.

    python tests/faults/fork_driver.py TASK.json

TASK: {"action": "commit" | "recover", "work": DIR,
       "partitions": [{"dir": "orders-0", "topic": "orders", "partition": 0, "end": 846}, ...],
       "threads": N (optional),
       "runs": [{"name": NAME, "template": DIR, "crash_at": SPEC or null}, ...]}
Each run copies its ``template`` log dir to ``work/NAME`` (a fresh copy per crash point), logs
its mutations to ``work/NAME.log`` and prints one JSON line: {"name", "killed", "exit"}.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import posixpath
import shutil
import signal
import sys
import traceback

import crash_points

import kcompact.operations.recover  # imported before forking: the children start warm
from kcompact.jobs.cli import main as kcompact
from kcompact.operations.cleaned import CLEANED, WrittenGroup
from kcompact.operations.commit import LocalCommit, commit_wave
from kcompact.operations.deleted import Removal

KINDS = ("log", "index", "timeindex", "txnindex")  # write_group's order of a group's files


def cleaned_groups(partition_dir: str) -> list[WrittenGroup]:
    """The ``.cleaned`` groups on disk, as the rewrite stage reports them to the commit."""
    names = set(os.listdir(partition_dir))
    groups = []
    for name in sorted(n for n in names if n.endswith(".log" + CLEANED)):
        stem = name.removesuffix(".log" + CLEANED)
        files = tuple(posixpath.join(partition_dir, f"{stem}.{kind}{CLEANED}") for kind in KINDS
                      if f"{stem}.{kind}{CLEANED}" in names)
        groups.append(WrittenGroup(int(stem), os.path.getsize(files[0]), 0, 0, files))
    return groups


def commit(log_dir: str, partitions: list[dict], threads: int = 1) -> int:
    commits = []
    for p in partitions:
        path = posixpath.join(log_dir, p["dir"])
        # the segments replaced are those below the end, as the wave lists them
        commits.append(LocalCommit(path, p["topic"], p["partition"], cleaned_groups(path), p["end"]))
    results = commit_wave(log_dir, commits, threads)
    failed = [r for r in results if isinstance(r, OSError)]
    if failed:
        raise failed[0]
    deleted = [path for r in results for path in r]
    removal = Removal()  # the job's too, once every partition is committed
    removal.start(deleted, threads)
    return 1 if removal.wait() else 0


def recover(log_dir: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return kcompact(["recover", log_dir])


def run_one(task: dict, run: dict) -> dict:
    target = os.path.join(task["work"], run["name"])
    shutil.copytree(run["template"], target, symlinks=True)
    pid = os.fork()
    if pid == 0:  # the child: a session of its own, so the kill takes it alone
        code = 3
        try:
            os.setsid()
            os.environ[crash_points.SESSION_ENV] = str(os.getpid())
            os.environ["KCOMPACT_CRASH_LOG"] = target + ".log"
            os.environ["KCOMPACT_CRASH_COUNTER"] = target + ".count"
            spec = run.get("crash_at")
            crash_points.install(crash_points.CrashPoint.parse(spec) if spec else None)
            code = (commit(target, task["partitions"], task.get("threads", 1)) if task["action"] == "commit"
                    else recover(target))
        except BaseException:  # noqa: BLE001 - the child reports everything, then exits with its code
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    return {"name": run["name"], "killed": killed, "exit": os.waitstatus_to_exitcode(status)}


def main(task_path: str) -> int:
    with open(task_path) as f:
        task = json.load(f)
    crash_points.install(None)  # wrapped once here; each child sets its own point
    for run in task["runs"]:
        print(json.dumps(run_one(task, run)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
