"""The JVM class-data archive of embedded local Spark: built once at install, mapped by every job.

A kcompact command's JVM lives seconds, and finding, parsing and verifying Spark's classes is a
large share of them. A dynamic CDS archive (JEP 350) holds the classes a representative run
loaded, already parsed and verified; a JVM started with it maps them instead (bench-compact:
session start and the first Spark jobs take seconds less, see docs/benchmarks.md). The build of
the shipped kernels (``jobs.kernels``, run by ``make install``) is that run: its JVM starts with
``-XX:ArchiveClassesAtExit`` (``training_env``), writes the archive as it exits, and ``keep`` moves
it into place in one rename, so a job never sees half an archive. An install from the wheel builds
no kernels: ``python -m kcompact.jobs.cds``, run once by the install's owner (docs/deployment.md),
trains it with one ``kcompact run`` of a small generated log dir. A JVM that finds the archive
made by another Java or for another class path ignores it without a word and loads classes as
usual: the archive only ever saves time.

``KCOMPACT_CDS=off`` runs without it (for comparisons). spark-submit runs do not use it: their
JVMs are started by the cluster manager.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
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


def partial() -> Path:
    """Where a training run's JVM writes the archive, beside it."""
    target = archive()
    return target.with_name(f"{target.name}.{os.getpid()}.tmp")


def training_env(path: Path) -> dict[str, str]:
    """The environment of a run whose JVM leaves the classes it loaded in ``path`` as it exits: no
    archive mapped (a JVM that maps a dynamic archive dumps none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # the dump's warnings on the JVM's standard output (classes it cannot archive: signed jars, old
    # class files) said nothing a job needs, hundreds of lines of them
    return {"KCOMPACT_CDS": "off", "JDK_JAVA_OPTIONS": f"-XX:ArchiveClassesAtExit={path} -Xlog:cds=error"}


def end_jvm() -> Callable[[], None]:
    """Make the JVM this process started exit now; the function returned waits for it. The JVM
    writes the archive as it exits, which it otherwise does only once this process has gone (its
    stdin ends)."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return lambda: None
    proc.stdin.close()  # PySpark's gateway server exits when its stdin ends
    return lambda: proc.wait(120)


def keep(path: Path) -> bool:
    """The archive a training run wrote, in place; or why there is none (jobs then start without it)."""
    if not path.is_file():
        print(f"kcompact: JVM class-data archive not built (the JVM wrote no {path}); jobs start without it",
              file=sys.stderr)
        return False
    target = archive()
    os.replace(path, target)
    print(f"JVM class-data archive for embedded Spark: {target} ({target.stat().st_size / 1e6:.0f} MB)")
    return True


def build() -> int:
    """Train the archive with one ``kcompact run`` of a generated log dir, and keep it."""
    path = partial()
    env = os.environ | training_env(path)
    with tempfile.TemporaryDirectory(prefix="kcompact-cds-") as work:
        logs = os.path.join(work, "logs")
        for step in (["gen", "--out", logs, "--seed", "1"], ["run", logs, "--report", os.path.join(work, "run.json")]):
            # output captured: the run returns once the JVM, which holds the pipes, has exited, its archive written
            done = subprocess.run([sys.executable, "-m", "kcompact.jobs.cli", *step], env=env, capture_output=True,
                                  text=True)
            if done.returncode != 0:
                path.unlink(missing_ok=True)
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                print(f"kcompact: JVM class-data archive not built (kcompact {step[0]} exited {done.returncode}: "
                      f"{' / '.join(tail)}); jobs start without it", file=sys.stderr)
                return 1
    return 0 if keep(path) else 1


if __name__ == "__main__":
    sys.exit(build())
