"""Kafka's cleaning states of a partition, persisted so every job and operator sees them.

Kafka keeps these in the broker's memory (LogCleanerManager); a fleet of jobs
needs them on disk. Each partition that is not idle has one small JSON file at
the root of its log dir, ``kcompact-state.<topic>-<partition>.json`` (a file,
never a directory: a broker refuses to start on a log dir holding a directory
that is not a partition). No file means idle.

    {"state": "paused", "pause_count": 2}
    {"state": "uncleanable", "reason": "CRC mismatch in ...", "since_ms": 1720000000000}
    {"state": "in_progress", "owner": "job-uuid", "host": "h", "pid": 1, "started_ms": ...,
     "heartbeat_ms": ..., "lease_ms": 120000}
    {"state": "aborted", "owner": "job-uuid", ..., "pause_count": 0}

Every change is a compare-and-swap on the file (``storage.write_if``/``remove_if``: a
conditional PUT on object stores, a directory flock locally), so two jobs racing for
one partition cannot both win, and an operator's abort cannot be lost under a heartbeat.

An in-progress lease is valid until ``heartbeat_ms + lease_ms`` on the wall clock; after
that its owner is taken for dead and the next job takes the partition over, so no state
can strand a partition (KAFKA-9087's lesson). Sooner when its holder is known dead
(``CleaningState.holder_gone``): a process of this host that no longer runs, or whose pid a
later process now has. (On local disk every lease a job finds under the log dir's ``.lock``
is a dead job's: ``operations.recover`` gives them back.)

A lease a job takes on local disk says ``"heartbeat_in_mtime": true``: its heartbeat is the later
of ``heartbeat_ms`` and the file's modification time, and the job renews it by setting that time
(``storage.touch_if_each``) instead of rewriting the file: a round of renewals of thousands of
leases then writes nothing and syncs nothing. The bytes stay, so the version stays, and an
operator's change of the file cannot be lost under a renewal; an operator's write bakes the
heartbeat into ``heartbeat_ms`` and drops the flag, so it renews nothing itself.

``aborted`` is an abort the owner has not yet acknowledged; ``pause_count`` on it is the pause
requested meanwhile (Kafka's abortAndPauseCleaning), which the partition keeps once the owner
lets go.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime

from kcompact import storage
from kcompact.conf.policy import is_compacted
from kcompact.contracts.plan_row import LeaseHolder
from kcompact.errors import FormatError, StateError
from kcompact.errors.failure import Failure

IDLE, IN_PROGRESS, ABORTED, PAUSED, UNCLEANABLE = "idle", "in_progress", "aborted", "paused", "uncleanable"
STATES = (IDLE, IN_PROGRESS, ABORTED, PAUSED, UNCLEANABLE)
LEASE_MS = 120_000  # default lease; the holder renews it every quarter of that
# A process that started more than this after a lease was taken is not its holder (a reused pid).
# The slack covers /proc's start time, known to the second, and steps of the wall clock since boot.
PID_START_SLACK_MS = 10_000
_FILE = re.compile(r"^kcompact-state\.(?P<topic>.+)-(?P<partition>\d+)\.json$")


def wall_ms() -> int:
    return int(time.time() * 1000)


def utc(ms: int | None) -> str:
    """A wall-clock time in ms as people read it."""
    if ms is None:
        return "an unknown time"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True, slots=True)
class CleaningState:
    state: str = IDLE
    pause_count: int = 0
    reason: str | None = None
    since_ms: int | None = None
    owner: str | None = None
    host: str | None = None
    pid: int | None = None
    started_ms: int | None = None
    heartbeat_ms: int | None = None
    lease_ms: int | None = None
    pid_ns: str | None = None  # the holder's pid namespace (/proc/self/ns/pid): its pid means nothing in another
    heartbeat_in_mtime: bool | None = None  # a local lease: renewed by its file's modification time

    def expired(self, at_ms: int | None = None) -> bool:
        """An in-progress or aborted lease whose owner stopped renewing it."""
        if self.state not in (IN_PROGRESS, ABORTED) or self.heartbeat_ms is None:
            return False
        return (wall_ms() if at_ms is None else at_ms) > self.heartbeat_ms + (self.lease_ms or LEASE_MS)

    def holder_gone(self) -> bool:
        """An in-progress or aborted lease whose holder is known dead: taken on this host (the
        same host name, and the same pid namespace when the lease names one) by a process that
        no longer runs, or whose pid now belongs to a process started after the lease was taken.
        A lease of another host, or of a live process, cannot be judged so: it stands until it
        expires."""
        if self.state not in (IN_PROGRESS, ABORTED) or type(self.pid) is not int or self.pid <= 0:
            return False
        if self.host != socket.gethostname() or self.pid_ns not in (None, pid_namespace()):
            return False
        return process_gone(self.pid, self.started_ms)

    def lapsed(self) -> bool:
        """A lease no job holds any more: expired, or its holder gone. The next job takes it over."""
        return self.expired() or self.holder_gone()

    @property
    def lease_end(self) -> str:
        if self.heartbeat_ms is None:
            return "no heartbeat recorded"
        return f"lease valid until {utc(self.heartbeat_ms + (self.lease_ms or LEASE_MS))}"

    @property
    def holder(self) -> str:
        return f"owner {self.owner} on {self.host} pid {self.pid}"

    @property
    def skip_reason(self) -> Refusal | None:
        """Why a job passes over a partition in this state, with the way out; None when a
        job may take it (idle, or a lease whose owner died)."""
        if self.state == PAUSED:
            return Refusal(f"paused ({self.pause_count}x; resume to clean)", Failure.PAUSED)
        if self.state in (IN_PROGRESS, ABORTED) and not self.lapsed():
            what = "in progress" if self.state == IN_PROGRESS else "aborted, waiting for its job to stop"
            return Refusal(f"{what} ({self.holder}; {self.lease_end}; 'kcompact abort' to stop it)",
                           Failure.LEASE_HELD, self.lease_holder())
        if self.state == UNCLEANABLE:
            return Refusal(f"uncleanable: {self.reason} (reset-uncleanable after fixing)", Failure.UNCLEANABLE)
        return None

    def lease_holder(self) -> LeaseHolder:
        """The job holding this state's lease (``until``: the lease's end in UTC, None when no
        heartbeat was recorded)."""
        until = None if self.heartbeat_ms is None else utc(self.heartbeat_ms + (self.lease_ms or LEASE_MS))
        return LeaseHolder(self.owner, self.host, self.pid, until)

    def to_json(self) -> bytes:
        return json.dumps(
            {k: v for k, v in asdict(self).items() if (v is not None and v != 0) or k == "state"}
        ).encode()


class Refusal(str):
    """Why a job may not take a partition, as people read it, with its ``kind`` (a ``Failure``)
    and, for another job's live lease, its ``holder`` (``CleaningState.lease_holder``)."""

    kind: Failure | None
    holder: LeaseHolder | None

    def __new__(cls, reason: str, kind: Failure | None = None, holder: LeaseHolder | None = None) -> Refusal:
        made = super().__new__(cls, reason)
        made.kind, made.holder = kind, holder
        return made


