"""The whole path: partitions that fit one worker, each read by one task that makes its map too.

Each task takes a share of the partitions, balanced by bytes, and is sent that share alone
(``compaction.pipeline.tasks.shipped``); a partition is read once, from its
end back, its map made on the way (``compaction.cleaning.backward.clean_partition``); the files of
all its groups are made durable together before the task reports them. When a job has fewer
tasks than cores (one large partition), each task uses the idle cores as threads. Which
partitions come here: ``compaction.pipeline.routing``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from kcompact.compaction.cleaning.backward import clean_partition
from kcompact.compaction.cleaning.results import GroupResult
from kcompact.compaction.cleaning.rewrite import GroupJob, GroupPlans, made_durable
from kcompact.compaction.pipeline.settings import JobSettings
from kcompact.compaction.pipeline.tasks import bins, shipped, task_count, unshipped
from kcompact.operations import states
from kcompact.session import kinds


def clean(spark, pids: list[int], sizes: list[int], keys: list[int], jobs: dict[int, tuple[GroupJob, GroupPlans]],
          groups_of: dict[int, list[int]], dry_run: bool, owner: str, settings: JobSettings):
    """A DataFrame of ``GroupResult``: the groups of partitions ``pids``, read whole."""
    from pyspark.sql.pandas.types import from_arrow_schema

    total = sum(sizes[pid] for pid in pids)
    shares = bins([sizes[pid] for pid in pids], task_count(spark, total, len(pids), step_bytes=settings.step_bytes))
    threads = settings.task_threads(len(shares))
    carried = [[(groups_of[pids[i]], [jobs[gid] for gid in groups_of[pids[i]]], keys[pids[i]]) for i in share]
               for share in shares]

    def run(rows: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        results: list[GroupResult] = []
        for share in unshipped(rows):
            for gids, groups, key_count in share:
                done = clean_partition(groups, render=not dry_run, held=lambda path: states.held_by(path, owner),
                                       threads=threads, keys=key_count)
                results += (row.but(gid=gid) for gid, row in zip(gids[len(gids) - len(done):], done, strict=True))
        if results:
            yield GroupResult.batch(made_durable(results))

    return shipped(spark, carried).mapInArrow(kinds.carrying(spark, run), from_arrow_schema(GroupResult.schema()))
