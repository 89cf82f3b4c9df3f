"""The blocking client's own connections (HTTP/1.1 on plain sockets, kept alive), against
servers on loopback sockets that misbehave as real ones do: one that closes a kept-alive
connection, one that drops a request unanswered, one that is down, one that answers in
pieces, in chunks, without a length or with a broken head, and a proxy from the
environment; and requests whose path or headers would smuggle another line."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator

import httpx
import pytest

import intentgate

TOOLS = json.dumps({"tools": []}).encode()


class Server:
    """A TCP server on loopback whose every connection is served by `serve(connection)` on
    a thread of its own; counts the connections and keeps the requests' first lines."""

    def __init__(self, serve: Callable[[Server, socket.socket], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.requests: list[str] = []
        self.headers: list[dict[str, str]] = []
        self._serve = serve
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(self, connection), daemon=True).start()

    def read_request(self, connection: socket.socket) -> bool:
        """Reads one request (head and body); False when the client closed the connection."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = connection.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        headers = {name.lower(): value for name, value in headers.items()}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            body += connection.recv(65536)
        self.requests.append(lines[0])
        self.headers.append(headers)
        return True

    def close(self) -> None:
        self.listener.close()


def answer(connection: socket.socket, body: bytes = TOOLS) -> None:
    """A 200 with a JSON body, kept alive (no `Connection: close`)."""
    connection.sendall(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.close()


def test_requests_share_one_kept_alive_connection(servers: list[Server]) -> None:
    def serve(server: Server, connection: socket.socket) -> None:
        while server.read_request(connection):
            answer(connection)

    server = Server(serve)
    servers.append(server)
    with intentgate.Client(server.url + "/base/", api_key="k-1") as client:
        for _ in range(3):
            assert client.tools() == []
    assert server.connections == 1
    assert server.requests == ["GET /base/v1/tools HTTP/1.1"] * 3
    assert server.headers[0]["authorization"] == "Bearer k-1"
    assert server.headers[0]["accept"].startswith("application/json")


def test_a_kept_alive_connection_the_gateway_closed_is_not_used_again(servers: list[Server]) -> None:
    # A gateway restarted, or closing idle connections: each connection gets one answer,
    # kept alive as far as its headers say, then is closed.
    def serve(server: Server, connection: socket.socket) -> None:
        if server.read_request(connection):
            answer(connection)
        connection.close()

    server = Server(serve)
    servers.append(server)
    client = intentgate.Client(server.url)
    for _ in range(3):
        assert client.tools() == []
        # Let the close reach the client's socket before the next request.
        threading.Event().wait(0.05)
    assert server.connections == 3
    client.close()


def test_a_request_the_gateway_dropped_unanswered_is_a_transport_error(servers: list[Server]) -> None:
    # The request may have reached the gateway: the caller must see the ambiguous error
    # httpx raises (the decorator settles again on it), never an answer.
    def serve(server: Server, connection: socket.socket) -> None:
        server.read_request(connection)
        connection.close()

    server = Server(serve)
    servers.append(server)
    with pytest.raises(httpx.TransportError) as raised:
        intentgate.Client(server.url).settle(42, "lease-1", "done")
    assert not isinstance(raised.value, httpx.ConnectError)
    assert server.requests == ["POST /v1/intents/42/settle HTTP/1.1"]


def test_a_gateway_that_is_down_is_a_connect_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    with pytest.raises(httpx.ConnectError, match="can't connect to the gateway"):
        intentgate.Client(f"http://127.0.0.1:{port}").tools()


def test_an_answer_slower_than_the_timeout_is_a_timeout(servers: list[Server]) -> None:
    def serve(server: Server, connection: socket.socket) -> None:
        server.read_request(connection)
        threading.Event().wait(2)
        connection.close()

    server = Server(serve)
    servers.append(server)
    with pytest.raises(httpx.TimeoutException):
        intentgate.Client(server.url, timeout=0.2).tools()


def test_a_proxy_from_the_environment_is_used(servers: list[Server], monkeypatch: pytest.MonkeyPatch) -> None:
    # gateway.test resolves nowhere: only a request sent through the proxy is answered.
    def serve(server: Server, connection: socket.socket) -> None:
        while server.read_request(connection):
            answer(connection)

    proxy = Server(serve)
    servers.append(proxy)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("http_proxy", proxy.url)
    with intentgate.Client("http://gateway.test:8080") as client:
        assert client.tools() == []
    assert proxy.requests == ["GET http://gateway.test:8080/v1/tools HTTP/1.1"]


def test_an_https_gateway_is_reached_through_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx's certificate authorities (certifi's, or SSL_CERT_FILE) are what a deployment
    # reaching its gateway over TLS counts on: those requests stay with httpx.
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url))
        return httpx.Response(200, json={"tools": []})

    real_client = httpx.Client

    def client_with_mock(**options: object) -> httpx.Client:
        assert options.get("transport") is None
        return real_client(**{**options, "transport": httpx.MockTransport(handler)})  # type: ignore[arg-type]

    monkeypatch.setattr(httpx, "Client", client_with_mock)
    with intentgate.Client("https://gateway.test") as client:
        assert client.tools() == []
    assert sent == ["https://gateway.test/v1/tools"]


def serving(servers: list[Server], answers: list[bytes]) -> Server:
    """A server that answers each request on a connection with the next of `answers`, as
    raw bytes sent one byte at a time (an answer that arrives in as many pieces as it can),
    and closes the connection after the last."""

    def serve(server: Server, connection: socket.socket) -> None:
        for raw in answers:
            if not server.read_request(connection):
                return
            for index in range(len(raw)):
                connection.sendall(raw[index : index + 1])
        connection.close()

    server = Server(serve)
    servers.append(server)
    return server


def test_answers_are_read_whatever_pieces_they_arrive_in(servers: list[Server]) -> None:
    body = json.dumps({"tools": [{"name": "refund"}]}).encode()
    server = serving(
        servers,
        [
            # A length, headers in any case, a repeated header, an interim 100 first.
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + b"X-Note: a\r\nX-Note: b\r\nCONTENT-LENGTH: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body,
            # Chunks, an extension on one, and a trailer.
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\n"
            + body[:5]
            + b"\r\n"
            + f"{len(body) - 5:x}".encode()
            + b"\r\n"
            + body[5:]
            + b"\r\n0\r\nx-trailer: t\r\n\r\n",
            # Neither: the body runs to the end of the connection, which can't be used again.
            b"HTTP/1.1 200 OK\r\n\r\n" + body,
        ],
    )
    client = intentgate.Client(server.url)
    for _ in range(3):
        assert client.tools() == [{"name": "refund"}]
    # The three answers came on one kept-alive connection.
    assert server.connections == 1
    client.close()


def test_an_answer_without_a_body_leaves_the_connection_usable(servers: list[Server]) -> None:
    server = serving(
        servers,
        [
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: " + str(len(TOOLS)).encode() + b"\r\n\r\n" + TOOLS,
        ],
    )
    client = intentgate.Client(server.url)
    assert client._request("POST", "/v1/nothing") is None
    assert client.tools() == []
    assert server.connections == 1
    # The POST without a body said so.
    assert server.headers[0]["content-length"] == "0"
    client.close()


def test_an_answer_that_asks_to_close_is_not_kept(servers: list[Server]) -> None:
    def serve(server: Server, connection: socket.socket) -> None:
        while server.read_request(connection):
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: "
                + str(len(TOOLS)).encode()
                + b"\r\n\r\n"
                + TOOLS
            )

    server = Server(serve)
    servers.append(server)
    with intentgate.Client(server.url) as client:
        for _ in range(2):
            assert client.tools() == []
    assert server.connections == 2


@pytest.mark.parametrize(
    "raw",
    [
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n",
    ],
    ids=["not-http", "status", "header", "negative-length", "cut-body", "coding", "chunk-size", "huge-head"],
)
def test_a_malformed_answer_is_a_transport_error(servers: list[Server], raw: bytes) -> None:
    # Whatever came back, the request was sent: an ambiguous transport error, never an answer
    # made up from half of one.
    def serve(server: Server, connection: socket.socket) -> None:
        if server.read_request(connection):
            connection.sendall(raw)
        connection.close()

    server = Server(serve)
    servers.append(server)
    with pytest.raises(httpx.RemoteProtocolError, match="the exchange with the gateway failed"):
        intentgate.Client(server.url).settle(42, "lease-1", "done")


@pytest.mark.parametrize(
    ("intent_id", "headers"),
    [
        ("42 HTTP/1.1\r\nx-evil: 1\r\n\r\nGET /admin", None),
        ("42/../../admin\x00", None),
        (42, {"traceparent": "00-a\r\nauthorization: Bearer stolen"}),
        (42, {"bad name": "x"}),
        (42, {"intent-id": "caf\u00e9\u2603"}),
    ],
    ids=["path-line-break", "path-nul", "header-line-break", "header-name", "header-not-latin-1"],
)
def test_a_request_that_would_smuggle_another_line_is_refused_unsent(
    servers: list[Server], intent_id: object, headers: dict[str, str] | None
) -> None:
    def serve(server: Server, connection: socket.socket) -> None:
        while server.read_request(connection):
            answer(connection)

    server = Server(serve)
    servers.append(server)
    client = intentgate.Client(server.url)
    with pytest.raises(ValueError, match="nothing was sent"):
        client._request("GET", f"/v1/intents/{intent_id}", headers=headers)
    assert server.requests == []
    client.close()


def test_an_api_key_with_a_line_break_is_refused_without_quoting_it(servers: list[Server]) -> None:
    # A key read from a file keeps its line break: the error names the header, never the key.
    def serve(server: Server, connection: socket.socket) -> None:
        while server.read_request(connection):
            answer(connection)

    server = Server(serve)
    servers.append(server)
    with intentgate.Client(server.url, api_key="igk_secret_material\n") as client:
        with pytest.raises(ValueError, match="'authorization'.*nothing was sent") as raised:
            client.tools()
    assert "secret_material" not in str(raised.value)
    assert server.requests == []
