"""Operators first, again (issue 26 item 5): inputs a broker would refuse, summaries that hide
nothing, outputs checked by trying them, and messages that name the path.

Expected exit codes are the README's (0 done, 1 bad input for verify and dump, 2 usage, 4
partial); "nothing written" is checked by comparing every file before and after.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kcompact import errors
from kcompact.jobs.cli import main
from tests.e2e.test_operator_inputs import EXPECTED, dirty, files, not_log_dirs, one_line
from tests.support import checkpoint_text, write_partition

NOW = 1_720_300_000_000
COMPACT = ["--topic-config", "*:cleanup.policy=compact"]
ROOT = Path(__file__).resolve().parents[2]
JOBS = ("plan", "compact", "retain", "run", "recover")


def paused(log_dir: Path, name: str, count: int = 1) -> None:
    (log_dir / f"kcompact-state.{name}.json").write_text(json.dumps({"state": "paused", "pause_count": count}))


# -- 1. one partition in two log dirs; one log dir named twice ----------------------------------
@pytest.mark.parametrize("command", JOBS)
def test_a_partition_in_two_log_dirs_is_refused_naming_both(tmp_path, command, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    dirty(a / "orders-0")
    dirty(a / "orders-3")
    dirty(b / "orders-3")
    dirty(b / "clicks-1")
    before = files(tmp_path)
    assert main([command, str(a), str(b), *(["--now", str(NOW)] if command != "recover" else [])]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"kcompact: orders-3 is in two log dirs, {a} and {b}: "), line
    assert line.endswith("give --allow-duplicate-partitions"), line
    assert files(tmp_path) == before  # not even a .lock


def test_copies_of_log_dirs_are_taken_together_when_said_so(tmp_path):
    """Copies of one log dir (snapshots, crash points, other brokers' disks) in one command."""
    a, b = tmp_path / "a", tmp_path / "b"
    dirty(a / "orders-3")
    dirty(b / "orders-3")
    assert main(["recover", str(a), str(b), "--allow-duplicate-partitions"]) == 0


def test_a_partition_moving_between_log_dirs_is_not_a_duplicate(tmp_path, capsys):
    """``-future`` (a move between log dirs under way) and ``-delete`` dirs are not live logs."""
    a, b = tmp_path / "a", tmp_path / "b"
    dirty(a / "orders-3")
    dirty(b / "orders-3.7b2c5a41e5e64b0e9d7d3b2e0e5c6a11-future")
    dirty(b / "clicks-1")
    from kcompact.jobs import checks

    checks.distinct_partitions([str(a), str(b)])


@pytest.mark.parametrize("command", [*JOBS, "status"])
def test_one_log_dir_named_twice_is_refused(tmp_path, command, capsys):
    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-3")
    (tmp_path / "link").symlink_to(log_dir)
    now = ["--now", str(NOW)] if command not in ("recover", "status") else []
    before = files(tmp_path)
    for second, says in ((str(log_dir), f"{log_dir} is named twice"),
                         (f"{log_dir}/", f"{log_dir} and {log_dir}/ are the same log dir"),
                         (str(tmp_path / "link"), f"{log_dir} and {tmp_path / 'link'} are the same log dir")):
        assert main([command, str(log_dir), second, *now]) == 2, second
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"kcompact: {says}: ") and "name each log dir once" in line, line
    assert files(tmp_path) == before


def test_one_s3_log_dir_named_twice_is_refused():
    from kcompact.jobs import checks

    with pytest.raises(errors.BadArgument, match="s3://b/logs and s3://b//logs/ are the same log dir"):
        checks.distinct_log_dirs(["s3://b/logs", "s3://b//logs/"])
    checks.distinct_log_dirs(["s3://b/logs", "s3://b/logs2", "s3://c/logs"])


# -- 2. paused partitions are listed in every summary --------------------------------------------
def test_paused_partitions_are_listed_in_every_summary(spark, tmp_path, capsys):
    log_dir = tmp_path / "logs"
    for name in ("orders-0", "orders-1", "orders-2"):
        dirty(log_dir / name)
    paused(log_dir, "orders-1")
    paused(log_dir, "orders-2", 2)
    listed = (f"paused partitions: {log_dir}: 2 (orders-1, orders-2) -> "
              f"'kcompact resume {log_dir} orders-1 orders-2'")
    for command in ("compact", "retain", "run"):
        capsys.readouterr()
        assert main([command, str(log_dir), "--now", str(NOW), "--dry-run", *COMPACT]) == 0, (
            command
        )  # a pause is a choice
        out = capsys.readouterr().out.splitlines()
        assert listed in out, (command, out)


