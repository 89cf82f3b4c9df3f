"""Puts the tests' helpers (`fake_gateway.py`, `processes.py`) on the import path."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
