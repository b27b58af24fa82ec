"""Finish or roll back interrupted swaps exactly as a Kafka broker does when it loads a log dir,
so that our tool and a restarted broker reach the same files; then rebuild broken indexes.

The broker's load rules (LogLoader), in order:
1. ``.deleted`` files are deleted; ``.cleaned`` files are noted, with the smallest base offset
   among them;
2. ``.swap`` files at or above that smallest ``.cleaned`` base offset are deleted (a swap
   that had not finished being published), then every ``.cleaned`` file;
3. the remaining ``.log.swap`` segments span [smallest base, largest next offset); every
   non-swap file whose name starts with an offset in that span is deleted (the segments those
   swaps replace, including their indexes and producer snapshots);
4. every ``.swap`` file takes its final name.
Then, per segment: a missing ``.index`` or an index failing the broker's sanity check is
rebuilt from the ``.log`` (LogSegment.recover's entries: one chunk per batch). A missing
``.timeindex`` beside a sound ``.index`` is left to the broker, which creates it empty on load;
our readers fall back to the segment's modification time, as the broker then does.

With ``torn_tails`` (``kcompact recover``), what a broker does after an unclean shutdown too:
it validates the batches from its recovery point on, so always those of the active segment, and
truncates the segment at the first invalid one (LogSegment.recover), then rebuilds its indexes.
We truncate only a torn tail (``readers.segment.torn_tail``: nothing valid after the first
invalid entry), which is what a crash mid-append leaves; a bad batch with valid ones after it,
or one in a closed segment, is corruption: reported, never cut (the broker would delete what
follows it). The ``.txnindex`` keeps the aborted transactions whose ABORT marker is still in the
log. Producer snapshots and the leader-epoch checkpoint beyond the new log end are the broker's
own, and it trims them when it loads the log.

``plan_recovery`` is the pure decision (file names in, actions out); ``recover_partition``
applies it through ``storage``, each step made durable before the next.
"""

from __future__ import annotations

import posixpath
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from kcompact import errors, storage
from kcompact.errors import FormatError
from kcompact.logdir import commits
from kcompact.logdir.listing import Partition, segment_name
from kcompact.operations import s3commit
from kcompact.readers import indexes
from kcompact.readers.segment import iter_batches, torn_tail
from kcompact.storage import FileInfo
from kcompact.writers.segment import DEFAULT_INDEX_INTERVAL_BYTES, SegmentWriter

SWAP, CLEANED, DELETED = ".swap", ".cleaned", ".deleted"
# What ``storage.write_atomic`` may leave at a log dir's root after a crash: our checkpoints'
# and cleaning states' temp files.
_ROOT_TEMP = re.compile(
    r"^(cleaner-offset-checkpoint|log-start-offset-checkpoint|kcompact-state\..+\.json|kcompact-last-run\.json)\.tmp$"
)
_OFFSET_PREFIX = re.compile(r"^(\d+)\.")


def _offset(name: str) -> int | None:
    """The broker's offsetFromFile: the digits before the first dot, if any."""
    match = _OFFSET_PREFIX.match(name)
    return int(match.group(1)) if match else None


@dataclass(slots=True)
class Actions:
    delete: list[str] = field(default_factory=list)  # in this order
    rename: list[tuple[str, str]] = field(default_factory=list)  # after the deletions

    def __bool__(self) -> bool:
        return bool(self.delete or self.rename)


def plan_recovery(names: Iterable[str], next_offset_of_swap: Callable[[str], int]) -> Actions:
    """The broker's decision for one partition dir's file ``names``. ``next_offset_of_swap``
    gives a ``.log.swap`` file's next offset (last offset + 1; its base offset when empty)."""
    names = sorted(names)
    actions = Actions()
    # KRaft snapshots (``.checkpoint.deleted``) are the metadata log's own business
    actions.delete += [n for n in names if n.endswith(DELETED) and not n.endswith(".checkpoint" + DELETED)]
    cleaned = [n for n in names if n.endswith(CLEANED)]
    swaps = [n for n in names if n.endswith(SWAP)]
    min_cleaned = min((_offset(n) for n in cleaned if _offset(n) is not None), default=None)
    if min_cleaned is not None:
        unfinished = [n for n in swaps if (_offset(n) or 0) >= min_cleaned]
        actions.delete += unfinished
        swaps = [n for n in swaps if n not in unfinished]
    actions.delete += cleaned
    log_swaps = [n for n in swaps if n.endswith(".log" + SWAP)]
    if log_swaps:
        low = min(_offset(n) for n in log_swaps)
        high = max(next_offset_of_swap(n) for n in log_swaps)
        gone = set(actions.delete)
        actions.delete += [n for n in names if n not in gone and not n.endswith(SWAP)
                           and (o := _offset(n)) is not None and low <= o < high]
    # In the commit's order (highest base first, each group's .log first): should this run stop
    # part way, the swaps left all lie below the files already renamed, whose base offsets the next
    # run's range then cannot reach (it would delete them as replaced and rebuild the indexes).
    swaps.sort(key=lambda n: (-(_offset(n) or 0), not n.endswith(".log" + SWAP), n))
    actions.rename = [(n, n.removesuffix(SWAP)) for n in swaps]
    return actions