# -- 3. a job that does nothing says so -----------------------------------------------------------
def test_a_job_that_cleans_nothing_says_what_happened(spark, tmp_path, capsys):
    log_dir = tmp_path / "garbage"
    dirty(log_dir / "orders-0")
    dirty(log_dir / "orders-1")
    (log_dir / "cleaner-offset-checkpoint").write_text("garbage\n")
    for command in ("compact", "run"):
        capsys.readouterr()
        assert main([command, str(log_dir), "--now", str(NOW), *COMPACT]) == 4, command
        out = capsys.readouterr().out.splitlines()
        assert "not cleaned until fixed (2 partitions):" in out
        assert out[-1] == "nothing cleaned: 2 partitions held back until fixed (above)", out


# -- 4. recover on a log dir with no partition ----------------------------------------------------
def test_recover_on_a_log_dir_without_partitions_ends_partial(tmp_path, capsys):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "meta.properties").write_text("version=1\nnode.id=1\n")
    (log_dir / "recovery-point-offset-checkpoint").write_bytes(checkpoint_text([]))
    assert main(["recover", str(log_dir)]) == 4
    assert f"kcompact: {log_dir}: no partitions in this log dir: nothing to do" in capsys.readouterr().err
    other = tmp_path / "other"
    dirty(other / "orders-0")
    assert main(["recover", str(other)]) == 0
    assert main(["recover", str(other), str(log_dir)]) == 4


