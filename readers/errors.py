"""The one error type for bad bytes: it always names the file and the byte position."""

from __future__ import annotations


class FormatError(ValueError):
    """Input that does not follow Kafka's on-disk format.

    ``path`` is the file, ``position`` the byte offset in it where the problem
    starts (``None`` when the whole file is at fault), ``what`` a sentence.
    """

    def __init__(self, path: str, position: int | None, what: str):
        self.path = path
        self.position = position
        self.what = what
        where = path if position is None else f"{path}: byte {position}"
        super().__init__(f"{where}: {what}")
