"""What a command checks before it starts work: its log dirs, the files it will write, its numbers.

A command that fails a check has written nothing (no ``.lock``, no state file, no report), and
its message is one line that says what was expected. Options are checked by argparse as it
parses them (``positive``), the rest before the command's first step (``before_work``).
"""

from __future__ import annotations

import argparse
import errno
import os
import posixpath
import tempfile
from datetime import UTC, datetime

from kcompact import storage
from kcompact.errors import BadArgument
from kcompact.logdir.listing import CHECKPOINTS, held_partitions, not_a_log_dir, parse_partition_dir
from kcompact.operations.states import utc

# Plausible epoch milliseconds: a --now outside these years is seconds, microseconds or a typo,
# and retention with such a clock deletes every closed segment (or none).
EARLIEST_NOW = int(datetime(2000, 1, 1, tzinfo=UTC).timestamp() * 1000)
LATEST_NOW = int(datetime(2100, 1, 1, tzinfo=UTC).timestamp() * 1000)
MIN_LEASE_MS = 1000  # renewed every quarter of it: shorter leases lapse between two renewals


def positive(minimum: int = 1, unit: str = ""):
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum of {minimum}{unit}")
        return value

    return parse


def now_ms(value: int | None, forced: bool) -> None:
    """``--now`` is epoch milliseconds between 2000 and 2100, unless ``--force-now``."""
    if value is None:
        return
    if value < 0:
        raise BadArgument(f"--now {value}: a time cannot be negative")
    if forced or EARLIEST_NOW <= value < LATEST_NOW:
        return
    hint = "a typo?"
    for factor, unit in ((1000, "seconds"), (1 / 1000, "microseconds"), (1 / 1_000_000, "nanoseconds")):
        if EARLIEST_NOW <= value * factor < LATEST_NOW:
            hint = f"{unit}? in milliseconds that is {int(value * factor)}, {utc(int(value * factor))}"
    raise BadArgument(f"--now {value} is not epoch milliseconds between 2000 and 2100 ({hint}); "
                      f"--force-now takes it as given")


def object_store_settings(argv) -> None:
    """The settings of the object stores the command names are ones fsspec takes
    (``storage.environment_problem``)."""
    why = storage.environment_problem(argv)
    if why is not None:
        raise BadArgument(why)


def log_dirs(paths: list[str]) -> None:
    """Every path is a Kafka log dir (``logdir.listing.not_a_log_dir``)."""
    for path in paths:
        why = _not_readable(path) or not_a_log_dir(path)
        if why is not None:
            raise BadArgument(why)


def _not_readable(path: str) -> str | None:
    """A local directory of another user that this process may not list: whose it is, not
    'permission denied'."""
    if not storage.is_local_path(path):
        return None
    fs_path = storage.resolve(path)[1]
    try:
        return storage.ownership.listing_refusal(fs_path) if os.path.isdir(fs_path) else None
    except OSError:
        return None  # not_a_log_dir says what is wrong with it


def distinct_log_dirs(paths: list[str]) -> None:
    """Each log dir named once. Two names of one directory (the same path twice, with a trailing
    slash, through a symlink; on an object store the same URL however written) are refused rather
    than taken once: a broker refuses such a ``log.dirs`` too (LogManager: "Duplicate log
    directory found"), and a second name is more often a disk that is not what it seems (a
    symlink left where a volume should be mounted) than a harmless repetition."""
    seen: dict[str, str] = {}
    for path in paths:
        key = storage.identity(path)
        if key not in seen:
            seen[key] = path
            continue
        first = seen[key]
        if first == path:
            raise BadArgument(f"{path} is named twice: name each log dir once "
                              "(a Kafka broker refuses a duplicate in log.dirs too)")
        real = "" if key in (first.rstrip("/"), path.rstrip("/")) else f" ({key})"
        raise BadArgument(f"{first} and {path} are the same log dir{real}: name each log dir once "
                          "(a Kafka broker refuses a duplicate in log.dirs too)")


def distinct_partitions(paths: list[str]) -> None:
    """No partition in two of the log dirs: one broker never holds a partition twice (LogManager
    refuses to start on "Duplicate log directories for <partition> are found in both ..."), so
    one copy is stale (a move between log dirs left behind, a restored backup) and cleaning both
    would make two histories. A move under way (``-future``) is no duplicate."""
    where: dict[tuple[str, int], str] = {}
    for path in paths:
        for topic, number in sorted(held_partitions(path)):
            first = where.setdefault((topic, number), path)
            if first != path:
                raise BadArgument(
                    f"{topic}-{number} is in two log dirs, {first} and {path}: one broker never holds "
                    "a partition twice (a Kafka broker refuses to start with one); remove the stale copy, "
                    "or, if the log dirs are not one broker's (copies, snapshots), give "
                    "--allow-duplicate-partitions"
                )


def dump_path(path: str) -> None:
    """What ``dump`` takes: a segment or index file (by its name; a missing one is dump's own
    error), a partition dir, or a Kafka log dir. Any other directory (an empty one, ``/etc``) is
    refused in one line, as ``verify`` refuses it, not with an error for each subdirectory."""
    from kcompact.tools.dump import file_kind

    if file_kind(path) is not None or storage.kind(path) != "directory":
        return  # a segment file, or nothing there, or another file: dump says which
    files, dirs = storage.list_dir(path)
    if files and not dirs and parse_partition_dir(posixpath.basename(path.rstrip("/"))) is not None:
        return  # a partition dir (dump says so when it holds no segment file)
    why = not_a_log_dir(path)
    if why is not None:
        raise BadArgument(f"{why}; dump also takes a partition dir or a .log, .index, .timeindex or .txnindex file")


