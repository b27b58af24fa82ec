"""The broker's own user runs kcompact from a root-owned install (issue 33, item 1), as
docs/deployment.md installs it: the wheel of ``make dist`` in a venv that belongs to root, a
system user made as distribution packages make ``kafka`` (``useradd --system --no-create-home
--home-dir /nonexistent``), its log dir ``kafka:kafka`` 0640/0750.

The JVM class-data archive is built in the venv as root, as deployment.md says, and every JVM of
the user's commands must map it. Every command runs as that user with ``runuser``, its environment
as a service manager would give it: ``HOME=/nonexistent`` (no home at all), and ``HOME=/root`` as
``sudo -u kafka`` leaves it (a home the user may not write). Was: exit 3, ``internal error:
RuntimeError: cannot cache function '_varint': no locator available for file
'.../readers/scan.py'``, for every command that reads a segment. Now each command does its work,
nothing is compiled (the driver's numba says what it saves with ``NUMBA_DEBUG_CACHE``; the
executors' too would change the cache files they share with it, compared byte for byte with the
shipped ones) and nothing is written into the install.

The venv's dependencies are those of the Python running the tests, put on its path by a ``.pth``
line (a directory so added has its own ``.pth`` files left alone: the tests' editable kcompact is
not seen): pip then finds them installed and takes none from an index, so the venv is made in
seconds where downloading and unpacking Spark again takes minutes. kcompact itself is the wheel,
installed by root into the venv's own site-packages, as deployment.md says.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow,  # a wheel, a venv and a dozen commands with Spark: minutes
              pytest.mark.skipif(os.geteuid() != 0, reason="making a system user and switching to it needs root")]

ROOT = Path(__file__).resolve().parents[2]
NOW = "1720001000000"
FILE_MODE, DIR_MODE = 0o640, 0o750


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` and a digest of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def python_for_all() -> str:
    """This Python's version, installed where any user may run it (this one may lie in root's home)."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for candidate in (os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
                      f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        path = Path(candidate)
        if path.is_file() and all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents]):
            return candidate
    pytest.fail(f"no {version} that every user may run (the broker's user runs the venv's)")


