"""The one seam between this product and storage.

Every read, listing, rename and delete goes through this package, so a local path and an
``s3://`` URL work alike (fsspec resolves the filesystem). The byte formats in
``readers``/``writers`` never import it: they take bytes and file objects. Each module holds
one kind of work (``listing``, ``reading``, ``durable``, ``changes``, ``cas``, ``lock``, ...);
this package only names their public functions, so a caller writes ``storage.rename``. A test
that wraps a primitive wraps it in its module too: the modules call each other there.
"""

from __future__ import annotations

import warnings

# fsspec warns on its import of an FSSPEC_<PROTOCOL> variable it ignores: the command line says
# what is wrong with it in its own line (failures.environment_problem), before any work
warnings.filterwarnings("ignore", message="Ignoring environment variable FSSPEC_", category=UserWarning)

from kcompact.storage.cas import (
    read_stamped,
    read_versioned,
    remove_if,
    remove_if_each,
    touch_if_each,
    write_if,
    write_if_each,
    write_if_many,
)
from kcompact.storage.changes import (
    copy,
    copy_many,
    makedirs,
    remove,
    remove_many,
    remove_tree,
    rename,
    set_mtime,
    truncate,
)
from kcompact.storage.describing import describe_error
from kcompact.storage.direct import DIRECT_BLOCK, DIRECT_BUFFER, DirectFile
from kcompact.storage.durable import (
    SYNCFS_FROM,
    TMP,
    create_file,
    fsync_dir,
    fsync_dirs,
    fsync_files,
    syncfs,
    write_atomic,
    write_durable,
    write_file,
)
from kcompact.storage.failures import describe_failure, environment_problem
from kcompact.storage.listing import exists, info, kind, list_dir, list_tree
from kcompact.storage.lock import BROKER_LOCK, HeldLogDirs, LogDirLock, held_locks, holds_lock
from kcompact.storage.paths import FileInfo, absolute, identity, is_local, is_local_path, join, resolve, url
from kcompact.storage.reading import open_read, read_bytes, read_range
from kcompact.storage.threads import IN_FLIGHT, map_in_flight, on_threads

__all__ = [
    "BROKER_LOCK",
    "DIRECT_BLOCK",
    "DIRECT_BUFFER",
    "TMP",
    "DirectFile",
    "FileInfo",
    "HeldLogDirs",
    "IN_FLIGHT",
    "LogDirLock",
    "SYNCFS_FROM",
    "absolute",
    "copy",
    "copy_many",
    "create_file",
    "describe_error",
    "describe_failure",
    "environment_problem",
    "exists",
    "fsync_dir",
    "fsync_dirs",
    "fsync_files",
    "held_locks",
    "holds_lock",
    "identity",
    "info",
    "is_local",
    "is_local_path",
    "join",
    "kind",
    "list_dir",
    "list_tree",
    "map_in_flight",
    "on_threads",
    "makedirs",
    "open_read",
    "read_bytes",
    "read_range",
    "read_stamped",
    "read_versioned",
    "remove",
    "remove_if",
    "remove_if_each",
    "remove_many",
    "remove_tree",
    "rename",
    "resolve",
    "set_mtime",
    "syncfs",
    "touch_if_each",
    "truncate",
    "url",
    "write_atomic",
    "write_durable",
    "write_file",
    "write_if",
    "write_if_each",
    "write_if_many",
]
