"""The driver's object-store settings, carried by the Spark tasks of a Spark Connect client.

A classic session's executors are given their settings where the application is submitted
(``spark.executorEnv.FSSPEC_S3``, a cluster's own environment). A Connect client cannot give
them any: the server's executors run with the server's environment, and a client sets no
``spark.executorEnv``. So over Connect each task carries what the client's own s3fs would use
(``settings``): fsspec's configuration (``FSSPEC_S3``, ``FSSPEC_S3_*``, fsspec's config files)
and, where that names none, the keys, region and endpoint of the client's ``AWS_*`` variables,
the first place botocore looks. A profile or an instance role stays the executors' own. The task
puts them in place for as long as it runs (``carrying``) and gives the worker back its own
configuration after: a Python worker outlives a task.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Iterator

_KEYS = {"key": "AWS_ACCESS_KEY_ID", "secret": "AWS_SECRET_ACCESS_KEY", "token": "AWS_SESSION_TOKEN"}


def settings() -> dict[str, dict]:
    """This process's settings for each object-store protocol fsspec knows of: protocol -> options."""
    import fsspec.config

    found = {protocol: copy.deepcopy(options) for protocol, options in fsspec.config.conf.items()
             if protocol not in ("file", "local") and isinstance(options, dict)}
    s3 = found.get("s3", {})
    if not any(s3.get(k) for k in _KEYS) and os.environ.get(_KEYS["key"]):
        s3 |= {k: os.environ[v] for k, v in _KEYS.items() if os.environ.get(v)}
    client = dict(s3.get("client_kwargs") or {})
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region and not client.get("region_name"):
        client["region_name"] = region
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and not client.get("endpoint_url"):
        client["endpoint_url"] = endpoint
    if client:
        s3["client_kwargs"] = client
    if s3:
        found["s3"] = s3
    return found


@contextlib.contextmanager
def installed(carried: dict[str, dict]) -> Iterator[None]:
    """fsspec's configuration of this process with ``carried`` over it (its options win), and
    as it was again after."""
    import fsspec.config

    saved = {protocol: fsspec.config.conf.get(protocol) for protocol in carried}
    for protocol, options in carried.items():
        fsspec.config.conf[protocol] = {**(saved[protocol] or {}), **options}
    try:
        yield
    finally:
        for protocol, options in saved.items():
            if options is None:
                fsspec.config.conf.pop(protocol, None)
            else:
                fsspec.config.conf[protocol] = options


def carrying(task: Callable[[Iterator], Iterator], carried: dict[str, dict]) -> Callable[[Iterator], Iterator]:
    """A ``mapInArrow`` function that runs ``task`` with ``carried`` installed."""
    if not carried:
        return task

    def run(batches: Iterator) -> Iterator:
        with installed(carried):
            yield from task(batches)

    return run
