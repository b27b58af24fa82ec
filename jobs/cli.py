"""The ``kcompact`` command line: argument parsing, checks before work, exit codes, nothing else.

Every subcommand calls one library function. Before it does, every input is checked (log dirs,
files to write, numbers, ``--now``), so a command refused for its input has written nothing.
Errors about the input (bad bytes, missing files, bad options) end with a one-line message
naming the file and byte position and a non-zero exit; no traceback reaches the user unless
``KCOMPACT_DEBUG`` is set. A job ends 0 only when it did all it was asked: partitions left
undone because of bad input or an uncleanable state make it partial (4), every run, until
someone fixes them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from conf.settings import ConfigError
from jobs import checks
from jobs.checks import BadArgument
from operations.states import wall_ms
from readers.errors import FormatError

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERNAL, EXIT_PARTIAL, EXIT_FAILED = 0, 1, 2, 3, 4, 5
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version as installed

    try:
        return installed("kcompact")
    except PackageNotFoundError:
        return "unknown (not installed)"


# -- output ----------------------------------------------------------------------------------------
def _say(args: argparse.Namespace) -> Callable[[str], None]:
    """Progress lines: on stdout as they happen, none with --quiet."""
    if args.quiet:
        return lambda line: None
    return lambda line: print(line, flush=True)


def _warn(message: str) -> None:
    print(f"kcompact: {message}", file=sys.stderr, flush=True)


# -- the commands ----------------------------------------------------------------------------------
def _dump(args: argparse.Namespace) -> int:
    from tools.dump import dump_path

    return dump_path(args.path, print_data=args.print_data, as_json=args.json, out=sys.stdout)


def _verify(args: argparse.Namespace) -> int:
    from tools.verify import verify_log_dir

    problems = verify_log_dir(args.logdir)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) found in {args.logdir}", file=sys.stderr)
        return EXIT_PROBLEMS
    print(f"{args.logdir}: OK")
    return EXIT_OK


def _gen(args: argparse.Namespace) -> int:
    from tools import generator

    if args.print_spec:
        import json

        print(json.dumps(generator.DEMO_SPEC, indent=1))
        return EXIT_OK
    if not args.out:
        raise BadArgument("gen: --out DIR is required (or --print-spec)")
    spec = generator.load_spec(args.spec)
    spec = generator.override(
        spec,
        records=args.records,
        partitions=args.partitions,
        segment_bytes=args.segment_bytes,
        start_ms=args.start_ms,
    )
    result = generator.generate(args.out, spec, seed=args.seed)
    print(result.summary())
    return EXIT_OK


def _config(args: argparse.Namespace, paths: list[str]):
    """The configuration every job takes: KRaft metadata < --config files < command line."""
    from conf import resolve
    from logdir import kraft

    return resolve.build(
        files=args.config, topic_args=args.topic_config, broker_args=args.broker_config,
        metadata=kraft.metadata_sources(paths),
    )


def _session(args: argparse.Namespace):
    from jobs.spark import Sizing, session

    conf = tuple(args.spark_conf)
    sizing = Sizing.from_env(args.cores, args.driver_memory, conf, args.spark_ui, args.verbose)
    return session(f"kcompact {args.command}", sizing)


@contextlib.contextmanager
def _log_dirs_held(paths: list[str], dry_run: bool = False) -> Iterator[tuple[list[str], list[str]]]:
    """Hold the broker ``.lock`` of every log dir for the whole command: (the free dirs, messages
    about the dirs in use, which are left alone)."""
    import storage

    free, busy = [], []
    with contextlib.ExitStack() as stack:
        for path in paths:
            try:
                stack.enter_context(storage.LogDirLock(path, create=not dry_run))
                free.append(path)
            except storage.LogDirBusy as exc:
                busy.append(str(exc))
                _warn(str(exc))
        yield free, busy


@contextlib.contextmanager
def _removing():
    """The files a compaction's commits renamed to ``.deleted``, removed while the command writes
    its report; waited for before the log dirs' locks go (leave this context first)."""
    from operations.deleted import Removal

    removal = Removal()
    try:
        yield removal
    finally:
        for problem in removal.wait():
            _warn(problem)


