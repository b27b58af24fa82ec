"""The OS byte that a log dir's broker writes in a gzip header, for the gzip batches the cleaner rewrites.

Kafka compresses gzip with Java's GZIPOutputStream, whose 10-byte header ends in an OS byte: 0 on
Java 8 and 11, 255 from Java 16 on (JDK-8244706). Every 4.x broker runs Java 17 or later; a 3.9
broker may run Java 8 or 11. The broker's own gzip batches show which: those its cleaner wrote,
marked by a delete horizon (attribute bit 6, set by the cleaner alone), whose value dates the
cleaning, so the one with the latest horizon tells the JVM of the latest cleaning (a broker moved
from Java 11 to 17 keeps older batches with 0). Producers' batches are not read: any JVM, or no
JVM, may have written them. A 3.9 log dir without such a batch takes ``--gzip-os``, else 255.
"""

from __future__ import annotations

import pyarrow as pa

from kcompact import storage
from kcompact.conf import releases
from kcompact.errors import FormatError
from kcompact.logdir.listing import Partition
from kcompact.readers import walk
from kcompact.readers.codecs import GZIP
from kcompact.writers.codecs import GZIP_OS_JAVA_8, GZIP_OS_JAVA_16, JAVA_GZIP_PREFIX

_RECORDS_AT = 61  # a v2 batch's records section (here: the gzip stream) starts at this byte
_CODEC, _DELETE_HORIZON = 0x07, 0x40
_JVMS = {GZIP_OS_JAVA_8: "a broker on Java 8 or 11", GZIP_OS_JAVA_16: "a broker on Java 16 or later"}


def cleaner_written(partition: Partition) -> tuple[int, int, str] | None:
    """The gzip batch of ``partition`` its cleaner wrote last: (delete horizon, header OS byte,
    where), or None when the cleaner wrote none (with Java's header: another header is no JVM's)."""
    found = None
    for seg in partition.segments[:-1]:  # the cleaner writes no active segment
        try:
            found = _latest(seg, found)
        except (FormatError, OSError):  # the plan's scan reports it
            continue
    return found


def _latest(seg, found: tuple[int, int, str] | None) -> tuple[int, int, str] | None:
    with storage.open_read(seg.log.path, seg.size) as f:
        for chunk in walk.read_chunks(f, seg.log.path):
            e = chunk.entries
            for k in range(len(e)):
                attributes = int(e[k, walk.ATTRIBUTES])
                if e[k, walk.MAGIC] != 2 or attributes & _CODEC != GZIP or not attributes & _DELETE_HORIZON:
                    continue
                at = int(e[k, walk.POSITION]) + _RECORDS_AT
                header = bytes(chunk.buf[at:at + 10])
                horizon = int(e[k, walk.BASE_TIMESTAMP])
                if header[:9] == JAVA_GZIP_PREFIX and header[9] in _JVMS and (found is None or horizon > found[0]):
                    found = (horizon, header[9], f"{seg.log.path} byte {chunk.file_position + at - _RECORDS_AT}")
    return found


def choose(release: releases.Release, found: tuple[int, int, str] | None, option: int | None) -> tuple[int, str]:
    """The OS byte for a log dir of ``release`` and why: from its cleaner's latest gzip batch
    (``found``, the latest of its partitions'), else ``option`` (``--gzip-os``), else Java 16's."""
    if release.line != "3.9":
        return GZIP_OS_JAVA_16, f"Kafka {release.line} brokers run on Java 17 or later"
    if found is not None:
        horizon, os_byte, where = found
        return os_byte, (f"detected: the gzip batch this log dir's cleaner wrote last ({where}, delete horizon "
                         f"{horizon}) has OS byte {os_byte}: {_JVMS[os_byte]}")
    if option is not None:
        return option, f"option: --gzip-os {option} ({_JVMS[option]}; no gzip batch written by this log dir's cleaner)"
    return GZIP_OS_JAVA_16, ("default: Java 16 or later (no gzip batch written by this log dir's cleaner; "
                             "--gzip-os 0 for a broker on Java 8 or 11)")


def apply(table: pa.Table, option: int | None) -> pa.Table:
    """The plan ``table`` with each row's ``gzip_os`` and ``gzip_os_source`` for its log dir: the
    rows arrive with their partition's own finding (``finding``), or none."""
    rows = table.select(["log_dir", "kafka_version", "gzip_os", "gzip_os_source"]).to_pylist()
    latest: dict[str, tuple[int, int, str]] = {}
    for r in rows:
        if r["gzip_os"] is not None and r["gzip_os_source"]:
            horizon, _, where = r["gzip_os_source"].partition("|")
            found = (int(horizon), r["gzip_os"], where)
            if r["log_dir"] not in latest or found[0] > latest[r["log_dir"]][0]:
                latest[r["log_dir"]] = found
    chosen = [choose(releases.resolve(r["kafka_version"] or releases.DEFAULT.name), latest.get(r["log_dir"]), option)
              for r in rows]
    table = table.set_column(table.schema.get_field_index("gzip_os"), "gzip_os",
                             pa.array([c[0] for c in chosen], pa.int32()))
    return table.set_column(table.schema.get_field_index("gzip_os_source"), "gzip_os_source",
                            pa.array([c[1] for c in chosen], pa.string()))


def finding(partition: Partition) -> dict:
    """A plan row's columns for ``apply``: the partition's own finding, the horizon ahead of where."""
    found = cleaner_written(partition)
    if found is None:
        return {}
    horizon, os_byte, where = found
    return {"gzip_os": os_byte, "gzip_os_source": f"{horizon}|{where}"}
