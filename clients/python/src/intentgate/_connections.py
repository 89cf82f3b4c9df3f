"""The blocking client's HTTP: kept-alive HTTP/1.1 connections of its own, on plain sockets,
used for a plain-`http` gateway when no httpx transport is given and no proxy applies to it.

A grant and a settle are two requests around every decorated call, so what a request costs
the caller's process is most of what the client adds to the call. Through httpx's `Client`
a request costs a few hundred microseconds of Python before and after the exchange itself
(building the request, merging the URL, auth, redirects, event hooks, httpcore's state
machine); the standard library's `http.client` about a hundred (a line read at a time, and
the headers parsed by the `email` package). Here a request is one `sendall` of bytes built
in one go, and an answer is read in as few `recv` calls as it arrived in, its head split
once. What the gateway answers is all this has to read: a status line, headers, and a body
framed by `Content-Length`, chunks, or the end of the connection. Failures are raised as
httpx's exceptions, so that callers see the same errors whichever is used.
"""

from __future__ import annotations

import re
import select
import socket
import threading
import urllib.request
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx

#: Idle connections kept per client; more concurrent requests open more, closed after use.
IDLE_MAX = 16

#: The longest head (status line and headers) read from the gateway; a longer one is refused
#: rather than buffered without end (the gateway's own are a few hundred bytes).
HEAD_MAX = 64 * 1024

#: How much one `recv` asks for.
RECV_SIZE = 64 * 1024

#: A status line: `HTTP/1.1 200 OK`, the reason optional.
_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([1-9][0-9]{2})(?: [^\r\n]*)?")

#: What a request's path and a header may hold: a path is visible ASCII without spaces (what
#: a request line can carry); a header name is an HTTP token; a value has no line break or NUL,
#: which would end the header early and start another of the caller's choosing.
_PATH = re.compile(r"[!-~]+")
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE_FORBIDDEN = re.compile(r"[\r\n\x00]")


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
        self._port = parts.port or 80
        self._prefix = parts.path.rstrip("/")
        host = f"[{self._host}]" if ":" in self._host else self._host
        authority = host if self._port == 80 else f"{host}:{self._port}"
        # Every request's own headers after these, which they may replace.
        self._headers = {"host": authority, "accept-encoding": "identity"}
        self._headers.update({name.lower(): value for name, value in headers.items()})
        self._timeout = timeout
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def request(
        self, method: str, path: str, content: bytes | None, headers: Mapping[str, str] | None
    ) -> tuple[int, bytes]:
        """Sends one request and answers its status and body. Raises `ValueError` for a path
        or header that can't be sent as it is (nothing was sent), `httpx.ConnectError` when no
        connection could be opened (nothing was sent), `httpx.TimeoutException` or another
        `httpx.TransportError` when the exchange failed after that (the request may have
        reached the gateway)."""
        request = self._encode(method, self._prefix + path, content, headers)
        connection = self._take()
        try:
            status, body, keep_alive = connection.exchange(request)
        except TimeoutError as error:
            connection.close()
            raise httpx.ReadTimeout(f"no answer from the gateway within {self._timeout} s: {error}") from error
        except (OSError, _Malformed) as error:
            connection.close()
            raise httpx.RemoteProtocolError(f"the exchange with the gateway failed: {error!r}") from error
        if keep_alive:
            self._give_back(connection)
        else:
            connection.close()
        return status, body

    def close(self) -> None:
        """Closes the idle connections; one in use is closed when its request ends."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _encode(self, method: str, path: str, content: bytes | None, headers: Mapping[str, str] | None) -> bytes:
        """The request's bytes: request line, headers and body, to be sent in one write."""
        if not _PATH.fullmatch(path):
            raise ValueError(
                f"can't send the request path {path!r}: it holds a space or a control character "
                "(check the tool name or intent id it was built from); nothing was sent"
            )
        merged = dict(self._headers)
        if headers:
            merged.update({name.lower(): value for name, value in headers.items()})
        if content is not None or method in ("POST", "PUT", "PATCH"):
            merged["content-length"] = str(len(content or b""))
        lines = [f"{method} {path} HTTP/1.1"]
        for name, value in merged.items():
            # The value is not quoted back: it may be a credential (an API key read from a
            # file with its line break).
            if not _HEADER_NAME.fullmatch(name) or _HEADER_VALUE_FORBIDDEN.search(value):
                raise ValueError(
                    f"can't send the header {name!r}: a name must be a token and a value must hold "
                    "no line break or NUL; nothing was sent"
                )
            lines.append(f"{name}: {value}")
        try:
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"can't send a header holding {error.object[error.start : error.end]!r}: header "
                "values are Latin-1 text; nothing was sent"
            ) from None
        return head + content if content else head

    def _take(self) -> _Connection:
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._open()
            if connection.still_open():
                return connection
            connection.close()

    def _give_back(self, connection: _Connection) -> None:
        with self._lock:
            if len(self._idle) < IDLE_MAX:
                self._idle.append(connection)
                return
        connection.close()

    def _open(self) -> _Connection:
        try:
            sock = socket.create_connection((self._host, self._port), timeout=self._timeout)
        except TimeoutError as error:
            raise httpx.ConnectTimeout(f"can't connect to the gateway within {self._timeout} s") from error
        except OSError as error:
            raise httpx.ConnectError(f"can't connect to the gateway at {self._host}: {error}") from error
        # Each request is one write, but the answer to the last must not wait on Nagle.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(sock)


