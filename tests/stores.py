"""One S3 endpoint of the tests, whichever server is behind it (moto, tests/s3server.py, or
SeaweedFS, tests/seaweedfs.py): how this process, a child process and Spark's workers reach it."""

from __future__ import annotations

import contextlib
import json
import os
import sys


class Store:
    """One S3 endpoint of the tests: its requests' counter (``snapshot``, ``reset``, ``by_key``), its
    credentials, the fsspec options that reach it, a child process's environment for it."""

    def __init__(self, name: str, counter, endpoint: str, key: str, secret: str, **options):
        self.name, self.counter, self.endpoint, self.key, self.secret = name, counter, endpoint, key, secret
        self.options = options  # more of s3fs's arguments

    def conf(self) -> dict:
        return {"client_kwargs": {"endpoint_url": self.endpoint}, "key": self.key, "secret": self.secret,
                **self.options}

    def fs(self):
        """The test's own view of the store: never cached."""
        import s3fs

        return s3fs.S3FileSystem(**self.conf(), use_listings_cache=False, skip_instance_cache=True)

    def env(self) -> dict:
        kept = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KCOMPACT_", "FSSPEC_"))}
        options = {"client_kwargs": {"endpoint_url": self.endpoint},  # as docs/deployment.md says
                   "config_kwargs": {"s3": {"addressing_style": "path"}}}
        return kept | {"FSSPEC_S3": json.dumps(options),
                       "AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": self.secret,
                       "AWS_DEFAULT_REGION": "us-east-1", "PYSPARK_PYTHON": sys.executable,
                       "PYSPARK_DRIVER_PYTHON": sys.executable, "KCOMPACT_SPARK_LOG_LEVEL": "ERROR"}

    @contextlib.contextmanager
    def installed(self, spark=None):
        """Every ``s3://`` path of this process (and of ``spark``'s Python workers) on this store meanwhile."""
        import fsspec
        import s3fs

        saved = fsspec.config.conf.get("s3")
        fsspec.config.conf["s3"] = self.conf()
        s3fs.S3FileSystem.clear_instance_cache()
        environment = spark.sparkContext.environment if spark is not None else {}
        saved_env = environment.get("FSSPEC_S3")
        environment["FSSPEC_S3"] = json.dumps(self.conf())
        try:
            yield self
        finally:
            s3fs.S3FileSystem.clear_instance_cache()
            if saved is None:
                fsspec.config.conf.pop("s3", None)
            else:
                fsspec.config.conf["s3"] = saved
            if saved_env is None:
                environment.pop("FSSPEC_S3", None)
            else:
                environment["FSSPEC_S3"] = saved_env
