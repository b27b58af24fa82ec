"""The Python workers' daemon (``spark.python.daemon.module``): pyspark's own, with the installed
pyspark and py4j found ahead of Spark's zip copies of them.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's source zip first on every worker's
path. Python keeps no compiled bytecode for a zip, so the daemon compiles pyspark's modules from
source each time it starts, and each worker reads both zips' directories again when pyspark adds
its files dir to the path. A pip-installed pyspark is its own SPARK_HOME: the zips then hold the
very package installed beside them, with its bytecode cached, so this daemon moves them behind
it. Any other zip (a cluster's own Spark, whose pyspark may not be the one pip installed) stays
where Spark put it.

Each worker is a fork of this daemon, so what the daemon imports before its first fork every
worker has without importing it (``warm_workers.prepare``: over a second of CPU a worker, paid
once a session rather than once a worker), and ``gc.freeze`` keeps those objects out of the
workers' collections, so their pages stay shared. A failure there is left to the workers, whose
imports then meet it in a task and Spark reports it with the task.
"""

from __future__ import annotations

import gc
import os
import sys


def _installed_beside(zip_path: str, path: list[str]) -> bool:
    """Whether ``zip_path`` is Spark's copy of a package installed beside it: the zip lies in
    ``<site>/pyspark/python/lib/`` and ``<site>`` is on ``path`` with that package (py4j: of the
    zip's version) in it."""
    lib = os.path.dirname(zip_path)
    spark_home = os.path.dirname(os.path.dirname(lib))
    site = os.path.dirname(spark_home)
    if os.path.basename(spark_home) != "pyspark" or site not in path:
        return False
    name = os.path.basename(zip_path)
    if name == "pyspark.zip":
        return os.path.isfile(os.path.join(spark_home, "__init__.py"))
    if name.startswith("py4j-") and name.endswith("-src.zip"):
        version = name[len("py4j-"):-len("-src.zip")]
        return os.path.isdir(os.path.join(site, f"py4j-{version}.dist-info"))
    return False


def installed_first(path: list[str]) -> list[str]:
    """``path`` with the zips that copy an installed package moved to its end, in their order."""
    copies = [p for p in path if p.endswith(".zip") and _installed_beside(p, path)]
    return [p for p in path if p not in copies] + copies


def _prepare_workers() -> None:
    """``warm_workers.prepare`` with this process's standard output on its standard error: Spark
    reads the daemon's port from its standard output, so a line a module prints there first (as
    numba's under ``NUMBA_DEBUG_CACHE``) would fail every task."""
    sys.stdout.flush()
    stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        from kcompact.session import warm_workers

        warm_workers.prepare()
    except Exception:  # noqa: BLE001 - each worker imports for itself and its task reports the failure
        return
    finally:
        sys.stdout.flush()
        os.dup2(stdout, 1)
        os.close(stdout)
    gc.freeze()


if __name__ == "__main__":
    sys.path[:] = installed_first(sys.path)
    _prepare_workers()
    from pyspark import daemon

    daemon.manager()
