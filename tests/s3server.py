"""A local S3 endpoint for tests and benchmarks: moto's server, seen through a WSGI layer that
counts the requests that arrive by S3 operation, can hold each one for a fixed latency, and can
answer a share of them ``503 SlowDown`` before moto sees them (as a throttled store does: the
request is refused, nothing in the bucket changes), and can drop the conditions of writes
(``If-Match``, ``If-None-Match``) before moto sees them, as a store without conditional writes.

The operation is told from the HTTP method, the query and the headers, as S3's REST API defines
them, not from what the client meant: a LIST is a GET on a bucket, a COPY a PUT with
``x-amz-copy-source``, a batched delete a POST with ``?delete``.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from urllib.parse import parse_qs

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.server import MotoRequestHandler
from werkzeug.serving import make_server


class _Quiet(MotoRequestHandler):
    def log_request(self, *args) -> None:  # one line per request would bury a test's output
        pass


SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b'<Message>Please reduce your request rate.</Message></Error>')


def operation(method: str, path: str, query: str, headers) -> str:
    """The S3 operation of one request: LIST, HEAD, GET, PUT, COPY, DELETE, DELETE_BATCH,
    MULTIPART (create, part, complete, abort) or OTHER."""
    params = parse_qs(query, keep_blank_values=True)
    key = path.lstrip("/").partition("/")[2]
    if "uploads" in params or "uploadId" in params:
        return "MULTIPART"
    if method == "POST" and "delete" in params:
        return "DELETE_BATCH"
    if method == "GET":
        return "GET" if key else "LIST"
    if method == "PUT":
        if not key:
            return "OTHER"  # a bucket's creation or settings
        return "COPY" if headers.get("x-amz-copy-source") else "PUT"
    if method in ("HEAD", "DELETE"):
        return method if key else "OTHER"
    return "OTHER"


def _target(environ) -> str:
    """The object a request is about; for a LIST, the bucket and the prefix listed."""
    path = environ.get("PATH_INFO", "")
    prefix = parse_qs(environ.get("QUERY_STRING", "")).get("prefix")
    return f"{path}/{prefix[0]}" if prefix else path


class CountingS3:
    """moto on 127.0.0.1 with a counter in front. ``latency_s``: each request is held that long
    before it is served. ``throttle``: the share of requests (0..1) answered 503 SlowDown, drawn
    from a seeded generator so a run is repeatable. ``conditional=False``: the conditions of every
    request are dropped unread, so every conditional write is written; ``ignores``: the conditions
    dropped (``("If-None-Match",)``: a store that checks only If-Match)."""

    def __init__(self, latency_s: float = 0.0, throttle: float = 0.0, seed: int = 0, conditional: bool = True,
                 ignores: tuple[str, ...] = ()):
        self.latency_s, self.throttle = latency_s, throttle
        self.ignores = ("If-Match", "If-None-Match") if not conditional else tuple(ignores)
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.counts: collections.Counter = collections.Counter()
        self.by_key: collections.Counter = collections.Counter()  # (operation, key) of every served request
        self.refused = 0
        self.bytes_in = self.bytes_out = 0
        self._app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", 0, self._serve, threaded=True, request_handler=_Quiet)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> CountingS3:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.by_key.clear()
            self.refused = self.bytes_in = self.bytes_out = 0

    def snapshot(self) -> dict:
        """The counts so far: operation -> requests, and the bytes sent and received."""
        with self._lock:
            return {"requests": dict(self.counts), "refused": self.refused,
                    "bytes_in": self.bytes_in, "bytes_out": self.bytes_out}

    def _serve(self, environ, start_response):
        headers = {
            key[5:].replace("_", "-").lower(): value for key, value in environ.items() if key.startswith("HTTP_")
        }
        op = operation(
            environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""), headers
        )
        for header in self.ignores:
            environ.pop(f"HTTP_{header.upper().replace('-', '_')}", None)
        if self.latency_s:
            time.sleep(self.latency_s)
        with self._lock:
            refuse = self.throttle > 0 and op != "OTHER" and self._random.random() < self.throttle
            if refuse:
                self.refused += 1
            else:
                self.counts[op] += 1
                self.by_key[op, _target(environ)] += 1
                self.bytes_in += int(environ.get("CONTENT_LENGTH") or 0)
        if refuse:
            environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            start_response("503 Slow Down", [("Content-Type", "application/xml"),
                                             ("Content-Length", str(len(SLOW_DOWN)))])
            return [SLOW_DOWN]
        body = self._app(environ, start_response)
        return self._measured(body)

    def _measured(self, body):
        for chunk in body:
            with self._lock:
                self.bytes_out += len(chunk)
            yield chunk
        close = getattr(body, "close", None)
        if close is not None:
            close()
