"""``kcompact dump``: print segments and indexes the way Kafka's DumpLogSegments does.

Same lines, field names and order as Kafka's tool, so the two can be diffed; with
``as_json`` every line is instead one JSON object with the same fields (camelCase,
plus ``type`` and ``file``). A ``.log`` is streamed batch by batch, never loaded
whole. Bad bytes do not end the dump with a traceback: everything valid before them
is printed, then the error with its file and byte position, and the exit code is 1.
"""

from __future__ import annotations

import errno
import json
import posixpath
from collections.abc import Callable
from typing import Any, TextIO

from kcompact import errors, storage
from kcompact.errors import EXIT_OK, EXIT_PROBLEMS, FormatError, Problem
from kcompact.logdir.listing import (
    CHECKPOINTS,
    LEFTOVER_SUFFIXES,
    METADATA_TOPIC,
    SEGMENT_KINDS,
    Partition,
    parse_partition_dir,
    scan_log_dir,
    scan_partition,
)
from kcompact.readers import checkpoint, codecs, snapshot
from kcompact.readers.batch import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP, Batch
from kcompact.readers.indexes import parse_offset_index, parse_time_index, parse_txn_index
from kcompact.readers.records import CONTROL_TYPES, Record, control_coordinator_epoch, control_type
from kcompact.readers.segment import iter_batches, problems
from kcompact.tools import dump_metadata
from kcompact.tools.verify import unreadable_problem

