"""Fixtures of the integration tests (helpers in `processes.py`): every test gets its own
mock provider (no faults until the test sets some) and its own gateway with a SQLite
ledger. The unit tests (`test_decorator.py`) use neither."""

from __future__ import annotations

import ipaddress
import pathlib
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from processes import CONFIG, EXAMPLE_CONFIG, EXAMPLE_HASH_KEY, Gateway, Mock  # noqa: E402

#: A policy on the refund tool: refunds over 100 wait for a person, and an order gets one
#: refund a day (another amount is `over_budget`).
POLICY = """\
    approval:
      when: amount > 100
    budgets:
      - name: per-order
        per: subject
        subject: "{order_id}"
        window: 24h
        count: 1
"""


@pytest.fixture
def mock(tmp_path: pathlib.Path) -> Iterator[Mock]:
    mock = Mock(tmp_path)
    yield mock
    mock.stop()


@pytest.fixture
def gateway(tmp_path: pathlib.Path, mock: Mock) -> Iterator[Gateway]:
    gateway = Gateway(tmp_path)
    yield gateway
    gateway.stop()


@pytest.fixture
def policy_gateway(tmp_path: pathlib.Path, mock: Mock) -> Iterator[Gateway]:
    """A gateway whose refund tool has `POLICY`."""
    folder = tmp_path / "policy"
    folder.mkdir()
    anchor = "    key_window_hours: 24\n"
    assert anchor in CONFIG
    config = folder / "gateway.yaml"
    config.write_text(CONFIG.replace(anchor, anchor + POLICY))
    gateway = Gateway(folder, config=config)
    yield gateway
    gateway.stop()


@pytest.fixture
def example_gateway(tmp_path: pathlib.Path, mock: Mock) -> Iterator[Gateway]:
    """A gateway with the repository's example config, `examples/support-agent.yaml`, whose
    gateway-executed tools call `mock`."""
    folder = tmp_path / "example"
    folder.mkdir()
    gateway = Gateway(folder, config=EXAMPLE_CONFIG, env={"INTENTGATE_MOCK_URL": mock.url, "INTENTGATE_HASH_KEY": EXAMPLE_HASH_KEY})
    yield gateway
    gateway.stop()


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Refuses every connection of this process to an address off the loopback interface
    (an agent framework sending traces or calling a model's API), and fails the test for
    it, even when the framework swallowed the refusal in a background thread."""
    refused: list[Any] = []
    connect = socket.socket.connect

    def loopback_connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            try:
                loopback = ipaddress.ip_address(address[0]).is_loopback
            except ValueError:  # a name, not an address
                loopback = address[0] == "localhost"
            if not loopback:
                refused.append(address)
                raise ConnectionRefusedError(f"the tests connect to loopback addresses only, not {address}")
        connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", loopback_connect)
    yield
    assert refused == [], f"the test tried to connect off the loopback interface: {refused}"
