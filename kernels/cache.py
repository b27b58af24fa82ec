"""Compiled kernels shipped inside the package: a fresh process loads them, it does not compile.

Why: numba compiles each ``@njit(cache=True)`` kernel at its first call and keeps the result in
its cache (``__pycache__`` beside the source, ``NUMBA_CACHE_DIR``, or the user's cache dir for a
zip). A process whose cache is empty compiles every kernel it calls again: seconds of CPU in
each executor's first tasks, more than the tiny job itself (docs/benchmarks.md). Ephemeral clusters
(Kubernetes pods, fresh YARN containers, a
``--py-files`` zip, a read-only site-packages) start every run with an empty cache, so every run
paid it on every executor.

What: ``python -m kcompact.jobs.kernels`` (run by ``make install`` and ``make dist``) runs a small but
complete workload (the whole and the shared compaction paths, every codec, legacy messages, the
data source, dump, verify) and keeps every kernel it compiled, for every signature, under
``kernels/compiled/`` (package data: in the wheel and in ``kcompact-py.zip``), with
``target.json`` naming the CPU target they were compiled for and a digest of their content.

How (numba 0.68, ``numba.core.caching``): numba picks a cache locator for a function when the
function is decorated: the first class of ``CacheImpl._locator_classes`` whose ``from_function``
accepts it. ``install()`` (run when this module is imported: ``readers.c_routines`` and every
module with kernels import it before they decorate one) puts ``ShippedLocator`` first. For a
kernel of our packages it asks numba's own locators where numba would cache it (``NUMBA_CACHE_DIR``,
``__pycache__``, the user's cache dir), and caches it in a directory there named for the shipped
cache's digest, which it fills once, first, with the shipped files of that package (written
aside and renamed in place, so workers starting together never see half of it). Where none of
those may be written (a broker's system user: a root-owned install, ``HOME=/nonexistent`` or
another user's home, as ``sudo -u kafka`` leaves it), numba alone has no locator and fails the
import ("cannot cache function ...: no locator available"): the directory is then made in this
user's own ``kcompact-numba-<uid>`` under the temp dir (mode 0700, used only when it is this
user's alone). From then on that directory is numba's own: a kernel whose source changed
since the build (numba's stamp is the SHA-256 of the source file's content, not its mtime, so a
wheel install or a zip keeps the stamps valid), a new signature or another CPU compile as before
and are saved there. Nothing is written to site-packages or the zip; with no shipped cache, or
``KCOMPACT_KERNELS=host``, numba's own locator is used, as before.

CPU: numba keys an entry by its target CPU name and features, by default the host's. The build
compiles for a portable target (``portable_target``: x86-64-v3 on x86-64, i.e. AVX2, BMI2, FMA,
the baseline of every x86 server CPU since 2013-2015), and a process that finds the shipped
cache sets that target for numba (``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES``, before its first
kernel is decorated) when its CPU has every feature of it: one target for every machine, so a
cache built anywhere serves every executor, where a build for the host's CPU would serve only
executors of the build machine's model. It costs next to nothing: the kernels are
byte-oriented scalar loops (varints, hashes, CRCs through C routines) that wider vector units do
not speed up (docs/benchmarks.md). A host without those features,
another architecture, Python or numba, or ``NUMBA_CPU_NAME`` set by hand: the shipped entries do
not match, and the kernels compile for the host as before. ``KCOMPACT_KERNELS=host`` always does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import uuid
from collections.abc import Iterator
from importlib import resources

import numba
from llvmlite import binding
from numba.core import caching, config
from numba.core.registry import cpu_target

SHIPPED = "compiled"  # kernels/compiled/<package dir>/<numba's files>: no module name, so
# that setuptools takes it for data, not for a package it was not told of
MANIFEST = "target.json"
BUILD_ENV = "KCOMPACT_KERNELS_BUILD"  # set by jobs.kernels: every process saves under <dir>/<pid>/
CHOICE_ENV = "KCOMPACT_KERNELS"  # "host": compile for this CPU, the shipped kernels unused

# LLVM's names of x86-64's micro-architecture levels and the features each adds to the one before
X86_LEVELS = (
    ("x86-64-v2", ("cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3")),
    ("x86-64-v3", ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")),
)
PORTABLE_X86 = "x86-64-v3"
_PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"  # numba's cache files are per Python version


def required_features(cpu_name: str) -> tuple[str, ...] | None:
    """The features a host needs to run code compiled for ``cpu_name``; None: not a level we know."""
    needed: list[str] = []
    for name, adds in X86_LEVELS:
        needed += adds
        if name == cpu_name:
            return tuple(needed)
    return () if cpu_name in ("x86-64", "generic") else None


def _host_features() -> dict[str, bool]:
    binding.initialize_native_target()
    return dict(binding.get_host_cpu_features())


def runs_here(cpu_name: str) -> bool:
    """This host's CPU has every feature of ``cpu_name`` (a level we know, or the host's own)."""
    needed = required_features(cpu_name)
    if needed is None:
        return cpu_name == binding.get_host_cpu_name()
    host = _host_features()
    return all(host.get(feature, False) for feature in needed)


def portable_target() -> tuple[str, str]:
    """(CPU name, features) to build the shipped kernels for on this host: x86-64-v3 on an x86-64
    host that has it, else the best level below it that it has; elsewhere the host's own CPU (the
    shipped kernels then serve executors of that same CPU)."""
    if binding.get_process_triple().startswith("x86_64"):
        for name in (PORTABLE_X86, "x86-64-v2", "x86-64"):
            if runs_here(name):
                return name, ""
    return binding.get_host_cpu_name(), binding.get_host_cpu_features().flatten()


def _shipped():
    return resources.files(__package__).joinpath(SHIPPED)


def manifest() -> dict | None:
    """The shipped cache's ``target.json``: CPU target, triple, numba and Python, digest; None
    when there is none (a tree where ``make install`` did not build it)."""
    try:
        return json.loads(_shipped().joinpath(MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _codegen_started() -> bool:
    """numba made its CPU code generator already (it does at the first decorated kernel): its
    target can no longer change in this process."""
    return "_toplevel_target_context" in vars(cpu_target)


def _choose_target(shipped: dict) -> bool:
    """Make the shipped kernels' CPU target numba's, when this process can use them."""
    wanted = (shipped.get("cpu_name"), shipped.get("cpu_features", ""))
    if (os.environ.get("NUMBA_CPU_NAME"), os.environ.get("NUMBA_CPU_FEATURES", "")) == wanted:
        return True  # set already (inherited from the process that started this one)
    if ("NUMBA_CPU_NAME" in os.environ or _codegen_started() or shipped.get("triple") != binding.get_process_triple()
            or not runs_here(wanted[0])):
        return False
    os.environ["NUMBA_CPU_NAME"], os.environ["NUMBA_CPU_FEATURES"] = wanted
    config.reload_config()  # numba reads them again when any NUMBA_ variable changes: so they stay
    return True


def package_dir(module: str) -> str | None:
    """The shipped cache's dir for a module of ours (``kcompact.tools.generator.truth``:
    ``tools/generator``), else None."""
    parts = module.split(".")
    if parts[0] != "kcompact" or len(parts) < 3:
        return None
    return "/".join(parts[1:-1])


_SEEDED: dict[str, bool] = {}


def _seed(dest: str, package: str) -> bool:
    """``dest`` holds the shipped files of ``package`` (once per process: filled by whichever
    process gets there first, in one rename); False if it cannot be made."""
    if dest not in _SEEDED:
        _SEEDED[dest] = os.path.isdir(dest) or _extract(dest, package)
    return _SEEDED[dest]


def _extract(dest: str, package: str) -> bool:
    source = _shipped().joinpath(package)
    partial = f"{dest}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    try:
        os.makedirs(partial)
        if source.is_dir():
            for item in source.iterdir():
                with open(os.path.join(partial, item.name), "wb") as out:
                    out.write(item.read_bytes())
        os.rename(partial, dest)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        return os.path.isdir(dest)  # another process renamed its copy in first
    return True


class ShippedLocator(caching._CacheLocator):
    """Where numba caches a kernel of ours: beside where it would itself (``inner``), in the
    directory that the shipped kernels seeded (in build mode: the build's part of this process)."""

    def __init__(self, inner: caching._CacheLocator, path: str):
        self._inner, self._path = inner, path
        self._py_file = inner._py_file  # numba's warnings name it

    def get_cache_path(self) -> str:
        return self._path

    def get_source_stamp(self):
        return self._inner.get_source_stamp()

    def get_disambiguator(self) -> str:
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file: str):
        package = package_dir(getattr(py_func, "__module__", None) or "")
        if package is None:
            return None  # not ours: numba's locators decide
        inner = None
        for other in caching.CacheImpl._locator_classes:
            if other is not cls and (inner := other.from_function(py_func, py_file)) is not None:
                break
        build = os.environ.get(BUILD_ENV)
        if build and inner is not None:
            return cls(inner, os.path.join(build, str(os.getpid()), package))
        stamps = inner or _stamp_locator(py_func, py_file)
        if stamps is None:
            return None
        for place in _places(inner, stamps, py_file):
            if _ACTIVE is None:
                if _writable(place):
                    return cls(stamps, place)
                continue
            dest = os.path.join(place, f"kcompact-{_ACTIVE['digest'][:16]}")
            if _seed(dest, package):
                return cls(stamps, dest)
        return inner


