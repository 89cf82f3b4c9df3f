"""The blocking client's HTTP: kept-alive connections of the standard library's
`http.client`, used for a plain-`http` gateway when no httpx transport is given and no
proxy applies to it.

A grant and a settle are two requests around every decorated call, so what a request costs
the caller's process is most of what the client adds to the call: through httpx's `Client`
a request costs a few hundred microseconds of Python before and after the exchange itself
(building the request, merging the URL, auth, redirects, event hooks, httpcore's state
machine); `http.client` does the same exchange with a fraction of that. Failures are
raised as httpx's exceptions, so that callers see the same errors whichever is used.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
import urllib.request
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx

#: Idle connections kept per client; more concurrent requests open more, closed after use.
IDLE_MAX = 16


def stdlib_usable(base_url: str) -> bool:
    """Whether `base_url` is reached without httpx: plain `http` (a gateway beside the
    agent, where the per-request cost shows), and no proxy from the environment applies to
    its host (httpx would use that proxy). `https` stays with httpx, whose certificate
    authorities (certifi's, or `SSL_CERT_FILE`) a deployment may count on."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return True
    return bool(urllib.request.proxy_bypass(parts.hostname))


class Connections:
    """Kept-alive connections to one gateway, shared by threads: each request takes an idle
    one (or opens one) and gives it back once its answer is read."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float) -> None:
        parts = urlsplit(base_url)
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._headers = dict(headers)
        self._timeout = timeout
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def request(
        self, method: str, path: str, content: bytes | None, headers: Mapping[str, str] | None
    ) -> tuple[int, bytes]:
        """Sends one request and answers its status and body. Raises `httpx.ConnectError`
        when no connection could be opened (nothing was sent), `httpx.TimeoutException` or
        another `httpx.TransportError` when the exchange failed after that (the request may
        have reached the gateway)."""
        connection = self._take()
        url = self._prefix + path
        merged = {**self._headers, **(headers or {})}
        try:
            connection.request(method, url, body=content, headers=merged)
            response = connection.getresponse()
            body = response.read()
        except socket.timeout as error:
            connection.close()
            raise httpx.ReadTimeout(f"no answer from the gateway within {self._timeout} s: {error}") from error
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise httpx.RemoteProtocolError(f"the exchange with the gateway failed: {error!r}") from error
        if response.will_close:
            connection.close()
        else:
            self._give_back(connection)
        return response.status, body

    def close(self) -> None:
        """Closes the idle connections; one in use is closed when its request ends."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _take(self) -> http.client.HTTPConnection:
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._open()
            if _still_open(connection):
                return connection
            connection.close()

    def _give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < IDLE_MAX:
                self._idle.append(connection)
                return
        connection.close()

    def _open(self) -> http.client.HTTPConnection:
        connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        try:
            connection.connect()
        except socket.timeout as error:
            raise httpx.ConnectTimeout(f"can't connect to the gateway within {self._timeout} s") from error
        except OSError as error:
            raise httpx.ConnectError(f"can't connect to the gateway at {self._host}: {error}") from error
        # Each request is one write, but the answer to the last must not wait on Nagle.
        if connection.sock is not None:
            connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection


def _still_open(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive connection can take a request: connected, and nothing to
    read on it (a gateway that closed it, or restarted, makes it readable at end of file)."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable

