"""Crash safety: ``kcompact compact`` killed with SIGKILL at every step of its commit, then
``kcompact recover``, must leave every partition exactly as it was before cleaning or exactly
as an uninjected cleaning leaves it, never a mix, never a record lost; a second crash during
the recovery changes nothing to that; and ``kcompact compact`` afterwards converges to the
uninjected result.

The kills are real: tests/faults/sitecustomize.py on PYTHONPATH makes the job (driver, JVM,
Python workers) SIGKILL itself at a chosen ``storage`` mutation (tests/faults/crash_points.py).
A Spark start costs seconds, so:
- a handful of whole ``kcompact compact`` jobs are killed: mid ``.cleaned`` write (in a Spark
  worker), before the first ``.swap`` rename, mid ``.swap``, mid ``.deleted``, mid final rename,
  between a checkpoint's temp file and its rename;
- the sweep over EVERY mutation of the commit (one wave of both partitions: each rename, fsync,
  remove, the checkpoint's temp write and rename) runs the job's driver-side commit without
  Spark, in a forked process per crash point (tests/faults/fork_driver.py), on the ``.cleaned``
  files the job killed before its first ``.swap`` rename wrote; that this commit is the job's own
  is checked: same mutations, in the same order, and the same files as the uninjected job (whose
  wave runs on one thread); the same wave with its fsyncs and removals on several threads is
  killed at every third mutation;
- ``kcompact recover`` is killed at every one of its mutations too, from several crash states.

Truth is independent of our reader: records are listed with kafka-python (offset, timestamp,
key, value, headers; CRC checked), the checkpoint is parsed here by its text format.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kcompact.jobs.cli import main as kcompact_main
from kcompact.logdir import names
from tests.faults.crash_points import nth_of, read_log, session_processes
from tests.support import kp_batches

NOW = "1720001000000"
# Segments of ~11.5 KB rolled at 12000 bytes, cleaned with segment.bytes=30000: groups of two
# segments (one for the last), so each partition has several groups, some spanning two segments.
SEGMENT_BYTES_AT_CLEANING = "orders:internal.segment.bytes=30000"
SPEC = {
    "start_ms": 1720000000000,
    "topics": [{
        "name": "orders", "partitions": 2,
        "config": {"cleanup.policy": "compact", "segment.bytes": 12000, "index.interval.bytes": 1024,
                   "delete.retention.ms": 600000, "min.cleanable.dirty.ratio": 0.01},
        "records": 900, "keys": 120, "key_distribution": "skewed", "key_skew": 1.2, "key_size": 10,
        "value_size": [10, 80], "tombstone_fraction": 0.06, "keyless_fraction": 0.01, "headers": 1,
        "codecs": {"none": 2, "gzip": 1, "snappy": 1, "lz4": 1, "zstd": 1}, "batch_records": [1, 12],
        "timestamp_step_ms": 25, "idempotent_fraction": 0.3, "idempotent_producers": 2,
        "transactional_fraction": 0.3, "transactional_producers": 2, "txn_batches": [1, 3],
        "abort_ratio": 0.3, "open_transaction": False, "checkpoint": {"1": 0.3},
    }],
}
PARTITIONS = ("orders-0", "orders-1")
LEFTOVER_SUFFIXES = (".cleaned", ".swap", ".deleted", ".tmp")
FAULTS = Path(__file__).resolve().parents[1] / "faults"
KCOMPACT = str(Path(sys.executable).with_name("kcompact"))
JOB_TIMEOUT = 900
JOB_LANES = 4  # whole jobs side by side: a Spark start is mostly one busy thread, and the jobs are tiny


# -- independent truth ----------------------------------------------------------------------------------


def digest(files: dict[str, bytes]) -> bytes:
    h = hashlib.sha256()
    for name, data in sorted(files.items()):
        h.update(b"%s\0%d\0" % (name.encode(), len(data)) + data)
    return h.digest()


_LISTINGS: dict[bytes, list[tuple]] = {}


def records(logs: dict[str, bytes]) -> list[tuple]:
    """(offset, timestamp, key, value, headers) of every record of a partition's ``.log`` files,
    read by kafka-python, CRC checked. Hundreds of crashed copies share a few contents: each
    distinct content is decoded once."""
    key = digest(logs)
    if key not in _LISTINGS:
        out = []
        for data in logs.values():
            for batch in kp_batches(data):
                out += [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]
        _LISTINGS[key] = out
    return _LISTINGS[key]


def checkpoint(log_dir: Path) -> dict[str, int]:
    """cleaner-offset-checkpoint as "topic-partition" -> offset, read by its text format."""
    path = log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2, lines
    return {f"{t}-{p}": int(o) for t, p, o in (line.split() for line in lines[2:])}


SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")


def segment_files(part: Path) -> dict[str, bytes]:
    """A partition's segments, every file of theirs (producer snapshots aside: a broker's recovery
    deletes those of the segments a swap replaces, the uninjected commit leaves them)."""
    return {p.name: p.read_bytes() for p in sorted(part.iterdir()) if p.suffix in SEGMENT_FILES}


def unknown_names(log_dir: Path) -> list[str]:
    """Paths of the log dir no broker knows (``logdir.names``; directories end in ``/``)."""
    return names.unknown(f"{p.relative_to(log_dir)}{'/' if p.is_dir() else ''}" for p in sorted(log_dir.rglob("*")))


def leftovers(log_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(log_dir)) for p in log_dir.rglob("*") if p.name.endswith(LEFTOVER_SUFFIXES))


@dataclass
class Snapshot:
    """A log dir's contents as the checks compare them."""

    records: dict[str, list[tuple]]
    segments: dict[str, dict[str, bytes]]
    checkpoint: dict[str, int]

    @classmethod
    def of(cls, log_dir: Path) -> Snapshot:
        files = {p: segment_files(log_dir / p) for p in PARTITIONS}
        return cls({p: records({n: d for n, d in files[p].items() if n.endswith(".log")}) for p in PARTITIONS},
                   files, checkpoint(log_dir))


_VERIFIED: dict[bytes, str | None] = {}


def verify_ok(log_dir: Path) -> str | None:
    """``kcompact verify`` (its code, in this process): None when clean, else what it printed.
    Run once per distinct log dir content (every file's name, modification time and bytes)."""
    key = digest({f"{p.relative_to(log_dir)}@{p.stat().st_mtime_ns}": p.read_bytes()
                  for p in log_dir.rglob("*") if p.is_file() and p.name != ".lock"})
    if key not in _VERIFIED:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = kcompact_main(["verify", str(log_dir)])
        _VERIFIED[key] = None if code == 0 else out.getvalue()
    return _VERIFIED[key]


# -- processes ----------------------------------------------------------------------------------------------


def job_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("KCOMPACT_CRASH_AT", "KCOMPACT_CRASH_LOG", "KCOMPACT_CRASH_COUNTER", "KCOMPACT_CRASH_SID"):
        env.pop(key, None)
    scratch = tmp / "scratch"  # Spark's local dirs and temp files of killed JVMs land here
    scratch.mkdir(exist_ok=True)
    env.update(TMPDIR=str(scratch), SPARK_LOCAL_DIRS=str(scratch), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, **extra)
    # Short jobs on tiny data: the JVM's optimizing compiler only costs start-up time here
    env["JAVA_TOOL_OPTIONS"] = " ".join(filter(None, [env.get("JAVA_TOOL_OPTIONS"), "-XX:TieredStopAtLevel=1"]))
    env.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.enabled=false pyspark-shell")
    if "KCOMPACT_CRASH_AT" in extra or "KCOMPACT_CRASH_LOG" in extra:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FAULTS), env.get("PYTHONPATH")]))
    return env


def wait_session_gone(sid: int, timeout: float = 120) -> None:
    """Every process of the job's session (JVM, pyspark daemon, workers) has exited."""
    deadline = time.monotonic() + timeout
    while session_processes(sid):
        assert time.monotonic() < deadline, f"processes of session {sid} outlived the kill: {session_processes(sid)}"
        time.sleep(0.1)


def run(args: list[str], env: dict[str, str], out: Path, timeout: float = JOB_TIMEOUT) -> int:
    """Run a command in a session of its own; return its exit code (-9: killed) once every
    process of the session is gone."""
    with open(out, "wb") as f:
        proc = subprocess.Popen(args, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=Path(__file__).resolve().parents[2])
        try:
            code = proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
    wait_session_gone(proc.pid)
    return code


def compact(log_dirs: list[Path], tmp: Path, out: Path, **crash: str) -> int:
    """One job; its commit on one thread, so that its mutations come in one order, run after run."""
    return run([KCOMPACT, "compact", *map(str, log_dirs), "--allow-duplicate-partitions", "--now", NOW,  # copies of one
                "--topic-config", SEGMENT_BYTES_AT_CLEANING, "--spark-conf", "spark.kcompact.commit.threads=1"],
               job_env(tmp, **crash), out)


