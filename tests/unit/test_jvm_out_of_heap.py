"""The JVM out of heap is told from py4j's lost connection even while the JVM is still exiting:
its socket closes before its process ends."""

import subprocess
import types

from py4j.protocol import Py4JError, Py4JNetworkError
from pyspark import SparkContext

from kcompact.jobs import spark


class Exiting:
    """A JVM process that has not ended when first asked, and ends with ``status`` once waited on."""

    def __init__(self, status: int):
        self.status, self.waited = status, False

    def poll(self):
        return self.status if self.waited else None

    def wait(self, timeout=None):
        self.waited = True
        return self.status


def test_a_lost_connection_waits_for_the_jvm_to_end(monkeypatch):
    monkeypatch.setattr(SparkContext, "_gateway", types.SimpleNamespace(proc=Exiting(spark.JVM_OUT_OF_MEMORY)))
    assert spark.jvm_ran_out_of_memory(Py4JNetworkError("Error while sending or receiving"))


def test_a_jvm_that_ends_otherwise_is_not_out_of_heap(monkeypatch):
    monkeypatch.setattr(SparkContext, "_gateway", types.SimpleNamespace(proc=Exiting(137)))
    assert not spark.jvm_ran_out_of_memory(Py4JNetworkError("Error while sending or receiving"))


def test_other_errors_do_not_wait_on_a_live_jvm(monkeypatch):
    class Live(Exiting):
        def wait(self, timeout=None):
            raise AssertionError("waited on a JVM that answers")

    monkeypatch.setattr(SparkContext, "_gateway", types.SimpleNamespace(proc=Live(0)))
    assert not spark.jvm_ran_out_of_memory(ValueError("a bug"))
    assert not spark.jvm_ran_out_of_memory(Py4JError("An error occurred while calling o31.stop"))


def test_a_still_running_jvm_after_the_wait_is_not_out_of_heap(monkeypatch):
    class Running(Exiting):
        def wait(self, timeout=None):
            raise subprocess.TimeoutExpired("java", timeout)

    monkeypatch.setattr(SparkContext, "_gateway", types.SimpleNamespace(proc=Running(0)))
    assert not spark.jvm_ran_out_of_memory(Py4JNetworkError("Error while sending or receiving"))


def test_a_refused_connection_waits_too(monkeypatch):
    """py4j opening a new connection to a JVM that is exiting is refused."""
    monkeypatch.setattr(SparkContext, "_gateway", types.SimpleNamespace(proc=Exiting(spark.JVM_OUT_OF_MEMORY)))
    assert spark.jvm_ran_out_of_memory(ConnectionRefusedError(111, "Connection refused"))
