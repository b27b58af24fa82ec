"""The signals that stop a command: SIGINT (Ctrl-C) and SIGTERM (Airflow's execution_timeout,
``systemctl stop``, Kubernetes and YARN stopping a container) end it the same way.

The first one cancels the Spark jobs this process runs and raises ``KeyboardInterrupt`` in the
main thread, so the command unwinds as from a Ctrl-C: leases and the log dirs' ``.lock`` given
back, partitions being cleaned left with their old segments (an unfinished ``.cleaned`` file is
what the next run or ``kcompact recover`` removes). Raised during a partition's commit, it waits
for the commit to end (``operations.critical``). Later ones are noted only: the clean-up they
would cut short is what leaves the data safe. The command line then says which it was
(``terminated`` exits 143, 128 + SIGTERM, as a shell reports it; ``interrupted`` 130).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading

from kcompact.operations import critical

_received: list[int] = []
_SPARK_LET_GO = threading.Event()  # no job left to cancel (``spark_let_go``)


def install() -> None:
    """Handle SIGINT and SIGTERM in this process (from the main thread; elsewhere nothing)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _handle)


def _handle(signum: int, frame) -> None:
    _received.append(signum)
    if len(_received) > 1:
        return  # the clean-up of the first is under way
    # From here the command unwinds, and a JVM that a signal to the whole process group ended fails
    # every call still made to it: py4j logs each failure's traceback (through the root logger)
    # before raising the error that the command line reports in one line.
    logging.disable(logging.ERROR)
    _cancel_spark_jobs()
    if not critical.hold(KeyboardInterrupt()):
        raise KeyboardInterrupt


def spark_let_go() -> None:
    """This process's Spark is being stopped (``jobs.spark.let_go``): a signal from here on has no
    job to cancel, and must not ask the JVM, whose gateway may take a new connection and never
    answer it."""
    _SPARK_LET_GO.set()


def _cancel_spark_jobs() -> None:
    """What Spark's own Ctrl-C handler does: cancel every job of this process's SparkContext."""
    if "pyspark" not in sys.modules or _SPARK_LET_GO.is_set():
        return
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None or getattr(sc, "_jsc", None) is None:
        return
    # The JVM may be stopping too (a signal to the whole process group): the accumulator server's
    # connection from it then breaks, which is no news, and no traceback on the console.
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, client_address: None
    try:
        sc.cancelAllJobs()
    except Exception:  # noqa: BLE001 - a JVM already gone has no jobs left
        pass


def received() -> bool:
    """A stopping signal reached this process."""
    return bool(_received)


def terminated() -> bool:
    """The first stopping signal was SIGTERM."""
    return bool(_received) and _received[0] == signal.SIGTERM