def _recover_first(paths: list[str], say: Callable[[str], None]):
    """Interrupted swaps of an earlier run finished or undone, as a broker would on start."""
    from operations.recover import recover_log_dirs

    report = recover_log_dirs(paths, progress=say)
    if any(p.changed for p in report.partitions) or report.skipped or report.temp_files:
        print(report.text(), flush=True)  # what was repaired: a summary, kept by --quiet
    return report


def _recover(args: argparse.Namespace) -> int:
    """The broker's load-time recovery (swaps, torn tails of active segments, broken indexes), on
    every partition not held by a live job."""
    say = _say(args)
    with _log_dirs_held(args.paths) as (free, busy):
        report = None
        if free:
            from operations.recover import recover_log_dirs

            report = recover_log_dirs(free, progress=say, torn_tails=True)
            print(report.text())
            if args.report:
                _write_report(args, report.to_json(), page=False)  # no page layout for recovery
    failed = len(busy) + (report.failed if report else 0)
    return _exit_status(failed, len(args.paths) + (len(report.partitions) if report else 0))


def _status(args: argparse.Namespace) -> int:
    from compaction.status import render, status

    rows = status(args.paths, show_idle=args.all)
    if args.json:
        import json

        print(json.dumps([r.as_dict() for r in rows], indent=1))
    else:
        print(render(rows))
    return EXIT_OK


def _state_command(args: argparse.Namespace) -> int:
    """pause / resume / abort / reset-uncleanable on named partitions of one log dir."""
    from operations import states

    change = {"pause": states.pause, "resume": states.resume, "abort": states.abort,
              "reset-uncleanable": states.reset_uncleanable}[args.command]
    failed = 0
    for name in args.partitions:
        path = f"{args.logdir.rstrip('/')}/{name}"
        try:
            new = change(path)
        except states.StateError as exc:
            _warn(f"{name}: {args.command} refused: {exc}")
            failed += 1
            continue
        print(f"{name}: {new.state}" + (f" ({new.pause_count}x)" if new.pause_count else ""))
    return _exit_status(failed, len(args.partitions))


def _plan(args: argparse.Namespace) -> int:
    from compaction.report import blocked_rows
    from planner import output, plan

    config = _config(args, args.paths)
    spark = _session(args)
    table = plan(spark, args.paths, conf=config, now=args.now, top=args.top, max_bytes=args.max_bytes).toArrow()
    print(output.describe(table))
    print(output.describe_retention(table))
    if args.output:
        output.write(table, args.output)
        print(f"plan written to {args.output}")
    if args.plot:
        from planner.plot import plot_plan

        plot_plan(table, args.plot)
        print(f"plot written to {args.plot}")
    rows = table.to_pylist()
    blocked = blocked_rows(rows)
    retention = [r for r in rows if (r["retention_skip_reason"] or "").startswith("bad input")
                 and r["path"] not in {b["path"] for b in blocked}]
    for b in blocked:
        _warn(f"{b['partition']}: cannot be cleaned: {b['why']} -> {b['way_out']}")
    for r in retention:
        _warn(f"{r['topic']}-{r['partition']}: retention blocked: {r['retention_skip_reason']}")
    empty = _empty(args.paths, table)
    return _exit_status(0, 0, incomplete=len(blocked) + len(retention) + len(empty))


def _empty(paths: list[str], table) -> list[str]:
    """Log dirs in which the plan found no partition: nothing was done there (say so)."""
    planned = set(table.column("log_dir").to_pylist())
    empty = [path for path in paths if path.rstrip("/") not in planned]
    for path in empty:
        _warn(f"{path}: no partitions in this log dir: nothing to do")
    return empty


