"""The ``kcompact`` command line: argument parsing and exit codes, nothing else.

Every subcommand calls one library function. Errors about the input (bad
bytes, missing files, bad options) end with a one-line message naming the
file and byte position and a non-zero exit; no traceback reaches the user
unless ``KCOMPACT_DEBUG`` is set.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator

from conf.settings import ConfigError
from readers.errors import FormatError

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERNAL, EXIT_PARTIAL, EXIT_FAILED = 0, 1, 2, 3, 4, 5


def _dump(args: argparse.Namespace) -> int:
    from readers.dump import dump_path

    return dump_path(args.path, print_data=args.print_data, as_json=args.json, out=sys.stdout)


def _verify(args: argparse.Namespace) -> int:
    from readers.verify import verify_log_dir

    problems = verify_log_dir(args.logdir)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) found in {args.logdir}", file=sys.stderr)
        return EXIT_PROBLEMS
    print(f"{args.logdir}: OK")
    return EXIT_OK


def _gen(args: argparse.Namespace) -> int:
    from writers import generator

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


def _config(args: argparse.Namespace):
    """The configuration every job takes: KRaft metadata < --config files < command line."""
    from conf import kraft, resolve

    return resolve.build(
        files=args.config, topic_args=args.topic_config, broker_args=args.broker_config,
        metadata=kraft.metadata_sources(args.paths),
    )


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
                print(f"kcompact: {exc}", file=sys.stderr)
        yield free, busy


def _recover_first(paths: list[str]):
    """Interrupted swaps of an earlier run finished or undone, as a broker would on start."""
    from operations.recover import recover_log_dirs

    report = recover_log_dirs(paths, progress=lambda line: print(line, flush=True))
    if any(p.changed for p in report.partitions) or report.skipped or report.temp_files:
        print(report.text(), flush=True)
    return report


def _recover(args: argparse.Namespace) -> int:
    """The broker's load-time recovery of swaps, on every partition not held by a live job."""
    with _log_dirs_held(args.paths) as (free, busy):
        report = _recover_first(free) if free else None
        if report is not None:
            if not (any(p.changed for p in report.partitions) or report.skipped or report.temp_files):
                print(report.text())  # else _recover_first printed it
            if args.report:
                _write_report(args.report, report.to_json(), page=False)  # no page layout for recovery
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
    from readers.logdir import parse_partition_dir

    change = {"pause": states.pause, "resume": states.resume, "abort": states.abort,
              "reset-uncleanable": states.reset_uncleanable}[args.command]
    failed = 0
    for name in args.partitions:
        if parse_partition_dir(name) is None:
            print(f"kcompact: {name!r} is not a partition name like orders-0", file=sys.stderr)
            return EXIT_USAGE
        path = f"{args.logdir.rstrip('/')}/{name}"
        try:
            new = change(path)
        except states.StateError as exc:
            print(f"{name}: {args.command} refused: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{name}: {new.state}" + (f" ({new.pause_count}x)" if new.pause_count else ""))
    return _exit_status(failed, len(args.partitions))


def _plan(args: argparse.Namespace) -> int:
    from jobs.spark import session
    from planner import output, plan

    config = _config(args)
    spark = session("kcompact plan")
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
    return EXIT_OK


def _compact(args: argparse.Namespace) -> int:
    """Recover, plan (or take --plan), clean every selected partition, report; exit 0 when all
    were cleaned, 4 when some failed or their log dir was in use, 5 when none could be cleaned."""
    from compaction import job
    from compaction.leases import LeaseKeeper
    from jobs.spark import session
    from planner import output, plan

    now = args.now if args.now is not None else int(time.time() * 1000)
    table = output.read(args.plan) if args.plan else None
    paths = sorted(set(table.column("log_dir").to_pylist())) if table is not None else args.paths
    config = None if args.plan else _config(args)
    spark = session("kcompact compact")
    ready = time.monotonic()
    with _log_dirs_held(paths, args.dry_run) as (free, busy):
        if not free:
            return EXIT_FAILED
        if not args.dry_run:
            _recover_first(free)
        if table is None:
            table = plan(spark, free, conf=config, now=now, top=args.max_partitions).toArrow()
        else:
            import pyarrow as pa
            import pyarrow.compute as pc

            table = table.filter(pc.is_in(table.column("log_dir"), value_set=pa.array(free)))
        result = job.run(spark, table, now=now, dry_run=args.dry_run, leases=LeaseKeeper(lease_ms=args.lease_ms),
                         progress=lambda line: print(line, flush=True), ready=ready)
    print(result.report.text())
    if args.report:
        _write_report(args.report, result.report.to_json())
    totals = result.report.totals()
    return _exit_status(totals["failed"] + len(busy), totals["partitions"] - totals["skipped"] + len(busy))