def recover(log_dirs: list[Path], tmp: Path, out: Path) -> int:
    return run([KCOMPACT, "recover", *map(str, log_dirs), "--allow-duplicate-partitions"], job_env(tmp), out)


def fork_driver(task: dict, tmp: Path, name: str) -> dict[str, dict]:
    """Run tests/faults/fork_driver.py on ``task``: per run, {"killed", "exit"}."""
    path = tmp / f"{name}.task.json"
    path.write_text(json.dumps(task))
    out = tmp / f"{name}.out"
    code = run([sys.executable, str(FAULTS / "fork_driver.py"), str(path)], job_env(tmp), out)
    assert code == 0, out.read_text()[-3000:]
    results = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
    return {r["name"]: r for r in results}


def relative(entries: list[dict], root: Path) -> list[tuple]:
    """A mutation log with paths relative to the log dir (``.`` itself), comparable across copies."""
    root = str(root)
    return [(e["op"], *("." if p == root else p.removeprefix(root + "/") for p in e["paths"])) for e in entries]


def without_leases(entries: list[tuple]) -> list[tuple]:
    """A job's mutations without its lease bookkeeping (kcompact-state files, renewed by a thread
    every 30 s, so anywhere in the log): each is a temp write, a rename, an fsync of the log dir."""
    out = []
    for e in entries:
        if any(p.startswith("kcompact-state.") for p in e[1:]):
            continue
        if e == ("fsync_dir", ".") and not (out and is_step("checkpoint", out[-1])):
            continue
        out.append(e)
    return out


def mutation_log(path: Path) -> list[dict]:
    return read_log(str(path)) if path.exists() else []  # a kill before the first mutation logs nothing


# -- the experiment -------------------------------------------------------------------------------------------


@dataclass
class Checked:
    """One crashed log dir after recovery (or after the convergence run)."""

    outcome: dict[str, str]  # partition -> old / new / MIX
    checkpoint: dict[str, int]
    lost: int = 0  # records the uninjected cleaning keeps that are missing
    compared: int = 0  # records compared
    problems: list[str] = field(default_factory=list)


