"""A partition's commit runs to its end: a signal that stops the command (Ctrl-C, SIGTERM) and
arrives while one runs is held until it is done, then raised.

Each step of a commit is safe to stop at for a broker loading the dir (Kafka's swap order, or
one commit record), but a person or a scheduler asking a job to stop means "leave the data as
it is", and the clean way to leave a partition is with all of its groups committed or none.
Signals reach Python's main thread only, so only sections entered there hold them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_depth = 0
_held: list[BaseException] = []
_asked: list[BaseException] = []  # every stop a signal handler asked for


def stop_asked() -> bool:
    """A signal asked this process to stop: what fails from here on (Spark's cancelled jobs, say)
    fails because of it."""
    return bool(_asked)


@contextlib.contextmanager
def section() -> Iterator[None]:
    """Code that a stopping signal must not cut in two (in the main thread; elsewhere a no-op)."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _held:  # raised even over the section's own error: the stop was asked for
            raise _held.pop(0)


def hold(exc: BaseException) -> bool:
    """Keep ``exc`` (a signal handler's) to raise when the section ends, if one is running."""
    _asked.append(exc)
    if _depth == 0:
        return False
    _held.append(exc)
    return True


@contextlib.contextmanager
def stops_as_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM stops the main thread as Ctrl-C does (``KeyboardInterrupt``,
    held while a section runs): for the API called from a script or a notebook, whose process
    would otherwise die of SIGTERM with its Spark jobs (on a Connect server, say) still running.
    A handler the application installed itself is left in place, and so is Ctrl-C's own."""
    import signal

    def stop(signum, frame) -> None:
        if not hold(KeyboardInterrupt()):
            raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
