"""Kafka's choice of what to clean (LogCleanerManager.grabFilthiestCompactedLog), computed
for every partition of one or many log dirs at once as a Spark DataFrame.

``plan(spark, paths, conf=None, now=None, top=None, max_bytes=None)`` is the entry point
for notebooks and jobs; the rules themselves are in ``planner.rules`` (pure functions).
"""

from __future__ import annotations


def plan(spark, paths, conf=None, now=None, top=None, max_bytes=None):
    """One row per partition: offsets, byte counts, ratio, the effective configuration with
    its sources, ``selected``, ``skip_reason`` and ``rank``. See ``planner.build.plan``."""
    from planner.build import plan as build_plan  # keeps ``import planner.rules`` free of Spark

    return build_plan(spark, paths, conf=conf, now=now, top=top, max_bytes=max_bytes)