def _write_report(path: str, doc: dict, page: bool = True) -> None:
    from compaction.report_html import write_report

    print(f"report written to {' and '.join(write_report(path, doc, page))}")


def _exit_status(failed: int, attempted: int) -> int:
    """0 when nothing failed, 5 when everything attempted failed, 4 in between (as compact)."""
    if failed == 0:
        return EXIT_OK
    return EXIT_PARTIAL if failed < attempted else EXIT_FAILED


def _retain(args: argparse.Namespace) -> int:
    """Plan retention, delete each partition's due prefix, move the checkpoints, report."""
    from jobs.spark import session
    from jobs.run import retain

    config = _config(args)  # a bad setting ends here, before Spark starts
    spark = session("kcompact retain")
    with _log_dirs_held(args.paths, args.dry_run) as (free, busy):
        if not free:
            return EXIT_FAILED
        if not args.dry_run:
            _recover_first(free)
        report = retain(spark, free, conf=config, now=args.now, dry_run=args.dry_run,
                        progress=lambda line: print(line, flush=True))
    print(report.text())
    if args.report:
        _write_report(args.report, report.to_json())
    return _exit_status(report.totals()["failed"] + len(busy), report.attempted + len(busy))


def _run(args: argparse.Namespace) -> int:
    """The nightly job: retention, then a fresh plan, then compaction; one report."""
    from jobs.run import nightly
    from jobs.spark import session

    config = _config(args)
    spark = session("kcompact run")
    with _log_dirs_held(args.paths, args.dry_run) as (free, busy):
        if not free:
            return EXIT_FAILED
        result = nightly(spark, free, conf=config, now=args.now, dry_run=args.dry_run, lease_ms=args.lease_ms,
                         max_partitions=args.max_partitions, progress=lambda line: print(line, flush=True))
    print(result.text())
    if args.report:
        _write_report(args.report, result.to_json())
    return _exit_status(result.failed + len(busy), result.attempted + len(busy))


def add_config_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", action="append", default=[], metavar="FILE",
                   help="properties file: broker-level keys, topic overrides as topic[NAME].KEY=VALUE")
    p.add_argument("--topic-config", action="append", default=[], metavar="TOPIC:KEY=VALUE[,KEY=VALUE...]",
                   help="topic override, as kafka-configs --add-config (lists in brackets); repeatable")
    p.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE...]",
                   help="broker-level default by its broker name; repeatable")
    p.add_argument("--now", type=int, metavar="MS", help="the current time in ms (default: the clock)")


def _job_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    """A job's subcommand: log dirs, then the configuration options every job takes."""
    p = sub.add_parser(name, help=help)
    p.add_argument("paths", nargs="+", metavar="LOGDIR", help="log dirs (local or s3://)")
    add_config_options(p)
    return p


