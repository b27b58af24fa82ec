"""Whose a file is: every local file this package creates is given the owner, group and
permission bits a broker expects before anything else can see it under its final name.

A log dir belongs to the broker's user (``kafka``, files 0640 or 0644), and operators run tools
with ``sudo``. A broker opens segment files, index files and the log dir's ``.lock`` read-write:
a file left as root's, or with wider bits than the operator chose, takes the log dir offline or
shows its data to every user. So a file that replaces another (a cleaned segment, a checkpoint)
takes the owner, group and bits of the file it replaces; a new one takes the owner and group of
its directory and the bits of its siblings of the same kind, never wider than the directory's
files and never world-writable. Directories likewise, from their parent. Set on the open file
(``fchown``/``fchmod``) while it still has its temporary name. Object stores have no owners.

A process that is neither root nor the directory's owner cannot give a file to another user:
``refusal`` says so, for the command line to refuse before it writes anything.
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass

# Names a file is written under before it is renamed to its final name.
TRANSIENT_SUFFIXES = (".tmp", ".cleaned", ".swap")
_NOT_WORLD_WRITABLE = ~stat.S_IWOTH & 0o7777


@dataclass(frozen=True, slots=True)
class Owner:
    uid: int
    gid: int
    mode: int  # permission bits only


def final_name(fs_path: str) -> str:
    """The name the file will have once renamed into place."""
    for suffix in TRANSIENT_SUFFIXES:
        if fs_path.endswith(suffix):
            return fs_path[: -len(suffix)]
    return fs_path


def kind(name: str) -> str:
    """What makes two files of a dir the same kind: the last extension (``.log``, ``.json``),
    else the last dash-separated word (``cleaner-offset-checkpoint`` -> ``checkpoint``)."""
    base = posixpath.basename(name)
    if "." in base.lstrip("."):
        return base.rsplit(".", 1)[1]
    return base.rsplit("-", 1)[-1]


SIBLINGS_OF_A_KIND = 64  # enough files of a kind to tell its bits; a log dir's root may hold thousands


def _sibling_modes(directory: str, name: str) -> tuple[list[int], list[int]]:
    """Permission bits of the regular files of ``directory`` other than ``name``'s: those of the
    same kind, and all, read until ``SIBLINGS_OF_A_KIND`` of the same kind are found (a root of
    20,000 partitions' state files would otherwise be read whole for each new one)."""
    same, every = [], []
    wanted = kind(name)
    try:
        entries = os.scandir(directory)
    except OSError:
        return same, every
    with entries:
        for entry in entries:  # lazily: the listing stops with the search
            final = final_name(entry.name)
            if final == posixpath.basename(name) or final != entry.name:
                continue
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue
                mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
            except OSError:
                continue
            every.append(mode)
            if kind(entry.name) == wanted:
                same.append(mode)
                if len(same) == SIBLINGS_OF_A_KIND:
                    break
    return same, every


def _narrowest(modes: list[int]) -> int:
    out = 0o7777
    for mode in modes:
        out &= mode
    return out


def _widest(modes: list[int]) -> int:
    out = 0
    for mode in modes:
        out |= mode
    return out


def _process_umask() -> int:
    """This process's umask, read once: Linux says it in /proc/self/status; elsewhere it is set and
    put back, which only import (one thread) may do, since files other threads create meanwhile
    would get no umask."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _process_umask()


def for_file(fs_path: str) -> Owner:
    """Who a local file about to be written at ``fs_path`` (perhaps under a transient name) must
    belong to, and its bits."""
    final = final_name(fs_path)
    try:
        replaced = os.stat(final)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISREG(replaced.st_mode):
            return Owner(replaced.st_uid, replaced.st_gid, stat.S_IMODE(replaced.st_mode))
    directory = posixpath.dirname(final) or "."
    parent = os.stat(directory)
    same, every = _sibling_modes(directory, final)
    mode = _narrowest(same) if same else 0o666 & ~_UMASK
    if every:
        mode &= _widest(every)
    return Owner(parent.st_uid, parent.st_gid, mode & 0o666 & _NOT_WORLD_WRITABLE)


def for_dir(fs_path: str) -> Owner:
    """Who a new local directory must belong to: its parent's owner and group, and bits no wider
    than its parent's."""
    parent = os.stat(posixpath.dirname(fs_path.rstrip("/")) or ".")
    return Owner(parent.st_uid, parent.st_gid, stat.S_IMODE(parent.st_mode) & 0o777 & ~_UMASK & _NOT_WORLD_WRITABLE)


def give(fd: int, owner: Owner) -> None:
    """Make the open file ``fd`` ``owner``'s, with its bits. Only root changes a file's owner; a
    process that is the owner already (``refusal`` let it through) sets the bits."""
    found = os.fstat(fd)
    if (found.st_uid, found.st_gid) != (owner.uid, owner.gid) and os.geteuid() == 0:
        os.fchown(fd, owner.uid, owner.gid)
    if stat.S_IMODE(found.st_mode) != owner.mode:
        os.fchmod(fd, owner.mode)


def give_path(fs_path: str, owner: Owner) -> None:
    """``give`` for a file or directory named by its path."""
    found = os.stat(fs_path)
    if (found.st_uid, found.st_gid) != (owner.uid, owner.gid) and os.geteuid() == 0:
        os.chown(fs_path, owner.uid, owner.gid)
    if stat.S_IMODE(found.st_mode) != owner.mode:
        os.chmod(fs_path, owner.mode)


def _name(uid: int) -> str | None:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _who(uid: int) -> str:
    name = _name(uid)
    return f"{name} (uid {uid})" if name else f"uid {uid}"


def refusal(fs_path: str) -> str | None:
    """Why this process may not write into the local dir ``fs_path``, or None: a file it wrote
    would be its own, not the dir's owner's, and the broker could not open it read-write."""
    uid = os.geteuid()
    owner = os.stat(fs_path).st_uid
    if uid == 0 or uid == owner:
        return None
    sudo_user = _name(owner) or f"'#{owner}'"
    return (f"{fs_path} belongs to {_who(owner)}, and this process runs as {_who(uid)}: the files it would "
            f"write could not be given to {_who(owner)}, and a broker running as that user could not open them "
            f"read-write; run kcompact as that user (sudo -u {sudo_user} kcompact ...) or as root")


def listing_refusal(fs_path: str) -> str | None:
    """Why this process may not list the local dir ``fs_path`` (another user's, with no read or
    search bit for this one), or None: said as ``refusal`` says it, not as a bare permission error."""
    if os.access(fs_path, os.R_OK | os.X_OK):
        return None
    uid, found = os.geteuid(), os.stat(fs_path)
    if uid == 0 or uid == found.st_uid:
        return None  # root reads it, the owner chmods it: permission bits, not whose it is
    sudo_user = _name(found.st_uid) or f"'#{found.st_uid}'"
    return (f"{fs_path} belongs to {_who(found.st_uid)}, mode {stat.S_IMODE(found.st_mode):04o}, and this process "
            f"runs as {_who(uid)}, which may not read it; run kcompact as that user (sudo -u {sudo_user} kcompact "
            "...) or as root")
