"""Progress of a long Spark stage on the console: tasks done, bytes done, elapsed time, an ETA.

A job says when a stage begins and when a partition is committed (its ``progress`` callback);
between the two a stage can run for minutes with nothing to show. While a command runs, the
``Ticker`` reads Spark's status tracker every ``every`` seconds and, when tasks are under way,
prints one line for them. The job splits its work into tasks of about equal bytes, large work into
several per core (``compaction.pipeline.tasks.task_count``), so the share of tasks done is the share
of bytes done and it moves while a stage runs; the ETA assumes the rest goes at the pace so far.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kcompact.conf.units import MB
from kcompact.session import warm_workers

EVERY = 10.0  # seconds between two lines


class Ticker:
    def __init__(self, tracker, say: Callable[[str], None], what: str, total_bytes: int | None = None,
                 every: float = EVERY, clock: Callable[[], float] = time.monotonic):
        self.tracker, self.say, self.what, self.total_bytes = tracker, say, what, total_bytes
        self.every, self.clock = every, clock
        self.first_seen: dict[int, float] = {}  # Spark job id -> the tick before the one that first saw it
        self.last_tick = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Ticker:
        self._thread = threading.Thread(target=self._loop, name="kcompact-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                line = self.line()
            except Exception:  # noqa: BLE001 - a status read racing the session's end: no line this time
                continue
            if line:
                self.say(line)

    def line(self) -> str | None:
        """The tasks of the Spark jobs running now, or None when none runs."""
        now, since = self.clock(), self.last_tick
        self.last_tick = now
        groups = getattr(self.tracker, "getJobIdsForGroup", None)  # a Connect status has no groups
        warming = set(groups(warm_workers.GROUP)) if groups else set()
        running = [j for j in self.tracker.getActiveJobsIds() if j not in warming]
        jobs = [job for job in (self.tracker.getJobInfo(j) for j in running) if job]
        if not jobs:
            return None
        done = total = 0
        for job in jobs:
            self.first_seen.setdefault(job.jobId, since)  # it began after the previous look
            for stage in filter(None, (self.tracker.getStageInfo(s) for s in job.stageIds)):
                done += stage.numCompletedTasks
                total += stage.numTasks
        if not total:
            return None
        elapsed = now - min(self.first_seen[job.jobId] for job in jobs)
        share = done / total
        line = f"  {self.what}: {done}/{total} tasks done"
        if self.total_bytes:
            line += f", about {share * self.total_bytes / MB:.1f} of {self.total_bytes / MB:.1f} MB"
        line += f", {elapsed:.0f} s"
        if 0 < share < 1:
            line += f", ETA {elapsed * (1 - share) / share:.0f} s"
        return line
