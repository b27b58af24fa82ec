"""The JVM class-data archive of embedded local Spark: built once at install, mapped by every job.

A kcompact command's JVM lives seconds, and finding, parsing and verifying Spark's classes is a
large share of them. A dynamic CDS archive (JEP 350) holds the classes a representative run
loaded, already parsed and verified; a JVM started with it maps them instead (bench-compact:
session start and the first Spark jobs take seconds less, see docs/benchmarks.md). ``make install``
runs ``python -m kcompact.jobs.cds``: one ``kcompact run`` of a small generated log dir with
``-XX:ArchiveClassesAtExit``, whose archive then moves into place in one rename, so a job never
sees half an archive. A JVM that finds the archive made by another Java or for another class
path ignores it without a word and loads classes as usual: the archive only ever saves time.

``KCOMPACT_CDS=off`` runs without it (for comparisons). spark-submit runs do not use it: their
JVMs are started by the cluster manager.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def archive() -> Path:
    """Per PySpark version, inside the environment that has it installed."""
    from pyspark import __version__

    return Path(sys.prefix) / "share" / "kcompact" / f"spark-{__version__}.jsa"


def java_options() -> str:
    """The driver JVM option that maps the archive, when there is one and it is wanted."""
    path = archive()
    if os.environ.get("KCOMPACT_CDS", "on") == "off" or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path}"


def build() -> int:
    """Run one ``kcompact run`` on a generated log dir and keep the classes its JVM loaded."""
    target = archive()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    with tempfile.TemporaryDirectory(prefix="kcompact-cds-") as work:
        logs = os.path.join(work, "logs")
        env = os.environ | {"KCOMPACT_CDS": "off", "JDK_JAVA_OPTIONS": f"-XX:ArchiveClassesAtExit={partial}"}
        steps = [["gen", "--out", logs, "--seed", "1"], ["run", logs, "--report", os.path.join(work, "run.json")]]
        for step in steps:
            done = subprocess.run(
                [sys.executable, "-m", "kcompact.jobs.cli", *step], env=env, capture_output=True, text=True
            )
            if done.returncode != 0:
                partial.unlink(missing_ok=True)
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                print(f"kcompact: JVM class-data archive not built (kcompact {step[0]} exited {done.returncode}: "
                      f"{' / '.join(tail)}); jobs start without it", file=sys.stderr)
                return 1
    if not partial.is_file():
        print(f"kcompact: JVM class-data archive not built (the JVM wrote no {partial}); jobs start without it",
              file=sys.stderr)
        return 1
    os.replace(partial, target)
    print(f"JVM class-data archive for embedded Spark: {target} ({target.stat().st_size / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(build())