def _compact(args: argparse.Namespace) -> int:
    """Recover, plan (or take --plan), clean every selected partition, report; exit 0 when all
    were cleaned, 4 when some failed, were blocked or their log dir was in use, 5 when none could be."""
    from jobs.run import compact

    say = _say(args)
    now = args.now if args.now is not None else wall_ms()
    table = args.plan_table if args.plan else None
    paths = sorted(set(table.column("log_dir").to_pylist())) if table is not None else args.paths
    config = None if args.plan else _config(args, paths)
    spark = _session(args)
    ready = time.monotonic()
    with _log_dirs_held(paths, args.dry_run) as (free, busy), _removing() as removal:
        if not free:
            return EXIT_FAILED
        if not args.dry_run:
            _recover_first(free, say)
        if table is not None:
            import pyarrow as pa
            import pyarrow.compute as pc

            table = table.filter(pc.is_in(table.column("log_dir"), value_set=pa.array(free)))
        report, table = compact(spark, free, now=now, dry_run=args.dry_run, progress=say, ready=ready,
                                lease_ms=args.lease_ms, conf=config, top=args.max_partitions, table=table,
                                watch=lambda what, total_bytes=None: _ticker(spark, say, what, total_bytes),
                                removal=removal)
        empty = _empty(free, table)
        print(report.text())
        if args.report:
            _write_report(args, report.to_json(), spark=spark, paths=paths)
    totals = report.totals()
    return _exit_status(totals["failed"] + len(busy), totals["partitions"] - totals["skipped"] + len(busy),
                        incomplete=len(report.blocked()) + len(empty))


@contextlib.contextmanager
def _ticker(spark, say: Callable[[str], None], what: str, total_bytes: int | None = None) -> Iterator[None]:
    from jobs.progress import Ticker

    with Ticker(spark.sparkContext.statusTracker(), say, what, total_bytes):
        yield


def _write_report(args: argparse.Namespace, doc: dict, page: bool = True, spark=None, paths=None) -> None:
    """The report, with where and how this run ran (``doc["run"]``) when the document has room for it
    (every command's that runs Spark: ``spark`` is its session)."""
    from compaction.report_html import write_report
    from jobs.spark import let_go

    if "run" in doc:
        doc["run"] = _run_facts(args, spark, paths or args.paths)
    if args.own_process:
        let_go()  # Spark's last use
    print(f"report written to {' and '.join(write_report(args.report, doc, page))}")


def _run_facts(args: argparse.Namespace, spark, paths: list[str]) -> dict:
    """When (wall clock, UTC), where and with what this command ran: what an archived report needs
    besides ``now``, the clock of the rules."""
    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")

    ended = wall_ms()
    sc = spark.sparkContext
    asked = ("spark.driver.memory", "spark.ui.enabled", *(key for key, _ in args.spark_conf))
    return {"command": args.command, "arguments": list(args.argv), "version": version(), "host": socket.gethostname(),
            "started": iso(args.started_ms), "ended": iso(ended), "started_ms": args.started_ms, "ended_ms": ended,
            "spark_master": sc.master, "spark_app_id": sc.applicationId,
            "spark_conf": {key: sc.getConf().get(key) for key in asked}, "log_dirs": list(paths)}


def _exit_status(failed: int, attempted: int, incomplete: int = 0) -> int:
    """0 when everything asked was done; 5 when every attempt failed; 4 otherwise (some failed, or
    ``incomplete`` things were left undone: blocked partitions, log dirs with no partition)."""
    if failed == 0 and incomplete == 0:
        return EXIT_OK
    if failed and failed >= attempted:
        return EXIT_FAILED
    return EXIT_PARTIAL


def _retain(args: argparse.Namespace) -> int:
    """Plan retention, delete each partition's due prefix, move the checkpoints, report."""
    from jobs.run import retain

    say = _say(args)
    config = _config(args, args.paths)  # a bad setting ends here, before Spark starts
    spark = _session(args)
    with _log_dirs_held(args.paths, args.dry_run) as (free, busy):
        if not free:
            return EXIT_FAILED
        if not args.dry_run:
            _recover_first(free, say)
        with _ticker(spark, say, "retention"):
            report, table = retain(spark, free, conf=config, now=args.now, dry_run=args.dry_run, progress=say)
    empty = _empty(free, table)
    print(report.text())
    if args.report:
        _write_report(args, report.to_json(), spark=spark)
    return _exit_status(report.totals()["failed"] + len(busy), report.attempted + len(busy),
                        incomplete=len(report.blocked) + len(empty))


