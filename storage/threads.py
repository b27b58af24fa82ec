"""Units of storage work on a thread pool: an object store's requests spend their time waiting
on its answers, not on a core, so several go at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from kcompact.storage.paths import is_local_path

IN_FLIGHT = 8  # units of work on an object store a thread pool keeps going at once (``map_in_flight``)


def on_threads(function, items: list, threads: int, name: str = "") -> list:
    """``function`` of each item, in order, on at most ``threads`` threads (one: one after another,
    on this one); ``name``: the threads' names begin with it."""
    if threads <= 1 or len(items) < 2:
        return [function(item) for item in items]
    with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix=name) as pool:
        return list(pool.map(function, items))


def map_in_flight(function, items: list, path: str) -> list:
    """``function`` of each item, in order. When ``path`` is on an object store, ``IN_FLIGHT`` at
    once: each spends most of its time waiting on the store's answers, not on a core. Locally one
    after another."""
    return on_threads(function, items, 1 if is_local_path(path) else IN_FLIGHT)
