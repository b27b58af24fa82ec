"""Fault injection for tests/e2e/test_s3_commit.py, loaded by every Python process started with this
folder on PYTHONPATH while ``KCOMPACT_S3_FAULTS`` is set.

Only the first process counts (the job's driver, or a test's commit script; Spark's Python
workers inherit a marker and stay untouched): every call of a ``storage`` function that changes
the store, made while ``operations.s3commit.commit_record`` runs for the partition dir named
``KCOMPACT_S3_CRASH_PARTITION`` (``orders-0``) or ``operations.s3commit.finish`` runs for a wave
of applies that holds it, is a mutation. Just before mutation number
``KCOMPACT_S3_CRASH_AT`` (1-based) the process group is killed with SIGKILL: the mutations before
it are done, that one and the rest are not. ``KCOMPACT_S3_COUNT_FILE``: the number of mutations
so far is written there at each one (an uninjected run's total). ``KCOMPACT_S3_LEASE_MS``: the
job's leases last that long (so a killed job's lapse soon, as its default 120 s would later).
"""

import os

if os.environ.get("KCOMPACT_S3_FAULTS") and not os.environ.get("_KCOMPACT_S3_FAULTS_SEEN"):
    os.environ["_KCOMPACT_S3_FAULTS_SEEN"] = "1"  # inherited by child processes: they do not count
    import functools
    import signal
    import sys

    from kcompact import storage

    MUTATIONS = (
        "write_durable",
        "create_file",
        "write_atomic",
        "write_if",
        "write_if_many",
        "remove_if",
        "remove",
        "remove_many",
        "rename",
        "copy",
        "copy_many",
    )
    _target = "/" + os.environ.get("KCOMPACT_S3_CRASH_PARTITION", "orders-0")
    _crash_at = int(os.environ.get("KCOMPACT_S3_CRASH_AT", "0"))
    _count_file = os.environ.get("KCOMPACT_S3_COUNT_FILE")
    _done = [0]

    def _in_target_commit() -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_globals.get("__name__") == "kcompact.operations.s3commit":
                if frame.f_code.co_name == "commit_record":
                    return str(frame.f_locals.get("partition_dir", "")).rstrip("/").endswith(_target)
                if frame.f_code.co_name == "finish":
                    return any(
                        a.partition_dir.rstrip("/").endswith(_target) for a in frame.f_locals.get("applying", ())
                    )
            frame = frame.f_back
        return False

    def _counted(name, function):
        @functools.wraps(function)
        def mutation(*args, **kwargs):
            if _in_target_commit():
                _done[0] += 1
                if _count_file:
                    with open(_count_file, "w") as f:
                        f.write(f"{_done[0]}\n")
                if _done[0] == _crash_at:
                    os.killpg(os.getpgrp(), signal.SIGKILL)
            return function(*args, **kwargs)

        return mutation

    for _name in MUTATIONS:
        _real = getattr(storage, _name)
        _wrapper = _counted(_name, _real)
        setattr(storage, _name, _wrapper)
        setattr(sys.modules[_real.__module__], _name, _wrapper)  # where the other primitives call it

    if os.environ.get("KCOMPACT_S3_LEASE_MS"):
        from kcompact.compaction.pipeline.leases import LeaseKeeper

        LeaseKeeper.__init__.__defaults__ = (None, int(os.environ["KCOMPACT_S3_LEASE_MS"]))
