"""Every error kcompact raises on purpose, under one root, ``KcompactError``.

Each class says what a command that ends on it exits with (``exit_code``) and, for what fails one
partition, the failure kind the driver decides on (``failure``, an ``errors.failure.Failure``).
The command line decides on these classes alone: anything else that reaches it is a bug, exit 3,
whatever its type or message (an ``ArrowInvalid`` is a ValueError, a ``KeyError`` a LookupError).
A class keeps the builtin base its callers caught before: a ``FormatError`` is a ValueError, a
``StorageError`` an OSError (``storage`` raises it, of the OSError subclass it replaces).

This is the bottom layer: readers and writers raise its format errors, so it imports no other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kcompact.errors.failure import Failure, problem_kind

# A command's exit status (README, "Exit codes")
EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERNAL, EXIT_PARTIAL, EXIT_FAILED = 0, 1, 2, 3, 4, 5
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM


class KcompactError(Exception):
    """The root. One raised and never caught, of no class below, is a bug: exit 3."""

    exit_code: ClassVar[int] = EXIT_INTERNAL
    failure: Failure | None = None  # the kind of a partition's failure on it, where it is one
    label: ClassVar[str] = "error: "  # how the command line introduces the message


# -- exit 1: bad input, by file and byte ------------------------------------------------------------
class BadInput(KcompactError, ValueError):
    """Input that cannot be read as what it must be; the message names where."""

    exit_code = EXIT_PROBLEMS
    failure = Failure.BAD_INPUT
    label = ""


class FormatError(BadInput):
    """Input that does not follow Kafka's on-disk format.

    ``path`` is the file, ``position`` the byte offset in it where the problem starts (``None``
    when the whole file is at fault), ``what`` a sentence. A ``.log``'s bytes are corrupt input,
    any other file's bad input (``problem_kind``).
    """

    def __init__(self, path: str, position: int | None, what: str):
        self.path = path
        self.position = position
        self.what = what
        where = path if position is None else f"{path}: byte {position}"
        super().__init__(f"{where}: {what}")

    @property
    def failure(self) -> Failure:
        return problem_kind(self.path, self.position)


@dataclass(frozen=True, slots=True)
class Problem:
    """One fault found while listing or checking, reported rather than raised: the file, the byte
    position in it (None: the file or directory as a whole), what is wrong."""

    path: str
    position: int | None
    what: str

    def __str__(self) -> str:
        where = self.path if self.position is None else f"{self.path}: byte {self.position}"
        return f"{where}: {self.what}"

    @classmethod
    def of(cls, exc: FormatError) -> Problem:
        return cls(exc.path, exc.position, exc.what)


class CodecError(BadInput):
    """Compressed bytes that the codec cannot decode (the caller adds file and position)."""

    failure = Failure.CORRUPT


class MetadataError(BadInput):
    """A KRaft metadata record value that cannot be decoded; ``position`` is the byte in the value
    (the caller names the file)."""

    def __init__(self, position: int, what: str):
        self.position = position
        self.what = what
        super().__init__(f"byte {position}: {what}")


# -- exit 2: bad usage, configuration or environment, refused before anything is written ------------
class UsageError(KcompactError, ValueError):
    """What the caller asked cannot be done as asked (a file given that is not what it must be, two
    options that exclude each other); the message says what was expected."""

    exit_code = EXIT_USAGE


class BadArgument(UsageError):
    """A command-line argument that cannot be right; the message names it."""

    label = ""


class ConfigError(UsageError):
    """A configuration key or value that cannot be right; the message names it and where it came from."""

    label = "configuration error: "


class UnknownRelease(ConfigError):
    """A Kafka version kcompact does not reproduce."""


class SettingError(UsageError):
    """A Spark setting of kcompact's (``spark.kcompact.*``, a Python worker's cap) that cannot be right."""


class CannotStart(UsageError):
    """Spark could not start for a reason of this host's, which the message names with its fix."""


class StateError(UsageError):
    """A change of a partition's cleaning state its current state refuses (``resume`` of one not paused)."""


class NoConditionalWrites(UsageError):
    """An object store that ignores conditional writes (``If-None-Match``, ``If-Match`` on PUT),
    which every commit there relies on: refused by the start-up probe (``storage.probe``) before
    anything is written. The store's, not one partition's: no partition is tried on it."""

    failure = None
    label = "object store refused: "


class OutOfMemory(KcompactError):
    """A Spark job failed for want of memory (``errors.memory``): the sizing's to change, not a bug."""

    exit_code = EXIT_USAGE
    failure = Failure.MEMORY


class StorageError(KcompactError, OSError):
    """A failure of storage: a file missing or refused, a full disk, an object store that cannot be
    reached or refuses the credentials. ``storage`` raises it in place of the OSError or botocore
    error it met (its ``__cause__``), as one of the subclasses below when that was a builtin
    subclass, so ``except FileNotFoundError`` still catches a missing file."""

    exit_code = EXIT_USAGE
    failure = Failure.IO


class MissingFile(StorageError, FileNotFoundError):
    pass


class AccessDenied(StorageError, PermissionError):
    pass


class AlreadyExists(StorageError, FileExistsError):
    pass


class IsDirectory(StorageError, IsADirectoryError):
    pass


class NotDirectory(StorageError, NotADirectoryError):
    pass


STORAGE_ERRORS: dict[type[OSError], type[StorageError]] = {
    FileNotFoundError: MissingFile, PermissionError: AccessDenied, FileExistsError: AlreadyExists,
    IsADirectoryError: IsDirectory, NotADirectoryError: NotDirectory}


# -- exit 4 or 5: what keeps a command from a log dir or a partition ---------------------------------
class LogDirBusy(KcompactError, OSError):
    """Another process (a Kafka broker, or another kcompact job) holds the log dir's ``.lock``."""

    exit_code = EXIT_FAILED
    label = ""

    def __str__(self) -> str:  # the sentence alone: no errno, no repeated path
        return self.strerror or super().__str__()


class CommitLost(KcompactError):
    """Another writer committed the partition first (an object store's commit record): this job's
    cleaned segments are left out, the partition is cleaned next run."""

    failure = Failure.LEASE_LOST


class LogChanged(KcompactError):
    """A partition's segments changed since the plan was made: nothing done to it, done next run."""

    failure = Failure.LOG_CHANGED