def _next_offset(path: str, base_offset: int) -> int:
    next_offset = base_offset
    with storage.open_read(path) as f:
        for batch in iter_batches(f, path, strict=False):
            next_offset = batch.next_offset
    return next_offset


@dataclass(slots=True)
class PartitionRecovery:
    path: str
    deleted: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    indexes_rebuilt: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)  # torn tails cut off active segments, as a broker does
    problems: list[str] = field(default_factory=list)
    generation: int | None = None  # object stores: the latest commit record's generation (0: none)

    @property
    def changed(self) -> bool:
        return bool(self.deleted or self.renamed or self.indexes_rebuilt or self.truncated)

    def summary(self) -> str:
        parts = [f"{len(self.deleted)} deleted", f"{len(self.renamed)} swaps completed"]
        if self.truncated:
            parts.append(f"truncated: {'; '.join(self.truncated)}")
        if self.indexes_rebuilt:
            parts.append(f"indexes rebuilt: {', '.join(self.indexes_rebuilt)}")
        if self.problems:
            parts.append(f"problems: {'; '.join(self.problems)}")
        return f"{self.path}: " + ", ".join(parts)


def needs_recovery(part: Partition) -> bool:
    """Whether ``recover_partition`` without its index check and torn tails has anything to do in
    a partition as a listing shows it: a temporary file, leftovers of an interrupted swap, or on an
    object store a commit record not applied or staged files; or something the listing cannot
    tell (a name it does not know, records that moved while it was made)."""
    return bool(part.temporary or part.leftovers or part.problems) or commits.pending(part.commit, part.staged)


def recover_partition(partition_dir: str, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                      indexes: bool = True, torn_tails: bool = False,
                      files: list[FileInfo] | None = None) -> PartitionRecovery:
    """Apply the broker's load-time recovery to one partition dir (idempotent: a second run, or
    a run after a crash of this one, finds less to do and ends in the same files). On an object
    store, first the commit protocol's (``operations.s3commit``): the caller holds the partition's
    lease, or no job can take it. ``indexes=False`` leaves the index check out: it reads every
    segment's index files, work for ``recover_log_dirs``, not for a job's check of each partition.
    ``torn_tails``: truncate a torn tail of the active segment, as a broker recovering from a crash.
    ``files``: the local dir's listing, when the caller made it under the log dir's ``.lock``
    (nothing else changes the dir meanwhile)."""
    out = PartitionRecovery(partition_dir)
    if files is None:
        files, _ = storage.list_dir(partition_dir)
    for f in files:  # an index rebuild of ours cut short (write_atomic's temp file)
        if f.path.endswith((".index" + storage.TMP, ".timeindex" + storage.TMP, ".txnindex" + storage.TMP)):
            storage.remove(f.path)
            out.deleted.append(posixpath.basename(f.path))
    if not storage.is_local_path(partition_dir):
        done = s3commit.recover_partition(partition_dir, files)
        out.generation, out.renamed = done.generation, done.copied
        out.deleted += done.replaced + done.deleted
        if done.redone or done.deleted:
            files, _ = storage.list_dir(partition_dir)
    names = [posixpath.basename(f.path) for f in files if not f.path.endswith(storage.TMP)]
    actions = plan_recovery(names, lambda n: _next_offset(storage.join(partition_dir, n), _offset(n)))
    if actions:
        for name in actions.delete:
            storage.remove(storage.join(partition_dir, name))
        storage.fsync_dir(partition_dir)
        for src, dst in actions.rename:
            storage.rename(storage.join(partition_dir, src), storage.join(partition_dir, dst))
        storage.fsync_dir(partition_dir)
        out.deleted += actions.delete
        out.renamed = actions.rename
        files, _ = storage.list_dir(partition_dir)
        names = [posixpath.basename(f.path) for f in files]
    logs = sorted((n for n in names if n.endswith(".log") and _offset(n) is not None), key=_offset)
    cut = None
    if torn_tails and logs:
        cut = _truncate_torn_tail(partition_dir, _offset(logs[-1]), out)
    if not indexes and cut is None:
        return out
    sizes = {posixpath.basename(f.path): f.size for f in files}
    for name in logs if indexes else logs[-1:]:
        base = _offset(name)
        try:
            rebuilt = _repair_indexes(partition_dir, base, sizes, index_interval_bytes, force=base == cut)
        except FormatError as exc:  # a corrupt .log: reported by verify and the job, not guessed at here
            out.problems.append(str(exc))
            continue
        out.indexes_rebuilt += rebuilt
    return out