@dataclass
class Lab:
    tmp: Path
    before: Snapshot
    after: Snapshot
    commit: list[tuple]  # the uninjected job's commit mutations, relative paths
    order: list[str]  # the partitions in the order the job commits them
    job_points: dict[str, tuple[str, int | None]] = field(default_factory=dict)  # kill -> (spec, commit done)
    job_logs: dict[str, list[tuple]] = field(default_factory=dict)
    job_codes: dict[str, int] = field(default_factory=dict)
    partial_cleaned: list[str] = field(default_factory=list)
    unknown_after_kill: dict[str, list[str]] = field(default_factory=dict)  # crashed log dir -> names no broker knows
    checkpoint_tmp_left: bool = False
    template_is_job_output: bool = False
    driver_results: dict[str, dict] = field(default_factory=dict)
    driver_logs: dict[str, list[tuple]] = field(default_factory=dict)
    driver_uninjected: Snapshot | None = None
    threaded_results: dict[str, dict] = field(default_factory=dict)  # the wave's fsyncs, removals on THREADS threads
    recover_templates: dict[str, str] = field(default_factory=dict)  # template -> the crashed dir it copies
    recover_results: dict[str, dict] = field(default_factory=dict)
    recover_logs: dict[str, list[tuple]] = field(default_factory=dict)
    recover_codes: dict[str, int] = field(default_factory=dict)
    after_recovery: dict[str, Checked] = field(default_factory=dict)
    converge_code: int | None = None
    after_convergence: dict[str, Checked] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def check(self, log_dir: Path, converged: bool = False) -> Checked:
        try:
            now = Snapshot.of(log_dir)
        except Exception as exc:  # noqa: BLE001 - kafka-python cannot read it: a failure to report, not to crash on
            return Checked(dict.fromkeys(PARTITIONS, "MIX"), {}, sum(map(len, self.after.records.values())),
                           problems=[f"unreadable: {exc!r}"])
        checked = Checked({}, now.checkpoint)
        for p in PARTITIONS:
            got = now.records[p]
            checked.compared += len(got)
            checked.lost += len(set(self.after.records[p]) - set(got))
            if got == self.before.records[p] and now.segments[p] == self.before.segments[p]:
                checked.outcome[p] = "old"
            elif got == self.after.records[p] and (converged or now.segments[p] == self.after.segments[p]):
                checked.outcome[p] = "new"  # a second cleaning may group segments otherwise: records decide
            else:
                checked.outcome[p] = "MIX"
                checked.problems.append(f"{p}: neither the old nor the new partition: {self.mix(p, now)}")
            old, new = self.before.checkpoint.get(p), self.after.checkpoint[p]
            mark = now.checkpoint.get(p)
            if mark not in (old, new) or (converged and mark != new):
                checked.problems.append(f"{p}: checkpoint {mark}, expected {new if converged else (old, new)}")
            if mark == new != old and checked.outcome[p] != "new":
                checked.problems.append(f"{p}: checkpoint {mark} claims a cleaning that is not on disk")
        if converged and set(checked.outcome.values()) != {"new"}:
            checked.problems.append(f"did not converge to the uninjected result: {checked.outcome}")
        if unknown := unknown_names(log_dir):
            checked.problems.append(f"names no broker knows: {unknown}")
        if leftovers(log_dir):
            checked.problems.append(f"leftovers: {leftovers(log_dir)}")
        states = sorted(p.name for p in log_dir.glob("kcompact-state.*"))
        if states:
            checked.problems.append(f"cleaning states of a dead job left: {states}")
        problems = verify_ok(log_dir)
        if problems:
            checked.problems.append(f"kcompact verify: {problems}")
        return checked

    def mix(self, p: str, now: Snapshot) -> str:
        """What differs, for the failure message."""
        out = []
        for name, then in (("old", self.before), ("new", self.after)):
            files = sorted(n for n in {*now.segments[p], *then.segments[p]}
                           if now.segments[p].get(n) != then.segments[p].get(n))
            out.append(f"vs {name}: records {'equal' if now.records[p] == then.records[p] else 'differ'}, "
                       f"files differing {files}")
        return "; ".join(out)

    def expected_outcome(self, k: int) -> dict[str, str]:
        """Killed before commit mutation k (1-based): a partition is new once every one of its
        ``.cleaned`` files became ``.swap`` (the protocol's point of no return), else old."""
        done = set(self.commit[:k - 1])
        return {p: "new" if all(e in done for e in self.commit if is_step("swap", e, p)) else "old"
                for p in PARTITIONS}

    def expected_checkpoint(self, k: int) -> dict[str, int]:
        """Killed before commit mutation k: a partition's checkpoint is new once a checkpoint rename
        after its last final rename is done (one write for the wave's partitions, after their swaps)."""
        out = {}
        for p in PARTITIONS:
            swapped = max(i for i, e in enumerate(self.commit) if is_step("final", e, p))
            moved = any(is_step("checkpoint", e) for e in self.commit[swapped:k - 1])
            out[p] = self.after.checkpoint[p] if moved else self.before.checkpoint.get(p)
        return {p: v for p, v in out.items() if v is not None}


STEPS = {  # the commit's steps, by the mutations they make (relative paths)
    "swap": lambda e: e[0] == "rename" and e[2].endswith(".swap"),
    "deleted": lambda e: e[0] == "rename" and e[2].endswith(".deleted"),
    "final": lambda e: e[0] == "rename" and e[1].endswith(".swap"),
    "remove": lambda e: e[0] == "remove" and e[1].endswith(".deleted"),
    "checkpoint": lambda e: e[0] == "rename" and e[2] == "cleaner-offset-checkpoint",
}


def is_step(step: str, entry: tuple, partition: str | None = None) -> bool:
    return STEPS[step](entry) and (partition is None or entry[1].startswith(partition + "/"))


def commit_section(entries: list[tuple]) -> list[tuple]:
    """The commit's mutations: from the fsyncs of the partition dirs before the first ``.swap``
    rename to the fsync after the last checkpoint rename, then the removals of the ``.deleted``
    files, which a thread makes once every partition is committed (the job's other mutations may
    come between them)."""
    first = next(i for i, e in enumerate(entries) if is_step("swap", e))
    last = max(i for i, e in enumerate(entries) if is_step("checkpoint", e))
    assert entries[first - 1][0] == "fsync_dir" and entries[last + 1][0] == "fsync_dir"
    while entries[first - 1][0] == "fsync_dir":
        first -= 1
    assert not any(is_step("remove", e) for e in entries[:last + 2])
    return entries[first:last + 2] + [e for e in entries[last + 2:] if is_step("remove", e)]


# Kills that need no knowledge of the commit, run beside the uninjected job: in a Spark worker, the
# second .log.cleaned file to reach 512 bytes (every group here writes more); the first .swap rename.
EARLY_KILLS = {"cleaned-write": "create_file:.log.cleaned:2:after-bytes=512",
               "before-first-swap": "rename:.swap:1"}


