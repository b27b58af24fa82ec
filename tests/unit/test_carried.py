"""The object-store settings a Spark Connect client's tasks carry (storage/carried.py): what the
client's s3fs would use, and the worker's own configuration given back after each task."""

from __future__ import annotations

import fsspec.config
import pytest

from kcompact.storage import carried


@pytest.fixture
def clean(monkeypatch):
    monkeypatch.setattr(fsspec.config, "conf", {})
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                 "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_fsspec_settings_are_carried_and_the_environment_fills_what_they_lack(clean):
    fsspec.config.conf.update({"s3": {"client_kwargs": {"endpoint_url": "http://store:8333"}},
                               "file": {"auto_mkdir": True}})
    clean.setenv("AWS_ACCESS_KEY_ID", "AK")
    clean.setenv("AWS_SECRET_ACCESS_KEY", "SK")
    clean.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    clean.setenv("AWS_ENDPOINT_URL", "http://elsewhere:9000")  # fsspec's endpoint wins
    assert carried.settings() == {"s3": {"key": "AK", "secret": "SK", "client_kwargs": {
        "endpoint_url": "http://store:8333", "region_name": "eu-west-1"}}}


def test_keys_in_fsspec_settings_are_not_replaced_by_the_environment(clean):
    fsspec.config.conf["s3"] = {"key": "mine", "secret": "s"}
    clean.setenv("AWS_ACCESS_KEY_ID", "other")
    clean.setenv("AWS_SECRET_ACCESS_KEY", "x")
    assert carried.settings() == {"s3": {"key": "mine", "secret": "s"}}


def test_nothing_to_carry_leaves_the_task_as_it_is(clean):
    def task(batches):
        yield from batches

    assert carried.settings() == {}
    assert carried.carrying(task, {}) is task


def test_a_task_sees_the_carried_settings_and_the_worker_gets_its_own_back(clean):
    fsspec.config.conf["s3"] = {"anon": True, "client_kwargs": {"endpoint_url": "http://worker"}}
    seen = []

    def task(batches):
        for b in batches:
            seen.append(dict(fsspec.config.conf["s3"]))
            yield b

    run = carried.carrying(task, {"s3": {"client_kwargs": {"endpoint_url": "http://client"}, "key": "k"}})
    assert list(run(iter([1]))) == [1]
    assert seen == [{"anon": True, "client_kwargs": {"endpoint_url": "http://client"}, "key": "k"}]
    assert fsspec.config.conf["s3"] == {"anon": True, "client_kwargs": {"endpoint_url": "http://worker"}}
    fsspec.config.conf.pop("s3")
    assert list(carried.carrying(task, {"s3": {"key": "k"}})(iter([2]))) == [2]
    assert "s3" not in fsspec.config.conf
