"""The steps of a night and the one compaction: what ``kcompact``'s functions do.

The command line (``jobs.cli``), the spark-submit entry points and notebooks call these; nothing
here imports ``jobs``. The function that opens a command (``compact``, ``retain``, ``run``,
``recover``) takes the broker ``.lock`` of every log dir once, for the whole command
(``storage.held_locks``), and hands the log dirs it holds to the layers below, which take none;
none imports Spark before it runs.

The nightly ``run``, in this order, on one Spark session and one clock (``now``):
0. recovery: swaps an earlier run left unfinished are completed or undone, as a broker would
   on start (``operations.recover``);
1. retention: each partition's due prefix deleted, log start and cleaner checkpoints moved
   (``operations.retention``);
2. plan: Kafka's cleaning decision, made on the log as retention left it, so a cleaner
   checkpoint retention raised to the new log start is the first dirty offset;
3. compaction of every selected partition (``compact``: ``compaction.pipeline.job.run``, then the last-run
   stamp).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from kcompact import errors
from kcompact.errors import memory
from kcompact.observer import QUIET, Observer
from kcompact.operations.states import LEASE_MS, wall_ms
from kcompact.results import CompactionResult, NightlyReport, RetentionResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from pyspark.sql import SparkSession

    from kcompact.compaction.reports.report import Report
    from kcompact.conf.resolve import Config
    from kcompact.operations.deleted import Removal
    from kcompact.operations.recover import RecoveryReport
    from kcompact.planner.plan import Plan
    from kcompact.storage import HeldLogDirs

Say = Callable[[str], None]
TopicConfig = Mapping[str, Mapping[str, object]]  # topic name or glob -> {topic-level key: value}
BrokerConfig = Mapping[str, object]  # broker-level key -> value


# -- configuration ---------------------------------------------------------------------------------
def configuration(log_dirs: Sequence[str], *, config: Config | None = None, config_files: Sequence[str] = (),
                  topic_config: TopicConfig | None = None, broker_config: BrokerConfig | None = None,
                  kafka_version: str | None = None, allow_unknown_topics: bool = False,
                  gzip_os: int | None = None) -> Config:
    """The configuration of every step, weakest first: Kafka's defaults, the log dirs' KRaft
    metadata, ``config_files`` (properties files, as ``--config``), ``broker_config``
    (``{"log.cleaner.min.cleanable.ratio": 0.3}``, as ``--broker-config``), ``topic_config``
    (``{"orders": {"cleanup.policy": "compact,delete"}}``, a topic name or glob, as
    ``--topic-config``), ``kafka_version`` (the Kafka release whose cleaner to reproduce, as
    ``--kafka-version``: "4.1", "3.9.2"; default: ``kafka.version`` in a config file, else the log
    dir's finalized metadata.version, else the newest release), ``gzip_os`` (0 or 255, as
    ``--gzip-os``: the gzip header byte for a 3.9 log dir that does not show it). ``config``: one already resolved
    (``conf.resolve.build``), taken as it is. A ``topic_config`` or file naming a topic no log dir
    holds is refused as a likely typo (``conf.resolve.check_topics``), unless ``allow_unknown_topics``."""
    if config is not None:
        if config_files or topic_config or broker_config or kafka_version or gzip_os is not None:
            raise errors.UsageError("give config, or config_files/topic_config/broker_config/kafka_version/gzip_os, "
                                    "not both")
        return config
    return resolved(log_dirs, files=config_files, topic_values=topic_config, broker_values=broker_config,
                    kafka_version=kafka_version, kafka_version_source="kafka_version=", gzip_os=gzip_os,
                    allow_unknown_topics=allow_unknown_topics)


def resolved(log_dirs: Sequence[str], *, files: Sequence[str] = (), topic_args: Sequence[str] = (),
             broker_args: Sequence[str] = (), topic_values: TopicConfig | None = None,
             broker_values: BrokerConfig | None = None, kafka_version: str | None = None,
             kafka_version_source: str = "--kafka-version", gzip_os: int | None = None,
             allow_unknown_topics: bool = False) -> Config:
    """The one place a configuration is built from its sources (the command line's options as
    text, ``configuration``'s as values): the log dirs' KRaft metadata first, then
    ``conf.resolve.build``, then the check of the topics it names against those the log dirs hold."""
    from kcompact.conf import resolve
    from kcompact.logdir import kraft
    from kcompact.logdir.listing import held_partitions

    built = resolve.build(
        files=list(files), topic_args=list(topic_args), broker_args=list(broker_args), topic_values=topic_values,
        broker_values=broker_values, metadata=kraft.metadata_sources(list(log_dirs)), kafka_version=kafka_version,
        kafka_version_source=kafka_version_source, log_dirs=list(log_dirs), gzip_os=gzip_os,
    )
    if not allow_unknown_topics:
        resolve.check_topics(built, lambda: {topic for path in log_dirs for topic, _ in held_partitions(path)})
    return built


def _conditional_writes(log_dirs: Sequence[str], dry_run: bool = False) -> None:
    """Before a step writes anything: every log dir on an object store is on one that honours
    conditional writes, else ``errors.NoConditionalWrites`` (``storage.probe``: asked once per
    store and process, so the command line's own check and the steps of ``run`` ask no more)."""
    if not dry_run:
        from kcompact.storage import probe

        probe.require(log_dirs)


def _held(log_dirs: Sequence[str], dry_run: bool, leave_busy: bool) -> contextlib.AbstractContextManager[HeldLogDirs]:
    """Every log dir's broker ``.lock``, taken once for the command (``errors.LogDirBusy`` when
    another process holds one, or with ``leave_busy`` that log dir left alone and named); a dry
    run creates no ``.lock``."""
    from kcompact import storage

    return storage.held_locks(log_dirs, create=not dry_run, leave_busy=leave_busy)


@contextlib.contextmanager
def _waited(removal: Removal | None) -> Iterator[None]:
    """The replaced files' removal ended, however the command ends, before its locks go."""
    try:
        yield
    finally:
        if removal is not None:
            removal.wait()


def _nothing_compacted(now: int, dry_run: bool) -> tuple[Report, Plan]:
    """The report and plan of a compaction that found every log dir in use: nothing planned, no
    Spark job run."""
    from kcompact.compaction.reports.report import Report
    from kcompact.contracts.plan_row import PlanRow
    from kcompact.planner.plan import Plan

    report = Report(now=now, dry_run=dry_run)
    report.observe_plan([])
    return report, Plan(PlanRow.schema().empty_table())


@contextlib.contextmanager
def _step(spark: SparkSession, name: str) -> Iterator[None]:
    """A step's Spark jobs, tagged: a Ctrl-C or SIGTERM (or any error) that ends the step
    interrupts those still running, on a classic session or a Spark Connect server alike. A job
    that failed for want of memory ends the step as ``errors.OutOfMemory``."""
    from kcompact.operations import critical
    from kcompact.session import kinds

    try:
        with critical.stops_as_interrupts(), kinds.cancellable(spark, name):
            yield
    except Exception as exc:
        if not memory.out_of_memory(exc):
            raise
        raise errors.OutOfMemory(
            "a Spark task ran out of memory: give it more (spark.executor.pyspark.memory caps a Python worker's "
            "address space, spark.driver.memory, --driver-memory, the JVM's heap; a partition over 256 MiB also "
            "takes the shared path once spark.kcompact.map.memory is lowered)") from exc


def _recovered(log_dirs: Sequence[str], progress: Say, observer: Observer) -> RecoveryReport:
    """Interrupted swaps of an earlier run finished or undone, as a broker would on start; the
    summary said only when something was repaired."""
    from kcompact.operations.recover import recover_log_dirs

    report = recover_log_dirs(list(log_dirs), progress=progress, object_store_indexes=False)
    if any(p.changed for p in report.partitions) or report.skipped or report.temp_files:
        observer.summary(report.text())
    return report


def _worker_python(spark: SparkSession) -> None:
    """Spark's Python workers run this interpreter when the session is local and nobody chose one
    (``PYSPARK_PYTHON``, ``spark.pyspark.python``). pyspark's default is ``python3`` on the PATH,
    which from a venv that is not activated is not the Python with kcompact installed: every task
    would fail to import it. pyspark reads the worker Python (``SparkContext.pythonExec``) when it
    makes a Python function, so setting it on a session that exists is in time."""
    try:
        context = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect: no context here, its server's workers are its own
        return
    chosen = os.environ.get("PYSPARK_PYTHON") or context.getConf().get("spark.pyspark.python")
    if not chosen and context.master.startswith("local") and context.pythonExec == "python3":
        context.pythonExec = sys.executable


# -- the functions -------------------------------------------------------------------------------
def plan(spark: SparkSession, log_dirs: Sequence[str], *, now: int | None = None, top: int | None = None,
         max_bytes: int | None = None, retention_only: bool = False, config: Config | None = None,
         config_files: Sequence[str] = (), topic_config: TopicConfig | None = None,
         broker_config: BrokerConfig | None = None, kafka_version: str | None = None) -> Plan:
    """Kafka's cleaning decision (and what retention deletes) for every partition of ``log_dirs``,
    one row per partition (``.rows``: typed records, ``contracts.plan_row.PlanRow``; ``.df(spark)``:
    as a Spark DataFrame). ``top``: select at most N partitions, highest ratio first; ``max_bytes``:
    select in rank order while the dirty bytes fit. Writes nothing."""
    from kcompact.planner.build import plan as build_plan

    _worker_python(spark)
    config = configuration(log_dirs, config=config, config_files=config_files, topic_config=topic_config,
                           broker_config=broker_config, kafka_version=kafka_version)
    with _step(spark, "plan"):
        return build_plan(spark, list(log_dirs), conf=config, now=now, top=top, max_bytes=max_bytes,
                          retention_only=retention_only)


def compact(
    spark: SparkSession,
    log_dirs: Sequence[str] | None = None,
    *,
    plan: Plan | None = None,
    now: int | None = None,
    dry_run: bool = False,
    max_partitions: int | None = None,
    lease_ms: int = LEASE_MS,
    config: Config | None = None,
    config_files: Sequence[str] = (),
    topic_config: TopicConfig | None = None,
    broker_config: BrokerConfig | None = None,
    kafka_version: str | None = None,
    recover_first: bool = True,
    leave_busy: bool = False,
    progress: Say = print,
    observer: Observer = QUIET,
) -> CompactionResult:
    """Plan (unless given the ``plan``, whose log dirs are the default ``log_dirs``) and clean every
    selected partition, as Kafka's cleaner would; the only function that compacts. Each log dir's
    last-run stamp is read before and written after (when it began choosing: what Kafka's
    time-since-last-run-ms measures; a dry run writes nothing). ``recover_first``: interrupted
    swaps of an earlier run finished or undone first (not on a dry run), its summary to the
    ``observer`` when it repaired something. ``leave_busy``: a log dir another process locks (a
    broker, another job) is left alone, the others cleaned, and named with its holder in the
    result's ``busy``; by default ``errors.LogDirBusy`` is raised. ``observer``
    (``kcompact.observer.Observer``): its ``ready`` starts the report's stages (default: now), its
    ``watch`` is a context around planning and around cleaning, its ``removal`` removes the
    replaced files while the last-run stamps are written, ended before the locks go (else they are
    removed before the stamps). Returns the report, the plan it followed and the recovery it ran
    first (``results.CompactionResult``)."""
    ready = time.monotonic() if observer.ready is None else observer.ready
    if plan is not None and (config is not None or config_files or topic_config or broker_config or kafka_version):
        raise errors.UsageError("a plan carries its configuration: give plan or a configuration, not both")
    if log_dirs is None:
        if plan is None:
            raise errors.UsageError("compact needs log_dirs or a plan")
        log_dirs = plan.log_dirs
    log_dirs = list(log_dirs)
    now = wall_ms() if now is None else now
    _conditional_writes(log_dirs, dry_run)
    _worker_python(spark)
    with _held(log_dirs, dry_run, leave_busy) as held, _waited(observer.removal):
        if held.busy and not held.free:
            result = CompactionResult(*_nothing_compacted(now, dry_run))
        else:
            result = _compact(
                spark, held.free, plan=plan.within(held.free) if plan is not None and held.busy else plan, now=now,
                dry_run=dry_run, max_partitions=max_partitions, lease_ms=lease_ms, config=config,
                config_files=config_files, topic_config=topic_config, broker_config=broker_config,
                kafka_version=kafka_version, recover_first=recover_first, progress=progress, observer=observer,
                ready=ready)
    result.busy = held.busy
    return result


def _compact(spark: SparkSession, log_dirs: list[str], *, plan: Plan | None, now: int, dry_run: bool,
             max_partitions: int | None, lease_ms: int, config: Config | None, config_files: Sequence[str] = (),
             topic_config: TopicConfig | None = None, broker_config: BrokerConfig | None = None,
             kafka_version: str | None = None, recover_first: bool, progress: Say, observer: Observer,
             ready: float) -> CompactionResult:
    """``compact``'s work on the log dirs whose locks its caller holds."""
    from kcompact.compaction.pipeline import job
    from kcompact.compaction.pipeline.leases import LeaseKeeper
    from kcompact.operations import last_run
    from kcompact.planner.build import plan as build_plan
    from kcompact.planner.output import selected_bytes

    with _step(spark, "compact"):
        recovery = _recovered(log_dirs, progress, observer) if recover_first and not dry_run else None
        previous = {path: last_run.read(path) for path in log_dirs}
        began = wall_ms()
        if plan is None:
            conf = configuration(log_dirs, config=config, config_files=config_files, topic_config=topic_config,
                                 broker_config=broker_config, kafka_version=kafka_version)
            with observer.watch("planning"):
                plan = build_plan(spark, log_dirs, conf=conf, now=now, top=max_partitions)
        with observer.watch("cleaning", selected_bytes(plan.rows)):
            report = job.run(spark, plan, now=now, dry_run=dry_run, progress=progress, ready=ready,
                             leases=LeaseKeeper(lease_ms=lease_ms), removal=observer.removal).report
        report.previous_runs, report.began_choosing_ms = previous, began
        if not dry_run:
            for path in log_dirs:
                try:
                    last_run.write(path, began)
                except OSError as exc:  # a full disk: the stamp is a gauge's, the run's outcome stands
                    progress(f"  {path.rstrip('/')}/{last_run.FILE} not written: {(exc.strerror or str(exc)).lower()}")
    return CompactionResult(report, plan, recovery)


def retain(spark: SparkSession, log_dirs: Sequence[str], *, now: int | None = None, dry_run: bool = False,
           config: Config | None = None, config_files: Sequence[str] = (), topic_config: TopicConfig | None = None,
           broker_config: BrokerConfig | None = None, kafka_version: str | None = None, recover_first: bool = True,
           leave_busy: bool = False, progress: Say = print, observer: Observer = QUIET) -> RetentionResult:
    """Plan retention for every partition of ``log_dirs`` (on Spark), then delete each partition's
    due prefix and move the checkpoints (driver), as Kafka's retention would. ``recover_first``,
    ``leave_busy``: as ``compact``'s (the first recovery's summary to the ``observer``, a log dir
    left alone in the result's ``busy``). Returns the report, the plan it followed and the
    recovery it ran first (``results.RetentionResult``)."""
    from kcompact.operations.retention import RetentionReport

    now = wall_ms() if now is None else now
    log_dirs = list(log_dirs)
    _conditional_writes(log_dirs, dry_run)
    _worker_python(spark)
    with _held(log_dirs, dry_run, leave_busy) as held:
        if held.busy and not held.free:
            result = RetentionResult(RetentionReport(now, dry_run), _nothing_compacted(now, dry_run)[1])
        else:
            result = _retain(spark, held.free, now=now, dry_run=dry_run, config=config, config_files=config_files,
                             topic_config=topic_config, broker_config=broker_config, kafka_version=kafka_version,
                             recover_first=recover_first, progress=progress, observer=observer)
    result.busy = held.busy
    return result


def _retain(spark: SparkSession, log_dirs: list[str], *, now: int, dry_run: bool, config: Config | None,
            config_files: Sequence[str] = (), topic_config: TopicConfig | None = None,
            broker_config: BrokerConfig | None = None, kafka_version: str | None = None, recover_first: bool,
            progress: Say, observer: Observer) -> RetentionResult:
    """``retain``'s work on the log dirs whose locks its caller holds."""
    from kcompact.operations.retention import execute
    from kcompact.planner.build import plan as build_plan

    started = time.monotonic()
    with _step(spark, "retain"):
        recovery = _recovered(log_dirs, progress, observer) if recover_first and not dry_run else None
        conf = configuration(log_dirs, config=config, config_files=config_files, topic_config=topic_config,
                             broker_config=broker_config, kafka_version=kafka_version)
        progress("retention: planning")
        plan = build_plan(spark, log_dirs, conf=conf, now=now, retention_only=True)
        report = execute(plan.rows, now=now, dry_run=dry_run, progress=progress)
    report.seconds = time.monotonic() - started
    return RetentionResult(report, plan, recovery)


def run(spark: SparkSession, log_dirs: Sequence[str], *, now: int | None = None, dry_run: bool = False,
        max_partitions: int | None = None, lease_ms: int = LEASE_MS, config: Config | None = None,
        config_files: Sequence[str] = (), topic_config: TopicConfig | None = None,
        broker_config: BrokerConfig | None = None, kafka_version: str | None = None, leave_busy: bool = False,
        progress: Say = print, observer: Observer = QUIET) -> NightlyReport:
    """The nightly job: recovery (not on a dry run), retention, a fresh plan, compaction, on one
    configuration and one clock, holding every log dir's ``.lock`` throughout. Recovery's and
    retention's summaries go to the ``observer``'s ``summary`` as each ends; its ``watch`` is a
    context around retention and around each of compaction's Spark steps (``compact``'s), so
    progress names the step under way; its ``removal``: as ``compact``'s. ``leave_busy``: as
    ``compact``'s (a log dir left alone in the result's ``busy``)."""
    now = wall_ms() if now is None else now
    log_dirs = list(log_dirs)
    conf = configuration(
        log_dirs,
        config=config,
        config_files=config_files,
        topic_config=topic_config,
        broker_config=broker_config,
        kafka_version=kafka_version,
    )  # one configuration and one clock for every step
    _conditional_writes(log_dirs, dry_run)
    with _held(log_dirs, dry_run, leave_busy) as held, _waited(observer.removal), _step(spark, "run"):
        if held.busy and not held.free:
            from kcompact.operations.recover import RecoveryReport
            from kcompact.operations.retention import RetentionReport

            report, plan = _nothing_compacted(now, dry_run)
            night = NightlyReport(now, dry_run, None if dry_run else RecoveryReport(), RetentionReport(now, dry_run),
                                  report, plan)
        else:
            night = _night(spark, held.free, conf, now=now, dry_run=dry_run, max_partitions=max_partitions,
                           lease_ms=lease_ms, progress=progress, observer=observer)
    night.busy = held.busy
    return night


def _night(spark: SparkSession, log_dirs: list[str], conf: Config, *, now: int, dry_run: bool,
           max_partitions: int | None, lease_ms: int, progress: Say, observer: Observer) -> NightlyReport:
    """``run``'s steps on the log dirs whose locks its caller holds."""
    from kcompact.operations.recover import recover_log_dirs

    recovery = None  # 0. recovery, before anything reads the log dirs
    if not dry_run:
        recovery = recover_log_dirs(log_dirs, progress=progress, torn_tails=False)
        observer.summary(recovery.text())
    # 1. retention
    with observer.watch("retention"):
        retention = _retain(spark, log_dirs, config=conf, now=now, dry_run=dry_run, recover_first=False,
                            progress=progress, observer=QUIET).report
    observer.summary(retention.text())
    # 2. plan, on the log as retention left it; 3. compaction, its report's stages from its start
    progress("compaction: planning")
    compaction = _compact(spark, log_dirs, plan=None, now=now, dry_run=dry_run, max_partitions=max_partitions,
                          lease_ms=lease_ms, config=conf, recover_first=False, progress=progress, observer=observer,
                          ready=time.monotonic())
    return NightlyReport(now, dry_run, recovery, retention, compaction.report, compaction.plan)


def recover(log_dirs: Sequence[str], *, torn_tails: bool = True, progress: Say = print) -> RecoveryReport:
    """What a broker does on load after a crash, on every partition no live job holds: interrupted
    swaps finished or undone, and (``torn_tails``) torn tails of active segments truncated and
    broken indexes rebuilt. A log dir another process locks is skipped (``skipped``), the holder
    named. Needs no Spark."""
    from kcompact.operations.recover import recover_log_dirs

    _conditional_writes(log_dirs)
    with _held(log_dirs, dry_run=False, leave_busy=True) as held:
        report = recover_log_dirs(held.free, progress=progress, torn_tails=torn_tails)
    report.skipped = held.busy | report.skipped
    return report


def register_data_source(spark: SparkSession) -> None:
    """Register the ``kafka-log`` data source: ``spark.read.format("kafka-log").load(log_dir)``
    reads the segments in place (options: ``datasource.kafka_log``)."""
    from kcompact.datasource.kafka_log import KafkaLogDataSource

    _worker_python(spark)
    spark.dataSource.register(KafkaLogDataSource)


def plot(plan: Plan) -> Figure:
    """The plan's picture: the ratio distribution and the top partitions, a matplotlib Figure
    (``.savefig("plan.png")``; a notebook displays it)."""
    from kcompact.planner.plot import show_plan

    return show_plan(plan)
