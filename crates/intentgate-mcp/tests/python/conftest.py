"""Fixtures of the MCP acceptance tests (helpers in `support.py`). Every test gets its own
mock provider (no faults until the test sets some), its own SQLite ledger, and a gateway on
each transport: the `gateway` fixture runs every test over stdio and over Streamable HTTP."""

import pytest

from support import Gateway, Mock


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def mock(tmp_path):
    mock = Mock(tmp_path)
    yield mock
    mock.stop()


@pytest.fixture(params=["stdio", "http"])
def transport(request) -> str:
    return request.param


@pytest.fixture
def gateway(transport, mock, tmp_path):
    gateway = Gateway(transport, mock, tmp_path)
    yield gateway
    gateway.stop()
