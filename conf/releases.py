"""The Kafka releases whose cleaner kcompact reproduces, and what differs between them.

One row per release whose cleaner writes different files (or refuses different settings); every
rule that depends on the release reads its row here: the segment writer's index entries, the
round's last batch, the conversion of v0/v1 entries, compression, the configuration limits.
Facts from Kafka's sources (the release points and fix commits are listed in
docs/compaction-semantics.md, "Kafka releases"). A patch release whose cleaner equals another's
is an alias of it (4.1.2 is "4.1"). No Spark, fsspec or storage here: ``writers`` imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kcompact.errors import UnknownRelease

MIB = 1024 * 1024
# RECORD_OVERHEAD_V0: the smallest segment.bytes Kafka accepts before KIP-1030
LEGACY_SEGMENT_BYTES_FLOOR = 14

KeepLastEmpty = Literal["first_uncleanable", "high_watermark"] | None


@dataclass(frozen=True, slots=True)
class Release:
    name: str  # "3.9.0", "4.1": a patch release, or a line whose patches all clean alike
    aliases: tuple[str, ...]  # the other version strings that name it
    # KAFKA-806: an offset/time index entry per appended batch (else at most one per cleaner append)
    index_per_batch: bool
    # the round's last batch, emptied by cleaning, stays as an empty header when its next offset is:
    # None never (only the producer-state rule keeps one); KAFKA-17076 the first uncleanable offset;
    # KAFKA-20452 the high watermark
    keep_last_empty: KeepLastEmpty
    legacy_to_v2: bool  # KIP-724 / KAFKA-13093: kept v0/v1 entries are rewritten as v2 batches
    message_format_removed: bool  # (log.)message.format.version and their kin no longer exist
    topic_segment_bytes_floor: int  # segment.bytes' lower bound
    broker_segment_bytes_floor: int  # log.segment.bytes' lower bound (KIP-1030)
    internal_segment_bytes: bool  # KAFKA-19080: the internal.segment.bytes topic override exists
    # the compression libraries this release ships (gradle/dependencies.gradle) and their natives
    lz4_java: str
    liblz4: str
    snappy_java: str
    zstd_jni: str
    libzstd: str
    released: bool = True  # False: a branch not released yet (its head as read)
    # KAFKA-19112 (4.2): a list setting naming a value twice is refused ("cleanup.policy=delete,delete")
    unique_lists: bool = False

    @property
    def line(self) -> str:
        return ".".join(self.name.split(".")[:2])


_LZ4_OLD = ("org.lz4:lz4-java:1.8.0", "1.9.3")
_LZ4_YAWK = ("at.yawk.lz4:lz4-java:1.10.1", "1.10.0")


def _release(name, aliases, index_per_batch, keep_last_empty, four, broker_floor, topic_floor, lz4, snappy, zstd,
             released=True) -> Release:
    line = tuple(int(n) for n in name.split(".")[:2])
    return Release(name, aliases, index_per_batch, keep_last_empty, legacy_to_v2=four, message_format_removed=four,
                   topic_segment_bytes_floor=topic_floor, broker_segment_bytes_floor=broker_floor,
                   internal_segment_bytes=topic_floor == MIB, lz4_java=lz4[0], liblz4=lz4[1],
                   snappy_java=snappy, zstd_jni=zstd, libzstd="1.5.6", released=released, unique_lists=line >= (4, 2))


_FLOOR = LEGACY_SEGMENT_BYTES_FLOOR
SUPPORTED: tuple[Release, ...] = (
    _release("3.9.0", (), False, None, False, _FLOOR, _FLOOR, _LZ4_OLD, "1.1.10.5", "1.5.6-4"),
    _release("3.9.1", (), True, None, False, _FLOOR, _FLOOR, _LZ4_OLD, "1.1.10.5", "1.5.6-4"),
    _release("3.9.2", (), True, "first_uncleanable", False, _FLOOR, _FLOOR, _LZ4_YAWK, "1.1.10.5", "1.5.6-4"),
    _release("4.0.0", (), False, "first_uncleanable", True, MIB, _FLOOR, _LZ4_OLD, "1.1.10.5", "1.5.6-6"),
    _release("4.0.1", ("4.0.2",), True, "first_uncleanable", True, MIB, _FLOOR, _LZ4_OLD, "1.1.10.5", "1.5.6-6"),
    _release("4.1", ("4.1.0", "4.1.1", "4.1.2"), True, "first_uncleanable", True, MIB, MIB, _LZ4_YAWK, "1.1.10.7",
             "1.5.6-10"),
    _release("4.2", ("4.2.0", "4.2.1"), True, "first_uncleanable", True, MIB, MIB, _LZ4_YAWK, "1.1.10.7", "1.5.6-10"),
    _release("4.3", ("4.3.0", "4.3.1"), True, "first_uncleanable", True, MIB, MIB,
             ("at.yawk.lz4:lz4-java:1.10.2", "1.10.0"), "1.1.10.7", "1.5.6-10"),
    # the 4.4 branch as of 87943b2ff8 (2026-08-21, 4.4.0-SNAPSHOT); KAFKA-20036 reverted there
    _release("4.4", ("4.4.0",), True, "high_watermark", True, MIB, MIB, ("at.yawk.lz4:lz4-java:1.11.2", "1.10.0"),
             "1.1.10.7", "1.5.6-10", released=False),
)
BY_NAME: dict[str, Release] = {v: r for r in SUPPORTED for v in (r.name, *r.aliases)}
# Every released version (a "Bump version to" commit): the row whose cleaner it has, and what it
# changes against the patch before it in the cleaner's or the log's bytes, or in the libraries
# that write them (gradle/dependencies.gradle). A row's library fields are its newest patch's.
_YAWK = ("lz4-java moved to the at.yawk.lz4 fork (KAFKA-19951: 1.8.0 to 1.10.1, liblz4 1.9.3 to 1.10.0): "
         "the same lz4 frames")
PATCHES: dict[str, tuple[str, str]] = {
    "3.9.0": ("3.9.0", "lz4-java 1.8.0 (liblz4 1.9.3), snappy-java 1.1.10.5, zstd-jni 1.5.6-4"),
    "3.9.1": ("3.9.1", "an index entry per batch (KAFKA-806)"),
    "3.9.2": ("3.9.2", f"the round's last emptied batch kept (KAFKA-17076); {_YAWK}"),
    "4.0.0": ("4.0.0", "against 3.9.2: v0/v1 entries rewritten as v2 and message-format settings refused (KIP-724), "
                       "log.segment.bytes floor 1 MiB (KAFKA-16368), at most one index entry per cleaner append "
                       "(KAFKA-806 not yet), lz4-java 1.8.0 again, zstd-jni 1.5.6-6"),
    "4.0.1": ("4.0.1", "an index entry per batch (KAFKA-806)"),
    "4.0.2": ("4.0.1", f"{_YAWK}, so 4.0.1's cleaner bytes"),
    "4.1.0": ("4.1", "against 4.0.2: segment.bytes floor 1 MiB and internal.segment.bytes (KIP-1030, KAFKA-19080), "
                     "lz4-java 1.8.0, snappy-java 1.1.10.7 (the same native library), zstd-jni 1.5.6-10"),
    "4.1.1": ("4.1", "nothing in the cleaner's or the log's bytes"),
    "4.1.2": ("4.1", _YAWK),
    "4.2.0": ("4.2", "against 4.1.2: nothing in the cleaner's bytes"),
    "4.2.1": ("4.2", "nothing in the cleaner's or the log's bytes"),
    "4.3.0": ("4.3", "lz4-java at.yawk.lz4 1.10.2 (the same liblz4 1.10.0 and JNI call): the same lz4 frames"),
    "4.3.1": ("4.3", "nothing in the cleaner's or the log's bytes"),
}
# The newest released line: 4.4 is a branch with no release yet, chosen only by name.
DEFAULT: Release = BY_NAME["4.3"]
# A line named without its patch (detection reads only a line): its newest patch release.
NEWEST_OF_LINE: dict[str, Release] = {r.line: r for r in SUPPORTED}


def resolve(text: str | Release) -> Release:
    """The release a version string names: "4.1.2" and "4.1" are "4.1"; "3.9.0" and "3.9.2" differ."""
    if isinstance(text, Release):
        return text
    version = str(text).strip()
    if version in BY_NAME:
        return BY_NAME[version]
    known = ", ".join(r.name for r in SUPPORTED)
    raise UnknownRelease(f"Kafka version {version!r} is not one kcompact reproduces (known: {known}; a line such as "
                         "4.1 stands for each of its patch releases)")


# metadata.version feature levels (MetadataVersion) by release line: a finalized level names the
# line that introduced it, a lower bound on the brokers' software (unstable levels included)
_LEVELS = {1: "3.0-IV1", 2: "3.1-IV0", 3: "3.2-IV0", **{4 + i: f"3.3-IV{i}" for i in range(4)}, 8: "3.4-IV0",
           **{9 + i: f"3.5-IV{i}" for i in range(3)}, **{12 + i: f"3.6-IV{i}" for i in range(3)},
           **{15 + i: f"3.7-IV{i}" for i in range(5)}, 20: "3.8-IV0", 21: "3.9-IV0",
           **{22 + i: f"4.0-IV{i}" for i in range(4)}, 26: "4.1-IV0", 27: "4.1-IV1", 28: "4.2-IV0", 29: "4.2-IV1",
           30: "4.3-IV0", **{31 + i: f"4.4-IV{i}" for i in range(3)}}


# How the release was chosen, strongest first: an explicit option, a --config file, the log dir's
# finalized metadata.version, the default.
SOURCES = ("option", "config file", "detected", "default")


@dataclass(frozen=True, slots=True)
class Choice:
    """The release a run reproduces and why: ``source`` is one of SOURCES, ``detail`` says more (the
    file, the metadata.version read)."""

    release: Release
    source: str
    detail: str = ""
    named: str = ""  # the version as given ("4.0.2"), when it is not the row's own name

    def describe(self) -> str:
        unreleased = " (unreleased branch)" if not self.release.released else ""
        why = f"{self.source}: {self.detail}" if self.detail else self.source
        patch = PATCHES.get(self.named)
        if self.named and self.named != self.release.name:
            cleans = f"{self.named}, cleaned as {self.release.name}" + (f" ({self.named}: {patch[1]})" if patch else "")
            return f"Kafka {cleans}{unreleased} ({why})"
        return f"Kafka {self.release.name}{unreleased} ({why})"


def detected(level: int | None, where: str) -> Choice | None:
    """The release a finalized ``metadata.version`` level read at ``where`` stands for: the newest
    patch of the line that introduced the level. None when there is no level, or it names a line
    this table lacks (older than 3.9, newer than 4.4): the caller says so and takes the default."""
    name = _LEVELS.get(level) if level else None
    if name is None:
        return None
    line = name.split("-")[0]
    release = NEWEST_OF_LINE.get(line)
    if release is None:
        return None
    patch = "" if release.name == line else f", its newest patch {release.name} taken"
    return Choice(release, "detected", f"metadata.version {name} (level {level}) in {where}: line {line}{patch} "
                                       "(a lower bound on the brokers' release; --kafka-version names another)")


def undetected(level: int | None, where: str, metadata: bool = True) -> Choice:
    """The default, and why no release was detected at ``where``; ``metadata`` False: ``where`` is
    a log dir without a KRaft metadata partition (a ZooKeeper-mode broker's, or one of a KRaft
    broker's other log dirs), which records no release at all."""
    if not metadata:
        why = (f"{where} holds no KRaft metadata (no __cluster_metadata-0: a ZooKeeper-mode log dir, or not the "
               "broker's metadata log dir), so no metadata.version names the brokers' release")
    elif level is None:
        why = f"no finalized metadata.version in {where}"
    else:
        name = _LEVELS.get(level)
        why = (f"metadata.version {name} (level {level}) in {where} names a line before 3.9" if name else
               f"metadata.version level {level} in {where} is newer than any release known here")
    return Choice(DEFAULT, "default", f"{why}; the newest release, {DEFAULT.name}, taken "
                                      "(--kafka-version or kafka.version names another)")