# -- 5. an output is checked by trying what writing it needs ---------------------------------------
def tmpfs(mount: Path, options: str):
    """A tmpfs mounted at ``mount`` with ``options``, unmounted afterwards."""
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], check=False)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only mount (a tmpfs mounted ro)."""
    yield from tmpfs(tmp_path / "ro", "ro,size=64k")


def test_outputs_that_cannot_be_written_are_refused_before_the_job(tmp_path, read_only_dir, capsys):
    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    before = files(tmp_path)
    cases = [(["compact", "--report", "/proc/r.json"], "--report /proc/r.json: directory /proc is not writable"),
             (["run", "--report", f"{read_only_dir}/r.json"],
              f"--report {read_only_dir}/r.json: directory {read_only_dir} is not writable (read-only file system)"),
             (["plan", "--output", "/proc/p.json"], "--output /proc/p.json: directory /proc is not writable"),
             (["plan", "--plot", f"{read_only_dir}/p.png"], f"--plot {read_only_dir}/p.png: directory {read_only_dir} "
                                                            "is not writable"),
             (["recover", "--report", "/proc/r.json"], "--report /proc/r.json: directory /proc is not writable")]
    for (command, *options), says in cases:
        assert main([command, str(log_dir), *options]) == 2, command
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"kcompact: {says}"), line
    assert files(tmp_path) == before
    assert not [p for p in Path("/proc").iterdir() if p.name.startswith(".kcompact")]


def test_a_read_only_log_dir_is_refused_before_spark_starts(tmp_path, monkeypatch, capsys):
    from kcompact.jobs import spark

    started = []
    monkeypatch.setattr(spark, "session", lambda *a, **kw: started.append(a) or pytest.fail("Spark started"))
    for mount in tmpfs(tmp_path / "logs", "size=1m"):
        dirty(mount / "orders-0")
        before = files(mount)
        if subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=False).returncode != 0:
            pytest.skip("cannot remount a tmpfs read-only here")
        for command in ("compact", "run", "retain"):
            assert main([command, str(mount)]) == 2, command
            line = one_line(capsys.readouterr().err)
            assert line == (f"kcompact: {mount}: the log dir is not writable (read-only file system); the command "
                            "writes its .lock, states and segments there"), line
        assert files(mount) == before
    assert not started


# -- 6. dump: a path that holds no segment, a path that is not a log dir -------------------------
def test_dump_refuses_a_path_that_is_not_a_log_dir_as_verify_does(tmp_path, capsys):
    paths = not_log_dirs(tmp_path)
    for kind in ("empty dir", "other dir"):
        assert main(["verify", str(paths[kind])]) == 2
        verify = one_line(capsys.readouterr().err)
        assert main(["dump", str(paths[kind])]) == 2, kind
        out = capsys.readouterr()
        assert out.out == ""
        line = one_line(out.err)
        assert line.startswith(verify) and EXPECTED in line, (line, verify)


def test_dump_of_a_dir_without_segment_files_says_so(tmp_path, capsys):
    part = tmp_path / "logs" / "orders-0"
    part.mkdir(parents=True)
    (part / "leader-epoch-checkpoint").write_text("0\n0\n")
    assert main(["dump", str(part)]) == 1
    assert capsys.readouterr().out == f"Error: {part}: holds no segment files\n"
    log_dir = tmp_path / "bare"
    log_dir.mkdir()
    (log_dir / "meta.properties").write_text("version=1\nnode.id=1\n")
    assert main(["dump", str(log_dir)]) == 1
    assert capsys.readouterr().out == f"Error: {log_dir}: holds no segment files (no partition directories)\n"


# -- 7. a full disk names the path and the room needed ---------------------------------------------
@pytest.fixture
def tiny_disk(tmp_path):
    """A size-limited directory: a tmpfs mount of 160 KiB."""
    yield from tmpfs(tmp_path / "tiny", "size=160k")


def test_a_full_disk_names_the_mount_the_file_and_the_room_needed(spark, tiny_disk):
    from kcompact.compaction.pipeline import job
    from kcompact.conf import resolve
    from kcompact.planner.build import plan
    from tests.e2e.test_safety import recs

    log_dir = tiny_disk / "logs"
    write_partition(log_dir / "big-0", [(0, [recs(0, [b"k%d" % i for i in range(30)], 1500)]),
                                        (30, [recs(30, [b"k0"], 1500)]), (31, [recs(31, [b"z"], 10)])])
    group_bytes = sum((log_dir / "big-0" / f"{base:020d}.log").stat().st_size for base in (0, 30))
    filler = tiny_disk / "filler"
    free = os.statvfs(tiny_disk).f_bavail * os.statvfs(tiny_disk).f_frsize
    filler.write_bytes(b"\0" * max(0, free - 8_000))
    config = resolve.build(topic_args=["*:cleanup.policy=compact"])
    result = job.run(spark, plan(spark, [str(log_dir)], conf=config, now=NOW), now=NOW, progress=lambda line: None)
    (report,) = result.report.partitions
    assert not report.committed
    mb = group_bytes / 2**20
    needed = f"{mb:.1f}" if mb >= 0.05 else f"{mb:.2g}"
    assert (f"no space left on {tiny_disk} (writing big-0/00000000000000000000.log.cleaned, up to {needed} MB needed)"
            in report.error), report.error
    assert report.error.startswith("I/O error (transient, retried next run): ")


def test_a_full_disk_while_writing_a_file_names_it(tiny_disk):
    """A write that fails for want of room raises ENOSPC from write(), with no file name: the path
    being written is named (a report, a checkpoint, a state file)."""
    from kcompact import storage
    target = tiny_disk / "r.json"
    with pytest.raises(OSError) as raised:
        storage.write_durable(str(target), b"x" * 400_000)
    assert storage.describe_error(raised.value) == f"{target}: no space left on device"


# -- 9. the spark-submit entry scripts ------------------------------------------------------------
@pytest.mark.parametrize("command", JOBS)
def test_each_entry_script_names_its_command(command):
    done = subprocess.run([sys.executable, str(ROOT / "jobs" / f"{command}.py"), "--help"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert re.match(rf"usage: (kcompact {command}|{command}\.py) ", done.stdout), done.stdout[:200]


def test_readme_and_deployment_name_every_entry_script():
    readme = (ROOT / "README.md").read_text()
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for command in JOBS:
        assert f"`jobs/{command}.py`" in readme, command
        assert f"`{command}.py`" in deployment.split("## What `make dist` writes")[1].split("##")[0], command
        assert f"jobs/{command}.py" in makefile, command
