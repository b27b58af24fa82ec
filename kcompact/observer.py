"""What a caller of a step sees of it besides its ``progress`` lines and its result.

The steps take one ``Observer`` instead of a hook per concern, so that the command line's console
(``jobs.console``: the ticker, the step summaries, the removal of replaced files on a thread)
stays in ``jobs`` and a notebook passes nothing. Every hook of the default does nothing: what the
console prints as a step ends is in the step's result too.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kcompact.operations.deleted import Removal


class Observer:
    """Subclass it and override what you watch."""

    ready: float | None = None  # time.monotonic() when the caller's session was ready: a report's stages start there
    removal: Removal | None = None  # removes the replaced files while the step ends; the step waits for it

    def summary(self, text: str) -> None:
        """A step's summary as it ends (``run``'s recovery and retention, a first recovery that repaired something)."""

    def watch(self, what: str, total_bytes: int | None = None) -> contextlib.AbstractContextManager:
        """A context around a Spark step (``what``: "retention", "planning", "cleaning"; its
        ``total_bytes`` when known)."""
        return contextlib.nullcontext()


QUIET = Observer()
