"""The SparkSession every job uses: the one spark-submit configured, else local Spark.

Executors must run the Python that has this project installed, so PYSPARK_PYTHON defaults to
the interpreter running the driver. Embedded local Spark is sized by ``Sizing`` (the command
line's ``--cores``, ``--driver-memory``, ``--spark-conf``, ``--spark-ui``, or the environment's
``KCOMPACT_CORES``, ``KCOMPACT_DRIVER_MEMORY``, ``KCOMPACT_SPARK_CONF``); under spark-submit,
spark-submit's own options do that. The JVM's own output (its start-up warnings, Spark's log)
goes to a file unless ``verbose``, so the console shows only what kcompact says; a Ctrl-C or
SIGTERM is noted (``interrupted``) as Spark's jobs are cancelled, so the command line can say so
rather than report the cancelled job's Java error.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kcompact.errors import BadArgument, CannotStart
from kcompact.jobs import cds, signals

LOG4J = Path(__file__).resolve().parent.parent / "conf" / "log4j2.properties"
# The Python workers' environment. spark.executor.pyspark.memory caps a worker's address space,
# not its memory: Arrow's default allocator (mimalloc) reserves a gigabyte of address space up
# front, and glibc a 64 MiB heap per thread, so a capped worker would fail with little in use.
# OpenBLAS (numpy's; the workers never call it) starts a thread with a buffer per core, address
# space a capped worker needs for its own work (docs/benchmarks.md has the figures).
WORKER_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_ARENA_MAX": "2", "OPENBLAS_NUM_THREADS": "1"}
# pyspark's daemon, with the installed pyspark imported rather than Spark's zip copy of it
WORKER_DAEMON = "kcompact.session.worker_daemon"
_LET_GO = threading.Event()
_LOG: list[str] = []  # the file this process's JVM writes to, once it started one


@dataclass(frozen=True, slots=True)
class Sizing:
    """Embedded local Spark's size and settings; None: the environment's, else Spark's default."""

    cores: int | None = None
    driver_memory: str | None = None
    conf: tuple[tuple[str, str], ...] = ()
    ui: bool = False
    verbose: bool = False  # the JVM's output on the console rather than in ``log_path()``

    @classmethod
    def from_env(cls, cores: int | None = None, driver_memory: str | None = None,
                 conf: tuple[tuple[str, str], ...] = (), ui: bool = False, verbose: bool = False) -> Sizing:
        """The command line's values, each missing one from the environment; a ValueError naming the
        flag or the variable for a value Spark would fail on (the JVM would not start)."""
        if cores is None and os.environ.get("KCOMPACT_CORES"):
            text = os.environ["KCOMPACT_CORES"]
            if not (text.strip().isdigit() and int(text) >= 1):
                raise BadArgument(f"KCOMPACT_CORES={text}: the cores of embedded Spark (local[N]) are a whole "
                                 "number of at least 1")
            cores = int(text)
        if driver_memory:
            _check_jvm_size(f"--driver-memory {driver_memory}", driver_memory)
        elif os.environ.get("KCOMPACT_DRIVER_MEMORY"):
            driver_memory = os.environ["KCOMPACT_DRIVER_MEMORY"]
            _check_jvm_size(f"KCOMPACT_DRIVER_MEMORY={driver_memory}", driver_memory)
        try:
            env_conf = tuple(parse_conf(item) for item in os.environ.get("KCOMPACT_SPARK_CONF", "").split())
        except ValueError as exc:
            raise BadArgument(f"KCOMPACT_SPARK_CONF: {exc}") from None
        return cls(cores, driver_memory or None, env_conf + tuple(conf), ui, verbose)