def _run(args: argparse.Namespace) -> int:
    """The nightly job: recovery, retention, then a fresh plan, then compaction; one report."""
    from jobs.run import nightly

    say = _say(args)
    config = _config(args, args.paths)
    spark = _session(args)
    with _log_dirs_held(args.paths, args.dry_run) as (free, busy), _removing() as removal:
        if not free:
            return EXIT_FAILED
        with _ticker(spark, say, "run"):
            result = nightly(spark, free, conf=config, now=args.now, dry_run=args.dry_run, lease_ms=args.lease_ms,
                             max_partitions=args.max_partitions, progress=say,
                             summary=lambda text: print(text, flush=True),  # kept by --quiet
                             removal=removal)
        empty = _empty(free, result.plan)
        print(result.text())
        if args.report:
            _write_report(args, result.to_json(), spark=spark)
    return _exit_status(result.failed + len(busy), result.attempted + len(busy),
                        incomplete=result.blocked + len(empty))


# -- the parser ------------------------------------------------------------------------------------
def add_config_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", action="append", default=[], metavar="FILE",
                   help="properties file: broker-level keys, topic overrides as topic[NAME].KEY=VALUE")
    p.add_argument("--topic-config", action="append", default=[], metavar="TOPIC:KEY=VALUE[,KEY=VALUE...]",
                   help="topic override, as kafka-configs --add-config (lists in brackets); repeatable")
    p.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE...]",
                   help="broker-level default by its broker name; repeatable")
    p.add_argument("--now", type=int, metavar="MS",
                   help="the current time in epoch milliseconds (default: the clock); values outside 2000-2100 "
                        "are refused unless --force-now")
    p.add_argument("--force-now", action="store_true", help="take --now as given, however implausible")


def add_spark_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("embedded Spark (ignored under spark-submit, which sizes Spark itself)")
    g.add_argument("--cores", type=checks.positive(), metavar="N",
                   help="local[N]: cores for Spark (default: all; env KCOMPACT_CORES)")
    g.add_argument("--driver-memory", metavar="SIZE",
                   help="the JVM's heap, as spark.driver.memory: 2g, 512m (default: Spark's 1g; env KCOMPACT_DRIVER_MEMORY)")
    g.add_argument("--spark-conf", action="append", default=[], type=_spark_conf, metavar="KEY=VALUE",
                   help="any Spark setting, repeatable (env KCOMPACT_SPARK_CONF: space-separated KEY=VALUE)")
    g.add_argument("--spark-ui", action="store_true", help="start Spark's web UI (default: off)")


