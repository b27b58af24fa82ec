"""A job's leases on the partitions it cleans: taken before any file is touched, renewed by a
driver thread while the job runs, checked at every segment group and before every commit,
given back at the end (idle, uncleanable, or the paused state an operator asked for)."""

from __future__ import annotations

import threading
import uuid

from kcompact.operations import states


class LeaseKeeper:
    def __init__(self, owner: str | None = None, lease_ms: int = states.LEASE_MS):
        self.owner = owner or f"kcompact-{uuid.uuid4().hex[:12]}"
        self.lease_ms = lease_ms
        self._leases: dict[str, states.Lease] = {}
        self._lost: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, partition_dir: str) -> str | None:
        """None when the partition is now ours, else why not (another job, paused, ...)."""
        got = states.acquire(partition_dir, self.owner, self.lease_ms)
        if isinstance(got, str):
            return got
        with self._lock:
            self._leases[partition_dir] = got
        return None

    def __enter__(self) -> LeaseKeeper:
        self._thread = threading.Thread(target=self._renew_loop, name="kcompact-lease-renewal", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for path in list(self._leases):  # whatever the job did not give back: back to idle
            self.release(path)

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease_ms / 4000):
            with self._lock:
                leases = [(path, lease) for path, lease in self._leases.items() if path not in self._lost]
            # renewed outside the lock: a round over thousands of leases writes (and fsyncs) each
            # one, and ``held`` (asked before every commit) must not wait for the round
            for path, lease in leases:
                try:
                    renewed = states.renew(lease)
                except OSError:
                    continue  # a storage hiccup: the next round tries again before expiry
                with self._lock:
                    if self._leases.get(path) is not lease:
                        continue  # given back meanwhile: its release compares and swaps the file itself
                    if renewed is None:
                        self._lost.add(path)
                    else:
                        self._leases[path] = renewed

    def held(self, partition_dir: str) -> bool:
        """Still ours: not aborted by an operator, not taken over after expiring."""
        with self._lock:
            lease = self._leases.get(partition_dir)
            if lease is None or partition_dir in self._lost:
                return False
        return states.still_held(lease)

    def release(self, partition_dir: str, uncleanable: str | None = None) -> None:
        with self._lock:
            lease = self._leases.pop(partition_dir, None)
            self._lost.discard(partition_dir)
        if lease is not None:
            states.release(lease, uncleanable)