# The least heap Spark's driver starts with (its UnifiedMemoryManager: 1.5 times its 300 MiB reserve)
MIN_DRIVER_MEMORY = 450 << 20
_JVM_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _check_jvm_size(what: str, text: str) -> None:
    """A heap size as the JVM's -Xmx takes it (spark.driver.memory becomes that): digits and an
    optional k, m, g or t; a bare number is bytes."""
    size = re.fullmatch(r"([0-9]+)([kKmMgGtT]?)", text)
    if size is None:
        raise BadArgument(f"{what}: not a JVM heap size: digits with an optional k, m, g or t, as 512m or 2g")
    if int(size[1]) * _JVM_UNITS[size[2].lower()] < MIN_DRIVER_MEMORY:
        raise BadArgument(f"{what}: below the {MIN_DRIVER_MEMORY >> 20}m Spark's driver needs to start "
                         "(a number without a unit is bytes)")


def parse_conf(item: str) -> tuple[str, str]:
    """``KEY=VALUE`` of a Spark setting (``--spark-conf``, ``KCOMPACT_SPARK_CONF``)."""
    from kcompact.compaction.pipeline.settings import check_setting

    key, eq, value = item.partition("=")
    if not eq or not key.startswith("spark."):
        raise BadArgument(f"{item!r} is not a Spark setting KEY=VALUE (keys start with 'spark.')")
    check_setting(key, value)
    return key, value


def log_path() -> str:
    """Where the embedded JVM writes its output unless verbose: one file per kcompact process, named
    by user and pid, since a file another user's process left under a pid now reused is not ours to open."""
    return os.environ.get("KCOMPACT_SPARK_LOG") or os.path.join(
        tempfile.gettempdir(), f"kcompact-spark-{os.getuid()}-{os.getpid()}.log"
    )


def session(app_name: str, sizing: Sizing | None = None, warm: tuple[str, ...] = ()):
    """The SparkSession; ``warm``: modules the command imports later, imported on a thread of their
    own while the JVM starts (a wait of seconds in which this process is idle)."""
    sizing = sizing or Sizing.from_env()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    level = os.environ.get("KCOMPACT_SPARK_LOG_LEVEL", "WARN")
    # from the SparkContext's first lines on: under spark-submit, whose JVM started with Spark's
    # INFO profile, the context's start said some 44 INFO lines before the command's first
    builder = (SparkSession.builder.appName(app_name).config("spark.log.level", level)
               .config("spark.sql.debug.maxToStringFields", "200"))  # a plan's string: no warning that it was cut
    for key, value in WORKER_ENV.items():
        builder = builder.config(f"spark.executorEnv.{key}", value)
    starts_jvm = SparkContext._active_spark_context is None
    # spark-submit starts the driver with its gateway port set (and always a master); a
    # SparkConf read before the gateway exists would see none of spark-submit's settings
    embedded = "PYSPARK_GATEWAY_PORT" not in os.environ
    if embedded:  # not under spark-submit: embedded local Spark
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.master(f"local[{sizing.cores or '*'}]")
                   # C1 only: a command's JVM lives seconds, and C2's compilations cost more CPU
                   # than they win back (docs/benchmarks.md)
                   # out of heap, the JVM exits (``jvm_ran_out_of_memory``): Spark's scheduler
                   # threads would die of it and leave the job waiting for ever
                   .config("spark.driver.extraJavaOptions",
                           f"-Dlog4j2.configurationFile={LOG4J.as_uri()} -XX:TieredStopAtLevel=1 "
                           f"-XX:+ExitOnOutOfMemoryError {cds.java_options()}")
                   .config("spark.ui.enabled", str(sizing.ui).lower())
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.python.daemon.module", WORKER_DAEMON)
                   # a task's result larger than this goes through the block manager, one more
                   # fetch (default 1 MiB): a large partition's batch plans are several MB
                   .config("spark.task.maxDirectResultSize", "64m")
                   .config("spark.sql.shuffle.partitions", str(max(2, (sizing.cores or os.cpu_count() or 2) * 2))))
        if sizing.driver_memory:
            builder = builder.config("spark.driver.memory", sizing.driver_memory)
        for key, value in sizing.conf:
            builder = builder.config(key, value)
    redirect = not sizing.verbose and embedded and starts_jvm
    if redirect:
        _LOG[:] = [log_path()]
    try:
        with _warmed((*PYSPARK_LATER, *warm) if starts_jvm else ()), _jvm_output(log_path() if redirect else None):
            spark = builder.getOrCreate()
    except Exception as exc:
        cause = _start_failure()
        if cause is None:
            raise
        raise CannotStart(cause) from exc
    spark.sparkContext.setLogLevel(level)  # a context that was running already
    if embedded and starts_jvm:
        _quiet_when_the_jvm_ends(spark.sparkContext)
    _note_interrupts()
    from kcompact.compaction.pipeline.settings import check_settings

    check_settings(spark)  # before any command writes: spark-submit's --conf comes unchecked
    return spark


