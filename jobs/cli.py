"""The ``kcompact`` command line: each subcommand's call of the API, its console output, exit codes.

Every job subcommand calls one function of ``kcompact`` (the API notebooks use too) and prints its
report. Before it does, every input is checked (``jobs.arguments``: log dirs, files to write,
numbers, ``--now``), so a command refused for its input has written nothing.
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
from collections.abc import Callable
from datetime import UTC, datetime

import kcompact
from kcompact import errors
from kcompact.errors import (
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_TERMINATED,
)
from kcompact.errors.failure import Failure
from kcompact.jobs import home
from kcompact.jobs.arguments import build_parser, check, version
from kcompact.jobs.console import Console
from kcompact.operations.states import wall_ms


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
    from kcompact.tools.dump import dump_path

    return dump_path(args.path, print_data=args.print_data, as_json=args.json, out=sys.stdout)


def _verify(args: argparse.Namespace) -> int:
    from kcompact.tools.verify import run_verify

    return run_verify(args.logdir, strict=args.strict, out=sys.stdout, err=sys.stderr, as_json=args.json)


def _gen(args: argparse.Namespace) -> int:
    from kcompact.tools import generator

    if args.print_spec:
        import json

        print(json.dumps(generator.DEMO_SPEC, indent=1))
        return EXIT_OK
    if not args.out:
        raise errors.BadArgument("gen: --out DIR is required (or --print-spec)")
    spec = generator.load_spec(args.spec)
    spec = generator.override(
        spec,
        records=args.records,
        partitions=args.partitions,
        segment_bytes=args.segment_bytes,
        start_ms=args.start_ms,
    )
    try:
        # its summary alone is said: no per-record truth, which a corpus of millions cannot afford
        result = generator.generate(args.out, spec, seed=args.seed, keep_records=False,
                                    say=lambda line: print(line, flush=True))
    except KeyboardInterrupt:  # generate removed what it had written: the usual line would not be true
        from kcompact.jobs import signals

        _warn(f"{'terminated' if signals.terminated() else 'interrupted'}: gen stopped, and what it had "
              f"written is removed: {args.out} is as it was before")
        return EXIT_TERMINATED if signals.terminated() else EXIT_INTERRUPTED
    print(result.summary())
    return EXIT_OK


def _config(args: argparse.Namespace, paths: list[str]):
    """The configuration every job takes: KRaft metadata < --config files < command line."""
    from kcompact.steps import resolved

    return resolved(paths, files=args.config, topic_args=args.topic_config, broker_args=args.broker_config,
                    kafka_version=args.kafka_version, gzip_os=getattr(args, "gzip_os", None),
                    allow_unknown_topics=args.allow_unknown_topics)


# What a command imports once its session is up: imported while the JVM starts (``spark.session``)
_CLEANING = ("kcompact.compaction.pipeline.job", "kcompact.compaction.reports.outcome")
_LATER = {"compact": _CLEANING, "run": _CLEANING}
_REPORT = "kcompact.compaction.reports.report_html"


def _session(args: argparse.Namespace):
    from kcompact.jobs.spark import Sizing, session
    from kcompact.session import warm_workers

    conf = tuple(args.spark_conf)
    sizing = Sizing.from_env(args.cores, args.driver_memory, conf, args.spark_ui, args.verbose)
    warm = _LATER.get(args.command, ()) + ((_REPORT,) if getattr(args, "report", None) else ())
    spark = session(f"kcompact {args.command}", sizing, warm)
    warm_workers.start(spark)
    return spark


def _left_alone(paths: list[str], busy: dict[str, str]) -> list[str]:
    """The log dirs in use the API left alone (``leave_busy``), each warned about; the others, which
    it worked on."""
    for why in busy.values():
        _warn(why)
    return [path for path in paths if path not in busy]


def _idle(free: list[str], args: argparse.Namespace) -> bool:
    """Every log dir in use and no report asked: nothing was done, nothing to say. With ``--report``
    the report is written, so that its outcome names each log dir left alone."""
    return not free and not args.report


def _not_worked_on(step: str, busy: dict[str, str], empty: list[str]) -> list[dict]:
    """The outcome's rows for the log dirs a command left alone: in use, or holding no partition."""
    from kcompact.compaction.reports.outcome import log_dir_row

    return ([log_dir_row(step, path, why, "stop what holds it (a broker, another job), then run again")
             for path, why in busy.items()]
            + [log_dir_row(step, path, "no partitions in this log dir: nothing to do",
                           "check the path: a Kafka log dir holds one directory per partition (topic-N)")
               for path in empty])