class _Malformed(Exception):
    """An answer that is not HTTP/1.1 as the gateway speaks it."""


class _Connection:
    """One connection: sends a request, reads its answer. Bytes read past an answer stay in
    `_buffer` for the next (there are none from a gateway that answers one request at a
    time, but nothing is dropped if there were)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def close(self) -> None:
        self._sock.close()

    def still_open(self) -> bool:
        """Whether an idle kept-alive connection can take a request: nothing to read on it
        (a gateway that closed it, or restarted, makes it readable at end of file)."""
        if self._buffer or self._sock.fileno() < 0:
            return False
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        """Sends `request` and reads its answer: status, body, and whether the connection
        may carry another request."""
        self._sock.sendall(request)
        while True:
            status, headers, version = self._read_head()
            # An interim answer (`100 Continue`) is followed by the real one.
            if status >= 200 or status == 101:
                break
        connection = {token.strip() for token in headers.get(b"connection", b"").lower().split(b",")}
        keep_alive = b"close" not in connection and (version == 1 or b"keep-alive" in connection)
        if status in (204, 304) or 100 <= status < 200:
            return status, b"", keep_alive
        coding = headers.get(b"transfer-encoding")
        if coding is not None:
            if coding.lower().split(b",")[-1].strip() != b"chunked":
                raise _Malformed(f"a body in transfer coding {coding!r} without `chunked` last")
            return status, self._read_chunked(), keep_alive
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                raise _Malformed(f"content-length {length!r}")
            return status, self._read_exactly(int(length)), keep_alive
        # Neither: the body runs to the end of the connection.
        return status, self._read_to_end(), False

    def _read_head(self) -> tuple[int, dict[bytes, bytes], int]:
        """The next head's status, headers (names in lower case; a repeated one's values
        joined by commas, as HTTP reads them) and minor HTTP version."""
        end = self._buffer.find(b"\r\n\r\n")
        while end < 0 and len(self._buffer) <= HEAD_MAX:
            self._fill("the head of an answer")
            end = self._buffer.find(b"\r\n\r\n")
        if end < 0 or end > HEAD_MAX:
            raise _Malformed(f"a head longer than {HEAD_MAX} bytes")
        head = bytes(self._buffer[:end])
        del self._buffer[: end + 4]
        lines = head.split(b"\r\n")
        matched = _STATUS_LINE.fullmatch(lines[0])
        if matched is None:
            raise _Malformed(f"status line {lines[0][:100]!r}")
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise _Malformed(f"header line {line[:100]!r}")
            name = name.lower()
            value = value.strip()
            headers[name] = headers[name] + b", " + value if name in headers else value
        return int(matched[2]), headers, int(matched[1])

    def _read_exactly(self, length: int) -> bytes:
        while len(self._buffer) < length:
            self._fill(f"a body of {length} bytes")
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        return body

    def _read_line(self) -> bytes:
        end = self._buffer.find(b"\r\n")
        while end < 0:
            if len(self._buffer) > HEAD_MAX:
                raise _Malformed(f"a chunk line longer than {HEAD_MAX} bytes")
            self._fill("a chunked body")
            end = self._buffer.find(b"\r\n")
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    def _read_chunked(self) -> bytes:
        body = bytearray()
        while True:
            size_text = self._read_line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _Malformed(f"chunk size {size_text[:20]!r}") from None
            if size < 0:
                raise _Malformed(f"chunk size {size_text[:20]!r}")
            if size == 0:
                break
            body += self._read_exactly(size)
            if self._read_exactly(2) != b"\r\n":
                raise _Malformed("a chunk not followed by CRLF")
        # Trailers, if any, up to the empty line that ends the body.
        while self._read_line():
            pass
        return bytes(body)

    def _read_to_end(self) -> bytes:
        while True:
            chunk = self._sock.recv(RECV_SIZE)
            if not chunk:
                break
            self._buffer += chunk
        body = bytes(self._buffer)
        self._buffer.clear()
        return body

    def _fill(self, reading: str) -> None:
        chunk = self._sock.recv(RECV_SIZE)
        if not chunk:
            raise _Malformed(f"the gateway closed the connection in {reading}")
        self._buffer += chunk
