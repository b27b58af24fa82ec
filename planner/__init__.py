"""Kafka's choice of what to clean (LogCleanerManager.grabFilthiestCompactedLog), computed
for every partition of one or many log dirs at once on Spark.

``planner.build.plan(spark, paths, conf=None, now=None, top=None, max_bytes=None)`` is the
entry point for notebooks and jobs and returns a ``planner.plan.Plan``; the rules themselves
are in ``planner.rules`` (pure functions).
"""
