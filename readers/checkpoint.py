"""Kafka's offset checkpoint files (cleaner-offset, log-start-offset, recovery-point, ...), parsed
(rendered by ``writers.checkpoint``) as Kafka's CheckpointFile reads them.

Text: version ``0``, the entry count, then ``topic partition offset`` lines. Lines end as
BufferedReader.readLine ends them (``\\n``, ``\\r`` or ``\\r\\n``, the last one at the end of the file
too); an entry's fields are split on runs of whitespace. A file that breaks any of that is
reported with the byte position of the bad line, never guessed at. An empty file, or one holding
only the version line, has no entries (a broker creates ``cleaner-offset-checkpoint`` empty at
start-up, before any cleaning). A partition repeated is taken at its last line, as Kafka's map of
the entries takes it.
"""

from __future__ import annotations

import re

from kcompact.errors import FormatError

VERSION = 0
CLEANER_OFFSET = "cleaner-offset-checkpoint"  # first dirty offset per partition (the cleaner's)
LOG_START_OFFSET = "log-start-offset-checkpoint"  # log start offset per partition (retention's)
RECOVERY_POINT = "recovery-point-offset-checkpoint"  # flushed offset per partition (the broker's recovery)
REPLICATION_OFFSET = "replication-offset-checkpoint"  # high watermark per partition (a stopped broker's)
_NUMBER = re.compile(rb"[+-]?[0-9]+")  # what Java's Integer.parseInt and Long.parseLong accept
_LINE_END = re.compile(rb"\r\n|\r|\n")  # BufferedReader.readLine's line terminators
_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")  # Java's \s+, OffsetCheckpointFile's field separator
_INT = (1 << 31) - 1
_LONG = (1 << 63) - 1


class EntryNumberError(FormatError):
    """An entry line whose partition or offset Java's parseInt/parseLong refuses. Kafka's reader
    throws a NumberFormatException there, not the IOException of every other fault in the file,
    and a broker's load tells the two apart (``logdir.broker_load.unreadable_checkpoint``)."""


def _number(text: str, limit: int) -> int:
    if not _NUMBER.fullmatch(text.encode()) or not -limit - 1 <= int(text) <= limit:
        raise ValueError(text)
    return int(text)


def lines(text: bytes) -> list[tuple[int, bytes]]:
    """(byte position, line) of each line as BufferedReader.readLine returns them."""
    out, pos = [], 0
    for end in _LINE_END.finditer(text):
        out.append((pos, text[pos:end.start()]))
        pos = end.end()
    if pos < len(text):  # the last line, without its terminator: readLine returns it all the same
        out.append((pos, text[pos:]))
    return out


def parse(path: str, text: bytes) -> dict[tuple[str, int], int]:
    return {key: offset for _, key, offset in entries(path, text)}


def entries(path: str, text: bytes) -> list[tuple[int, tuple[str, int], int]]:
    """(byte position of its line, (topic, partition), offset) of every entry line, in order."""
    found = lines(text)
    if not found:
        return []

    def line(i: int) -> tuple[int, str]:
        at, raw = found[i]
        try:
            return at, raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(path, at, f"line {i + 1} is not UTF-8") from None

    at, version = line(0)
    try:
        supported = _number(version, _INT) == VERSION
    except ValueError:
        supported = False
    if not supported:
        raise FormatError(path, at, f"unsupported checkpoint version {version!r} (expected {VERSION})")
    if len(found) == 1:
        return []
    count_at, count_text = line(1)
    try:
        count = _number(count_text, _INT)
    except ValueError:
        raise FormatError(path, count_at, f"entry count {count_text!r} is not a number") from None
    out = []
    for i in range(2, len(found)):
        at, entry = line(i)
        fields = _WHITESPACE.split(entry)
        while fields and not fields[-1]:  # Java's split drops trailing empty strings
            fields.pop()
        if len(fields) != 3:
            raise FormatError(path, at, f"line {i + 1} {entry!r} is not 'topic partition offset'")
        topic, partition, offset = fields
        try:
            out.append((at, (topic, _number(partition, _INT)), _number(offset, _LONG)))
        except ValueError:
            raise EntryNumberError(path, at, f"line {i + 1} {entry!r} has a non-numeric partition or offset") from None
    if count != len(found) - 2:
        raise FormatError(path, count_at, f"entry count {count} does not match the {len(found) - 2} entry lines")
    return out
