"""The ``kcompact`` command line's arguments: the parser of every subcommand, and the checks of
its input that can be made before any work (``check``), so a command refused for its input has
written nothing. The commands themselves are ``jobs.cli``'s (by ``args.command``)."""

from __future__ import annotations

import argparse

from kcompact import storage
from kcompact.errors import BadArgument
from kcompact.jobs import checks


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("kcompact")
    except PackageNotFoundError:
        return "unknown (not installed)"


# -- the parser ------------------------------------------------------------------------------------
def add_config_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", action="append", default=[], metavar="FILE",
                   help="properties file: broker-level keys, topic overrides as topic[NAME].KEY=VALUE")
    p.add_argument("--topic-config", action="append", default=[], metavar="TOPIC:KEY=VALUE[,KEY=VALUE...]",
                   help="topic override, as kafka-configs --add-config (lists in brackets); repeatable")
    p.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE...]",
                   help="broker-level default by its broker name; repeatable")
    p.add_argument("--allow-unknown-topics", action="store_true",
                   help="take a --topic-config or --config override of a topic no log dir holds yet (else refused "
                        "as a likely typo)")
    p.add_argument("--kafka-version", metavar="X",
                   help="the Kafka release whose cleaner to reproduce: 3.9.0, 3.9.1, 3.9.2, 4.0.0, 4.0.1, 4.1, 4.2, "
                        "4.3, 4.4 or any released patch (4.0.2 cleans as 4.0.1, 4.1.2 as 4.1: the plan says so; "
                        "default: kafka.version in a --config file, else the log dir's metadata.version, else "
                        "the newest release)")
    p.add_argument("--gzip-os", type=int, choices=(0, 255), metavar="0|255",
                   help="the OS byte of rewritten gzip batches' header for a 3.9 log dir whose own cleaner-written "
                        "gzip batches do not show it: 0 for a broker on Java 8 or 11, 255 on Java 16 and later "
                        "(the default; every 4.x broker)")
    p.add_argument("--now", type=int, metavar="MS",
                   help="the current time in epoch milliseconds (default: the clock); values outside 2000-2100 "
                        "are refused unless --force-now")
    p.add_argument("--force-now", action="store_true", help="take --now as given, however implausible")


def add_spark_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("embedded Spark (ignored under spark-submit, which sizes Spark itself)")
    g.add_argument("--cores", type=checks.positive(), metavar="N",
                   help="local[N]: cores for Spark (default: all; env KCOMPACT_CORES)")
    g.add_argument(
        "--driver-memory",
        metavar="SIZE",
        help="the JVM's heap, as spark.driver.memory: 2g, 512m (default: Spark's 1g; env KCOMPACT_DRIVER_MEMORY)",
    )
    g.add_argument("--spark-conf", action="append", default=[], type=_spark_conf, metavar="KEY=VALUE",
                   help="any Spark setting, repeatable (env KCOMPACT_SPARK_CONF: space-separated KEY=VALUE)")
    g.add_argument("--spark-ui", action="store_true", help="start Spark's web UI (default: off)")


def _spark_conf(text: str) -> tuple[str, str]:
    from kcompact.jobs.spark import parse_conf

    try:
        return parse_conf(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _output_options() -> argparse.ArgumentParser:
    """--quiet and --verbose, taken by every subcommand."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "-q", "--quiet", action="store_true", help="no progress lines: the summary, warnings and errors only"
    )
    g.add_argument("-v", "--verbose", action="store_true",
                   help="Spark's own log on the console too (by default it goes to a file, see the README)")
    return p


def _job_parser(sub, name: str, help: str, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A job's subcommand: log dirs, then the configuration options every job takes."""
    p = sub.add_parser(name, help=help, parents=[common])
    p.add_argument("paths", nargs="+", metavar="LOGDIR", help="log dirs (local or s3://)")
    _copies_option(p)
    add_config_options(p)
    add_spark_options(p)
    return p


def _copies_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-duplicate-partitions", action="store_true",
                   help="the log dirs are not one broker's (copies, snapshots, other brokers' disks): a partition in "
                        "several of them is taken in each (by default refused, as a broker refuses to start so)")


