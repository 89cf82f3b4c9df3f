"""JSON without floats: amounts and keys stay exact on the way in and on the way out.

Numbers with a fraction or an exponent are read as `decimal.Decimal`, never as `float`.
A `Decimal` is written as a JSON *string* in its plain decimal form (`Decimal("49.00")` is
`"49.00"`, `Decimal("1E+2")` is `"100"`), because the gateway's tool schemas take amounts
as strings and a string can't be rounded by any JSON reader on the way. A `float` anywhere
in a value is refused with `TypeError` before anything is sent: a float has already lost
the amount the caller meant (`0.1 + 0.2`).
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["dumps", "loads", "to_json_value"]


#: The types a value keeps as it is (exactly these: a subclass goes through `to_json_value`).
_KEPT = frozenset({str, int, bool, type(None)})


def to_json_value(value: Any, path: str = "$") -> Any:
    """`value` as plain JSON types (dict, list, str, int, bool, None), `Decimal`s as
    strings. Raises `TypeError` naming the place of a `float` or of any other type JSON
    can't carry, and `ValueError` for a non-finite `Decimal`."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        raise TypeError(
            f"{path} is a float ({value!r}); pass amounts as decimal.Decimal or str, "
            "never float, so they stay exact"
        )
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise ValueError(f"{path} is {value}, not a finite number")
        return format(value, "f")
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path} has a key {key!r} that is not a string")
            # A plain string, integer, boolean or None is kept as it is, without naming its
            # place (only an error needs it).
            result[key] = item if type(item) in _KEPT else to_json_value(item, f"{path}.{key}")
        return result
    if isinstance(value, (list, tuple)):
        return [
            item if type(item) in _KEPT else to_json_value(item, f"{path}[{index}]")
            for index, item in enumerate(value)
        ]
    raise TypeError(f"{path} is a {type(value).__name__}, which JSON can't carry")


#: One encoder and one decoder for every request: `json.dumps` and `json.loads` given options
#: build a new one (and its scanner) on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> bytes:
    """The JSON text of `value` (see `to_json_value`), UTF-8 encoded."""
    return _ENCODER.encode(to_json_value(value)).encode()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"the answer holds {name}, which is not JSON")


_DECODER = json.JSONDecoder(parse_float=decimal.Decimal, parse_constant=_refuse_constant)


def loads(text: str | bytes) -> Any:
    """Parses JSON, reading every number with a fraction or an exponent as `Decimal`; bytes
    and a leading byte order mark as `json.loads` takes them."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    elif text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)
