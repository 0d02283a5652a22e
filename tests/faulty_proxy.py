"""An HTTP proxy on loopback that fails a share of the requests it forwards: for object-store
fault tests, in front of the moto S3 server (tests/s3_server.py).

Each PUT or GET (the methods chosen) is, at random with a fixed seed, answered ``503 Slow
Down`` without reaching the store (``error_share``), or dropped: the connection closes without
an answer, as a request that timed out in the network does (``drop_share``); the rest are
forwarded as they are. ``down`` fails every chosen request. Counts of each fate are kept.
"""

from __future__ import annotations

import http.client
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}
_SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
              b"<Message>Please reduce your request rate.</Message></Error>")


class FaultyProxy:
    """The proxy (a context manager); ``url`` is its endpoint."""

    def __init__(self, target: str, *, error_share: float = 0.0, drop_share: float = 0.0,
                 methods: tuple[str, ...] = ("PUT", "GET"), seed: int = 7) -> None:
        self.error_share = error_share
        self.drop_share = drop_share
        self.down = False
        self.counts = {"forwarded": 0, "errors": 0, "dropped": 0}
        parts = urlsplit(target)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._methods = methods
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FaultyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _fate(self, method: str) -> str:
        with self._lock:
            if method not in self._methods:
                fate = "forwarded"
            elif self.down:
                fate = "errors"
            else:
                roll = self._random.random()
                fate = ("errors" if roll < self.error_share else
                        "dropped" if roll < self.error_share + self.drop_share else "forwarded")
            self.counts[fate] += 1
            return fate

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the test reads the counts

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _any(self) -> None:
                body = self._body()
                fate = proxy._fate(self.command)
                if fate == "dropped":
                    self.close_connection = True
                    self.connection.close()
                    return
                if fate == "errors":
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(_SLOW_DOWN)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(_SLOW_DOWN)
                    return
                upstream = http.client.HTTPConnection(*proxy._target, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in _HOP}
                    headers["Content-Length"] = str(len(body))
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    answer = upstream.getresponse()
                    data = answer.read()
                finally:
                    upstream.close()
                self.send_response(answer.status, answer.reason)
                for key, value in answer.getheaders():
                    if key.lower() not in _HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        return Handler
