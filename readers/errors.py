"""The one error type for bad bytes: it always names the file and the byte position."""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True, slots=True)
class Problem:
    """One fault found while listing or checking: the file, the byte position in it
    (None: the file or directory as a whole), what is wrong."""

    path: str
    position: int | None
    what: str

    def __str__(self) -> str:
        where = self.path if self.position is None else f"{self.path}: byte {self.position}"
        return f"{where}: {self.what}"

    @classmethod
    def of(cls, exc: FormatError) -> Problem:
        return cls(exc.path, exc.position, exc.what)