# What Spark's log says when the JVM could not start for a reason of the host's, and the fix.
# Spark's driver looks up this host's name (InetAddress.getLocalHost) or SPARK_LOCAL_IP's.
_HOST_CAUSES = (("java.net.UnknownHostException", "a name Spark's driver looked up does not resolve (this host's, or "
                 "SPARK_LOCAL_IP's): add it to /etc/hosts, or set SPARK_LOCAL_IP=127.0.0.1 and "
                 "SPARK_LOCAL_HOSTNAME=localhost"),)


def _start_failure() -> str | None:
    """Why the JVM did not start, from its log (``log_path``), when the cause is the host's."""
    if not _LOG:
        return None
    try:
        with open(_LOG[0], errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    for sign, fix in _HOST_CAUSES:
        at = text.find(sign)
        if at >= 0:
            found = text[at:].splitlines()[0].strip()
            return f"Spark cannot start: {found[:200]}: {fix}"
    return None


@contextlib.contextmanager
def _jvm_output(path: str | None) -> Iterator[None]:
    """While the JVM starts, this process's stderr is ``path``: the JVM inherits it for its life
    (its start-up warnings, Spark's log, the Python workers' output), this process gets its own back."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    # the default file is this process's alone: one of that name is a dead process's, started afresh
    fresh = 0 if os.environ.get("KCOMPACT_SPARK_LOG") else os.O_TRUNC
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | fresh, 0o600)
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


# What pyspark imports once the JVM is up, while the driver waits for its first answers: the
# py4j converter of numpy arrays asks pyspark.testing.utils whether numpy is there, which imports
# pandas.
PYSPARK_LATER = ("pyspark.testing.utils",)


@contextlib.contextmanager
def _warmed(modules: tuple[str, ...]) -> Iterator[None]:
    """``modules`` imported on a thread while the body runs, waited for after it. A module that
    fails to import is left to the code that needs it, which then says why. pyspark forks the JVM's
    launcher with a ``preexec_fn`` meanwhile: the child runs only ``signal.signal`` before it
    execs, which takes no lock an importing thread could hold."""
    def load() -> None:
        for name in modules:
            with contextlib.suppress(Exception):
                importlib.import_module(name)

    thread = threading.Thread(target=load, name="kcompact-warm-imports", daemon=True)
    if modules:
        thread.start()
    try:
        yield
    finally:
        if modules:
            thread.join()


def _note_interrupts() -> None:
    """Spark's SparkContext puts its own Ctrl-C handler in place as it starts: ours again, which
    cancels Spark's jobs as that one does and handles SIGTERM alike (``jobs.signals``)."""
    signals.install()


# What every JVM start prints, whatever happens next: a log holding these lines alone says nothing.
_START_NOISE = ("WARNING: Using incubator modules:", "Picked up JAVA_TOOL_OPTIONS:", "Picked up _JAVA_OPTIONS:",
                "Picked up JDK_JAVA_OPTIONS:")


def log_says_something() -> bool:
    """The embedded JVM's log holds more than what every JVM prints as it starts: only such a log
    is named in a message and kept. One that cannot be read says something (it may hold the why)."""
    if not _LOG:
        return False
    try:
        with open(_LOG[0], "rb") as f:
            head = f.read(64 * 1024)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    lines = head.decode(errors="replace").splitlines()
    return any(line.strip() and not line.startswith(_START_NOISE) for line in lines)


def let_go() -> None:
    """Stop the Spark this process started, now that its command needs it no more. Left to this
    process's exit, the JVM stops Spark and its Python gateway only when its stdin ends, well after
    this process; stopped here, it exits with it. Only the JVM's half of ``SparkContext.stop``: the
    other half stops this process's accumulator server, waiting for its polling loop, for a process
    about to exit. The JVM must not exit first: that
    server would print a traceback on losing it. A JVM that started this process (spark-submit's)
    is left alone."""
    if _LET_GO.is_set() or "pyspark" not in sys.modules:  # done, or no Spark here (nothing to import)
        return
    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None or getattr(SparkContext._gateway, "proc", None) is None:
        return
    _LET_GO.set()
    signals.spark_let_go()
    if SparkContext._gateway.proc.poll() is None:  # a signal to the whole process group ends the JVM first
        try:
            sc._jsc.stop()
        except (Py4JError, OSError) as exc:  # the JVM died meanwhile: nothing left to stop
            # news only when nobody asked it to stop, and not out of heap (the command said so)
            if not signals.received() and not _out_of_heap(SparkContext._gateway.proc, wait=True):
                print(f"kcompact: stopping Spark: {exc}", file=sys.stderr)
    SparkContext._gateway.shutdown()


JVM_OUT_OF_MEMORY = 3  # the JVM's exit status under -XX:+ExitOnOutOfMemoryError
JVM_EXIT_WAIT_S = 5  # how long a lost connection to the JVM waits to see it exit (``_quiet_when_the_jvm_ends``)


def _quiet_when_the_jvm_ends(sc) -> None:
    """When the JVM ends (out of heap, killed) the command says so in its own line; pyspark's
    accumulator server, whose connection from the JVM breaks, and py4j, whose call under way
    breaks (logged on the root logger, with its traceback), would each print a traceback first."""
    import logging

    import py4j

    server, proc = getattr(sc, "_accumulatorServer", None), getattr(sc._gateway, "proc", None)
    if proc is None:
        return

    def jvm_ended() -> bool:
        try:
            proc.wait(JVM_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:  # the JVM lives on: what broke is news
            return False
        return True

    py4j_dir = os.path.dirname(py4j.__file__) + os.sep
    logging.getLogger().addFilter(lambda record: not (record.pathname.startswith(py4j_dir) and jvm_ended()))
    if server is not None:
        said = server.handle_error
        server.handle_error = lambda request, client_address: jvm_ended() or said(request, client_address)


def jvm_ran_out_of_memory(exc: BaseException) -> bool:
    """The JVM this process started (an embedded session's) has ended for want of heap. When
    ``exc`` is py4j's lost connection the JVM may still be exiting (its socket closes first): it
    is given ``JVM_EXIT_WAIT_S`` to end (so is a refused connection: py4j opening a new one)."""
    if "pyspark" not in sys.modules:
        return False
    from py4j.protocol import Py4JNetworkError
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    return proc is not None and _out_of_heap(proc, wait=isinstance(exc, Py4JNetworkError | ConnectionError))


def _out_of_heap(proc: subprocess.Popen, wait: bool) -> bool:
    """The JVM ``proc`` exited for want of heap (``wait``: given ``JVM_EXIT_WAIT_S`` to exit)."""
    if wait:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(JVM_EXIT_WAIT_S)
    return proc.poll() == JVM_OUT_OF_MEMORY


def close_log(keep: bool) -> None:
    """At the end of a command: the JVM's log kept when the command failed and the log says
    something (the error names it), else removed, unless KCOMPACT_SPARK_LOG asked for it. Either
    way it is that command's: a later command of this process, on the same JVM, names none."""
    if _LOG and not (keep and log_says_something()) and not os.environ.get("KCOMPACT_SPARK_LOG"):
        with contextlib.suppress(OSError):
            os.remove(_LOG[0])
    _LOG.clear()


def interrupted() -> bool:
    """A Ctrl-C or SIGTERM reached this process."""
    return signals.received()
