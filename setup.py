"""The one list of kcompact's layers: each top-level folder of the repository is installed as a
subpackage of ``kcompact`` (``readers/`` as ``kcompact.readers``), so the wheel adds one name to
site-packages. Metadata and dependencies are in setup.cfg."""

from setuptools import find_packages, setup

LAYERS = ("compaction", "conf", "contracts", "datasource", "errors", "jobs", "kernels", "logdir", "operations",
          "planner", "readers", "session", "storage", "tools", "writers")

setup(
    package_dir={"kcompact": "kcompact", **{f"kcompact.{layer}": layer for layer in LAYERS}},
    packages=["kcompact", *(f"kcompact.{layer}{sub}" for layer in LAYERS
                            for sub in ["", *(f".{name}" for name in find_packages(layer))])],
    package_data={
        "kcompact.conf": ["*.properties"],
        # the compiled kernels built by make install and make dist (kernels/cache.py)
        "kcompact.kernels": ["compiled/*.json", "compiled/*/*.nbi", "compiled/*/*.nbc",
                             "compiled/*/*/*.nbi", "compiled/*/*/*.nbc"],
    },
)
