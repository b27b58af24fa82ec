"""What git tracks: sources, never what a build or a run makes (compiled kernels, bytecode, wheels,
class-data archives, scratch directories). A build that writes into the tree must be ignored by
.gitignore, or a commit carries its output."""

from __future__ import annotations

import fnmatch
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# what builds and runs here make: numba's cache files, bytecode, wheels and eggs, JVM archives,
# scratch directories of a build (kernels.<pid>.tmp/) and the shipped kernels' directory
BUILD_OUTPUT = ("*.nbi", "*.nbc", "*.pyc", "*.pyo", "*.so", "*.whl", "*.jsa", "*.egg-info/*", "*/__pycache__/*",
                "*.tmp/*", "kernels/compiled/*", "build/*", "dist/*", ".venv*/*", "bench-data/*", "demo-logs*")


def _tracked() -> list[str]:
    done = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    return done.stdout.splitlines()


def test_no_tracked_file_is_build_output():
    found = [name for name in _tracked() if any(fnmatch.fnmatch(name, pattern) for pattern in BUILD_OUTPUT)]
    assert found == [], f"build output tracked by git (remove it and extend .gitignore): {found[:10]}"


def test_build_output_is_ignored():
    """Each kind of output a build leaves in the tree is ignored, so it cannot be added by accident."""
    probes = ["kernels/compiled/target.json", "kernels/kernels.123.tmp/x.nbi", "readers/__pycache__/a.pyc",
              "kcompact.egg-info/PKG-INFO", "dist/kcompact-py.zip", "build/lib/x.py", ".venv/bin/python",
              "demo-logs/orders-0/00000000000000000000.log"]
    done = subprocess.run(["git", "check-ignore", "--no-index", *probes], cwd=REPO, capture_output=True, text=True)
    assert sorted(done.stdout.split()) == sorted(probes)
