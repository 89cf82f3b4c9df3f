"""Fixtures of the integration tests (helpers in `processes.py`): every test gets its own
mock provider (no faults until the test sets some) and its own gateway with a SQLite
ledger. The unit tests (`test_decorator.py`) use neither."""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from processes import Gateway, Mock  # noqa: E402


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
