"""Writing a local file past the page cache (``O_DIRECT``), for cleaned segments."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import queue

DIRECT_BLOCK = 4096  # the most O_DIRECT asks of buffer addresses, write sizes and file offsets
DIRECT_BUFFER = 4 << 20
_DIRECT_BUFFERS: queue.SimpleQueue = queue.SimpleQueue()  # reused: a fresh page costs a fault


class DirectFile:
    """A file written with ``O_DIRECT``, in whole blocks from a reused page-aligned buffer straight
    to the device. It skips the copy into the page cache, which costs more than the write when the
    cache's pages are new to the machine (on a virtual machine, the host faults each one in), and
    leaves the cache to what brokers read: a cleaned segment holds a partition's older records.
    ``flush`` writes the last partial block through the page cache (the file goes on that way); so
    does every write after the file system refuses an aligned one (``EINVAL``)."""

    def __init__(self, fd: int):
        self.fd, self.used = fd, 0
        try:
            self.buffer = _DIRECT_BUFFERS.get_nowait()
        except queue.Empty:
            self.buffer = mmap.mmap(-1, DIRECT_BUFFER)
        self.view = memoryview(self.buffer)

    def __enter__(self) -> DirectFile:
        return self

    def __exit__(self, *exc) -> None:
        self.view.release()
        _DIRECT_BUFFERS.put(self.buffer)
        os.close(self.fd)

    def write(self, data) -> int:
        data = memoryview(data).cast("B")
        size = len(data)
        while data:
            n = min(len(data), DIRECT_BUFFER - self.used)
            self.view[self.used:self.used + n] = data[:n]
            self.used += n
            data = data[n:]
            if self.used == DIRECT_BUFFER:
                self._drain(DIRECT_BUFFER)
        return size

    def flush(self) -> None:
        """Write all that is buffered: whole blocks directly, a partial one through the page cache."""
        self._drain(self.used - self.used % DIRECT_BLOCK)
        if self.used:
            self._leave_direct()
            self._drain(self.used)

    def _drain(self, n: int) -> None:
        """Write the buffer's first ``n`` bytes; what follows them moves to its start."""
        if n == 0:
            return
        done = 0
        while done < n:
            try:
                done += os.write(self.fd, self.view[done:n])
            except OSError as exc:
                if exc.errno != errno.EINVAL or not self._leave_direct():
                    raise
        rest = self.used - n
        self.view[:rest] = self.view[n:self.used]
        self.used = rest

    def _leave_direct(self) -> bool:
        """Go on through the page cache; False when already so."""
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        if not flags & os.O_DIRECT:
            return False
        fcntl.fcntl(self.fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
        return True