def _index_broken(path: str, data: bytes, entry: struct.Struct) -> bool:
    """The broker's sanityCheck: whole entries, and a last entry not before the first (the first
    and the last entry are all it reads)."""
    try:
        n = indexes.used_entries(path, data, entry)
    except FormatError:
        return True
    if not n:
        return False
    first, last = entry.unpack_from(data, 0), entry.unpack_from(data, (n - 1) * entry.size)
    if entry is indexes.TIME_ENTRY:  # (timestamp, relative offset)
        return last[0] < first[0] or last[1] < 0
    return last[0] < 0  # (relative offset, position)


def _truncate_torn_tail(partition_dir: str, base: int, out: PartitionRecovery) -> int | None:
    """Cut the active segment (base offset ``base``) at its torn tail, if it has one, and keep its
    ``.txnindex`` to the transactions still in the log; the base offset when it was cut."""
    log_path = storage.join(partition_dir, segment_name(base, "log"))
    with storage.open_read(log_path) as f:
        tail = torn_tail(f, log_path)
        if tail is None:
            return None
        log_end = base
        for batch in iter_batches(f, log_path, end=tail.position):
            log_end = batch.next_offset
    size = storage.info(log_path).size
    storage.truncate(log_path, tail.position)
    out.truncated.append(f"{segment_name(base, 'log')}: {size - tail.position} bytes from byte {tail.position} "
                         f"({tail.what}); the log now ends at offset {log_end}")
    txn_path = storage.join(partition_dir, segment_name(base, "txnindex"))
    if storage.exists(txn_path):
        data = storage.read_bytes(txn_path)
        kept = [t for t in indexes.parse_txn_index(txn_path, data) if t.last_offset < log_end]
        if len(kept) * indexes.TXN_ENTRY.size != len(data):
            storage.write_atomic(txn_path, data[:len(kept) * indexes.TXN_ENTRY.size])
            out.truncated.append(
                f"{segment_name(base, 'txnindex')}: aborted transactions past offset {log_end} dropped"
            )
    return base


def _repair_indexes(partition_dir: str, base: int, sizes: dict[str, int], interval: int,
                    force: bool = False) -> list[str]:
    index, timeindex = segment_name(base, "index"), segment_name(base, "timeindex")
    index_path, time_path = storage.join(partition_dir, index), storage.join(partition_dir, timeindex)
    broken = force or index not in sizes or _index_broken(index_path, storage.read_bytes(index_path),
                                                           indexes.OFFSET_ENTRY)
    if not broken and timeindex in sizes:
        broken = _index_broken(time_path, storage.read_bytes(time_path), indexes.TIME_ENTRY)
    if not broken:
        return []
    log_path = storage.join(partition_dir, segment_name(base, "log"))
    writer = SegmentWriter(_Discard(), base, index_interval_bytes=interval)
    with storage.open_read(log_path) as f:
        for batch in iter_batches(f, log_path):
            writer.append(_Sized(batch.size), batch.last_offset, batch.max_timestamp, batch.last_offset)
    built = writer.close()
    storage.write_atomic(index_path, built.offset_index)
    storage.write_atomic(time_path, built.time_index)
    return [index, timeindex]


class _Discard:
    """A sink for SegmentWriter when only the index entries are wanted."""

    def write(self, chunk) -> int:
        return len(chunk)


class _Sized:
    """Stands for a batch's bytes by its length alone (the index rules read nothing else)."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size


def remove_root_temp_files(log_dir: str, files: list[FileInfo] | None = None) -> list[str]:
    """Temp files of checkpoints and cleaning states an interrupted atomic write left behind;
    ``files``: the root's listing, when made."""
    files = storage.list_dir(log_dir)[0] if files is None else files
    gone = [f.path for f in files if _ROOT_TEMP.match(posixpath.basename(f.path))]
    for path in gone:
        storage.remove(path)
    return gone