def kind_of(reason: str | None) -> Failure | None:
    """The kind of a skip ``reason`` (a ``Refusal``'s; None for a plain one)."""
    return reason.kind if isinstance(reason, Refusal) else None


def paused_lines(paused: dict[str, list[str]]) -> list[str]:
    """The summary's lines for the paused partitions of each log dir (names in order), with the
    way out: a forgotten pause must not stop cleaning silently."""
    return [f"paused partitions: {log_dir}: {len(names)} ({', '.join(names)}) -> "
            f"'kcompact resume {log_dir} {' '.join(names)}'" for log_dir, names in paused.items()]


def pid_namespace() -> str | None:
    """This process's pid namespace (``pid:[4026531836]``), None where /proc does not say."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def process_gone(pid: int, since_ms: int | None) -> bool:
    """No process of this host with ``pid`` can have taken a lease at ``since_ms`` (wall ms): none
    runs (or only its zombie), or the one running started after (a reused pid: its start time
    from ``/proc/<pid>/stat`` and the boot time, ``PID_START_SLACK_MS`` allowed). False when it
    cannot be told (no /proc: a live pid is taken for the holder)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    except FileNotFoundError:
        return os.path.isdir("/proc/self")  # /proc is there and the process is not: it ended just now
    except (OSError, StopIteration, ValueError, IndexError):
        return False
    fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) ": field 3 (state) on
    try:
        state, start_ticks = fields[0], int(fields[19])  # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        return False
    if state in (b"Z", b"X"):  # a zombie holds nothing: it only waits for its parent
        return True
    if since_ms is None:
        return False
    started_ms = boot * 1000 + start_ticks * 1000 // os.sysconf("SC_CLK_TCK")
    return started_ms > since_ms + PID_START_SLACK_MS


