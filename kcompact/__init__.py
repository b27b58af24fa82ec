"""kcompact's Python API, for notebooks, Airflow and the ``kcompact`` command line alike.

    import kcompact

    kcompact.plan(spark, log_dirs, *, now=None, top=None, max_bytes=None, ...)   -> Plan
    kcompact.compact(spark, log_dirs=None, *, plan: Plan = None, now=None, dry_run=False,
                     max_partitions=None, lease_ms=120000, ...)                 -> CompactionResult
    kcompact.retain(spark, log_dirs, *, now=None, dry_run=False, ...)           -> RetentionResult
    kcompact.run(spark, log_dirs, *, now=None, dry_run=False, max_partitions=None,
                 lease_ms=120000, ...)                                          -> NightlyReport
    kcompact.recover(log_dirs, *, torn_tails=True)                              -> RecoveryReport
    kcompact.register_data_source(spark)     # spark.read.format("kafka-log").load(log_dir)
    kcompact.plot(plan: Plan)                                                   -> matplotlib Figure

``plan`` is Kafka's cleaning decision for every partition (nothing written): a
``planner.plan.Plan``, whose rows are typed records on the driver (``plan.rows``, of
``contracts.plan_row.PlanRow``), an Arrow table (``plan.table``) and, for a notebook, a Spark
DataFrame (``plan.df(spark)``); ``compact`` cleans the selected partitions of a
plan as Kafka's cleaner would and writes each log dir's last-run stamp; ``retain`` deletes what
Kafka's retention would; ``run`` is the nightly job (recover, retain, plan, compact, on one
clock); ``recover`` is a broker's load-time recovery. Every function takes
the command line's options as keyword arguments with its defaults: ``now`` (epoch ms; default the
clock), ``dry_run``, and the configuration by Kafka's names: ``config_files`` (``--config``),
``broker_config={"log.cleaner.min.cleanable.ratio": 0.3}``, ``topic_config={"orders":
{"min.cleanable.dirty.ratio": 0.1}}``, and ``kafka_version="4.1"`` (the Kafka release whose cleaner to
reproduce, as ``--kafka-version``). Log dirs are local paths or ``s3://`` URLs; ``progress``
(default ``print``) receives the progress lines; ``observer`` (of ``compact``, ``retain``, ``run``:
a ``kcompact.Observer``, whose every hook does nothing by default) what the command line's console
adds: each step's summary as it ends, a context around each Spark step (its ticker). Each command
returns one object (``kcompact.results``): the reports of what it did, with the plan it followed,
its counts as properties and ``to_json()``, the JSON of its ``--report``. On an ``s3://`` log
dir, ``compact``, ``retain``, ``run`` and ``recover`` (not a dry run) first ask whether the store
honours conditional writes, and raise ``kcompact.errors.NoConditionalWrites`` before writing
anything when it does not (docs/deployment.md, "S3-compatible stores"). ``compact``, ``retain``
and ``run`` hold every log dir's ``.lock`` while they work and raise ``kcompact.errors.LogDirBusy``
when another process (a broker, another job) holds one, or, given ``leave_busy=True``, leave that
log dir alone and name it with its holder in the result's ``busy`` (``recover`` skips it:
``RecoveryReport.skipped``). Importing this package imports no Spark.

The layers (``kcompact.readers``, ``kcompact.compaction``...) are subpackages of this one, so the
functions are imported on first use: a Spark worker that needs only the byte format does not load
the API's layers.
"""

import importlib

_MODULES = {"CompactionResult": "results", "NightlyReport": "results", "RetentionResult": "results",
            "Observer": "observer", "compact": "steps", "plan": "steps", "plot": "steps", "recover": "steps",
            "register_data_source": "steps", "retain": "steps", "run": "steps"}
__all__ = list(_MODULES)


def __getattr__(name: str):
    if name in _MODULES:
        return getattr(importlib.import_module(f"kcompact.{_MODULES[name]}"), name)
    raise AttributeError(f"module 'kcompact' has no attribute {name!r}")
