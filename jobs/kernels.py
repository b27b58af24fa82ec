"""Build the compiled kernels shipped in the package (``kernels/compiled``; ``kernels.cache``
says why and how they are used): ``python -m kcompact.jobs.kernels [--out DIR]``, run by ``make install``
and by ``make dist`` before the wheel and the zip are made.

A child process runs a small workload that takes every path with kernels: a generated log dir
of every codec, with legacy messages, transactions and tombstones, through ``kcompact run``
(planned, compacted by the whole path, retained), a copy of it compacted by the shared path, the
``kafka-log`` data source in each of its modes, ``dump`` and ``verify``. Numba is set to the
portable CPU target (``kernels.cache.portable_target``) and, with ``KCOMPACT_KERNELS_BUILD``,
every process (the driver and each Spark worker) saves what it compiles in a directory of its
own, so no two write one index. Their entries are then merged, per kernel, into one index and its
data files, ``target.json`` is written beside them, and the whole moves into place in one rename.
The build fails if a kernel of ours (one a caller may reach: not an ``inline="always"`` helper)
got no entry: a new kernel on a path the workload does not take must be added to it.

The same run trains the JVM class-data archive of embedded Spark (``jobs.cds``): its JVM loads
every class a job's does, and a second run only for the archive would cost as much again.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import pickle
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kcompact.jobs import cds
from kcompact.kernels import cache

DEFAULT_OUT = Path(cache.__file__).parent / cache.SHIPPED
NOW = 1_720_001_000_000


def _spec() -> dict:
    """The demo log dir (every codec, transactions, tombstones, three cleanup policies) and a topic
    of legacy magic 0 and 1 messages, compressed and not, before its v2 batches."""
    from kcompact.tools.generator.spec import DEMO_SPEC

    legacy = {"name": "legacy", "partitions": 1, "records": 1200, "keys": 150, "key_size": 10, "value_size": [10, 120],
              "tombstone_fraction": 0.05, "codecs": {"none": 1, "lz4": 1, "zstd": 1}, "batch_records": [1, 20],
              "legacy": {"magic0": 300, "magic1": 300, "codecs": {"none": 2, "gzip": 1, "snappy": 1, "lz4": 1}},
              "config": {"cleanup.policy": "compact", "segment.bytes": 32768}}
    return DEMO_SPEC | {"topics": [*DEMO_SPEC["topics"], legacy]}


def _library(logs: Path) -> None:
    """What only a library caller reaches: a batch of each codec rebuilt without its first record
    (``writers.rebuild.rebuild``), and a key table that grows."""
    import numpy as np

    from kcompact.compaction.cleaning.offset_map import KeyTable
    from kcompact.readers.segment import iter_batches
    from kcompact.writers.rebuild import rebuild

    codecs = set()
    for segment in sorted(logs.glob("*/*.log")):
        with open(segment, "rb") as f:
            for batch in iter_batches(f, str(segment)):
                if batch.magic == 2 and not batch.is_control and batch.count > 1 and batch.codec not in codecs:
                    keep = np.ones(batch.count, np.bool_)
                    keep[0] = False
                    rebuild(batch, keep)
                    codecs.add(batch.codec)
    keys, n = np.frombuffer(b"0123456789abcdef" * 4, np.uint8), 8
    KeyTable(1, 16).upsert(keys, np.arange(n) * 8, np.full(n, 8), np.zeros(n, np.int64), np.arange(n))


def workload(work: Path) -> None:
    """Every path with kernels, in this process (its driver side) and Spark's workers."""
    from kcompact.compaction.pipeline import settings
    from kcompact.jobs.cli import main
    from kcompact.tools import generator

    logs, shared = work / "logs", work / "logs-shared"
    generator.generate(str(logs), _spec(), seed=1, keep_records=False)
    shutil.copytree(logs, shared)
    _library(logs)
    quiet = contextlib.redirect_stdout(io.StringIO())
    steps = [["dump", str(logs)], ["verify", str(logs)],
             ["run", str(logs), "--now", str(NOW), "--report", str(work / "run.json")]]
    for step in steps:
        started = time.perf_counter()
        with quiet:
            code = main(step)
        print(f"  kcompact {step[0]}: {time.perf_counter() - started:.0f} s", flush=True)
        if code != 0:
            raise SystemExit(f"kcompact {step[0]} exited {code}")
    started = time.perf_counter()
    with quiet:  # as the tests' "shared" path: every partition taken for larger than a task
        code = main(["compact", str(shared), "--now", str(NOW), "--spark-conf", f"{settings.MAP_MEMORY}=0",
                     "--spark-conf", f"{settings.WHOLE}=0",
                     "--report", str(work / "shared.json"), "--kafka-version", "4.0.0"])  # one append per read chunk
    if code != 0:
        raise SystemExit(f"kcompact compact (shared path) exited {code}")
    print(f"  kcompact compact, shared path: {time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()
    from pyspark.sql import SparkSession

    from kcompact.datasource.kafka_log import KafkaLogDataSource

    spark = SparkSession.builder.getOrCreate()
    spark.dataSource.register(KafkaLogDataSource)
    for mode in ("records", "compaction", "batches"):
        spark.read.format("kafka-log").option("mode", mode).load(str(shared)).toArrow()
    spark.stop()
    print(f"  kafka-log data source: {time.perf_counter() - started:.0f} s", flush=True)


def layers() -> list:
    """kcompact's subpackages, found where they lie: the folders beside ``readers`` that import as
    ``kcompact.<folder>`` (a source checkout's top-level folders, or an install's subpackages)."""
    base = os.path.dirname(os.path.dirname(cache.__file__))  # a dir, or a dir inside a zip
    found = []
    for entry in sorted(pkgutil.iter_modules([base]), key=lambda e: e.name):
        if entry.ispkg:
            with contextlib.suppress(ImportError):
                found.append(importlib.import_module(f"kcompact.{entry.name}"))
    return found


def kernels() -> dict[tuple[str, str], object]:
    """Every cached kernel of ours a caller may reach, by (package dir, numba's file name base)."""
    from numba.core.registry import CPUDispatcher

    for root in layers():  # every module of ours imported, to find them
        for module in pkgutil.walk_packages(root.__path__, f"{root.__name__}."):
            with contextlib.suppress(Exception):  # an optional dependency missing: no kernels there
                importlib.import_module(module.name)
    found = {}
    for module in list(sys.modules.values()):
        for obj in list(vars(module).values()) if module else []:
            impl = getattr(obj, "_cache", None) and getattr(obj._cache, "_impl", None)  # cache=True only
            if isinstance(obj, CPUDispatcher) and impl and obj.targetoptions.get("inline", "never") == "never":
                package = cache.package_dir(obj.py_func.__module__)
                if package is not None:
                    found[(package, impl.filename_base)] = obj
    return found


def name(kernel) -> str:
    """A kernel's module and name."""
    return f"{kernel.py_func.__module__}.{kernel.__name__}"


def merge(parts: Path, out: Path) -> dict[tuple[str, str], int]:
    """Each kernel's entries of every process's part, in one index per kernel under ``out``:
    (package dir, file name base) -> entries."""
    import numba
    from numba.core.caching import IndexDataCacheFile

    merged: dict[tuple[str, str], tuple[object, dict]] = {}
    for index in sorted(parts.glob("*/**/*.nbi")):
        package = index.parent.relative_to(parts / index.relative_to(parts).parts[0]).as_posix()
        with open(index, "rb") as f:
            if pickle.load(f) != numba.__version__:
                continue
            stamp, overloads = pickle.loads(f.read())
        seen_stamp, entries = merged.setdefault((package, index.name[:-4]), (stamp, {}))
        if seen_stamp != stamp:
            raise SystemExit(f"{index}: source changed during the build")
        for key, data in overloads.items():
            entries.setdefault(key, index.parent / data)
    counts = {}
    for (package, base), (stamp, entries) in merged.items():
        target = out / package
        target.mkdir(parents=True, exist_ok=True)
        cache_file = IndexDataCacheFile(str(target), base, stamp)
        overloads = {}
        for number, key in enumerate(sorted(entries, key=repr), 1):
            data_name = f"{base}.{number}.nbc"
            shutil.copyfile(entries[key], target / data_name)
            overloads[key] = data_name
        cache_file._save_index(overloads)
        counts[(package, base)] = len(overloads)
    return counts


def _child(work: Path, out: Path) -> int:
    started = time.perf_counter()
    workload(work)
    jvm_exited = cds.end_jvm()  # it writes the class-data archive meanwhile
    worked = time.perf_counter() - started
    try:
        return _keep(work, out, worked)
    finally:
        jvm_exited()  # the archive whole before the parent keeps it


def _keep(work: Path, out: Path, worked: float) -> int:
    """The kernels the workload compiled, merged and moved into ``out``, or why not."""
    partial = Path(f"{out}.{os.getpid()}.tmp")
    shutil.rmtree(partial, ignore_errors=True)
    counts = merge(work / "parts", partial)
    missing = sorted(name(kernel) for key, kernel in kernels().items() if key not in counts)
    if missing:
        shutil.rmtree(partial)
        print(f"kcompact: no shipped kernels built: the workload of jobs/kernels.py compiled no entry for "
              f"{', '.join(missing)}", file=sys.stderr)
        return 1
    import numba
    from llvmlite import binding

    manifest = {"cpu_name": os.environ["NUMBA_CPU_NAME"], "cpu_features": os.environ["NUMBA_CPU_FEATURES"],
                "triple": binding.get_process_triple(), "numba": numba.__version__,
                "python": cache._PYTHON, "digest": cache.digest(str(partial))}
    (partial / cache.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    old = Path(f"{out}.{os.getpid()}.old")
    if out.exists():
        out.rename(old)
    partial.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"shipped kernels: {out} ({len(counts)} kernels, {sum(counts.values())} entries, {size / 1e6:.1f} MB, "
          f"for {manifest['cpu_name']}; workload {worked:.0f} s)")
    return 0


def build(out: Path) -> int:
    """Run the workload in a child process set to build, and keep what it compiled in ``out`` and
    the class-data archive its JVM wrote."""
    cpu_name, cpu_features = cache.portable_target()
    archive = cds.partial()
    with tempfile.TemporaryDirectory(prefix="kcompact-kernels-") as work:
        env = {k: v for k, v in os.environ.items() if k not in (cache.CHOICE_ENV, "NUMBA_CACHE_DIR")}
        env |= {cache.BUILD_ENV: str(Path(work, "parts")), "NUMBA_CPU_NAME": cpu_name,
                "NUMBA_CPU_FEATURES": cpu_features} | cds.training_env(archive)
        done = subprocess.run(
            [sys.executable, "-m", "kcompact.jobs.kernels", "--child", work, "--out", str(out)], env=env
        )
    if done.returncode == 0:
        cds.keep(archive)
    else:
        archive.unlink(missing_ok=True)
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where (default {DEFAULT_OUT})")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.out.absolute())
    return build(args.out.absolute())


if __name__ == "__main__":
    sys.exit(main())
