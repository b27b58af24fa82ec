"""Re-encoding batches that lose most of their records: encode_like versus rebuild.

Run as ``python -m tests.bench.rebuild [--mb 100]`` (``make bench-rebuild``). Not a
test: nothing here runs under pytest.

Per codec, ``--mb`` MB of batches (as stored, so compressed for the codecs) are
generated in memory with the corpus of ``tests.bench.format`` (~16 KiB of 100-byte
records per batch before compression) and read back with ``iter_batches``. Each
batch gets a random keep mask holding ``--keep`` (20%) of its records. Timed with
``perf_counter``, single-threaded, after a warm-up that compiles the kernels and
checks that both paths agree on the warm-up batches:
  - decode + encode_like: ``Batch.records()``, the kept ones, ``encode_like``:
    what re-encoding cost before ``rebuild``
  - encode_like alone: the same, the decoding left out of the timing
  - rebuild: ``rebuild(batch, mask)``, median of three runs
MB/s counts the input batches' stored bytes and records/s their records, kept or not;
speed-up is against decode + encode_like.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kcompact.readers import codecs
from kcompact.readers.batch import V2_CRC_START, V2_HEADER_SIZE, Batch
from kcompact.readers.segment import iter_batches
from kcompact.writers.rebuild import rebuild
from tests.bench.format import MB, build_pool, machine, placed_stream
from tests.oracles import encode_like

CODECS = ("none", "lz4", "zstd")
WARM_UP_BATCHES = 20


@dataclass(frozen=True, slots=True)
class Work:
    """One codec's input: the batches and a keep mask per batch."""

    batches: list[Batch]
    masks: list[np.ndarray]

    @property
    def nbytes(self) -> int:
        return sum(b.size for b in self.batches)

    @property
    def records(self) -> int:
        return sum(b.records_count for b in self.batches)


def generate(codec: int, target_bytes: int, keep: float, seed: int) -> Work:
    """Pool batches placed one after the other until ``target_bytes``, read back as a segment is."""
    chunks, size = [], 0
    for data, _ in placed_stream(build_pool(codec, seed=7)):
        chunks.append(data)
        size += len(data)
        if size >= target_bytes:
            break
    batches = list(iter_batches(io.BytesIO(b"".join(chunks)), f"{codecs.name(codec)}.log"))
    rng = np.random.default_rng(seed)
    return Work(batches, [rng.random(b.records_count) < keep for b in batches])


def decode_and_encode_like(work: Work) -> float:
    started = time.perf_counter()
    for batch, mask in zip(work.batches, work.masks):
        encode_like(batch, [r for r, k in zip(batch.records(), mask) if k])
    return time.perf_counter() - started


def encode_like_alone(work: Work) -> float:
    seconds = 0.0
    for batch, mask in zip(work.batches, work.masks):
        kept = [r for r, k in zip(batch.records(), mask) if k]
        started = time.perf_counter()
        encode_like(batch, kept)
        seconds += time.perf_counter() - started
    return seconds


def rebuild_all(work: Work) -> float:
    started = time.perf_counter()
    for batch, mask in zip(work.batches, work.masks):
        rebuild(batch, mask)
    return time.perf_counter() - started


def content(data: bytes) -> tuple[bytes, bytes]:
    """A v2 batch's header fields after the CRC and its decompressed records section."""
    return data[V2_CRC_START:V2_HEADER_SIZE], codecs.decompress(data[22] & 0x07, data[V2_HEADER_SIZE:])


def warm_up(work: Work) -> None:
    """Compile the kernels, load the codecs, and make sure both paths write the same batches."""
    head = Work(work.batches[:WARM_UP_BATCHES], work.masks[:WARM_UP_BATCHES])
    for batch, mask in zip(head.batches, head.masks):
        reference = encode_like(batch, [r for r, k in zip(batch.records(), mask) if k])
        assert content(rebuild(batch, mask)) == content(reference), f"rebuild differs from encode_like: {batch}"
    for measure in (decode_and_encode_like, encode_like_alone, rebuild_all):
        measure(head)


@dataclass(frozen=True, slots=True)
class Result:
    codec: str
    method: str
    nbytes: int
    records: int
    batches: int
    seconds: float

    def row(self, baseline: float) -> str:
        return (
            f"{self.codec:<6} {self.method:<22} {self.nbytes / MB:>7.1f} {self.seconds:>8.3f} "
            f"{self.nbytes / MB / self.seconds:>8.0f} {self.records / self.seconds / 1e6:>8.2f} "
            f"{self.seconds / self.batches * 1e6:>9.1f} {baseline / self.seconds:>8.1f}x"
        )


def bench_codec(name: str, work: Work) -> list[Result]:
    warm_up(work)
    runs: list[tuple[str, Callable[[], float]]] = [
        ("decode + encode_like", lambda: decode_and_encode_like(work)),
        ("encode_like alone", lambda: encode_like_alone(work)),
        ("rebuild", lambda: statistics.median(rebuild_all(work) for _ in range(3))),
    ]
    nbytes, records, batches = work.nbytes, work.records, len(work.batches)
    return [Result(name, method, nbytes, records, batches, measure()) for method, measure in runs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mb", type=int, default=100, help="MB of stored batches per codec (default 100)")
    parser.add_argument("--keep", type=float, default=0.2, help="fraction of records kept (default 0.2)")
    parser.add_argument("--codecs", default=",".join(CODECS), help="comma-separated codec names")
    args = parser.parse_args(argv)
    print(machine())
    print(f"keeping {args.keep:.0%} of records at random, no delete horizon; MB/s and Mrec/s count the input\n")
    print(f"{'codec':<6} {'method':<22} {'MB':>7} {'seconds':>8} {'MB/s':>8} {'Mrec/s':>8} {'us/batch':>9} "
          f"{'speed-up':>9}")
    for name in args.codecs.split(","):
        work = generate(codecs.BY_NAME[name], args.mb * MB, args.keep, seed=11)
        results = bench_codec(name, work)
        for result in results:
            print(result.row(results[0].seconds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