@pytest.fixture(scope="module")
def install():
    """A root-owned venv with the wheel installed, a system user with no home, its log dir."""
    base = Path(tempfile.mkdtemp(prefix="kcompact-broker-user-", dir="/tmp"))
    base.chmod(0o755)
    user, user_made = f"kct{os.getpid()}", False
    try:
        dist = base / "dist"
        built = subprocess.run(["make", "dist", f"DIST={dist}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-4000:]
        venv = base / "venv"
        subprocess.run([python_for_all(), "-m", "venv", str(venv)], check=True)
        (site,) = venv.glob("lib/python*/site-packages")
        (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        (wheel,) = dist.glob("kcompact-*.whl")
        pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-index", "-c",
                              str(ROOT / "constraints.txt"), str(wheel)], capture_output=True, text=True, timeout=600)
        assert pip.returncode == 0, pip.stderr[-4000:]
        cds = subprocess.run([str(venv / "bin" / "python"), "-m", "kcompact.jobs.cds"], capture_output=True,
                             text=True, timeout=600, env=_plain_env("/root"), cwd="/")  # as deployment.md: root, once
        assert cds.returncode == 0, cds.stdout[-2000:] + cds.stderr[-3000:]
        (archive,) = venv.glob("share/kcompact/spark-*.jsa")
        assert archive.stat().st_mode & stat.S_IROTH, oct(archive.stat().st_mode)
        subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", user], check=True)
        user_made = True
        entry = pwd.getpwnam(user)
        logs = base / "logs"
        gen = subprocess.run([str(venv / "bin" / "kcompact"), "gen", "--out", str(logs), "--seed", "7"],
                             capture_output=True, text=True, env=_plain_env("/root"))
        assert gen.returncode == 0, gen.stderr
        for path in [logs, *logs.rglob("*")]:
            os.chown(path, entry.pw_uid, entry.pw_gid)
            path.chmod(DIR_MODE if path.is_dir() else FILE_MODE)
        own = base / "own"  # where the user may write: gen's output, plan files
        own.mkdir()
        yield {"venv": venv, "user": user, "uid": entry.pw_uid, "uid_gid": entry.pw_gid, "logs": logs, "own": own,
               "dist": dist}
    finally:
        if user_made:
            shutil.rmtree(Path(tempfile.gettempdir()) / f"kcompact-numba-{pwd.getpwnam(user).pw_uid}",
                          ignore_errors=True)
            subprocess.run(["userdel", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _plain_env(home: str, **more: str) -> dict[str, str]:
    """A service's environment: no venv on the PATH, no PYSPARK_*, NUMBA_* or XDG_* variables."""
    env = {"HOME": home, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env | more


def as_user(install: dict, home: str, *args: str, program: list[str] | None = None,
            **more: str) -> subprocess.CompletedProcess:
    # -Xshare:on: a JVM that cannot map the install's class-data archive (as this user, this venv's jars) fails
    env = _plain_env(home, NUMBA_DEBUG_CACHE="1", JDK_JAVA_OPTIONS="-Xshare:on", **more)
    command = ["runuser", "-u", install["user"], "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
               *(program or [str(install["venv"] / "bin" / "kcompact")]), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd="/")


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time (a venv is too big to hash)."""
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


def shipped_copies(uid: int) -> dict[str, str]:
    """The cache files numba uses for this user: the shipped kernels, copied once into its private dir."""
    private = Path(tempfile.gettempdir()) / f"kcompact-numba-{uid}"
    return tree(private) if private.exists() else {}


def shipped(venv: Path) -> dict[str, str]:
    (kernels,) = venv.glob("lib/python*/site-packages/kcompact/kernels/compiled")
    return tree(kernels)


def commands(logs: str, partition: str, own: Path) -> list[tuple[list[str], str]]:
    """Every command, and a word its output must hold."""
    plan = str(own / "plan.json")
    return [
        (["verify", logs], ": OK"),
        (["dump", partition], "baseOffset"),
        (["status", logs], ""),
        (["plan", logs, "--now", NOW, "--output", plan, "--plot", str(own / "plan.png")], ""),
        (["compact", logs, "--plan", plan, "--now", NOW], "committed"),
        (["retain", logs, "--now", NOW], ""),
        (["run", logs, "--now", NOW], ""),
        (["recover", logs], ""),
        (["verify", logs], ": OK"),
        (["gen", "--out", str(own / "generated"), "--seed", "3", "--records", "300"], ""),
    ]


@pytest.mark.parametrize("home", ["/nonexistent", "/root"])
def test_every_command_runs_as_the_brokers_user(install, home):
    """Each command in turn; with HOME=/root (a home the user may not write, as ``sudo -u`` leaves
    it: the same lack of a cache dir) those that read segments on the driver and the executors."""
    logs = install["logs"].with_name(f"logs-{home.strip('/')}")
    subprocess.run(["cp", "-a", str(install["logs"]), str(logs)], check=True)  # owners and modes kept
    own = install["own"] / home.strip("/")
    own.mkdir()
    os.chown(own, install["uid"], install["uid_gid"])
    partition = str(next(p for p in sorted(logs.iterdir()) if p.name.startswith("orders-")))
    chosen = commands(str(logs), partition, own)
    if home == "/root":
        chosen = [chosen[i] for i in (0, 3, 4, 9)]
    venv_before = listing(install["venv"])
    shutil.rmtree(Path(tempfile.gettempdir()) / f"kcompact-numba-{install['uid']}", ignore_errors=True)
    for args, says in chosen:
        done = as_user(install, home, *args)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
        assert says in done.stdout, (args, done.stdout[-2000:])
        assert "no locator" not in done.stderr and "saved to" not in done.stdout + done.stderr, (args, done.stderr)
        assert "MPLCONFIGDIR" not in done.stderr and "Matplotlib" not in done.stderr, (args, done.stderr)
    copies = shipped_copies(install["uid"])
    assert copies, "no shipped kernel was used"
    originals = shipped(install["venv"])
    for name, digest in copies.items():  # <subpath>/kcompact-<digest>/<file>: as shipped, nothing added or saved
        package_file = name.split("/", 2)[-1]
        assert any(o.endswith("/" + package_file) and originals[o] == digest for o in originals), name
    assert listing(install["venv"]) == venv_before
    found = logs.stat()
    assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (install["uid"], DIR_MODE)


def test_spark_submit_runs_as_the_brokers_user(install):
    """``run.py`` under spark-submit (local master) with ``--py-files kcompact-py.zip``, as
    deployment.md runs it: numba caches zipped code in the user's cache dir, which this user has
    none of, so the zip's kernels take the private dir too."""
    logs = install["logs"].with_name("logs-submit")
    subprocess.run(["cp", "-a", str(install["logs"]), str(logs)], check=True)
    import pyspark

    submit = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")
    python = str(install["venv"] / "bin" / "python")
    shutil.rmtree(Path(tempfile.gettempdir()) / f"kcompact-numba-{install['uid']}", ignore_errors=True)
    done = as_user(install, "/nonexistent", "--master", "local[2]", "--py-files",
                   str(install["dist"] / "kcompact-py.zip"), str(install["dist"] / "run.py"), str(logs), "--now", NOW,
                   program=[submit], PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert "committed" in done.stdout, done.stdout[-2000:]
    assert "no locator" not in done.stderr and "saved to" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert shipped_copies(install["uid"]), "no shipped kernel was used"