@contextlib.contextmanager
def _removing():
    """The files a compaction's commits renamed to ``.deleted``, removed on a thread (the API waits
    for it before it lets the log dirs' locks go); what could not be removed, warned about."""
    from kcompact.operations.deleted import Removal

    removal = Removal()
    try:
        yield removal
    finally:
        for problem in removal.wait():
            _warn(problem)


def _recover(args: argparse.Namespace) -> int:
    """The broker's load-time recovery (swaps, torn tails of active segments, broken indexes), on
    every partition not held by a live job; partial (4), as the jobs, when a log dir held no partition."""
    from kcompact.compaction.reports.outcome import outcome, recovery_undone
    from kcompact.logdir.listing import held_partitions

    report = kcompact.recover(args.paths, torn_tails=True, progress=_say(args))  # a log dir in use: skipped
    free = _left_alone(args.paths, {path: why for path, why in report.skipped.items() if path in args.paths})
    if _idle(free, args):
        return EXIT_FAILED
    print(report.text())
    empty = [path for path in free if not held_partitions(path)]
    for path in empty:
        _warn(f"{path}: no partitions in this log dir: nothing to do")
    code = _exit_status(report.failed, len(args.paths) + len(report.partitions), incomplete=len(empty))
    if args.report:
        undone = recovery_undone(report, args.paths)  # the log dirs skipped: not worked on
        _write_report(args, {"outcome": outcome(code, undone, log_dirs=_not_worked_on("recovery", {}, empty)),
                             **report.to_json()})
    return code


def _status(args: argparse.Namespace) -> int:
    from kcompact.compaction.reports.status import render, status

    rows = status(args.paths, show_idle=args.all)
    if args.json:
        import json

        print(json.dumps([r.as_dict() for r in rows], indent=1))
    else:
        print(render(rows))
    return EXIT_OK


def _state_command(args: argparse.Namespace) -> int:
    """pause / resume / abort / reset-uncleanable on named partitions of one log dir."""
    from kcompact.operations import states

    change = {"pause": states.pause, "resume": states.resume, "abort": states.abort,
              "reset-uncleanable": states.reset_uncleanable}[args.command]
    failed = 0
    for name in args.partitions:
        path = f"{args.logdir.rstrip('/')}/{name}"
        try:
            new = change(path)
        except errors.StateError as exc:
            _warn(f"{name}: {args.command} refused: {exc}")
            failed += 1
            continue
        print(f"{name}: {new.state}" + (f" ({new.pause_count}x)" if new.pause_count else ""))
    return _exit_status(failed, len(args.partitions))


def _plan(args: argparse.Namespace) -> int:
    from kcompact.compaction.reports.report import blocked_rows
    from kcompact.planner import output

    config = _config(args, args.paths)
    spark = _session(args)
    plan = kcompact.plan(spark, args.paths, config=config, now=args.now, top=args.top, max_bytes=args.max_bytes)
    print(output.describe(plan.rows, each=not args.quiet))
    print(output.describe_retention(plan.rows, each=not args.quiet))
    if args.output:
        output.write(plan, args.output)
        print(f"plan written to {args.output}")
    if args.plot:
        from kcompact.planner.plot import plot_plan

        plot_plan(plan, args.plot)
        print(f"plot written to {args.plot}")
    blocked = blocked_rows(plan.rows)
    retention = [r for r in plan.rows if r.retention_skip_kind == Failure.BAD_INPUT
                 and r.path not in {b["path"] for b in blocked}]
    for b in blocked:
        _warn(f"{b['partition']}: cannot be cleaned: {b['why']} -> {b['way_out']}")
    for r in retention:
        _warn(f"{r.name}: retention blocked: {r.retention_skip_reason}")
    empty = _empty(args.paths, plan)
    return _exit_status(0, 0, incomplete=len(blocked) + len(retention) + len(empty))


def _empty(paths: list[str], plan) -> list[str]:
    """Log dirs in which the plan found no partition: nothing was done there (say so)."""
    planned = set(plan.log_dirs)
    empty = [path for path in paths if path.rstrip("/") not in planned]
    for path in empty:
        _warn(f"{path}: no partitions in this log dir: nothing to do")
    return empty


