"""The file system's own share of a compaction of many small partitions: what any implementation
of Kafka's swap protocol pays for the same files on this machine, against which a partition's
milliseconds are judged.

Run as ``python -m tests.bench.fs_floor --dir bench-data/many [--size 2000]`` (``make bench-floor``),
on ``make bench-many``'s corpus of that size (generated here when missing). Not a test.

One ``kcompact compact`` of a fresh copy of the corpus runs with every storage mutation logged
(``tests/faults/crash_points.py``'s ``KCOMPACT_CRASH_LOG``: the op and its paths, from the driver
and the Spark workers alike). Then, on another fresh copy of the corpus, the same mutations are
replayed in the logged order on one thread by plain ``os`` calls: each created file written whole
with the size it has once the job is done, each rename, removal, ``utime``, fsync and ``syncfs``
as logged. Printed, per replay (``--replays``, each on a fresh copy): per kind of mutation its
calls, seconds, microseconds a call and milliseconds a partition; the total in thread-milliseconds
a partition (on 2 cores, half of it in wall if it all overlapped); the median of the replays. The
reads (segments, indexes, listings) are not in it: they hit the page cache.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tests.bench.compact import _env
from tests.bench.many import NOW, generated

FAULTS = Path(__file__).resolve().parents[1] / "faults"
CREATES = ("create_file", "write_file", "write_durable")
UNKNOWN_SIZE = 100  # a file gone by the job's end (a lease's temp file): about a state file's size


def fresh_copy(corpus: Path, to: Path) -> None:
    shutil.rmtree(to, ignore_errors=True)
    to.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-r", "--preserve=timestamps", str(corpus), str(to)], check=True)
    os.sync()


def logged_job(corpus: Path, work: Path) -> list[dict]:
    """The mutations of one ``kcompact compact`` of a copy of ``corpus`` at ``work/logs``, in order."""
    logs, log = work / "logs", work / "mutations.jsonl"
    fresh_copy(corpus, logs)
    log.unlink(missing_ok=True)
    env = _env(None)
    env["KCOMPACT_CRASH_LOG"] = str(log)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FAULTS), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "kcompact.jobs.cli", "compact", str(logs), "--now", str(NOW)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"kcompact compact exited {done.returncode}:\n{done.stdout[-4000:].decode(errors='replace')}")
    with open(log) as f:
        return [json.loads(line) for line in f if line.strip()]


def final_size(path: str) -> int:
    """A created file's size once the job is done (a ``.cleaned`` file's under its final name)."""
    try:
        return os.path.getsize(path.removesuffix(".cleaned"))
    except OSError:
        return UNKNOWN_SIZE


def replay(entries: list[dict], logged_root: Path, root: Path) -> tuple[collections.Counter, collections.Counter]:
    """``entries`` (paths under ``logged_root``) done under ``root`` by plain os calls: seconds and calls per op."""
    sizes = {p: final_size(p) for e in entries if e["op"] in CREATES for p in e["paths"]}
    zeros = bytes(max(sizes.values(), default=0))
    libc = ctypes.CDLL(None, use_errno=True)
    prefix = str(logged_root)
    seconds, calls = collections.Counter(), collections.Counter()
    for e in entries:
        op = e["op"]
        paths = [str(root) + p[len(prefix):] if p.startswith(prefix) else p for p in e["paths"]]
        started = time.perf_counter()
        if op in CREATES:
            with open(paths[0], "wb") as f:
                f.write(zeros[:sizes[e["paths"][0]]])
                if op == "write_durable":
                    f.flush()
                    os.fsync(f.fileno())
        elif op == "rename":
            os.rename(paths[0], paths[1])
        elif op in ("remove", "remove_if"):
            with contextlib.suppress(FileNotFoundError):  # the removal raced a lease's give-back
                os.unlink(paths[0])
        elif op == "set_mtime":
            os.utime(paths[0], ns=(NOW * 1_000_000, NOW * 1_000_000))
        elif op in ("fsync_dir", "syncfs"):
            fd = os.open(paths[0], os.O_RDONLY)
            try:
                if op == "fsync_dir":
                    os.fsync(fd)
                else:
                    libc.syncfs(fd)
            finally:
                os.close(fd)
        elif op == "makedirs":
            os.makedirs(paths[0], exist_ok=True)
        else:
            raise SystemExit(f"a logged mutation this replay does not know: {e}")
        seconds[op] += time.perf_counter() - started
        calls[op] += 1
    return seconds, calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="make bench-many's directory (bench-data/many)")
    parser.add_argument("--size", type=int, default=2_000, help="the corpus of that many partitions")
    parser.add_argument("--replays", type=int, default=3, help="replays of the logged mutations, each on a fresh copy")
    args = parser.parse_args(argv)
    corpus = args.dir / str(args.size) / "corpus"
    manifest = generated(corpus, args.size)
    work = args.dir / str(args.size) / "floor"
    print(f"logged job on {corpus} ...", flush=True)
    entries = logged_job(corpus, work)
    partitions = manifest["partitions"]
    totals = []
    for run in range(1, args.replays + 1):
        fresh_copy(corpus, work / "replay")
        seconds, calls = replay(entries, work / "logs", work / "replay")
        totals.append(sum(seconds.values()))
        print(f"replay {run}: {len(entries):,} mutations of {partitions:,} partitions on one thread "
              f"(load {os.getloadavg()[0]:.1f}):")
        for op, spent in seconds.most_common():
            print(f"  {op:14s} {calls[op]:8,d} calls {spent:7.2f} s {spent / calls[op] * 1e6:8.1f} us a call "
                  f"{spent / partitions * 1e3:6.3f} ms a partition")
        print(f"  total {totals[-1]:.2f} s: {totals[-1] / partitions * 1e3:.2f} thread-ms a partition", flush=True)
    middle = statistics.median(totals)
    print(f"median of {len(totals)}: {middle:.2f} s, {middle / partitions * 1e3:.2f} thread-ms a partition")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
