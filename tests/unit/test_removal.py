"""``operations.deleted.Removal``: the ``.deleted`` files of many partitions, removed a directory
per thread, each one that could not be removed said, none forgotten; on one thread in the order
given, a directory after another (the crash sweeps kill it at a chosen unlink)."""

from __future__ import annotations

import threading

from kcompact import storage
from kcompact.operations.deleted import NAME, Removal
from tests.support import patch_storage

THREADS = 4


def _spy(monkeypatch) -> list[tuple[str, str]]:
    """(thread name, path) of each ``storage.remove`` call, as it is made."""
    calls, real = [], storage.remove

    def remove(path):
        calls.append((threading.current_thread().name, path))
        real(path)

    patch_storage(monkeypatch, "remove", remove)
    return calls


def test_every_file_of_every_dir_removed_and_each_failure_said(tmp_path, monkeypatch):
    calls = _spy(monkeypatch)
    paths, stuck = [], []
    for p in range(THREADS * 3):  # more dirs than threads: a thread takes several
        d = tmp_path / f"topic-{p}"
        d.mkdir()
        for base in range(5):
            f = d / f"{base:020d}.log.deleted"
            f.write_bytes(b"x" * 100)
            paths.append(str(f))
        blocker = d / f"{99:020d}.index.deleted"  # a directory where a file was: unlink refuses it
        blocker.mkdir()
        stuck.append(str(blocker))
    gone = str(tmp_path / "topic-0" / "00000000000000000077.log.deleted")  # removed by someone first
    removal = Removal()
    removal.start([*paths, *stuck, gone], THREADS)
    problems = removal.wait()
    assert not list(tmp_path.glob("topic-*/*.log.deleted"))
    assert sorted(problem.split(": not removed (")[0] for problem in problems) == sorted(stuck)
    assert all(problem.endswith("'kcompact recover' removes it") for problem in problems)
    names = {name for name, _ in calls}
    assert 1 < len(names) <= THREADS and all(name.startswith(NAME) for name in names)
    by_dir = {}
    for name, path in calls:  # each directory's files on one thread
        by_dir.setdefault(path.rsplit("/", 1)[0], set()).add(name)
    assert all(len(names) == 1 for names in by_dir.values())


def test_one_thread_removes_a_directory_after_another_in_the_order_given(tmp_path, monkeypatch):
    calls = _spy(monkeypatch)
    paths = []
    for p in (2, 0, 1):
        d = tmp_path / f"topic-{p}"
        d.mkdir()
        for base in (4, 0):
            f = d / f"{base:020d}.log.deleted"
            f.write_bytes(b"x")
            paths.append(str(f))
    paths = paths[1:] + paths[:1]  # a directory's files not all together
    removal = Removal()
    removal.start(paths)
    assert removal.wait() == []
    expected = [("topic-2", 0), ("topic-2", 4), ("topic-0", 4), ("topic-0", 0), ("topic-1", 4), ("topic-1", 0)]
    assert [path for _, path in calls] == [str(tmp_path / d / f"{base:020d}.log.deleted") for d, base in expected]
    assert {name for name, _ in calls} == {NAME}