def _compact(args: argparse.Namespace) -> int:
    """Recover, plan (or take --plan), clean every selected partition, report; exit 0 when all
    were cleaned, 4 when some failed, were blocked, held by another job or their log dir was in use,
    5 when none could be."""
    say = _say(args)
    now = args.now if args.now is not None else wall_ms()
    plan = args.plan_read if args.plan else None
    paths = plan.log_dirs if plan is not None else args.paths
    config = None if args.plan else _config(args, paths)
    spark = _session(args)
    ready = time.monotonic()
    with _removing() as removal:
        result = kcompact.compact(spark, paths, plan=plan, now=now, dry_run=args.dry_run,
                                  max_partitions=args.max_partitions, lease_ms=args.lease_ms, config=config,
                                  leave_busy=True, progress=say, observer=Console(spark, say, ready, removal))
        busy, free = result.busy, _left_alone(paths, result.busy)
        if _idle(free, args):
            return EXIT_FAILED
        empty = _empty(free, result.plan)
        print(result.text(each=not args.quiet))
        code = _exit_status(result.failed + len(busy), result.attempted + len(busy),
                            incomplete=result.incomplete + len(empty))
        if args.report:
            from kcompact.compaction.reports.outcome import compaction_undone, outcome

            found = outcome(code, compaction_undone(result.report),
                            log_dirs=_not_worked_on("compaction", busy, empty))
            _write_report(args, {"outcome": found, **result.to_json()}, spark=spark, paths=paths)
    return code


def _write_report(args: argparse.Namespace, doc: dict, spark=None, paths=None) -> None:
    """The report and its page, with where and how this run ran (``doc["run"]``) when the document has
    room for it (every command's that runs Spark: ``spark`` is its session). ``doc["outcome"]`` holds
    the exit code the command then returns."""
    from kcompact.compaction.reports.report_html import write_report
    from kcompact.jobs.spark import let_go

    if "run" in doc:
        doc["run"] = _run_facts(args, spark, paths or args.paths)
    if args.own_process:
        let_go()  # Spark's last use
    print(f"report written to {' and '.join(write_report(args.report, doc))}")


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
    say = _say(args)
    config = _config(args, args.paths)  # a bad setting ends here, before Spark starts
    spark = _session(args)
    console = Console(spark, say)
    with console.watch("retention"):
        result = kcompact.retain(spark, args.paths, config=config, now=args.now, dry_run=args.dry_run,
                                 leave_busy=True, progress=say, observer=console)
    busy, free = result.busy, _left_alone(args.paths, result.busy)
    if _idle(free, args):
        return EXIT_FAILED
    empty = _empty(free, result.plan)
    print(result.text())
    code = _exit_status(result.failed + len(busy), result.attempted + len(busy),
                        incomplete=result.incomplete + len(empty))
    if args.report:
        from kcompact.compaction.reports.outcome import outcome, retention_undone

        found = outcome(code, retention_undone(result.report), log_dirs=_not_worked_on("retention", busy, empty))
        _write_report(args, {"outcome": found, **result.to_json()}, spark=spark)
    return code


def _run(args: argparse.Namespace) -> int:
    """The nightly job: recovery, retention, then a fresh plan, then compaction; one report."""
    say = _say(args)
    config = _config(args, args.paths)
    spark = _session(args)
    with _removing() as removal:
        result = kcompact.run(spark, args.paths, config=config, now=args.now, dry_run=args.dry_run,
                              lease_ms=args.lease_ms, max_partitions=args.max_partitions, leave_busy=True, progress=say,
                              observer=Console(spark, say, removal=removal))
        busy, free = result.busy, _left_alone(args.paths, result.busy)
        if _idle(free, args):
            return EXIT_FAILED
        empty = _empty(free, result.plan)
        print(result.text(each=not args.quiet))
        code = _exit_status(result.failed + len(busy), result.attempted + len(busy),
                            incomplete=result.incomplete + len(empty))
        if args.report:
            from kcompact.compaction.reports import outcome as undone

            steps = [undone.retention_undone(result.retention), undone.compaction_undone(result.compaction)]
            if result.recovery is not None:
                steps.insert(0, undone.recovery_undone(result.recovery, free))
            found = undone.outcome(code, *steps, log_dirs=_not_worked_on("run", busy, empty))
            _write_report(args, {"outcome": found, **result.to_json()}, spark=spark)
    return code