def commit_crash_points(log: list[dict], root: Path, lab: Lab) -> dict[str, tuple[str, int]]:
    """The whole-job kills inside the commit, located in the uninjected job's log:
    (KCOMPACT_CRASH_AT, how many commit mutations are done when it strikes)."""
    rel = relative(log, root)
    first, second = lab.order

    def at(step: str, partition: str | None, which: int, op: str, substring: str) -> tuple[str, int]:
        """The which-th mutation of a commit step (of a partition), as op:substring:N."""
        hit = [i for i, e in enumerate(rel) if is_step(step, e, partition)][which]
        return f"{op}:{substring}:{nth_of(log, hit, op, substring)}", lab.commit.index(rel[hit])

    return {
        "before-first-swap": at("swap", first, 0, "rename", ".swap"),
        "mid-swap": at("swap", first, 2, "rename", ".swap"),
        "mid-deleted": at("deleted", second, 5, "rename", ".deleted"),
        "mid-final": at("final", first, 5, "rename", ".swap"),
        # the first partition's checkpoint: its temp file written and fsynced, not renamed
        "checkpoint-before-rename": ("write_atomic:cleaner-offset-checkpoint:1:before-rename",
                                     at("checkpoint", None, 0, "rename", "cleaner-offset-checkpoint.tmp")[1]),
    }


pytestmark = pytest.mark.slow  # every test here waits for the module fixture below: more than 20 s


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Lab:
    tmp = tmp_path_factory.mktemp("crash")
    started = time.monotonic()
    spec = tmp / "spec.json"
    spec.write_text(json.dumps(SPEC))
    source = tmp / "input"
    with contextlib.redirect_stdout(io.StringIO()):
        assert kcompact_main(["gen", "--out", str(source), "--seed", "3", "--spec", str(spec)]) == 0
    before = Snapshot.of(source)
    baseline, jobs = tmp / "baseline", tmp / "jobs"
    jobs.mkdir()

    def killed_job(name: str, point: str) -> int:
        shutil.copytree(source, jobs / name)
        return compact([jobs / name], tmp, jobs / f"{name}.out", KCOMPACT_CRASH_AT=point,
                       KCOMPACT_CRASH_LOG=str(jobs / f"{name}.log"))

    def uninjected_job() -> int:
        shutil.copytree(source, baseline)
        return compact([baseline], tmp, tmp / "baseline.out", KCOMPACT_CRASH_LOG=str(tmp / "baseline.log"))

    # Whole jobs side by side (each in a session of its own: a kill takes its own job only). Round 1:
    # the uninjected job, every mutation logged, and the kills that need no knowledge of it.
    with ThreadPoolExecutor(JOB_LANES) as lanes:
        running = {name: lanes.submit(killed_job, name, point) for name, point in EARLY_KILLS.items()}
        assert lanes.submit(uninjected_job).result() == 0, (tmp / "baseline.out").read_text()[-3000:]
        after = Snapshot.of(baseline)
        base_log = read_log(str(tmp / "baseline.log"))
        commit = commit_section(without_leases(relative(base_log, baseline)))
        lab = Lab(tmp, before, after, commit, list(dict.fromkeys(e[1].split("/")[0] for e in commit
                                                                 if is_step("swap", e))))
        lab.seconds["uninjected job"] = time.monotonic() - started

        # Round 2: the kills inside the commit, while the sweeps run here
        lab.job_points = {"cleaned-write": (EARLY_KILLS["cleaned-write"], None)} | commit_crash_points(
            base_log, baseline, lab)
        assert lab.job_points["before-first-swap"][0] == EARLY_KILLS["before-first-swap"]
        running |= {name: lanes.submit(killed_job, name, point) for name, (point, _) in lab.job_points.items()
                    if name not in running}
        running["before-first-swap"].result()
        sweep = sweep_commit(lab, jobs / "before-first-swap")
        threaded = sweep_threaded(lab)
        running["cleaned-write"].result()
        sweep_recover(lab, sweep, jobs / "cleaned-write")
        lab.job_codes = {name: job.result() for name, job in running.items()}
    lab.seconds["killed jobs and sweeps"] = time.monotonic() - started - lab.seconds["uninjected job"]
    for name in lab.job_points:
        lab.job_logs[name] = without_leases(relative(mutation_log(jobs / f"{name}.log"), jobs / name))
    lab.partial_cleaned = sorted(str(f.relative_to(jobs)) for f in (jobs / "cleaned-write").rglob("*.log.cleaned")
                                 if f.stat().st_size == 512)
    lab.checkpoint_tmp_left = (jobs / "checkpoint-before-rename" / "cleaner-offset-checkpoint.tmp").exists()

    # recover every crashed log dir (each killed job's by a command of its own), then check
    mark = time.monotonic()
    crashed = {f"job:{n}": jobs / n for n in lab.job_points}
    crashed |= {f"commit:{n}": sweep / n for n in lab.driver_results if n != "uninjected"}
    crashed |= {f"threaded:{n}": threaded / n for n in lab.threaded_results}
    crashed |= {f"recover:{n}": tmp / "recover" / n for n in lab.recover_results if not n.endswith("-uninjected")}
    lab.unknown_after_kill = {
        name: unknown_names(log_dir) for name, log_dir in crashed.items()
    }  # as the kills left them
    for name in lab.job_points:
        lab.recover_codes[f"job:{name}"] = recover([jobs / name], tmp, jobs / f"{name}.recover.out")
    lab.recover_codes["sweeps"] = recover([d for n, d in crashed.items() if not n.startswith("job:")], tmp,
                                          tmp / "recover-sweeps.out")
    for name, log_dir in crashed.items():
        lab.after_recovery[name] = lab.check(log_dir)
    lab.seconds["recover + check"] = time.monotonic() - mark

    # compaction again, one job over the log dirs of every killed job and commit: the uninjected
    # result (a recovery killed and run again ends as the uninterrupted one: checked above)
    mark = time.monotonic()
    again = {n: d for n, d in crashed.items() if not n.startswith(("recover:", "threaded:"))}
    lab.converge_code = compact(list(again.values()), tmp, tmp / "converge.out")
    for name, log_dir in again.items():
        lab.after_convergence[name] = lab.check(log_dir, converged=True)
    lab.seconds["convergence + check"] = time.monotonic() - mark
    lab.seconds["total"] = time.monotonic() - started
    return lab


