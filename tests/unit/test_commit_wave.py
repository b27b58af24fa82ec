"""A local commit wave (``operations.commit.commit_wave``): Kafka's swap for many partitions at
once, each step done for every partition and then made durable once, the cleaner checkpoint
written once after every swap; a partition that fails leaves the wave alone.

Truth: records read back by kafka-python, the checkpoint parsed here by its text format, the
order of the mutations by the protocol of docs/protocols.md#swap-protocol.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from kcompact import storage
from kcompact.operations.cleaned import WrittenGroup
from kcompact.operations.commit import LocalCommit, commit_wave
from kcompact.operations.recover import recover_partition
from kcompact.storage import durable
from tests.support import TS0, checkpoint_text, kp_batches, kp_keyed, make_batches, patch_storage, write_partition

END = 30  # the cleaned range: segments 0 and 15 become one group at 0; segment 30 stays


def old_records(p: int) -> list[tuple]:
    out = []
    for b in [*make_batches(0, 3), *make_batches(15, 3), *make_batches(30, 2)]:
        out += [(r.offset, r.value) for r in kp_batches(b)[0]]
    return out


def new_records(p: int) -> list[tuple]:
    kept = [(r.offset, r.value) for r in kp_batches(kp_keyed(10, _cleaned_kv(p), TS0))[0]]
    return kept + [r for r in old_records(p) if r[0] >= END]


def _cleaned_kv(p: int) -> list[tuple[bytes, bytes]]:
    return [(b"k%d" % i, b"cleaned %d of t-%d" % (i, p)) for i in range(5)]


def records(part: Path) -> list[tuple]:
    out = []
    for log in sorted(part.glob("*.log")):
        for batch in kp_batches(log.read_bytes()):
            out += [(r.offset, r.value) for r in batch]
    return out


def checkpoint(log_dir: Path) -> dict[str, int]:
    lines = (log_dir / "cleaner-offset-checkpoint").read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2
    return {f"{t}-{p}": int(o) for t, p, o in (line.split() for line in lines[2:])}


def wave(log_dir: Path, n: int) -> list[LocalCommit]:
    """``n`` partitions of three segments, each with a cleaned group written for the first two;
    a checkpoint holding an entry of t-0 and one of a partition the log dir no longer holds."""
    (log_dir / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("t", 0, 0), ("gone", 0, 5)]))
    commits = []
    for p in range(n):
        part = write_partition(log_dir / f"t-{p}", [(0, make_batches(0, 3)), (15, make_batches(15, 3)),
                                                    (30, make_batches(30, 2))])
        files = []
        for kind, data in (("log", kp_keyed(10, _cleaned_kv(p), TS0)), ("index", b""), ("timeindex", b"")):
            files.append(str(part / f"{0:020d}.{kind}.cleaned"))
            Path(files[-1]).write_bytes(data)
        commits.append(LocalCommit(str(part), "t", p, [WrittenGroup(0, len(data), 1, 5, tuple(files))], END))
    return commits


@pytest.mark.parametrize("threads", [1, 4])
def test_a_wave_commits_every_partition_and_moves_the_checkpoint_once(tmp_path, threads):
    commits = wave(tmp_path, 6)
    results = commit_wave(str(tmp_path), commits, threads)
    for p, deleted in enumerate(results):
        part = tmp_path / f"t-{p}"
        assert sorted(Path(d).name for d in deleted) == sorted(
            f"{base:020d}.{kind}.deleted" for base in (0, 15) for kind in ("log", "index", "timeindex"))
        assert records(part) == new_records(p)
        assert not [f.name for f in part.iterdir() if f.suffix in (".swap", ".cleaned")]
    assert checkpoint(tmp_path) == {f"t-{p}": END for p in range(6)}  # the gone partition's entry dropped


def test_each_step_is_done_for_the_whole_wave_then_made_durable_once(tmp_path, monkeypatch):
    commits = wave(tmp_path, 3)
    log: list[tuple[str, str]] = []
    for op in ("rename", "fsync_dir"):
        real = getattr(storage, op)

        def traced(*args, real=real, op=op):
            log.append((op, args[-1] if op == "rename" else Path(args[0]).name))
            return real(*args)
        patch_storage(monkeypatch, op, traced)
    commit_wave(str(tmp_path), commits, 1)
    kinds = []
    for op, what in log:
        kind = ("fsync" if op == "fsync_dir" else "checkpoint" if what.endswith("cleaner-offset-checkpoint")
                else "swap" if what.endswith(".swap") else "deleted" if what.endswith(".deleted") else "final")
        if not kinds or kinds[-1][0] != kind:
            kinds.append((kind, []))
        kinds[-1][1].append(what)
    dirs = sorted(f"t-{p}" for p in range(3))
    assert [k for k, _ in kinds] == ["fsync", "swap", "fsync", "deleted", "fsync", "final", "fsync", "checkpoint",
                                     "fsync"]
    for at in (0, 2, 4, 6):  # every partition dir once per step
        assert sorted(kinds[at][1]) == dirs
    assert kinds[8][1] == [tmp_path.name]  # the checkpoint's rename made durable
    assert len(kinds[1][1]) == len(kinds[5][1]) == 9 and len(kinds[3][1]) == 18


def test_a_waves_renames_come_partition_after_partition_whatever_its_threads(tmp_path, monkeypatch):
    """The renames of a wave on the committing thread, in the wave's order (docs/protocols.md): the
    same sequence with 4 commit threads as with one, so a crash point names one rename run after run."""
    import threading

    runs, real = {}, storage.rename
    for threads in (1, 4):
        root = tmp_path / f"threads-{threads}"
        root.mkdir()
        commits = wave(root, 5)
        seen = []

        def traced(src, dst, real=real, seen=seen, root=root):
            seen.append((threading.get_ident(), Path(src).relative_to(root).as_posix(), Path(dst).name))
            return real(src, dst)
        patch_storage(monkeypatch, "rename", traced)
        commit_wave(str(root), commits, threads)
        assert {ident for ident, _, _ in seen} == {threading.get_ident()}
        runs[threads] = [(src, dst) for _, src, dst in seen]
    assert runs[4] == runs[1]
    swaps = [src.split("/")[0] for src, dst in runs[1] if dst.endswith(".swap")]
    assert swaps == [f"t-{p}" for p in range(5) for _ in range(3)]  # each partition's three files together


def test_a_partition_whose_swap_fails_is_left_alone_and_recovered(tmp_path, monkeypatch):
    commits = wave(tmp_path, 4)
    real = storage.rename

    def failing(src, dst):
        if src.endswith("t-2/00000000000000000000.index.cleaned"):  # its first group's second file
            raise OSError(errno.EIO, "injected", src)
        return real(src, dst)
    patch_storage(monkeypatch, "rename", failing)
    results = commit_wave(str(tmp_path), commits, 4)
    assert isinstance(results[2], OSError)
    assert all(isinstance(r, list) and r for i, r in enumerate(results) if i != 2)
    assert checkpoint(tmp_path) == {"t-0": END, "t-1": END, "t-3": END}  # t-2 had no entry: it still has none
    patch_storage(monkeypatch, "rename", real)
    recover_partition(str(tmp_path / "t-2"), indexes=False)
    assert records(tmp_path / "t-2") == old_records(2)  # a .cleaned file was left: the swap is undone
    for p in (0, 1, 3):
        assert records(tmp_path / f"t-{p}") == new_records(p)


def test_a_dir_whose_fsync_fails_fails_its_partition_alone(tmp_path, monkeypatch):
    commits = wave(tmp_path, 3)
    real = storage.fsync_dir
    calls = []

    def failing(path):
        calls.append(path)
        if path.endswith("t-1") and calls.count(path) == 3:  # after its .deleted renames
            raise OSError(errno.EIO, "injected", path)
        return real(path)
    patch_storage(monkeypatch, "fsync_dir", failing)
    results = commit_wave(str(tmp_path), commits, 1)
    assert isinstance(results[1], OSError) and isinstance(results[0], list) and isinstance(results[2], list)
    assert checkpoint(tmp_path) == {"t-0": END, "t-2": END}
    recover_partition(str(tmp_path / "t-1"), indexes=False)  # past the point of no return: finished
    assert records(tmp_path / "t-1") == new_records(1)


def test_a_full_disk_at_the_checkpoint_removes_the_deleted_files_first(tmp_path, monkeypatch):
    commits = wave(tmp_path, 3)
    real = storage.write_durable
    refused = []

    def full(path, data):
        if path.endswith("cleaner-offset-checkpoint.tmp") and not refused:
            refused.append(path)
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real(path, data)
    patch_storage(monkeypatch, "write_durable", full)
    results = commit_wave(str(tmp_path), commits, 2)
    assert refused and results == [[], [], []]
    assert not list(tmp_path.rglob("*.deleted"))
    assert checkpoint(tmp_path) == {f"t-{p}": END for p in range(3)}


def test_many_dirs_of_one_file_system_are_made_durable_by_one_syncfs(tmp_path, monkeypatch):
    """From ``SYNCFS_FROM`` dirs on, one syncfs(2) (Linux >= 5.8, where it reports write-back errors)
    instead of an fsync each; when it fails, each dir's fsync says which one failed."""
    calls = []
    monkeypatch.setattr(durable, "_syncfs_reports_errors", lambda: True)
    patch_storage(monkeypatch, "fsync_dir", lambda path: calls.append(("fsync", path)))
    patch_storage(monkeypatch, "syncfs", lambda path: calls.append(("syncfs", path)))
    dirs = [str(tmp_path / f"t-{p}") for p in range(storage.SYNCFS_FROM)]
    for d in dirs:
        Path(d).mkdir()
    assert storage.fsync_dirs(dirs, 4) == {} and calls == [("syncfs", dirs[0])]
    calls.clear()
    assert storage.fsync_dirs(dirs[1:], 4) == {} and sorted(calls) == sorted(("fsync", d) for d in dirs[1:])

    def broken(path):
        raise OSError(errno.EIO, "injected", path)
    calls.clear()
    patch_storage(monkeypatch, "syncfs", broken)
    patch_storage(monkeypatch, "fsync_dir", lambda path: broken(path) if path == dirs[3] else calls.append(path))
    failed = storage.fsync_dirs(dirs, 1)
    assert list(failed) == [dirs[3]] and calls == [d for d in dirs if d != dirs[3]]