TIMESTAMP_TYPES = {NO_TIMESTAMP: "NoTimestampType", CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime"}
BATCH_LABELS = {"compressCodec": "compresscodec", "isValid": "isvalid"}  # Kafka's spelling on batch lines
RECORD_INDENT = "| "
SNAPSHOT = ".snapshot"  # a producer-state snapshot (the KRaft metadata log's are .checkpoint files)
INT32_MAX = (1 << 31) - 1
Fields = dict[str, Any]
Decoder = Callable[[Batch, Record], Fields]


class Printer:
    """Writes each item as Kafka's text line or as one JSON object."""

    def __init__(self, out: TextIO, as_json: bool):
        self.out = out
        self.as_json = as_json

    def note(self, text: str) -> None:
        """Kafka's framing lines (``Dumping ...``); JSON output carries ``file`` instead."""
        if not self.as_json:
            self.out.write(text + "\n")

    def item(
        self, kind: str, path: str, fields: Fields, labels: dict[str, str] | None = None, indent: str = ""
    ) -> None:
        if self.as_json:
            self.out.write(json.dumps({"type": kind, "file": path, **fields}) + "\n")
        else:
            self.out.write(indent + _text(fields, labels or {}) + "\n")

    def remark(self, found: Problem) -> None:
        """A file left out that a broker ignores too (a note, not an error)."""
        if self.as_json:
            self.item("note", found.path, {"position": found.position, "note": found.what})
        else:
            self.out.write(f"Note: {found}\n")

    def error(self, problem: Problem) -> None:
        if self.as_json:
            self.item("error", problem.path, {"position": problem.position, "error": problem.what})
        else:
            self.out.write(f"Error: {problem}\n")


def _text(fields: Fields, labels: dict[str, str]) -> str:
    """``label: value`` pairs; a ``timestampType`` field becomes the label of the next one."""
    parts, pending = [], None
    for key, value in fields.items():
        if key == "timestampType":
            pending = value
            continue
        label, pending = pending or labels.get(key, key), None
        text = _java(key, value)
        if text is not None:
            parts.append(f"{label}: {text}")
    return " ".join(parts)


def _java(key: str, value: Any) -> str | None:
    """A value as Java prints it; None means the field is left out (null key or payload)."""
    if key in ("deleteHorizonMs", "currentTxnFirstOffset"):
        return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(value) + "]"
    return str(value)


# -- entry points ---------------------------------------------------------------------------
def dump_path(path: str, print_data: bool, as_json: bool, out: TextIO) -> int:
    """Dump a segment or index file, a partition dir or a log dir; 1 if anything was bad."""
    printer = Printer(out, as_json)
    kind, name = file_kind(path), posixpath.basename(path)
    producers = name.endswith(SNAPSHOT)
    named = kind is not None or producers or name in CHECKPOINTS or dump_metadata.is_snapshot(name)
    if named and storage.kind(path) is None:  # said alone, no "Dumping" line first
        raise errors.MissingFile(errno.ENOENT, "no such file or directory", path)
    if producers:
        ok = dump_producer_snapshot(printer, path)
    elif kind is not None:
        ok = dump_file(printer, path, kind, print_data)
    elif name in CHECKPOINTS:
        ok = dump_checkpoint(printer, path)
    elif dump_metadata.is_snapshot(name):
        ok = dump_metadata_snapshot(printer, path)
    else:
        ok = dump_dir(printer, path.rstrip("/"), print_data)
    return EXIT_OK if ok else EXIT_PROBLEMS


def _parsed(printer: Printer, path: str, parse: Callable[[str, bytes], list]) -> list | None:
    """``parse(path, bytes)`` of a whole small file, after its "Dumping" line; None when it is bad
    input or may not be read (said as an error)."""
    printer.note(f"Dumping {path}")
    try:
        return parse(path, storage.read_bytes(path))
    except FormatError as exc:
        printer.error(Problem.of(exc))
    except PermissionError as exc:
        printer.error(unreadable_problem(path, exc))
    return None


def dump_checkpoint(printer: Printer, path: str) -> bool:
    """A broker's offset checkpoint file (cleaner-offset-checkpoint and the others): its entries as
    Kafka's CheckpointFile reads them, one line each; a fault after the entries before it."""
    found = _parsed(printer, path, checkpoint.entries)
    if found is None:
        return False
    if not found:
        printer.note(f"{path} has no entries.")
    for at, (topic, partition), offset in found:
        printer.item("checkpoint", path, {"topic": topic, "partition": partition, "offset": offset, "position": at})
    return True


def dump_metadata_snapshot(printer: Printer, file: str) -> bool:
    """A KRaft metadata snapshot (``<end offset>-<epoch>.checkpoint``): its records, payloads decoded."""
    end, epoch = dump_metadata.snapshot_offsets(file)
    printer.note(f"Dumping {file}")
    printer.note(f"Snapshot end offset: {end}, epoch: {epoch}")
    try:
        return dump_log(printer, file, None, True, dump_metadata.payload)
    except PermissionError as exc:
        printer.error(unreadable_problem(file, exc))
        return False


def file_kind(path: str) -> str | None:
    """``log``, ``index``, ``timeindex`` or ``txnindex`` by suffix (a leftover suffix is looked through)."""
    name = posixpath.basename(path)
    for suffix in LEFTOVER_SUFFIXES:
        name = name.removesuffix(suffix)
    _, dot, kind = name.rpartition(".")
    return kind if dot and kind in SEGMENT_KINDS else None


def dump_dir(printer: Printer, path: str, print_data: bool) -> bool:
    """A partition dir (files only, named ``<topic>-<n>``) or else a log dir; one that holds no
    segment file at all is said to (bad input for dump: there is nothing of Kafka's to show)."""
    files, dirs = storage.list_dir(path)
    name = posixpath.basename(path)
    if not dirs and [posixpath.basename(f.path) for f in files] == [name]:
        raise errors.UsageError(f"{path}: not a .log, .index, .timeindex or .txnindex file, a KRaft snapshot "
                                "(.checkpoint), an offset checkpoint file, nor a directory")
    parsed = parse_partition_dir(name)
    if parsed is not None and parsed[0] == METADATA_TOPIC and not dirs:
        return dump_metadata_dir(printer, path)
    if parsed is not None and not dirs:
        part = scan_partition(path, *parsed, files=files)
        ok = dump_partition(printer, part, print_data)
        return _holds_segments(printer, path, [part]) and ok
    logdir = scan_log_dir(path)
    for problem in logdir.problems:
        printer.error(problem)
    results = [dump_partition(printer, part, print_data) for part in logdir.partitions]
    if logdir.metadata is not None:  # the KRaft metadata partition too, never left out silently
        results.append(dump_metadata_dir(printer, logdir.metadata.rstrip("/")))
    holds = logdir.metadata is not None or _holds_segments(printer, path, logdir.partitions)
    return holds and not logdir.problems and all(results)


def dump_metadata_dir(printer: Printer, path: str) -> bool:
    """A KRaft metadata partition dir (``tools.dump_metadata``): quorum-state, the segments, then
    the snapshots, every record with its payload decoded (as --cluster-metadata-decoder, which
    prints the records); other files named as not dumped."""
    logs, snapshots, other = dump_metadata.files_of(path)
    ok = True
    for file in other:
        name = posixpath.basename(file)
        if name == dump_metadata.QUORUM_STATE:
            printer.note(f"Dumping {file}")
            state, problem = dump_metadata.quorum_state(file)
            if problem is not None:
                printer.error(problem)
                ok = False
            else:
                printer.item("quorumState", file, {"state": state if printer.as_json else json.dumps(state)})
        else:
            printer.remark(Problem(file, None, "not dumped (not a metadata segment, snapshot or quorum-state)"))
    for file in logs:
        ok = dump_file(printer, file, "log", True, dump_metadata.payload) and ok
    for file in snapshots:
        ok = dump_metadata_snapshot(printer, file) and ok
    if not logs and not snapshots:
        printer.error(Problem(path, None, "holds no metadata segment or snapshot"))
        ok = False
    return ok


def _holds_segments(printer: Printer, path: str, parts: list[Partition]) -> bool:
    """False, with an error naming ``path``, when ``parts`` hold no segment."""
    if any(part.segments for part in parts):
        return True
    printer.error(Problem(path, None, "holds no segment files" + ("" if parts else " (no partition directories)")))
    return False


def dump_partition(printer: Printer, part: Partition, print_data: bool) -> bool:
    """Every segment's files in offset order: .log, .index, .timeindex, .txnindex."""
    for problem in part.problems:
        printer.error(problem)
    for note in part.notes:  # what a broker's load deletes or passes over (logdir.broker_load): not dumped
        printer.remark(note)
    ok = not part.problems
    for seg in part.segments:
        for kind in SEGMENT_KINDS:
            info = getattr(seg, kind)
            if info is not None:
                ok = dump_file(printer, info.path, kind, print_data) and ok
    return ok


def dump_file(printer: Printer, path: str, kind: str, print_data: bool, decode: Decoder | None = None) -> bool:
    printer.note(f"Dumping {path}")
    try:
        base_offset = _base_offset(path)
        if kind == "log":
            return dump_log(printer, path, base_offset, print_data, decode)
        return dump_index(printer, path, kind, base_offset)
    except FormatError as exc:
        printer.error(Problem.of(exc))
        return False
    except PermissionError as exc:  # a file this process may not read: bad input too (a broker cannot load it)
        printer.error(unreadable_problem(path, exc))
        return False


def dump_producer_snapshot(printer: Printer, path: str) -> bool:
    """A producer-state snapshot: a line per producer, as ``kafka-dump-log`` prints the entries
    the broker reads back (its batch fields only when the entry has a last offset)."""
    entries = _parsed(printer, path, snapshot.parse)
    if entries is None:
        return False
    for e in entries:
        fields = {"producerId": e.producer_id, "producerEpoch": e.producer_epoch,
                  "coordinatorEpoch": e.coordinator_epoch,
                  "currentTxnFirstOffset": e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None,
                  "lastTimestamp": e.timestamp}
        if e.last_offset >= 0:
            fields |= {"firstSequence": first_sequence(e.last_sequence, e.offset_delta),
                       "lastSequence": e.last_sequence, "lastOffset": e.last_offset, "offsetDelta": e.offset_delta,
                       "timestamp": e.timestamp}
        printer.item("producer", path, fields)
    return True


def first_sequence(last: int, delta: int) -> int:
    """A batch's first sequence from its last and their distance: sequences wrap from 2^31 - 1 to 0."""
    return last - delta if last >= delta else INT32_MAX - (delta - last) + 1


def _base_offset(path: str) -> int:
    head = posixpath.basename(path).split(".")[0]
    if not head.isdigit():
        raise FormatError(path, None, "file name does not start with a base offset")
    return int(head)


# -- .log -----------------------------------------------------------------------------------
def dump_log(printer: Printer, path: str, base_offset: int | None, print_data: bool,
             decode: Decoder | None = None) -> bool:
    """Batches as they come; a batch with a bad CRC or codec is shown (isvalid: false) and
    reported, and reading goes on since its framing is intact. ``decode``: a record's fields in
    place of its key and payload (a metadata record's decoded payload); ``base_offset`` None: a
    snapshot, which has none."""
    if base_offset is not None:
        printer.note(f"Log starting offset: {base_offset}")
    ok, seen = True, False
    with storage.open_read(path) as f:
        for batch in iter_batches(f, path, strict=False):
            seen = True
            printer.item("batch", path, batch_fields(batch), BATCH_LABELS)
            found = problems(batch)
            if found:
                what = f"batch at offset {batch.base_offset_field}: {'; '.join(found)}"
                printer.error(Problem(path, batch.position, what))
                ok = False
            elif print_data:
                ok = dump_records(printer, batch, decode) and ok
    if not seen:
        printer.note(f"{path} is empty.")
    return ok


def dump_records(printer: Printer, batch: Batch, decode: Decoder | None = None) -> bool:
    try:
        records = batch.records()
        for record in records:
            fields = record_fields(batch, record)
            if decode is not None:
                for key in ("key", "payload", "controlType"):
                    fields.pop(key, None)
                extra = decode(batch, record)
                if not printer.as_json and isinstance(extra.get("payload"), dict):
                    extra["payload"] = json.dumps(extra["payload"])
                fields.update(extra)
            printer.item("record", batch.path, fields, indent=RECORD_INDENT)
    except FormatError as exc:
        printer.error(Problem.of(exc))
        return False
    return True


def batch_fields(batch: Batch) -> Fields:
    """DumpLogSegments' batch line: the v2 header, or ``offset`` alone for a legacy entry."""
    if batch.magic == 2:
        fields: Fields = {
            "baseOffset": batch.base_offset_field,
            "lastOffset": batch.last_offset,
            "count": batch.records_count,
            "baseSequence": batch.base_sequence,
            "lastSequence": batch.last_sequence,
            "producerId": batch.producer_id,
            "producerEpoch": batch.producer_epoch,
            "partitionLeaderEpoch": batch.partition_leader_epoch,
            "isTransactional": batch.is_transactional,
            "isControl": batch.is_control,
            "deleteHorizonMs": batch.delete_horizon_ms if batch.has_delete_horizon else None,
        }
    else:
        fields = {"offset": batch.last_offset}
    fields.update(
        position=batch.position,
        timestampType=TIMESTAMP_TYPES[batch.timestamp_type],
        maxTimestamp=batch.max_timestamp,
        size=batch.size,
        magic=batch.magic,
        compressCodec=codecs.name(batch.codec),
        crc=batch.crc,
        isValid=batch.crc_valid(),
    )
    return fields


def record_fields(batch: Batch, record: Record) -> Fields:
    """DumpLogSegments' ``--print-data`` record line (keys and values read as UTF-8, as its StringDecoder)."""
    fields: Fields = {
        "offset": record.offset,
        "timestampType": TIMESTAMP_TYPES[batch.timestamp_type],
        "timestamp": record.timestamp,
        "keySize": _size(record.key),
        "valueSize": _size(record.value),
    }
    if batch.magic == 2:
        fields["sequence"] = _sequence(batch, record)
        fields["headerKeys"] = [key for key, _ in record.headers]
    elif batch.codec == codecs.NONE:  # the entry is the message itself: its own CRC
        fields.update(isValid=batch.crc_valid(), crc=batch.crc)
    if batch.is_control:
        fields.update(_control_fields(record))
    else:
        fields.update(key=_string(record.key), payload=_string(record.value))
    return fields


def _control_fields(record: Record) -> Fields:
    kind = control_type(record)
    if kind in CONTROL_TYPES:
        return {"endTxnMarker": CONTROL_TYPES[kind], "coordinatorEpoch": control_coordinator_epoch(record)}
    return {"controlType": f"UNKNOWN({kind})"}


def _sequence(batch: Batch, record: Record) -> int:
    if batch.base_sequence < 0:
        return -1
    return (batch.base_sequence + record.offset - batch.base_offset_field) % (1 << 31)


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _string(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


# -- index files ----------------------------------------------------------------------------
def dump_index(printer: Printer, path: str, kind: str, base_offset: int) -> bool:
    """Entries with absolute offsets; entries before a bad byte are printed, then the error."""
    parse, render = INDEX_DUMPERS[kind]
    data = storage.read_bytes(path)
    try:
        entries, error = parse(path, data), None
    except FormatError as exc:
        entries, error = parse(path, data[: exc.position or 0]), exc
    if kind == "index" and not entries and error is None:
        printer.note(f"{path} is empty.")
    for entry in entries:
        printer.item(kind, path, render(entry, base_offset))
    if error is not None:
        printer.error(Problem.of(error))
    return error is None


INDEX_DUMPERS: dict[str, tuple[Callable[[str, bytes], list], Callable[[Any, int], Fields]]] = {
    "index": (parse_offset_index, lambda e, base: {"offset": base + e.relative_offset, "position": e.position}),
    "timeindex": (parse_time_index, lambda e, base: {"timestamp": e.timestamp, "offset": base + e.relative_offset}),
    "txnindex": (parse_txn_index, lambda e, base: {
        "version": e.version, "producerId": e.producer_id, "firstOffset": e.first_offset,
        "lastOffset": e.last_offset, "lastStableOffset": e.last_stable_offset,
    }),
}
