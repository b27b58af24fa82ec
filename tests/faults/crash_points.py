"""Kill a kcompact process tree with SIGKILL at a chosen ``storage`` mutation (tests only).

Every file change of the product goes through ``storage`` (its one seam), so wrapping that
module's functions reaches every mutation, on the driver and in Spark's Python workers alike
(workers inherit PYTHONPATH and run ``sitecustomize`` of this folder, which calls ``install``).

Environment:
  KCOMPACT_CRASH_LOG=FILE   append one JSON line per completed primitive mutation
                            ({"op", "paths", "pid"}); the line number is the mutation index
  KCOMPACT_CRASH_AT=SPEC    kill at a point, SPEC = OP:SUBSTRING:N[:WHEN]
      OP         a storage function (rename, remove, remove_if, fsync_dir, syncfs, write_durable,
                 write_file, create_file, set_mtime, makedirs, write_atomic), or * for any primitive
                 mutation (every OP but write_atomic, whose steps are primitives themselves)
      SUBSTRING  matched against the call's path arguments (empty: every call)
      N          the Nth matching call, counted across all processes of the job
      WHEN       before (default: the call does not happen), after (it completed),
                 before-rename (write_atomic: temp file written and fsynced, not renamed),
                 after-bytes=K (create_file: the file holds its first K bytes; then
                 N counts the matching files that reach K bytes, not the calls)
  KCOMPACT_CRASH_COUNTER=FILE  where matching calls are counted (default: a file in the temp
                 dir named after the session)

The kill takes the whole job: every process group of the session (the driver's, where the
JVM runs too, and pyspark's daemon, which moves its workers to a group of their own). It acts
only inside a session whose leader installed it (the job was started with start_new_session):
anywhere else it kills the calling process alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import tempfile
from dataclasses import dataclass

PRIMITIVES = ("rename", "remove", "remove_if", "fsync_dir", "syncfs", "write_durable", "write_file",
              "create_file", "set_mtime", "makedirs")
CREATES = ("create_file",)  # the streamed ones: after-bytes=K applies to them
WRAPPED = (*PRIMITIVES, "write_atomic")
WHENS = ("before", "after", "before-rename")
SESSION_ENV = "KCOMPACT_CRASH_SID"


@dataclass(frozen=True)
class CrashPoint:
    op: str
    substring: str
    nth: int
    when: str = "before"
    after_bytes: int | None = None

    @classmethod
    def parse(cls, spec: str) -> CrashPoint:
        parts = spec.split(":")
        if len(parts) not in (3, 4):
            raise ValueError(f"crash point {spec!r}: expected OP:SUBSTRING:N[:WHEN]")
        op, substring, nth = parts[:3]
        when = parts[3] if len(parts) == 4 else "before"
        after_bytes = None
        if when.startswith("after-bytes="):
            after_bytes, when = int(when.removeprefix("after-bytes=")), "after-bytes"
            if op not in CREATES or after_bytes < 1:
                raise ValueError(f"crash point {spec!r}: after-bytes=K (K >= 1) applies to {' and '.join(CREATES)}"
                                 " only")
        elif when not in WHENS:
            raise ValueError(f"crash point {spec!r}: WHEN must be one of {WHENS} or after-bytes=K")
        if when == "before-rename" and op != "write_atomic":
            raise ValueError(f"crash point {spec!r}: before-rename applies to write_atomic only")
        if op != "*" and op not in WRAPPED:
            raise ValueError(f"crash point {spec!r}: unknown storage function {op!r}")
        if int(nth) < 1:
            raise ValueError(f"crash point {spec!r}: N counts from 1")
        return cls(op, substring, int(nth), when, after_bytes)

    def matches(self, op: str, paths: tuple[str, ...]) -> bool:
        if self.op == "*":
            if op not in PRIMITIVES:
                return False
        elif op != self.op:
            return False
        return any(self.substring in p for p in paths)


def read_log(path: str) -> list[dict]:
    """The mutations a run logged, in order (index 0 is the first)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def nth_of(entries: list[dict], index: int, op: str, substring: str) -> int:
    """N such that ``op:substring:N`` names the mutation at ``index`` of a logged run."""
    target = entries[index]
    assert (op == "*" or target["op"] == op) and any(substring in p for p in target["paths"]), target
    point = CrashPoint(op, substring, 1)
    return sum(point.matches(e["op"], tuple(e["paths"])) for e in entries[:index + 1])


# -- the kill -----------------------------------------------------------------------------------------