@dataclass(slots=True)
class RecoveryReport:
    partitions: list[PartitionRecovery] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # partition dir or log dir -> why
    temp_files: list[str] = field(default_factory=list)
    # partition dir -> the live lease of another job (its holder, its end): that job's to finish, not a failure
    held: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return sum(1 for p in self.partitions if p.problems) + len(self.skipped)

    def text(self) -> str:
        """Problems and skips, then the counts (each recovered partition was said as it happened)."""
        lines = [p.summary() for p in self.partitions if p.problems]
        lines += [f"{path}: skipped: {why}" for path, why in self.skipped.items()]
        lines += [f"{path}: removed (interrupted atomic write)" for path in self.temp_files]
        lines += [f"note: {path}: held by another job: {why} -> left to it; recovered by the next job or "
                  "'kcompact recover' once it ends or its lease lapses" for path, why in self.held.items()]
        changed = sum(p.changed for p in self.partitions)
        n = len(self.partitions)
        held = f", {len(self.held)} held by another job" if self.held else ""
        lines.append(f"recovery: {n} partition{'' if n == 1 else 's'} checked, {changed} recovered, "
                     f"{len(self.skipped)} skipped, {sum(bool(p.problems) for p in self.partitions)} with problems"
                     + held)
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"partitions": [asdict(p) for p in self.partitions if p.changed or p.problems],
                "checked": len(self.partitions), "skipped": self.skipped, "temp_files": self.temp_files,
                "held": self.held}


def recover_log_dirs(paths: Iterable[str], progress=print, torn_tails: bool = False,
                     object_store_indexes: bool = True) -> RecoveryReport:
    """Recover every partition of the log dirs, except one a live job is working on: its swap is
    not interrupted, it is under way. The caller holds every local log dir's ``.lock``
    (``storage.held_locks``: the function that opens the command takes it; refused otherwise). A
    job holds a local log dir's ``.lock`` for as long as it runs, so a lease found there is a dead
    job's (killed, say): its partition is recovered and the lease given back, as if it had expired. On an object
    store the same is done with a lease whose holder is known dead (``CleaningState.holder_gone``:
    a process of this host that no longer runs); a live job's lease, or one of another host, is
    left to its job until it lapses (``held``: a note, not a failure). There a partition with a
    commit to finish or staged files to delete is recovered under a lease of its own, so no job
    commits to it meanwhile. ``torn_tails``: see ``recover_partition``. ``object_store_indexes``:
    check the index files of a log dir on an object store too (two reads a segment): no broker
    crash leaves a torn index there, and kcompact's own are staged whole, so a job's recovery
    before it starts leaves them to ``kcompact recover``. A partition a listing shows nothing to
    recover in (``needs_recovery``) and no cleaning state for is then not read at all."""
    import uuid

    report = RecoveryReport()
    owner = f"kcompact-recover-{uuid.uuid4().hex[:12]}"
    for log_dir in paths:
        local = storage.is_local_path(log_dir)
        if local and not storage.holds_lock(log_dir):  # its leases would be taken for dead jobs'
            raise errors.KcompactError(f"{log_dir}: recovery without its .lock held (storage.held_locks)")
        _recover_log_dir(log_dir, owner, report, progress, torn_tails, object_store_indexes or local)
    return report


def _recover_log_dir(log_dir: str, owner: str, report: RecoveryReport, progress, torn_tails: bool,
                     indexes: bool) -> None:
    from kcompact.logdir.listing import list_log_dir, scan_log_dir
    from kcompact.operations import states

    locked = storage.is_local_path(log_dir)  # object stores have no .lock
    listing = list_log_dir(log_dir)
    report.temp_files += remove_root_temp_files(log_dir, listing.root)
    root_names = {posixpath.basename(f.path) for f in listing.root}
    for part in scan_log_dir(log_dir, listing).partitions:
        if (not indexes and not torn_tails and not needs_recovery(part)
                and states.file_name(part.topic, part.partition) not in root_names):
            report.partitions.append(PartitionRecovery(part.path))  # checked: nothing to do
            continue
        state, version = states.read(part.path)
        leased = state.state in (states.IN_PROGRESS, states.ABORTED)
        if leased and not locked:
            why = state.skip_reason  # None once the lease lapsed: expired, or its holder gone
            if why is not None:
                report.held[part.path] = why
                continue
            if not state.expired():
                progress(f"  {part.path}: taking over the lease of {state.holder}: that process no longer runs")
        if not locked and state.skip_reason is None and commits.pending(part.commit, part.staged):
            lease = states.acquire(part.path, owner)  # paused, uncleanable: no job can take it anyway
            if isinstance(lease, str):
                report.skipped[part.path] = lease
                continue
            try:
                done = recover_partition(part.path, indexes=indexes, torn_tails=torn_tails)
            finally:
                states.release(lease)
        else:
            done = recover_partition(part.path, indexes=indexes, torn_tails=torn_tails, files=part.listed)
            if leased:  # after the files: a crash in between leaves the lease for the next recovery
                states.release(states.Lease(part.path, state, version))
        if done.changed:
            progress(f"  recovered {done.summary()}")
        report.partitions.append(done)