def _spark_conf(text: str) -> tuple[str, str]:
    from jobs.spark import parse_conf

    try:
        return parse_conf(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _output_options() -> argparse.ArgumentParser:
    """--quiet and --verbose, taken by every subcommand."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true", help="no progress lines: the summary, warnings and errors only")
    g.add_argument("-v", "--verbose", action="store_true",
                   help="Spark's own log on the console too (by default it goes to a file, see the README)")
    return p


def _job_parser(sub, name: str, help: str, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A job's subcommand: log dirs, then the configuration options every job takes."""
    p = sub.add_parser(name, help=help, parents=[common])
    p.add_argument("paths", nargs="+", metavar="LOGDIR", help="log dirs (local or s3://)")
    add_config_options(p)
    add_spark_options(p)
    return p


def _lease_option(p: argparse.ArgumentParser) -> None:
    from operations.states import LEASE_MS

    p.add_argument("--lease-ms", type=checks.positive(checks.MIN_LEASE_MS, " ms"), default=LEASE_MS, metavar="MS",
                   help=f"lease on each partition being cleaned, renewed every quarter of it; a job silent for "
                        f"that long is taken for dead and its partitions taken over (default {LEASE_MS}, "
                        f"at least {checks.MIN_LEASE_MS})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kcompact", description="Spark-native compaction for Kafka log dirs.")
    parser.add_argument("--version", action="version", version=f"kcompact {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _output_options()

    p = sub.add_parser("dump", help="print batches (and records) of a segment, partition dir or log dir", parents=[common])
    p.add_argument("path", help=".log/.index/.timeindex/.txnindex file, partition dir or log dir (local or s3://)")
    p.add_argument("--print-data", action="store_true", help="print every record too")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    p.set_defaults(func=_dump)

    p = sub.add_parser("verify", help="check CRCs, offsets, names, indexes and checkpoints of a log dir", parents=[common])
    p.add_argument("logdir")
    p.set_defaults(func=_verify)

    p = _job_parser(sub, "plan", "Kafka's choice of what to clean, for every partition of the log dirs", common)
    p.add_argument("--top", type=checks.positive(), metavar="N", help="select at most N partitions (highest ratio first)")
    p.add_argument("--max-bytes", type=checks.positive(), metavar="N",
                   help="select partitions in rank order while their dirty bytes fit in N (a larger one is passed over)")
    p.add_argument("--output", metavar="FILE", help="write the plan as plan.parquet or plan.json")
    p.add_argument("--plot", metavar="PNG", help="draw the ratio distribution and the top partitions")
    p.set_defaults(func=_plan)

    p = _job_parser(sub, "compact", "clean every selected partition as Kafka's cleaner would", common)
    p.add_argument("--plan", metavar="FILE", help="a plan written by 'kcompact plan --output' (default: plan now)")
    p.add_argument("--max-partitions", type=checks.positive(), metavar="N",
                   help="clean at most N partitions (highest ratio first)")
    p.add_argument("--dry-run", action="store_true", help="decide and report, write nothing")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON (and an HTML page beside it)")
    _lease_option(p)
    p.set_defaults(func=_compact)

    p = _job_parser(sub, "retain", "delete the segments Kafka's retention would delete, move the log start", common)
    p.add_argument("--dry-run", action="store_true", help="decide and report, write nothing")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON (and an HTML page beside it)")
    p.set_defaults(func=_retain)

    p = sub.add_parser("recover", help="do what a broker does on load after a crash: finish or undo interrupted "
                                       "swaps, truncate torn tails of active segments, rebuild broken indexes",
                       parents=[common])
    p.add_argument("paths", nargs="+", metavar="LOGDIR", help="log dirs (local or s3://)")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON")
    p.set_defaults(func=_recover)

    p = sub.add_parser("status", help="every partition's cleaning state, why a job skips it, the way out",
                       parents=[common])
    p.add_argument("paths", nargs="+", metavar="LOGDIR", help="log dirs (local or s3://)")
    p.add_argument("--all", action="store_true", help="list idle partitions too")
    p.add_argument("--json", action="store_true", help="JSON instead of a table")
    p.set_defaults(func=_status)

    for name, what in (("pause", "pause cleaning (nested; a running job is aborted)"),
                       ("resume", "undo one pause"),
                       ("abort", "stop the job cleaning it at its next segment group; old segments kept"),
                       ("reset-uncleanable", "clean again a partition marked uncleanable")):
        p = sub.add_parser(name, help=f"{what}", parents=[common])
        p.add_argument("logdir", metavar="LOGDIR")
        p.add_argument("partitions", nargs="+", metavar="TOPIC-PARTITION", help="e.g. orders-0")
        p.set_defaults(func=_state_command)

    p = _job_parser(sub, "run", "the nightly job: recovery, retention, then plan, then compaction", common)
    p.add_argument("--max-partitions", type=checks.positive(), metavar="N",
                   help="clean at most N partitions (highest ratio first)")
    p.add_argument("--dry-run", action="store_true", help="decide and report, write nothing")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON (and an HTML page beside it)")
    _lease_option(p)
    p.set_defaults(func=_run)

    p = sub.add_parser("gen", help="generate a realistic sample log dir", parents=[common])
    p.add_argument("--out", help="directory to create (must not exist or be empty)")
    p.add_argument("--seed", type=int, default=1, help="random seed: same seed, same bytes")
    p.add_argument("--spec", help="JSON spec of the topics to generate (format: README, 'The sample-data generator'; "
                                  "--print-spec prints the built-in one to start from)")
    p.add_argument("--print-spec", action="store_true", help="print the built-in spec (what gen uses without --spec)")
    p.add_argument("--records", type=checks.positive(), help="records per partition, for every topic")
    p.add_argument("--partitions", type=checks.positive(), help="partitions per topic")
    p.add_argument("--segment-bytes", type=checks.positive(14), help="segment.bytes for every topic")
    p.add_argument("--start-ms", type=checks.positive(0), help="timestamp of the first record")
    p.set_defaults(func=_gen)
    return parser


# -- checks before work ----------------------------------------------------------------------------
def check(args: argparse.Namespace) -> None:
    """Everything about the command's input that can be known before it starts: a ``BadArgument``
    (or ``ConfigError``) here means nothing was written."""
    checks.now_ms(getattr(args, "now", None), getattr(args, "force_now", False))
    if getattr(args, "plan", None):
        from planner import output

        checks.suffix(args.plan, "--plan", (".parquet", ".json"))
        args.plan_table = output.read(args.plan)  # read once: the command takes it from here
        planned = sorted(set(args.plan_table.column("log_dir").to_pylist()))
        given = sorted(path.rstrip("/") for path in args.paths)
        if planned != given:
            raise BadArgument(f"--plan {args.plan} was made for {', '.join(planned) or 'no log dir'}, "
                              f"not {', '.join(given)}")
    for attr in ("paths", "logdir"):
        value = getattr(args, attr, None)
        if value is not None:
            checks.log_dirs(value if isinstance(value, list) else [value])
    if getattr(args, "partitions", None) and args.command in ("pause", "resume", "abort", "reset-uncleanable"):
        checks.partitions(args.logdir, args.partitions)
    if args.command == "plan":
        checks.output(args.output, "--output", (".parquet", ".json"))
        checks.output(args.plot, "--plot", (".png",))
    checks.output(getattr(args, "report", None), "--report", (".json",))


def main(argv: list[str] | None = None, own_process: bool = False) -> int:
    """Run one command. ``own_process``: the process ends with the command (the console script,
    ``python -m jobs.cli``), so Spark, if the command started it, is stopped as soon as it is
    needed no more (``jobs.spark.let_go``: the JVM then exits with this process, not 0.45 s
    later); called in a process that goes on (a test, a notebook), the session stays."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.started_ms = wall_ms()
    args.own_process = own_process
    code = _main(args)
    from jobs import spark

    if own_process:
        spark.let_go()
    spark.close_log(keep=code not in (EXIT_OK, EXIT_PARTIAL))
    return code


def command() -> int:
    """The ``kcompact`` console script."""
    return main(own_process=True)


def _main(args: argparse.Namespace) -> int:
    from jobs import spark

    try:
        check(args)
        return args.func(args)
    except BrokenPipeError:
        # The reader went away (``kcompact dump ... | head``): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return _interrupted()
    except BadArgument as exc:
        _warn(str(exc))
        return EXIT_USAGE
    except FormatError as exc:
        _warn(str(exc))
        return EXIT_PROBLEMS
    except ConfigError as exc:
        _warn(f"configuration error: {exc}")
        return EXIT_USAGE
    except OSError as exc:
        import storage

        _warn(f"error: {storage.describe_error(exc)}")
        return EXIT_USAGE
    except ValueError as exc:
        _warn(f"error: {exc}")
        return EXIT_USAGE
    except Exception as exc:  # the CLI promises no traceback; KCOMPACT_DEBUG shows it
        if spark.interrupted():  # Spark's jobs cancelled by the Ctrl-C: their errors are not news
            return _interrupted()
        if os.environ.get("KCOMPACT_DEBUG"):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        log = f"; Spark's log: {spark.log_path()}" if spark.started_jvm() else ""
        if "MemoryError" in str(exc):  # a Spark task's (Python's MemoryError, the JVM's OutOfMemoryError)
            _warn("error: a Spark task ran out of memory: give it more (spark.executor.pyspark.memory caps a Python "
                  "worker's address space, --driver-memory the JVM's heap) or lower spark.kcompact.map.memory, "
                  f"so that large partitions take the shared path (set KCOMPACT_DEBUG=1 for details{log})")
            return EXIT_USAGE
        _warn(f"internal error: {type(exc).__name__}: {first[:300]} (set KCOMPACT_DEBUG=1 for details{log})")
        return EXIT_INTERNAL


def _interrupted() -> int:
    _warn("interrupted: nothing half-done is left in place (partitions being cleaned keep their old segments; "
          "the next run, or 'kcompact recover', removes unfinished files)")
    return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(command())
