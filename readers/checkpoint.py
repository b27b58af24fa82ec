"""Kafka's offset checkpoint files (cleaner-offset, log-start-offset, recovery-point, ...), parsed
(rendered by ``writers.checkpoint``).

Text: version ``0``, the entry count, then ``topic partition offset`` lines. A
file that breaks any of that is reported with the byte position of the bad
line, never guessed at. An empty file, or one holding only the version line,
has no entries: Kafka's CheckpointFile reads it so (a broker creates
``cleaner-offset-checkpoint`` empty at start-up, before any cleaning).
"""

from __future__ import annotations

import re

from kcompact.errors import FormatError

VERSION = 0
CLEANER_OFFSET = "cleaner-offset-checkpoint"  # first dirty offset per partition (the cleaner's)
LOG_START_OFFSET = "log-start-offset-checkpoint"  # log start offset per partition (retention's)
REPLICATION_OFFSET = "replication-offset-checkpoint"  # high watermark per partition (a stopped broker's)
_NUMBER = re.compile(r"-?[0-9]+")  # what Java's Long.parseLong accepts (no '+', '_' or spaces)


def _number(text: str) -> int:
    if not _NUMBER.fullmatch(text):
        raise ValueError(text)
    return int(text)


def parse(path: str, text: bytes) -> dict[tuple[str, int], int]:
    if not text:
        return {}
    lines, pos = [], 0
    for raw in text.split(b"\n"):
        lines.append((pos, raw))
        pos += len(raw) + 1
    if lines and lines[-1][1] == b"":
        lines.pop()
    else:
        raise FormatError(path, lines[-1][0], "checkpoint does not end with a newline (its last line is cut short)")

    def line(i: int) -> tuple[int, str]:
        if i >= len(lines):
            raise FormatError(path, len(text), f"checkpoint ends before line {i + 1}")
        at, raw = lines[i]
        try:
            return at, raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(path, at, f"line {i + 1} is not UTF-8") from None

    at, version = line(0)
    if version != str(VERSION):
        raise FormatError(path, at, f"unsupported checkpoint version {version!r} (expected {VERSION})")
    if len(lines) == 1:
        return {}
    at, count_text = line(1)
    try:
        count = _number(count_text)
    except ValueError:
        raise FormatError(path, at, f"entry count {count_text!r} is not a number") from None
    if count != len(lines) - 2:
        raise FormatError(path, at, f"entry count {count} does not match the {len(lines) - 2} entry lines")
    entries: dict[tuple[str, int], int] = {}
    for i in range(2, len(lines)):
        at, entry = line(i)
        fields = entry.split(" ")
        if len(fields) != 3:
            raise FormatError(path, at, f"line {i + 1} {entry!r} is not 'topic partition offset'")
        topic, partition, offset = fields
        try:
            key, value = (topic, _number(partition)), _number(offset)
        except ValueError:
            raise FormatError(path, at, f"line {i + 1} {entry!r} has a non-numeric partition or offset") from None
        if not topic or key[1] < 0:
            raise FormatError(path, at, f"line {i + 1} {entry!r} names no valid topic-partition")
        if key in entries:
            raise FormatError(path, at, f"line {i + 1} repeats {topic}-{partition}")
        entries[key] = value
    return entries
