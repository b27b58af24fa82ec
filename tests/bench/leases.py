"""A job's leases on many partitions of one local log dir: taking, renewing, checking, giving back.

Run as ``python -m tests.bench.leases --dir bench-data/leases [--sizes 2000,20000] [--profile]``.
Not a test: nothing here runs under pytest. No Spark: the log dir holds empty partition dirs
(topics of ``TOPIC_PARTITIONS``), which is all a lease looks at. Per phase: wall seconds, ms a
partition, and the fsync, rename and directory-listing calls counted by wrapping ``os``; the
1-minute load average before and after each size (the machine is shared). ``--profile`` prints
each phase's heaviest calls under cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

from kcompact.compaction.pipeline.leases import LeaseKeeper
from kcompact.operations import last_run, states

TOPIC_PARTITIONS = 2_000
COUNTED = ("fsync", "replace", "scandir", "listdir")


@contextmanager
def counting(counts: dict[str, int]):
    originals = {name: getattr(os, name) for name in COUNTED}

    def wrap(name):
        def call(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return originals[name](*args, **kwargs)
        return call

    for name in COUNTED:
        setattr(os, name, wrap(name))
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(os, name, function)


def make_log_dir(root: Path, size: int) -> list[str]:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    paths = []
    for i in range(size):
        part = root / f"t{i // TOPIC_PARTITIONS}-{i % TOPIC_PARTITIONS}"
        part.mkdir()
        paths.append(str(part))
    os.sync()
    return paths


def phases(keeper: LeaseKeeper, paths: list[str], log_dir: str) -> dict:
    """Each phase of a job's leases as the job runs them (``LeaseKeeper``'s bulk calls where it
    has them, else one partition at a time)."""
    bulk = hasattr(keeper, "acquire_many")
    return {
        "acquire": (lambda: keeper.acquire_many(paths)) if bulk else (lambda: [keeper.acquire(p) for p in paths]),
        "renew (one round)": keeper.renew_all if hasattr(keeper, "renew_all") else
        (lambda: [states.renew(lease) for lease in keeper._leases.values()]),
        "held (driver, each)": lambda: [keeper.held(p) for p in paths],
        "held_by (executors, each)": lambda: [states.held_by(p, keeper.owner) for p in paths],
        "release": (lambda: keeper.release_many(paths)) if bulk else (lambda: [keeper.release(p) for p in paths]),
        "last-run file": lambda: last_run.write(log_dir, 1),
    }


def run(root: Path, size: int, profile: bool) -> None:
    paths = make_log_dir(root / str(size), size)
    print(f"\n{size:,} partitions, load {os.getloadavg()[0]:.2f}")
    keeper = LeaseKeeper()
    for name, phase in phases(keeper, paths, str(root / str(size))).items():
        counts: dict[str, int] = {}
        profiler = cProfile.Profile() if profile else None
        start = time.perf_counter()
        with counting(counts):
            if profiler:
                profiler.enable()
            phase()
            if profiler:
                profiler.disable()
        wall = time.perf_counter() - start
        calls = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))
        print(f"  {name:28} {wall:8.3f} s  {wall * 1000 / size:7.3f} ms a partition  ({calls or 'no counted calls'})")
        if profiler:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(12)
    print(f"  load after {os.getloadavg()[0]:.2f}")
    shutil.rmtree(root / str(size), ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", default="bench-data/leases")
    parser.add_argument("--sizes", default="2000")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        run(Path(args.dir).absolute(), size, args.profile)


if __name__ == "__main__":
    main()