def retention_skip(state: CleaningState, policy: str) -> str | None:
    """LogCleanerManager's rule for retention: it passes over a partition being cleaned,
    aborted or paused, and over a compacted one marked uncleanable."""
    if state.state == UNCLEANABLE and not is_compacted(policy):
        return None
    return state.skip_reason


@dataclass(frozen=True, slots=True)
class Lease:
    """A job's hold on one partition: what it wrote, to renew or give it back by CAS."""

    partition_dir: str
    state: CleaningState
    version: str


def file_name(topic: str, partition: int) -> str:
    return f"kcompact-state.{topic}-{partition}.json"


def parse_file_name(name: str) -> tuple[str, int] | None:
    match = _FILE.match(posixpath.basename(name))
    return (match["topic"], int(match["partition"])) if match else None


def state_path(partition_dir: str) -> str:
    """Where a partition's state file lives: the root of its log dir."""
    log_dir, _, name = partition_dir.rstrip("/").rpartition("/")
    topic, _, number = name.rpartition("-")
    return f"{log_dir}/{file_name(topic, int(number))}"


def parse(path: str, data: bytes, modified_ms: int | None = None) -> CleaningState:
    """The state in a state file's bytes; ``modified_ms``: the file's modification time, a local
    lease's heartbeat when later than ``heartbeat_ms`` (``heartbeat_in_mtime``)."""
    try:
        doc = json.loads(data)
        state = doc["state"]
    except (ValueError, KeyError, TypeError):
        raise FormatError(path, None, "cleaning-state file is not a JSON object with a 'state'") from None
    if state not in STATES:
        raise FormatError(path, None, f"unknown cleaning state {state!r} (known: {', '.join(STATES)})")
    known = {k: doc[k] for k in CleaningState.__slots__ if k in doc}
    known.setdefault("pause_count", 1 if state == PAUSED else 0)
    found = CleaningState(**known)
    if (found.heartbeat_in_mtime and modified_ms is not None and found.heartbeat_ms is not None
            and modified_ms > found.heartbeat_ms):
        return replace(found, heartbeat_ms=modified_ms)
    return found


def load(path: str) -> CleaningState:
    """The state in the state file at ``path`` (``FileNotFoundError`` when there is none)."""
    found = storage.read_stamped(path)
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", path)
    return parse(path, found[0], found[2])


def read(partition_dir: str) -> tuple[CleaningState, str | None]:
    """The partition's state and the file's version (None: no file, idle)."""
    path = state_path(partition_dir)
    found = storage.read_stamped(path)
    if found is None:
        return CleaningState(), None
    return parse(path, found[0], found[2]), found[1]


def _change(partition_dir: str, step: Callable[[CleaningState], CleaningState | None]) -> CleaningState:
    """Apply ``step`` (old state -> new state, None for idle) by compare-and-swap, retrying
    while others change the file in between."""
    path = state_path(partition_dir)
    while True:
        old, version = read(partition_dir)
        new = step(old)
        if new is old:  # left as it is: not written back (a lease's bytes, its version, unchanged)
            return old
        if new is None or new.state == IDLE:
            if version is None or storage.remove_if(path, version):
                return CleaningState()
        elif storage.write_if(path, new.to_json(), version):
            return new


# -- a job's lease ------------------------------------------------------------------------------


def acquire(partition_dir: str, owner: str, lease_ms: int = LEASE_MS) -> Lease | str:
    """Take the partition for cleaning: a Lease, or the reason it is not free (another live
    job, paused, uncleanable). A lease whose owner died (expired, or its holder gone) is taken
    over; a dead owner's pending pause is kept instead."""
    path = state_path(partition_dir)
    first = True
    while True:
        if first:  # most partitions have no state file: create it, one request (the create is the CAS)
            first, old, version = False, CleaningState(), None
        else:
            old, version = read(partition_dir)
        if old.skip_reason is not None:
            return old.skip_reason
        if old.state == ABORTED and old.pause_count:  # dead owner, pause requested: honour it
            if storage.write_if(path, CleaningState(PAUSED, pause_count=old.pause_count).to_json(), version):
                return CleaningState(PAUSED, pause_count=old.pause_count).skip_reason
            continue
        new = _lease_state(partition_dir, owner, lease_ms, wall_ms())
        written = storage.write_if(path, new.to_json(), version)
        if written is not None:
            return Lease(partition_dir, new, written)