def sweep_commit(lab: Lab, killed_before_swap: Path) -> Path:
    """Every mutation of the commit, each in a forked process, on the .cleaned files of the job
    killed before its first .swap rename; and the same commit uninjected."""
    template = lab.tmp / "commit-template"
    shutil.copytree(killed_before_swap, template)
    cleaned = {(p, name): data for p in PARTITIONS for name, data in lab.after.segments[p].items()
               if name.endswith(".log") and lab.before.segments[p].get(name) != data}  # the groups written
    lab.template_is_job_output = sorted(str(f.relative_to(template)) for f in template.rglob("*.log.cleaned")) == \
        sorted(f"{p}/{name}.cleaned" for p, name in cleaned) and all(
        (template / p / f"{name}.cleaned").read_bytes() == data for (p, name), data in cleaned.items())
    sweep = lab.tmp / "commit"
    runs = [{"name": "uninjected", "template": str(template), "crash_at": None}] + [
        {"name": f"k{k:03d}", "template": str(template), "crash_at": f"*::{k}"} for k in range(1, len(lab.commit) + 1)]
    partitions = [{"dir": p, "topic": p.rsplit("-", 1)[0], "partition": int(p.rsplit("-", 1)[1]),
                   "end": lab.after.checkpoint[p]} for p in lab.order]
    lab.driver_results = fork_driver({"action": "commit", "work": str(sweep), "partitions": partitions,
                                      "runs": runs}, lab.tmp, "commit")
    for r in runs:
        lab.driver_logs[r["name"]] = relative(mutation_log(sweep / f"{r['name']}.log"), sweep / r["name"])
    lab.driver_uninjected = Snapshot.of(sweep / "uninjected")
    return sweep


THREADS, STRIDE = 4, 3  # the threaded sweep: a kill at every third mutation of a wave on 4 threads


def sweep_threaded(lab: Lab) -> Path:
    """The same wave with its fsyncs and the removal of its ``.deleted`` files on ``THREADS``
    threads (its renames stay on one), killed at every ``STRIDE``-th mutation: the order of those
    mutations of different partitions varies from run to run, so what is checked is only what
    holds in any order (each partition old or new, a moved checkpoint entry only beside a new
    partition)."""
    sweep = lab.tmp / "threaded"
    runs = [{"name": f"t{k:03d}", "template": str(lab.tmp / "commit-template"), "crash_at": f"*::{k}"}
            for k in range(1, len(lab.commit) + 1, STRIDE)]
    partitions = [{"dir": p, "topic": p.rsplit("-", 1)[0], "partition": int(p.rsplit("-", 1)[1]),
                   "end": lab.after.checkpoint[p]} for p in lab.order]
    lab.threaded_results = fork_driver({"action": "commit", "work": str(sweep), "partitions": partitions,
                                        "threads": THREADS, "runs": runs}, lab.tmp, "threaded")
    return sweep


