"""Removing the ``.deleted`` files a commit leaves, on threads of their own.

A ``.deleted`` file is garbage from the moment it is renamed: no reader takes it for a segment,
a broker deletes it on its scheduler (``file.delete.delay.ms`` later) or when it loads the log,
and ``kcompact recover`` removes any that are left. Removing one is not free: the kernel drops
the file's pages from the page cache, milliseconds for a large segment. So the job commits
every partition first and removes the files afterwards, while the command finishes (its last-run
stamps), still holding the log dirs' locks: ``kcompact.steps`` waits for it before it lets them go.
The unlinks of one directory wait on its lock, those of others do not: a directory a thread, on
the commit's threads (``spark.kcompact.commit.threads``; one: a directory after another, each
first named first, its files in the order named).
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Sequence

from kcompact import storage

NAME = "kcompact-remove-deleted"  # the removal's threads' names begin with it


class Removal:
    """``start`` once with the paths; ``wait`` returns what could not be removed (a file someone
    removed first is gone, as wanted)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._problems: list[str] = []

    def start(self, paths: Sequence[str], threads: int = 1) -> None:
        """Remove ``paths`` on a thread of its own, a directory at a time on each of ``threads``."""
        self._thread = threading.Thread(target=self._remove, args=(list(paths), threads), name=NAME)
        self._thread.start()

    def wait(self) -> list[str]:
        if self._thread is not None:
            self._thread.join()
        return self._problems

    def _remove(self, paths: list[str], threads: int) -> None:
        by_dir: dict[str, list[str]] = {}
        for path in paths:
            by_dir.setdefault(posixpath.dirname(path), []).append(path)
        storage.on_threads(self._remove_each, list(by_dir.values()), threads, NAME)

    def _remove_each(self, paths: list[str]) -> None:
        for path in paths:
            try:
                storage.remove(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                self._problems.append(f"{path}: not removed ({exc}); 'kcompact recover' removes it")
