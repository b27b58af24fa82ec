"""A task's cleaned groups are made durable together before it reports them
(``compaction.cleaning.rewrite.made_durable``): ``write_group`` fsyncs nothing; many files of
one file system take one ``syncfs``, a few an fsync each; a group with a file whose fsync failed
fails, its files removed and the error naming the file, and the other groups stand."""

from __future__ import annotations

import errno
import os

import numpy as np

from kcompact import storage
from kcompact.compaction.cleaning.results import IO_ERROR, GroupResult
from kcompact.compaction.cleaning.rewrite import made_durable
from kcompact.errors.failure import Failure
from kcompact.operations.cleaned import ChunkOut, write_group
from kcompact.storage import durable
from kcompact.writers.chunks import BufferSizes
from tests.support import kp_keyed, patch_storage


def _group(pdir, base: int) -> GroupResult:
    """One group of one batch written by ``write_group`` (kafka-python's bytes), as a task has it."""
    data = kp_keyed(base, [b"k"], 1_700_000_000_000)
    out = ChunkOut(segment="s", in_size=np.array([len(data)]), data=np.frombuffer(data, np.uint8),
                   at=np.array([0]), size=np.array([len(data)]), max_offset=np.array([base]),
                   max_timestamp=np.array([0]), offset_of_max_timestamp=np.array([base]), records=np.array([1]))
    pdir.mkdir(exist_ok=True)
    buffers = BufferSizes.of(1 << 20, 1, 1 << 20, 1 << 20)
    written = write_group(str(pdir), base, [out], [], 1_700_000_000_000, 4096, buffers)
    return GroupResult(gid=base, path=str(pdir), group=0, base_offset=base, size=written.size, files=written.files)


def _fsyncs(monkeypatch) -> list[str]:
    """The paths ``os.fsync`` is called on, from now on."""
    seen, real = [], os.fsync

    def fsync(fd):
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_write_group_fsyncs_nothing_and_a_few_files_are_fsynced_each(tmp_path, monkeypatch):
    seen = _fsyncs(monkeypatch)
    groups = [_group(tmp_path / "t-0", 0), _group(tmp_path / "t-0", 10)]
    assert seen == []
    files = [path for g in groups for path in g.files]
    assert len(files) == 6 < storage.SYNCFS_FROM  # .log, .index, .timeindex each
    assert made_durable(groups) == groups
    assert sorted(seen) == sorted(files)


def test_many_files_of_one_file_system_take_one_syncfs(tmp_path, monkeypatch):
    monkeypatch.setattr(durable, "_syncfs_reports_errors", lambda: True)
    synced = []
    patch_storage(monkeypatch, "syncfs", synced.append)
    groups = [_group(tmp_path / f"t-{p}", 0) for p in range(6)]
    seen = _fsyncs(monkeypatch)
    assert made_durable(groups) == groups
    assert len(synced) == 1 and seen == []


def test_a_group_whose_file_cannot_be_synced_fails_alone_and_leaves_nothing(tmp_path, monkeypatch):
    groups = [_group(tmp_path / "t-0", 0), _group(tmp_path / "t-1", 0)]
    bad = groups[1].files[1]  # the second group's .index.cleaned
    real = os.fsync

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path == bad:
            raise OSError(errno.EIO, "Input/output error")  # as fsync(2) fails: no file named
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    ok, failed = made_durable(groups)
    assert ok == groups[0] and all(os.path.exists(path) for path in ok.files)
    assert failed.error.startswith(IO_ERROR) and bad in failed.error and failed.failure == Failure.IO.value
    assert failed.files == () and failed.size == 0
    assert not any(os.path.exists(path) for path in groups[1].files)


def test_no_room_met_only_by_the_sync_is_said_as_a_writes(tmp_path, monkeypatch):
    """ENOSPC from fsync(2) (late allocation: NFS, XFS and ext4 with delalloc): the error names
    the file and the room, as ``no_space`` says a write's."""
    group = _group(tmp_path / "t-0", 0)

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", fsync)
    [failed] = made_durable([group])
    assert failed.error.startswith(f"{IO_ERROR}no space left on /")
    assert f"(writing t-0/{os.path.basename(group.files[0])}, up to " in failed.error
    assert failed.failure == Failure.IO.value and not any(os.path.exists(path) for path in group.files)