def acquire_many(partition_dirs: list[str], owner: str, lease_ms: int = LEASE_MS) -> list[Lease | str | OSError]:
    """``acquire`` of each partition at once: a Lease, the reason it is not free, or the error that
    kept its state file from being written. Where no state file is, the lease is created as
    ``acquire`` creates it, all of a log dir's in one compare-and-write (``storage.write_if_each``:
    locally one flock of the root, each file fsynced, the root once); a partition that has one
    (paused, uncleanable, another job's lease, a dead one's) goes through ``acquire``."""
    now = wall_ms()
    made = [_lease_state(path, owner, lease_ms, now) for path in partition_dirs]
    written = storage.write_if_each([(state_path(path), state.to_json(), None)
                                     for path, state in zip(partition_dirs, made, strict=True)])
    out: list[Lease | str | OSError] = []
    for path, state, version in zip(partition_dirs, made, written, strict=True):
        if isinstance(version, OSError):
            out.append(version)
        elif version is not None:
            out.append(Lease(path, state, version))
        else:  # a state file is there: read it and decide, one partition at a time
            try:
                out.append(acquire(path, owner, lease_ms))
            except OSError as exc:
                out.append(exc)
    return out


def _lease_state(partition_dir: str, owner: str, lease_ms: int, now: int) -> CleaningState:
    """A new lease of ``owner`` on the partition; on local disk renewed by its file's time."""
    return CleaningState(IN_PROGRESS, owner=owner, host=socket.gethostname(), pid=os.getpid(), started_ms=now,
                         heartbeat_ms=now, lease_ms=lease_ms, pid_ns=pid_namespace(),
                         heartbeat_in_mtime=storage.is_local_path(partition_dir) or None)


def renew(lease: Lease) -> Lease | None:
    """Push the lease's expiry forward; None when it is no longer ours to renew (aborted,
    taken over after expiring): the job must then stop touching the partition."""
    renewed = renew_many([lease])[0]
    if isinstance(renewed, OSError):
        raise renewed
    return renewed


def renew_many(leases: list[Lease]) -> list[Lease | OSError | None]:
    """``renew`` of each lease at once: the renewed lease, None where it is no longer ours, or the
    error of that one (the next round tries it again). A local lease gets its file's time set
    (``storage.touch_if_each``: bytes and version unchanged, nothing to make durable: a lease
    found after a crash is a dead job's whatever its time); one on an object store is rewritten,
    several at once (``storage.write_if_each``)."""
    now = wall_ms()
    out: list[Lease | OSError | None] = [None] * len(leases)
    touched = [i for i, lease in enumerate(leases) if lease.state.heartbeat_in_mtime]
    rewritten = [i for i, lease in enumerate(leases) if not lease.state.heartbeat_in_mtime]
    done = storage.touch_if_each([(state_path(leases[i].partition_dir), leases[i].version) for i in touched], now)
    for i, ok in zip(touched, done, strict=True):
        lease = leases[i]
        out[i] = ok if isinstance(ok, OSError) else (
            Lease(lease.partition_dir, replace(lease.state, heartbeat_ms=now), lease.version) if ok else None)
    renewed = {i: replace(leases[i].state, heartbeat_ms=now) for i in rewritten}
    written = storage.write_if_each([(state_path(leases[i].partition_dir), renewed[i].to_json(), leases[i].version)
                                     for i in rewritten])
    for i, version in zip(rewritten, written, strict=True):
        out[i] = version if not isinstance(version, str) else Lease(leases[i].partition_dir, renewed[i], version)
    return out


def still_held(lease: Lease) -> bool:
    return held_by(lease.partition_dir, lease.state.owner)


def held_by(partition_dir: str, owner: str) -> bool:
    """True while ``owner``'s lease stands: no abort, no takeover. Cheap enough to ask at every
    segment-group boundary, from any executor."""
    found = storage.read_versioned(state_path(partition_dir))
    if found is None:
        return False
    state = parse(state_path(partition_dir), found[0])
    return state.state == IN_PROGRESS and state.owner == owner


