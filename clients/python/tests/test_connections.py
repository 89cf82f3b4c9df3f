"""The blocking client's own connections (`http.client`, kept alive), against servers on
loopback sockets that misbehave as real ones do: one that closes a kept-alive connection,
one that drops a request unanswered, one that is down, and a proxy from the environment."""

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
