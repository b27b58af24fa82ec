"""``operations.deleted.Removal``: the ``.deleted`` files of many partitions, removed a directory
per thread, each one that could not be removed said, none forgotten."""

from __future__ import annotations

from kcompact.operations.deleted import THREADS, Removal


def test_every_file_of_every_dir_removed_and_each_failure_said(tmp_path):
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
    removal.start([*paths, *stuck, gone])
    problems = removal.wait()
    assert not list(tmp_path.glob("topic-*/*.log.deleted"))
    assert sorted(problem.split(": not removed (")[0] for problem in problems) == sorted(stuck)
    assert all(problem.endswith("'kcompact recover' removes it") for problem in problems)