def output(path: str | None, option: str, suffixes: tuple[str, ...] = ()) -> None:
    """A file the command writes at the end: the right suffix, and a directory that exists and
    in which a file can be created (locally: tried, since permissions alone do not tell a
    read-only mount or /proc) or a bucket that exists (object stores), so that no work is lost
    to a typo in its name."""
    if path is None:
        return
    suffix(path, option, suffixes)
    if storage.kind(path) == "directory":
        raise BadArgument(f"{option} {path}: is a directory; give a file name")
    parent = posixpath.dirname(path.rstrip("/")) or "."
    if storage.is_local_path(path):
        if not os.path.isdir(parent):
            raise BadArgument(f"{option} {path}: directory {parent} does not exist")
        why = _cannot_create(parent)
        if why is not None:
            raise BadArgument(f"{option} {path}: directory {parent} is not writable ({why})")
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise BadArgument(f"{option} {path}: the file exists and cannot be written")
        return
    fs, fs_path = storage.resolve(path)
    bucket = fs_path.split("/", 1)[0]
    if not fs.exists(bucket):
        raise BadArgument(f"{option} {path}: bucket {bucket!r} does not exist")


def _cannot_create(directory: str) -> str | None:
    """Why no file can be created in ``directory`` (None when one can): a file is created there and
    removed again."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".kcompact-check-", dir=directory)
    except OSError as exc:
        return {errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                errno.EPERM: "permission denied", errno.ENOSPC: "no space left",
                errno.ENOENT: "no file can be created in it"}.get(exc.errno, (exc.strerror or str(exc)).lower())
    os.close(fd)
    os.unlink(probe)
    return None


def readable(paths: list[str]) -> None:
    """Local log dirs whose partition dirs this process can list and whose checkpoint files it can
    read: a job that met one it cannot part way would stop after taking the log dir's ``.lock``
    (and a broker could not load the log dir either). Object stores say so per request: a
    refused read there is the partition's failure (``planner.scan.UNREADABLE``)."""
    for path in paths:
        if not storage.is_local_path(path):
            continue
        files, dirs = storage.list_dir(path)
        wanted = [(d, os.R_OK | os.X_OK, "partition dir") for d in sorted(dirs)
                  if parse_partition_dir(posixpath.basename(d.rstrip("/"))) is not None]
        wanted += [(f.path, os.R_OK, "checkpoint file") for f in files if posixpath.basename(f.path) in CHECKPOINTS]
        for where, mode, what in wanted:
            if not os.access(where, mode):
                raise BadArgument(f"{where}: permission denied: a {what} this process cannot read (a Kafka broker "
                                  "could not load the log dir either); fix its permissions, nothing was done")


def writable(paths: list[str]) -> None:
    """Log dirs this process may write into, as their owner's (``storage.ownership.refusal``: a
    broker must be able to open what a command leaves there read-write), asked of the kernel
    (access(2), which a read-only mount answers too) before anything starts, not met at the
    ``.lock`` once Spark has."""
    for path in paths:
        fs, fs_path = storage.resolve(path)
        if not storage.is_local(fs):
            continue
        why = storage.ownership.refusal(fs_path)
        if why is None and os.path.isdir(fs_path) and not os.access(fs_path, os.W_OK | os.X_OK):
            read_only = os.statvfs(fs_path).f_flag & os.ST_RDONLY
            why = (f"{path}: the log dir is not writable "
                   f"({'read-only file system' if read_only else f'mode {os.stat(fs_path).st_mode & 0o777:04o}'}); "
                   "the command writes its .lock, states and segments there")
        if why is not None:
            raise BadArgument(why)


def conditional_writes(paths: list[str]) -> None:
    """Log dirs on object stores that honour conditional writes, which every commit there relies
    on (``storage.probe.require``: two requests per store, answered once per process)."""
    from kcompact.storage import probe

    probe.require(paths)


def gen_out(out: str) -> None:
    """``gen --out``: locally, in a directory that exists (the API makes parents; the command
    line does not, so a typo in a parent's name leaves no tree nobody asked for)."""
    out = out.rstrip("/")
    parent = posixpath.dirname(out) or "."
    if storage.is_local_path(out) and not os.path.isdir(parent):
        raise BadArgument(f"{out}: directory {parent} does not exist; gen creates only {out} itself")


def suffix(path: str, option: str, suffixes: tuple[str, ...]) -> None:
    """A file named for its format: the format is chosen by its suffix."""
    if not path.endswith(suffixes):
        raise BadArgument(f"{option} {path}: the name must end in {' or '.join(suffixes)}")


def partitions(log_dir: str, names: list[str]) -> None:
    """Partition names of a state command (``orders-0``) that exist in the log dir: a typo must not
    leave a state file that no partition reads while the real one stays unprotected."""
    _, dirs = storage.list_dir(log_dir)
    present = {posixpath.basename(d.rstrip("/")) for d in dirs}
    for name in names:
        if parse_partition_dir(name) is None:
            raise BadArgument(f"{name!r} is not a partition name like orders-0")
        if name not in present:
            raise BadArgument(f"{name}: no such partition in {log_dir} (see 'kcompact status {log_dir} --all')")