def session_processes(sid: int) -> dict[int, int]:
    """pid -> process group of every live (non-zombie) process of session ``sid``."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            found[int(name)] = int(fields[2])
    return found


def kill_job() -> None:
    sid = os.getsid(0)
    if os.environ.get(SESSION_ENV) != str(sid):  # not a job session of ours: take this process alone
        os.kill(os.getpid(), signal.SIGKILL)
    own = os.getpgid(0)
    for group in set(session_processes(sid).values()) - {own}:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    os.killpg(own, signal.SIGKILL)


# -- bookkeeping shared by the job's processes -----------------------------------------------------------


def _counter_path() -> str:
    return os.environ.get("KCOMPACT_CRASH_COUNTER") or os.path.join(
        tempfile.gettempdir(), f"kcompact-crash-{os.getsid(0)}.count")


def _count() -> int:
    """One more matching call, across processes (a file under flock): its number."""
    fd = os.open(_counter_path(), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        n = int(os.pread(fd, 32, 0).strip() or 0) + 1
        os.pwrite(fd, b"%-31d" % n, 0)
        return n
    finally:
        os.close(fd)  # releases the flock


def _log(op: str, paths: tuple[str, ...]) -> None:
    log = os.environ.get("KCOMPACT_CRASH_LOG")
    if log:
        line = json.dumps({"op": op, "paths": list(paths), "pid": os.getpid()}) + "\n"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one small O_APPEND write: lines never interleave
        finally:
            os.close(fd)


# -- the wrappers -------------------------------------------------------------------------------------------


class _Injector:
    def __init__(self, storage, point: CrashPoint | None):
        self.storage = storage
        self.point = point
        self.armed_rename: str | None = None  # write_atomic's temp file, for before-rename

    def _hit(self, op: str, paths: tuple[str, ...]) -> bool:
        return self.point is not None and self.point.matches(op, paths) and _count() == self.point.nth

    def wrap(self, op: str):
        original = getattr(self.storage, op)
        if op in CREATES:
            return self._wrap_create(op, original)

        def wrapper(*args, **kwargs):
            paths = tuple(args[:2] if op == "rename" else args[:1])
            if op == "rename" and self.armed_rename is not None and args[0] == self.armed_rename:
                kill_job()
            hit = self._hit(op, paths)
            if hit and self.point.when == "before":
                kill_job()
            if hit and self.point.when == "before-rename":
                self.armed_rename = paths[0] + self.storage.TMP
            result = original(*args, **kwargs)
            if op != "write_atomic":
                _log(op, paths)
            if hit and self.point.when == "after":
                kill_job()
            return result

        wrapper.__wrapped__ = original
        return wrapper

    def _wrap_create(self, op: str, original):
        injector = self

        @contextlib.contextmanager
        def create(path, *args, **kwargs):
            point = injector.point
            if point is not None and point.after_bytes is not None and point.matches(op, (path,)):
                with original(path, *args, **kwargs) as f:
                    yield _Counting(f, point)
                _log(op, (path,))
                return
            hit = injector._hit(op, (path,))
            if hit and point.when == "before":
                kill_job()
            with original(path, *args, **kwargs) as f:
                yield f
            _log(op, (path,))
            if hit and point.when == "after":
                kill_job()

        create.__name__ = op
        create.__wrapped__ = original
        return create


class _Counting:
    """A file object that counts itself once ``point.after_bytes`` bytes were written to it, and
    stops the job there if it is the Nth such file (the rest of its bytes are never written)."""

    def __init__(self, f, point: CrashPoint):
        self.f, self.point, self.written = f, point, 0

    def write(self, data) -> int:
        limit = self.point.after_bytes
        if self.written < limit <= self.written + len(data) and _count() == self.point.nth:
            self.f.write(bytes(memoryview(data)[:limit - self.written]))
            self.f.flush()
            kill_job()
        self.written += len(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)


def install(point: CrashPoint | None = None) -> None:
    """Wrap ``storage``'s mutations (once per process) to log them and kill at ``point``."""
    from kcompact import storage
    if getattr(storage, "_crash_injector", None) is not None:
        storage._crash_injector.point = point
        storage._crash_injector.armed_rename = None
        return
    injector = _Injector(storage, point)
    for op in WRAPPED:
        room = sys.modules[getattr(storage, op).__module__]  # where the other primitives call it
        wrapper = injector.wrap(op)
        setattr(storage, op, wrapper)
        setattr(room, op, wrapper)
    storage._crash_injector = injector


def install_from_env() -> None:
    spec = os.environ.get("KCOMPACT_CRASH_AT")
    if not spec and not os.environ.get("KCOMPACT_CRASH_LOG"):
        return
    if os.getpid() == os.getsid(0):  # the job's session leader: the session is the job's own
        os.environ[SESSION_ENV] = str(os.getsid(0))
    try:
        install(CrashPoint.parse(spec) if spec else None)
    except ValueError as exc:
        print(f"crash_points: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