def sweep_recover(lab: Lab, sweep: Path, killed_mid_cleaned: Path) -> None:
    """``kcompact recover`` killed at each of its mutations, from crash states whose recoveries
    differ: rolled back, rolled forward from each step of the commit, a partial .cleaned file, a
    checkpoint's temp file."""
    commit, first = lab.commit, lab.order[0]

    def first_after(k: int, step: str) -> int:
        """The first k' >= k such that the mutation done last before k' is of ``step``."""
        return next(j for j in range(max(k, 2), len(commit) + 1) if is_step(step, commit[j - 2], first))

    swapped = first_after(1, "swap")
    while lab.expected_outcome(swapped)[first] == "old":
        swapped += 1
    checkpoint_tmp = next(k for k in range(2, len(commit) + 1) if commit[k - 2] == (
        "write_durable", "cleaner-offset-checkpoint.tmp"))
    states = {
        "commit-mid-swap": first_after(1, "swap") + 2,  # rolled back: .swap files above .cleaned ones
        "commit-all-swapped": swapped,  # rolled forward from here on
        "commit-mid-deleted": first_after(swapped, "deleted") + 4,
        "commit-mid-final": first_after(swapped, "final") + 3,
        "commit-mid-remove": first_after(swapped, "remove") + 3,
        "commit-checkpoint-tmp": checkpoint_tmp,
    }
    templates = lab.tmp / "recover-templates"
    for name, k in states.items():
        shutil.copytree(sweep / f"k{k:03d}", templates / name)
        lab.recover_templates[name] = f"commit:k{k:03d}"
    shutil.copytree(killed_mid_cleaned, templates / "job-cleaned-write")
    lab.recover_templates["job-cleaned-write"] = "job:cleaned-write"
    work = lab.tmp / "recover"
    uninjected = fork_driver({"action": "recover", "work": str(work), "runs": [
        {"name": f"{t}-uninjected", "template": str(templates / t), "crash_at": None}
        for t in lab.recover_templates]}, lab.tmp, "recover-uninjected")
    runs = [{"name": f"{t}-k{k:03d}", "template": str(templates / t), "crash_at": f"*::{k}"}
            for t in lab.recover_templates for k in range(1, len(mutation_log(work / f"{t}-uninjected.log")) + 1)]
    lab.recover_results = uninjected | fork_driver({"action": "recover", "work": str(work), "runs": runs},
                                                   lab.tmp, "recover-crashes")
    for name in lab.recover_results:
        lab.recover_logs[name] = relative(mutation_log(work / f"{name}.log"), work / name)


# -- the checks -----------------------------------------------------------------------------------------------


def test_the_setup_is_what_the_test_claims(lab):
    for p in PARTITIONS:
        assert lab.after.records[p] != lab.before.records[p], f"{p}: the cleaning removed nothing"
        groups = [e for e in lab.commit if is_step("swap", e, p) and e[2].endswith(".log.swap")]
        replaced = [e for e in lab.commit if is_step("deleted", e, p) and e[2].endswith(".log.deleted")]
        assert len(groups) >= 2, f"{p}: one segment group only"
        assert len(replaced) > len(groups), f"{p}: no group spans two segments"
        assert lab.after.checkpoint[p] != lab.before.checkpoint.get(p)
    assert {e[0] for e in lab.commit} == {"rename", "remove", "fsync_dir", "write_durable"}
    written = [data for p in PARTITIONS for name, data in lab.after.segments[p].items()
               if name.endswith(".log") and lab.before.segments[p].get(name) != data]
    assert min(map(len, written)) > 512, "a group too small for the kill mid .cleaned write"


def test_the_commit_driver_is_the_job_commit(lab):
    """The sweep's commit makes the job's mutations in the job's order and ends in the job's files;
    the .cleaned files it starts from are the job's output, byte for byte."""
    assert lab.template_is_job_output
    assert lab.driver_results["uninjected"] == {"name": "uninjected", "killed": False, "exit": 0}
    assert lab.driver_logs["uninjected"] == lab.commit
    assert lab.driver_uninjected == lab.after


