"""Reading files: a seekable file object, a whole file, a byte range; an object store's reads
name its URL in their errors."""

from __future__ import annotations

from kcompact.storage import listing, objects
from kcompact.storage.failures import naming, typed
from kcompact.storage.paths import is_local, resolve


class _NamedFile:
    """An object store's file open for reading, its errors naming its URL (``failures.naming``)."""

    def __init__(self, f, path: str, fs_path: str):
        self._f, self._path, self._fs_path = f, path, fs_path

    def __getattr__(self, name: str):
        return getattr(self._f, name)

    def __enter__(self) -> _NamedFile:
        return self

    def __exit__(self, *exc_info) -> None:
        self._f.close()

    def read(self, *args) -> bytes:
        with naming(self._path, self._fs_path):
            return self._f.read(*args)

    def readinto(self, buffer) -> int:
        with naming(self._path, self._fs_path):
            return self._f.readinto(buffer)

    def seek(self, *args) -> int:
        with naming(self._path, self._fs_path):
            return self._f.seek(*args)


@typed
def open_read(path: str, size: int | None = None):
    """A seekable binary file object; callers read it in bounded chunks. ``size``: the file's size
    as listed (an object store is then not asked for it)."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        return open(fs_path, "rb")  # fsspec's LocalFileOpener only wraps this, and costs more
    if size is None:
        size = listing.info(path).size
    return _NamedFile(objects.RangedReader(fs, fs_path, size), path, fs_path)


@typed
def read_bytes(path: str) -> bytes:
    fs, fs_path = resolve(path)
    with naming(path, fs_path):
        if not is_local(fs):
            return objects.get(fs, fs_path)[0]
        with open(fs_path, "rb") as f:  # not fsspec's cat_file: its file layer outweighs a small file's read
            return f.read()


@typed
def read_range(path: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of a file (``end`` not past its size), without reading the rest."""
    fs, fs_path = resolve(path)
    with naming(path, fs_path):
        if not is_local(fs):
            return objects.get(fs, fs_path, start, end)[0]
        with open(fs_path, "rb") as f:
            f.seek(start)
            return f.read(end - start)