def _lease_option(p: argparse.ArgumentParser) -> None:
    from kcompact.operations.states import LEASE_MS

    p.add_argument("--lease-ms", type=checks.positive(checks.MIN_LEASE_MS, " ms"), default=LEASE_MS, metavar="MS",
                   help=f"lease on each partition being cleaned, renewed every quarter of it; a job silent for "
                        f"that long is taken for dead and its partitions taken over (default {LEASE_MS}, "
                        f"at least {checks.MIN_LEASE_MS})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kcompact", description="Spark-native compaction for Kafka log dirs.")
    parser.add_argument("--version", action="version", version=f"kcompact {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _output_options()

    p = sub.add_parser(
        "dump", help="print batches (and records) of a segment, partition dir or log dir", parents=[common]
    )
    p.add_argument("path", help=".log/.index/.timeindex/.txnindex file, partition dir or log dir (local or s3://)")
    p.add_argument("--print-data", action="store_true", help="print every record too")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of text")

    p = sub.add_parser(
        "verify", help="check CRCs, offsets, names, indexes and checkpoints of a log dir", parents=[common]
    )
    p.add_argument("logdir")
    p.add_argument("--strict", action="store_true", help="exit 1 on notes too (states Kafka accepts and repairs)")
    p.add_argument("--json", action="store_true", help="one JSON document: every problem and note, and the counts")

    p = _job_parser(sub, "plan", "Kafka's choice of what to clean, for every partition of the log dirs", common)
    p.add_argument(
        "--top", type=checks.positive(), metavar="N", help="select at most N partitions (highest ratio first)"
    )
    p.add_argument(
        "--max-bytes",
        type=checks.positive(),
        metavar="N",
        help="select partitions in rank order while their dirty bytes fit in N (a larger one is passed over)",
    )
    p.add_argument("--output", metavar="FILE", help="write the plan as plan.parquet or plan.json")
    p.add_argument("--plot", metavar="PNG", help="draw the ratio distribution and the top partitions")

    p = _job_parser(sub, "compact", "clean every selected partition as Kafka's cleaner would", common)
    p.add_argument("--plan", metavar="FILE", help="a plan written by 'kcompact plan --output' (default: plan now)")
    p.add_argument("--max-partitions", type=checks.positive(), metavar="N",
                   help="clean at most N partitions (highest ratio first)")
    p.add_argument("--dry-run", action="store_true", help="decide and report, write nothing")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON (and an HTML page beside it)")
    _lease_option(p)

    p = _job_parser(sub, "retain", "delete the segments Kafka's retention would delete, move the log start", common)
    p.add_argument("--dry-run", action="store_true", help="decide and report, write nothing")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON (and an HTML page beside it)")

    p = sub.add_parser("recover", help="do what a broker does on load after a crash: finish or undo interrupted "
                                       "swaps, truncate torn tails of active segments, rebuild broken indexes",
                       parents=[common])
    p.add_argument("paths", nargs="+", metavar="LOGDIR", help="log dirs (local or s3://)")
    _copies_option(p)
    p.add_argument("--report", metavar="FILE", help="write the report as JSON")

    p = sub.add_parser("status", help="every partition's cleaning state, why a job skips it, the way out",
                       parents=[common])
    p.add_argument("paths", nargs="+", metavar="LOGDIR", help="log dirs (local or s3://)")
    p.add_argument("--all", action="store_true", help="list idle partitions too")
    p.add_argument("--json", action="store_true", help="JSON instead of a table")

    for name, what in (("pause", "pause cleaning (nested; a running job is aborted)"),
                       ("resume", "undo one pause"),
                       ("abort", "stop the job cleaning it at its next segment group; old segments kept"),
                       ("reset-uncleanable", "clean again a partition marked uncleanable")):
        p = sub.add_parser(name, help=f"{what}", parents=[common])
        p.add_argument("logdir", metavar="LOGDIR")
        p.add_argument("partitions", nargs="+", metavar="TOPIC-PARTITION", help="e.g. orders-0")

    p = _job_parser(sub, "run", "the nightly job: recovery, retention, then plan, then compaction", common)
    p.add_argument("--max-partitions", type=checks.positive(), metavar="N",
                   help="clean at most N partitions (highest ratio first)")
    p.add_argument("--dry-run", action="store_true", help="decide and report, write nothing")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON (and an HTML page beside it)")
    _lease_option(p)

    p = sub.add_parser("gen", help="generate a realistic sample log dir", parents=[common])
    p.add_argument("--out", help="directory to create (must not exist or be empty; its parent must exist)")
    p.add_argument("--seed", type=int, default=1, help="random seed: same seed, same bytes")
    p.add_argument("--spec", help="JSON spec of the topics to generate (format: docs/generator.md; "
                                  "--print-spec prints the built-in one to start from)")
    p.add_argument("--print-spec", action="store_true", help="print the built-in spec (what gen uses without --spec)")
    p.add_argument("--records", type=checks.positive(), help="data records written in each partition of every topic "
                                                              "(transaction markers on top)")
    p.add_argument("--partitions", type=checks.positive(), help="partitions per topic")
    p.add_argument("--segment-bytes", type=checks.positive(14), help="segment.bytes for every topic")
    p.add_argument("--start-ms", type=checks.positive(0), help="timestamp of the first record")
    return parser


# -- checks before work ----------------------------------------------------------------------------
STATE_COMMANDS = ("pause", "resume", "abort", "reset-uncleanable")
WRITING_COMMANDS = ("compact", "retain", "run", "recover", *STATE_COMMANDS)
SCANNING_COMMANDS = ("plan", "compact", "retain", "run", "recover")  # they read every partition dir


def check(args: argparse.Namespace) -> None:
    """Everything about the command's input that can be known before it starts: a ``BadArgument``
    (or ``ConfigError``) here means nothing was written."""
    checks.now_ms(getattr(args, "now", None), getattr(args, "force_now", False))
    checks.object_store_settings(getattr(args, "argv", ()))
    if hasattr(args, "spark_conf"):  # a job's embedded Spark, sized by flags and KCOMPACT_*: checked before it starts
        from kcompact.jobs.spark import Sizing

        try:
            Sizing.from_env(args.cores, args.driver_memory, tuple(args.spark_conf))
        except ValueError as exc:
            raise BadArgument(str(exc)) from None
    if getattr(args, "plan", None):
        from kcompact.planner import output

        if args.kafka_version:
            raise BadArgument("--plan carries the Kafka release it was made for (its kafka_version column): "
                              "give --kafka-version to 'kcompact plan' instead")
        if getattr(args, "gzip_os", None) is not None:
            raise BadArgument("--plan carries the gzip header byte it was made for (its gzip_os column): "
                              "give --gzip-os to 'kcompact plan' instead")

        checks.suffix(args.plan, "--plan", (".parquet", ".json"))
        plan = output.read(args.plan)
        planned = {storage.identity(log_dir): log_dir for log_dir in plan.log_dirs}
        given = {storage.identity(path): path.rstrip("/") for path in args.paths}
        if planned.keys() != given.keys():
            raise BadArgument(f"--plan {args.plan} was made for {', '.join(planned.values()) or 'no log dir'}, "
                              f"not {', '.join(given.values())}")
        # read once: the command takes it from here, its log dirs named as this command names them
        # (absolutely: executors do not share the driver's working directory)
        args.plan_read = plan.renamed({log_dir: storage.absolute(given[key]) for key, log_dir in planned.items()})
    for attr in ("paths", "logdir"):
        value = getattr(args, attr, None)
        if value is not None:
            checks.log_dirs(value if isinstance(value, list) else [value])
    if getattr(args, "paths", None):
        checks.distinct_log_dirs(args.paths)
        if not getattr(args, "allow_duplicate_partitions", True):  # the jobs; status shows both copies
            checks.distinct_partitions(args.paths)
    if args.command == "dump":
        checks.dump_path(args.path)
    if args.command == "gen" and args.out:
        checks.gen_out(args.out)
    if getattr(args, "partitions", None) and args.command in STATE_COMMANDS:
        checks.partitions(args.logdir, args.partitions)
    if args.command in SCANNING_COMMANDS:
        checks.readable(args.paths)
    if args.command in WRITING_COMMANDS and not getattr(args, "dry_run", False):
        checks.writable(args.paths if args.command not in STATE_COMMANDS else [args.logdir])
    if args.command == "plan":
        checks.output(args.output, "--output", (".parquet", ".json"))
        checks.output(args.plot, "--plot", (".png",))
    checks.output(getattr(args, "report", None), "--report", (".json",))
    if args.command in WRITING_COMMANDS and not getattr(args, "dry_run", False):  # last: it sends requests
        checks.conditional_writes(args.paths if args.command not in STATE_COMMANDS else [args.logdir])