COMMANDS = {"dump": _dump, "verify": _verify, "gen": _gen, "plan": _plan, "compact": _compact, "retain": _retain,
            "run": _run, "recover": _recover, "status": _status, "pause": _state_command,
            "resume": _state_command, "abort": _state_command, "reset-uncleanable": _state_command}


def main(argv: list[str] | None = None, own_process: bool = False) -> int:
    """Run one command. ``own_process``: the process ends with the command (the console script,
    ``python -m kcompact.jobs.cli``), so Spark, if the command started it, is stopped as soon as it is
    needed no more (``jobs.spark.let_go``: the JVM then exits with this process, not after
    it); called in a process that goes on (a test, a notebook), the session stays."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.started_ms = wall_ms()
    args.own_process = own_process
    home.settle_matplotlib()
    if own_process:  # the process is the command's: a scheduler's SIGTERM stops it as a Ctrl-C does; its
        # collector is set for a driver that keeps what it makes (``jobs.collector``)
        from kcompact.jobs import collector, signals

        signals.install()
        collector.for_one_command()
    code = _main(args)
    from kcompact.jobs import spark

    if own_process:
        spark.let_go()
    if code in (EXIT_PARTIAL, EXIT_FAILED) and spark.log_says_something():  # the other exits' messages name it
        _warn(f"Spark's log: {spark.log_path()}")
    spark.close_log(keep=code != EXIT_OK)
    return code


def command() -> int:
    """The ``kcompact`` console script."""
    return main(own_process=True)


def _main(args: argparse.Namespace) -> int:
    from kcompact.jobs import spark

    try:
        check(args)
        return COMMANDS[args.command](args)
    except BrokenPipeError:
        # The reader went away (``kcompact dump ... | head``): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt as stop:
        return _interrupted(getattr(stop, "__notes__", []))
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line and an exit code
        # After a Ctrl-C or SIGTERM, what broke on the way out (Spark's cancelled jobs, a JVM the
        # same signal ended, as a signal to the whole process group does) is not news
        if spark.interrupted():
            return _interrupted(getattr(exc, "__notes__", []))
        return _failed(args, exc)


def _failed(args: argparse.Namespace, exc: Exception) -> int:
    """The one line and exit status of a command that ``exc`` ended, decided by its class alone
    (``kcompact.errors``): any other error is a bug. The CLI promises no traceback
    (``KCOMPACT_DEBUG`` shows a bug's)."""
    from kcompact import storage
    from kcompact.jobs import spark

    if not isinstance(exc, errors.KcompactError) and spark.jvm_ran_out_of_memory(exc):  # py4j's error, the JVM gone
        exc = errors.OutOfMemory("Spark's JVM ran out of heap and ended: give it more (--driver-memory, "
                                 "spark.driver.memory)")
    if isinstance(exc, errors.KcompactError) and exc.exit_code != EXIT_INTERNAL:
        said = storage.describe_failure(exc, args.argv) if isinstance(exc, errors.StorageError) else str(exc)
        _warn(f"{exc.label}{said}{_spark_log()}")
        return exc.exit_code
    if os.environ.get("KCOMPACT_DEBUG"):
        raise exc
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    log = f"; Spark's log: {spark.log_path()}" if spark.log_says_something() else ""
    _warn(f"internal error: {type(exc).__name__}: {first[:300]} (set KCOMPACT_DEBUG=1 for details{log})")
    return EXIT_INTERNAL


def _spark_log() -> str:
    """`` (Spark's log: PATH)`` once this command started Spark with its log in a file that says
    something, else nothing."""
    from kcompact.jobs import spark

    return f" (Spark's log: {spark.log_path()})" if spark.log_says_something() else ""


def _interrupted(notes: list[str] = ()) -> int:
    """The one line of a stopped command; ``notes``: what the stop's clean-up removed, and left."""
    from kcompact.jobs import signals

    how = "terminated" if signals.terminated() else "interrupted"
    done = "; ".join(notes) + "; " if notes else ""
    _warn(f"{how}: partitions being cleaned keep their old segments ({done}the next run, or 'kcompact "
          f"recover', removes any unfinished file left){_spark_log()}")
    return EXIT_TERMINATED if signals.terminated() else EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(command())
