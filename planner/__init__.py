"""Kafka's choice of what to clean (LogCleanerManager.grabFilthiestCompactedLog), computed
for every partition of one or many log dirs at once on Spark.

``planner.build.plan(spark, paths, conf, now=None, top=None, max_bytes=None)`` is the entry
point of the API's steps (``kcompact.plan``, which builds ``conf``) and returns a
``planner.plan.Plan``; the rules themselves are in ``planner.rules`` (pure functions).
"""
