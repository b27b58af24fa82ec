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
        got = self.acquire_many([partition_dir])[partition_dir]
        if isinstance(got, OSError):
            raise got
        return got

    def acquire_many(self, partition_dirs: list[str]) -> dict[str, str | OSError | None]:
        """``acquire`` of each partition at once (``states.acquire_many``): None where it is now
        ours, else why not, or the error that kept its lease from being written."""
        out: dict[str, str | OSError | None] = {}
        got = states.acquire_many(partition_dirs, self.owner, self.lease_ms)
        with self._lock:
            for path, lease in zip(partition_dirs, got, strict=True):
                if isinstance(lease, states.Lease):
                    self._leases[path] = lease
                    out[path] = None
                else:
                    out[path] = lease
        return out

    def __enter__(self) -> LeaseKeeper:
        self._thread = threading.Thread(target=self._renew_loop, name="kcompact-lease-renewal", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.release_many(list(self._leases))  # whatever the job did not give back: back to idle

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease_ms / 4000):
            self.renew_all()

    def renew_all(self) -> None:
        """One round: every lease still ours renewed at once (``states.renew_many``). Renewed
        outside the lock: ``held`` (asked before every commit) must not wait for the round."""
        with self._lock:
            leases = [(path, lease) for path, lease in self._leases.items() if path not in self._lost]
        if not leases:
            return
        try:
            renewed = states.renew_many([lease for _, lease in leases])
        except OSError:
            return  # a storage hiccup: the next round tries again before expiry
        with self._lock:
            for (path, lease), new in zip(leases, renewed, strict=True):
                if isinstance(new, OSError) or self._leases.get(path) is not lease:
                    continue  # tried again next round; or given back meanwhile (its release compares and swaps)
                if new is None:
                    self._lost.add(path)
                else:
                    self._leases[path] = new

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

    def release_many(self, partition_dirs: list[str]) -> None:
        """Each of these partitions back to idle (or to what an operator asked meanwhile) at once
        (``states.release_many``); one whose state file cannot be changed keeps its lease on disk
        until it lapses, as after a crash."""
        with self._lock:
            leases = [lease for lease in (self._leases.pop(path, None) for path in partition_dirs) if lease is not None]
            self._lost.difference_update(partition_dirs)
        if leases:
            states.release_many(leases)
