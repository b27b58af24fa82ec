"""What a command checks before it starts work: its log dirs, the files it will write, its numbers.

A command that fails a check has written nothing (no ``.lock``, no state file, no report), and
its message is one line that says what was expected. Options are checked by argparse as it
parses them (``positive``), the rest before the command's first step (``before_work``).
"""

from __future__ import annotations

import argparse
import os
import posixpath
from datetime import UTC, datetime

import storage
from operations.states import utc
from logdir.listing import not_a_log_dir, parse_partition_dir

# Plausible epoch milliseconds: a --now outside these years is seconds, microseconds or a typo,
# and retention with such a clock deletes every closed segment (or none).
EARLIEST_NOW = int(datetime(2000, 1, 1, tzinfo=UTC).timestamp() * 1000)
LATEST_NOW = int(datetime(2100, 1, 1, tzinfo=UTC).timestamp() * 1000)
MIN_LEASE_MS = 1000  # renewed every quarter of it: shorter leases lapse between two renewals


class BadArgument(ValueError):
    """An argument that cannot be right; the message names it and says what was expected."""


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


def log_dirs(paths: list[str]) -> None:
    """Every path is a Kafka log dir (``logdir.listing.not_a_log_dir``)."""
    for path in paths:
        why = not_a_log_dir(path)
        if why is not None:
            raise BadArgument(why)


def output(path: str | None, option: str, suffixes: tuple[str, ...] = ()) -> None:
    """A file the command writes at the end: the right suffix, and a directory that exists and
    can be written (locally) or a bucket that exists (object stores), so that no work is lost
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
        if not os.access(parent, os.W_OK):
            raise BadArgument(f"{option} {path}: directory {parent} is not writable")
        return
    fs, fs_path = storage.resolve(path)
    bucket = fs_path.split("/", 1)[0]
    if not fs.exists(bucket):
        raise BadArgument(f"{option} {path}: bucket {bucket!r} does not exist")


def writable(paths: list[str]) -> None:
    """Log dirs this process may write into as their owner's (``storage.ownership.refusal``): a
    broker must be able to open what a command leaves there read-write."""
    for path in paths:
        fs, fs_path = storage.resolve(path)
        why = storage.ownership.refusal(fs_path) if storage.is_local(fs) else None
        if why is not None:
            raise BadArgument(why)


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
