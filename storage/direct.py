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
    """A file written in whole blocks from a reused page-aligned buffer, past the page cache
    (``O_DIRECT``) once it outgrows that buffer. That skips the copy into the page cache, which
    costs more than the write when the cache's pages are new to the machine (on a virtual machine,
    the host faults each one in), and leaves the cache to what brokers read: a cleaned segment
    holds a partition's older records. A file no larger than the buffer goes whole through the
    page cache in one write at ``flush``: past the cache a small write waits on the device and
    saves little copying. ``flush`` writes the last partial block through the page cache (the file
    goes on that way); so does every write after the file system refuses ``O_DIRECT`` or an
    aligned write (``EINVAL``)."""

    def __init__(self, fd: int):
        self.fd, self.used = fd, 0
        self.direct = self.tried = False  # direct: past the cache now; tried: O_DIRECT asked for once
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
                if not self.tried:
                    self._enter_direct()
                self._drain(DIRECT_BUFFER)
        return size

    def flush(self) -> None:
        """Write all that is buffered: whole blocks directly, a partial one through the page cache."""
        if self.direct:
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

    def _enter_direct(self) -> None:
        """Past the page cache from here on, where the file system allows it."""
        self.tried = True
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        try:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, flags | os.O_DIRECT)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: this file system takes no O_DIRECT
                raise
        else:
            self.direct = True

    def _leave_direct(self) -> bool:
        """Go on through the page cache; False when already so."""
        if not self.direct:
            return False
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        fcntl.fcntl(self.fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
        self.direct = False
        return True
