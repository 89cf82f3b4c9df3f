"""Fixtures of the console's browser tests: a mock provider, a gateway in front of it, and a
fresh headless Chromium per test."""

from __future__ import annotations

import pathlib
from typing import Iterator

import pytest

from harness import Gateway, Mock, chromium


@pytest.fixture
def mock(tmp_path: pathlib.Path) -> Iterator[Mock]:
    provider = Mock(tmp_path)
    yield provider
    provider.stop()


@pytest.fixture
def gateway(tmp_path: pathlib.Path, mock: Mock) -> Iterator[Gateway]:
    server = Gateway(tmp_path, mock)
    yield server
    server.stop()


@pytest.fixture
def downloads(tmp_path: pathlib.Path) -> pathlib.Path:
    folder = tmp_path / "downloads"
    folder.mkdir()
    return folder


@pytest.fixture
def driver(downloads: pathlib.Path) -> Iterator[object]:
    browser = chromium(downloads)
    yield browser
    browser.quit()