def _places(inner, stamps: caching._CacheLocator, py_file: str) -> Iterator[str]:
    """Where a kernel may be cached: where numba would cache it, else this user's private dir."""
    if inner is not None:
        yield inner.get_cache_path()
    private = private_dir()
    if private is not None:
        yield os.path.join(private, stamps.get_suitable_cache_subpath(py_file))


def _stamp_locator(py_func, py_file: str) -> caching._CacheLocator | None:
    """numba's locator for a source file or a zip, for its source stamp and disambiguator only
    (none of numba's accepted the function: no place it may write)."""
    if ".zip" in py_file:
        return caching.ZipCacheLocator(py_func, py_file)
    return caching.InTreeCacheLocator(py_func, py_file) if os.path.exists(py_file) else None


def private_dir(what: str = "numba") -> str | None:
    """This user's own dir for ``what``'s files under the temp dir (``kcompact-<what>-<uid>``, mode
    0700), for a user with no writable home (a broker's system user) and no setting naming one:
    None when it cannot be made, or is not this user's alone (another user made it first, or a
    symlink)."""
    path = os.path.join(tempfile.gettempdir(), f"kcompact-{what}-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        found = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        return None
    return path


def _writable(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _active() -> dict | None:
    """The shipped cache's manifest if this process uses it (and its CPU target set), else None."""
    if os.environ.get(CHOICE_ENV, "shipped") == "host" or os.environ.get(BUILD_ENV):
        return None
    shipped = manifest()
    if shipped is None or (shipped.get("numba"), shipped.get("python")) != (numba.__version__, _PYTHON):
        return None  # numba would find no entry it can use: compile for the host, as before
    return shipped if _choose_target(shipped) else None


def install() -> None:
    """Put ``ShippedLocator`` first among numba's locators (once)."""
    if ShippedLocator not in caching.CacheImpl._locator_classes:
        caching.CacheImpl._locator_classes.insert(0, ShippedLocator)


def digest(directory: str) -> str:
    """SHA-256 of a built cache's files (names and bytes), ``target.json`` aside."""
    h = hashlib.sha256()
    for base, dirs, names in sorted(os.walk(directory)):
        dirs.sort()
        for name in sorted(names):
            if name != MANIFEST:
                path = os.path.join(base, name)
                h.update(os.path.relpath(path, directory).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


_ACTIVE: dict | None = None
with contextlib.suppress(Exception):  # a broken shipped cache must never stop an import: numba compiles
    _ACTIVE = _active()
install()