def test_every_kill_happened_where_it_was_injected(lab):
    for name, (point, done) in lab.job_points.items():
        assert lab.job_codes[name] == -9, f"job {name} ({point}) was not killed: exit {lab.job_codes[name]}"
        log = lab.job_logs[name]
        if done is None:  # killed before the commit
            assert not any(is_step("swap", e) for e in log), name
            continue
        start = log.index(lab.commit[0])
        assert log[start:] == lab.commit[:done], f"job {name}: killed after {len(log) - start} commit mutations"
    assert lab.partial_cleaned, "the kill mid .cleaned write left no partial .cleaned file"
    assert lab.checkpoint_tmp_left, "the kill before the checkpoint's rename left no temp file"
    for k in range(1, len(lab.commit) + 1):
        result = lab.driver_results[f"k{k:03d}"]
        assert result["killed"], result
        assert lab.driver_logs[f"k{k:03d}"] == lab.commit[:k - 1], f"commit killed before mutation {k}"
    assert len(lab.threaded_results) == len(range(1, len(lab.commit) + 1, STRIDE))
    assert all(result["killed"] for result in lab.threaded_results.values()), lab.threaded_results
    for name, result in lab.recover_results.items():
        template, _, k = name.rpartition("-")
        if k == "uninjected":
            assert result["exit"] == 0, result
            continue
        assert result["killed"], result
        assert lab.recover_logs[name] == lab.recover_logs[f"{template}-uninjected"][:int(k[1:]) - 1], name


def test_every_name_a_kill_leaves_is_one_a_broker_knows(lab):
    assert len(lab.unknown_after_kill) > len(lab.commit)
    assert not {name: found for name, found in lab.unknown_after_kill.items() if found}


def test_recovery_gives_the_old_or_the_new_partition_never_a_mix(lab):
    assert set(lab.recover_codes.values()) == {0}, lab.recover_codes
    problems = {name: c.problems for name, c in lab.after_recovery.items() if c.problems}
    assert not problems, json.dumps(problems, indent=1)[:5000]
    assert sum(c.lost for c in lab.after_recovery.values()) == 0
    for k in range(1, len(lab.commit) + 1):  # the protocol's promise, exactly
        checked = lab.after_recovery[f"commit:k{k:03d}"]
        assert (checked.outcome, checked.checkpoint) == (lab.expected_outcome(k), lab.expected_checkpoint(k)), k
    old = dict.fromkeys(PARTITIONS, "old")
    assert lab.after_recovery["job:cleaned-write"].outcome == old
    assert lab.after_recovery["job:before-first-swap"].outcome == old
    for name, (_, done) in lab.job_points.items():
        if done is not None:  # a whole job killed at commit mutation done + 1: as the sweep's
            assert lab.after_recovery[f"job:{name}"].outcome == lab.expected_outcome(done + 1), name
            assert lab.after_recovery[f"job:{name}"].checkpoint == lab.expected_checkpoint(done + 1), name


def test_a_crash_during_recovery_ends_the_same_way(lab):
    """Killed at any mutation of ``kcompact recover`` and recovered again: the partitions and the
    checkpoint of the uninterrupted recovery of the same crash state."""
    seen = 0
    for name, checked in lab.after_recovery.items():
        if name.startswith("recover:"):
            source = lab.after_recovery[lab.recover_templates[name.removeprefix("recover:").rpartition("-")[0]]]
            assert (checked.outcome, checked.checkpoint) == (source.outcome, source.checkpoint), name
            seen += 1
    assert seen >= 10 * len(lab.recover_templates)


def test_compaction_after_recovery_converges_to_the_uninjected_result(lab):
    assert lab.converge_code == 0, (lab.tmp / "converge.out").read_text()[-3000:]
    problems = {name: c.problems for name, c in lab.after_convergence.items() if c.problems}
    assert not problems, json.dumps(problems, indent=1)[:5000]


def test_summary(lab, capsys):
    points = {"whole jobs": len(lab.job_points), "commit mutations": len(lab.commit),
              "threaded commit kills": len(lab.threaded_results),
              "recover mutations": sum(1 for n in lab.recover_results if not n.endswith("-uninjected"))}
    checked = [*lab.after_recovery.values(), *lab.after_convergence.values()]
    outcomes: dict[str, int] = {}
    for c in lab.after_recovery.values():
        for o in c.outcome.values():
            outcomes[o] = outcomes.get(o, 0) + 1
    lost = sum(c.lost for c in checked)
    with capsys.disabled():
        print(f"\ncrash points injected: {sum(points.values())} {points}; runs per point: 1 kill + 1 recover "
              f"(+ 1 compact for killed jobs and commits, one job for all {len(lab.after_convergence)}); "
              f"partitions after recovery: {outcomes}; "
              f"records compared: {sum(c.compared for c in checked)}; lost: {lost}; "
              f"seconds: { {k: round(v, 1) for k, v in lab.seconds.items()} }")
    assert lost == 0