def _lease_option(p: argparse.ArgumentParser) -> None:
    from operations.states import LEASE_MS

    p.add_argument("--lease-ms", type=int, default=LEASE_MS, metavar="MS",
                   help=f"lease on each partition being cleaned, renewed every quarter of it; a job silent for "
                        f"that long is taken for dead and its partitions taken over (default {LEASE_MS})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kcompact", description="Spark-native compaction for Kafka log dirs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("dump", help="print batches (and records) of a segment, partition dir or log dir")
    p.add_argument("path", help=".log/.index/.timeindex/.txnindex file, partition dir or log dir (local or s3://)")
    p.add_argument("--print-data", action="store_true", help="print every record too")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    p.set_defaults(func=_dump)

    p = sub.add_parser("verify", help="check CRCs, offsets, names, indexes and checkpoints of a log dir")
    p.add_argument("logdir")
    p.set_defaults(func=_verify)

    p = _job_parser(sub, "plan", help="Kafka's choice of what to clean, for every partition of the log dirs")
    p.add_argument("--top", type=int, metavar="N", help="select at most N partitions (highest ratio first)")
    p.add_argument("--max-bytes", type=int, metavar="N", help="select partitions while their dirty bytes fit N")
    p.add_argument("--output", metavar="FILE", help="write the plan as plan.parquet or plan.json")
    p.add_argument("--plot", metavar="PNG", help="draw the ratio distribution and the top partitions")
    p.set_defaults(func=_plan)

    p = _job_parser(sub, "compact", help="clean every selected partition as Kafka's cleaner would")
    p.add_argument("--plan", metavar="FILE", help="a plan written by 'kcompact plan --output' (default: plan now)")
    p.add_argument("--max-partitions", type=int, metavar="N", help="clean at most N partitions (highest ratio first)")
    p.add_argument("--dry-run", action="store_true", help="decide and report, write nothing")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON")
    _lease_option(p)
    p.set_defaults(func=_compact)

    p = _job_parser(sub, "retain", help="delete the segments Kafka's retention would delete, move the log start")
    p.add_argument("--dry-run", action="store_true", help="decide and report, write nothing")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON")
    p.set_defaults(func=_retain)

    p = sub.add_parser("recover", help="finish or undo interrupted swaps as a restarting broker would")
    p.add_argument("paths", nargs="+", metavar="LOGDIR", help="log dirs (local or s3://)")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON")
    p.set_defaults(func=_recover)

    p = sub.add_parser("status", help="every partition's cleaning state, why a job skips it, the way out")
    p.add_argument("paths", nargs="+", metavar="LOGDIR", help="log dirs (local or s3://)")
    p.add_argument("--all", action="store_true", help="list idle partitions too")
    p.add_argument("--json", action="store_true", help="JSON instead of a table")
    p.set_defaults(func=_status)

    for name, what in (("pause", "pause cleaning (nested; a running job is aborted)"),
                       ("resume", "undo one pause"),
                       ("abort", "stop the job cleaning it at its next segment group; old segments kept"),
                       ("reset-uncleanable", "clean again a partition marked uncleanable")):
        p = sub.add_parser(name, help=f"{what}")
        p.add_argument("logdir", metavar="LOGDIR")
        p.add_argument("partitions", nargs="+", metavar="TOPIC-PARTITION", help="e.g. orders-0")
        p.set_defaults(func=_state_command)

    p = _job_parser(sub, "run", help="the nightly job: recovery, retention, then plan, then compaction")
    p.add_argument("--max-partitions", type=int, metavar="N", help="clean at most N partitions (highest ratio first)")
    p.add_argument("--dry-run", action="store_true", help="decide and report, write nothing")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON (retention and compaction)")
    _lease_option(p)
    p.set_defaults(func=_run)

    p = sub.add_parser("gen", help="generate a realistic sample log dir")
    p.add_argument("--out", required=True, help="directory to create (must not exist or be empty)")
    p.add_argument("--seed", type=int, default=1, help="random seed: same seed, same bytes")
    p.add_argument("--spec", help="JSON spec (same form as shared/fixtures/kafka-written/generator-spec.json)")
    p.add_argument("--records", type=int, help="records per partition, for every topic")
    p.add_argument("--partitions", type=int, help="partitions per topic")
    p.add_argument("--segment-bytes", type=int, help="segment.bytes for every topic")
    p.add_argument("--start-ms", type=int, help="timestamp of the first record")
    p.set_defaults(func=_gen)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        # The reader went away (``kcompact dump ... | head``): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except FormatError as exc:
        print(f"kcompact: {exc}", file=sys.stderr)
        return EXIT_PROBLEMS
    except ConfigError as exc:
        print(f"kcompact: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError) as exc:
        print(f"kcompact: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kcompact: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the CLI promises no traceback; KCOMPACT_DEBUG shows it
        if os.environ.get("KCOMPACT_DEBUG"):
            raise
        print(f"kcompact: internal error: {type(exc).__name__}: {exc} (set KCOMPACT_DEBUG=1 for details)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
