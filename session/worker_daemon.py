"""The Python workers' daemon (``spark.python.daemon.module``): pyspark's own, with the installed
pyspark and py4j found ahead of Spark's zip copies of them.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's source zip first on every worker's
path. Python keeps no compiled bytecode for a zip, so the daemon compiles pyspark's modules from
source each time it starts, and each worker reads both zips' directories again when pyspark adds
its files dir to the path. A pip-installed pyspark is its own SPARK_HOME: the zips then hold the
very package installed beside them, with its bytecode cached, so this daemon moves them behind
it. Any other zip (a cluster's own Spark, whose pyspark may not be the one pip installed) stays
where Spark put it. The daemon imports nothing more than pyspark's own before it forks workers.
"""

from __future__ import annotations

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


if __name__ == "__main__":
    sys.path[:] = installed_first(sys.path)
    from pyspark import daemon

    daemon.manager()