def release(lease: Lease, uncleanable: str | None = None) -> CleaningState:
    """Give the partition back: idle, or uncleanable with the reason; an abort requested
    meanwhile is acknowledged (idle, or paused when a pause came with it)."""
    owner = lease.state.owner

    def step(old: CleaningState) -> CleaningState | None:
        if old.owner != owner or old.state not in (IN_PROGRESS, ABORTED):
            return old  # taken over: not ours any more, leave it as it is
        if uncleanable is not None:
            return CleaningState(UNCLEANABLE, reason=uncleanable, since_ms=wall_ms())
        if old.state == ABORTED and old.pause_count:
            return CleaningState(PAUSED, pause_count=old.pause_count)
        return None

    if (uncleanable is None and lease.state.state == IN_PROGRESS
            and storage.remove_if(state_path(lease.partition_dir), lease.version)):
        return CleaningState()  # still our lease as we wrote it (no abort came): idle, one request
    return _change(lease.partition_dir, step)


def release_many(leases: list[Lease]) -> list[CleaningState | OSError]:
    """``release`` (back to idle) of each lease at once: those still as we wrote them removed by one
    compare-and-delete each (``storage.remove_if_each``; on an object store several at once),
    the others (an abort came, taken over) through ``release``; each outcome, or its error."""
    simple = [i for i, lease in enumerate(leases) if lease.state.state == IN_PROGRESS]
    removed = storage.remove_if_each([(state_path(leases[i].partition_dir), leases[i].version) for i in simple])
    out: list[CleaningState | OSError | None] = [None] * len(leases)
    for i, gone in zip(simple, removed, strict=True):
        if gone is True:
            out[i] = CleaningState()
        elif isinstance(gone, OSError):
            out[i] = gone
    for i, lease in enumerate(leases):
        if out[i] is None:
            try:
                out[i] = release(lease)
            except OSError as exc:
                out[i] = exc
    return out  # type: ignore[return-value]


def mark_uncleanable(partition_dir: str, reason: str) -> CleaningState:
    """A partition found corrupt without being leased (by the planner): uncleanable, unless
    a job or an operator holds it in another state."""
    return _change(partition_dir, lambda old: CleaningState(UNCLEANABLE, reason=reason, since_ms=wall_ms())
                   if old.state == IDLE else old)


# -- operator commands (kcompact pause / resume / abort / reset-uncleanable) --------------------


def pause(partition_dir: str) -> CleaningState:
    """Kafka's abortAndPauseCleaning: nested pauses count; a running job is asked to abort
    and the partition stays paused after it stops."""

    def step(old: CleaningState) -> CleaningState:
        if old.state == IDLE:
            return CleaningState(PAUSED, pause_count=1)
        if old.state == PAUSED:
            return replace(old, pause_count=old.pause_count + 1)
        if old.state in (IN_PROGRESS, ABORTED):
            return replace(old, state=ABORTED, pause_count=old.pause_count + 1, heartbeat_in_mtime=None)
        raise StateError(f"uncleanable ({old.reason}); 'kcompact reset-uncleanable' first")

    return _change(partition_dir, step)


def resume(partition_dir: str) -> CleaningState:
    def step(old: CleaningState) -> CleaningState | None:
        if old.pause_count <= 0 or old.state not in (PAUSED, ABORTED):
            raise StateError(f"not paused (state {old.state})")
        if old.state == PAUSED and old.pause_count == 1:
            return None
        return replace(old, pause_count=old.pause_count - 1, heartbeat_in_mtime=None)

    return _change(partition_dir, step)


def abort(partition_dir: str) -> CleaningState:
    """Ask the job cleaning the partition to stop at its next segment-group boundary; a dead
    owner's lease is cleared at once."""

    def step(old: CleaningState) -> CleaningState | None:
        if old.state not in (IN_PROGRESS, ABORTED):
            raise StateError(f"not being cleaned (state {old.state})")
        if old.lapsed() or old.heartbeat_ms is None:  # nobody left to acknowledge the abort
            return CleaningState(PAUSED, pause_count=old.pause_count) if old.pause_count else None
        return replace(old, state=ABORTED, heartbeat_in_mtime=None)

    return _change(partition_dir, step)


def reset_uncleanable(partition_dir: str) -> CleaningState:
    def step(old: CleaningState) -> CleaningState | None:
        if old.state != UNCLEANABLE:
            raise StateError(f"not uncleanable (state {old.state})")
        return None

    return _change(partition_dir, step)
