"""The command line's observer of a step (``kcompact.observer.Observer``): what its console shows
besides the progress lines, and the removal of the replaced files that it hands the steps."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from kcompact.observer import Observer


class Console(Observer):
    """``say``: the progress lines (none with --quiet); ``ready``: ``time.monotonic()`` when the
    session was; ``removal``: the command's ``operations.deleted.Removal``."""

    def __init__(self, spark, say: Callable[[str], None], ready: float | None = None, removal=None):
        self.spark, self.say, self.ready, self.removal = spark, say, ready, removal

    def summary(self, text: str) -> None:
        """A step's summary (what recovery repaired, what retention did): kept by --quiet."""
        print(text, flush=True)

    @contextlib.contextmanager
    def watch(self, what: str, total_bytes: int | None = None) -> Iterator[None]:
        """Every ``jobs.progress.EVERY`` seconds while a Spark stage of ``what`` runs, its progress."""
        from kcompact.jobs.progress import Ticker
        from kcompact.session import kinds

        with kinds.status(self.spark) as tracker, Ticker(tracker, self.say, what, total_bytes):
            yield
