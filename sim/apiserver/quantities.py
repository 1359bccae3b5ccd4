"""Parsing of Kubernetes resource quantities ("500m", "32Gi", "1e3") into exact fractions."""

from __future__ import annotations

import re
from fractions import Fraction

from .errors import bad_request

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[A-Za-z]*)$")


def parse_quantity(value: object) -> Fraction:
    """A quantity as an exact number; raises a 400 ApiError for garbage."""
    if isinstance(value, bool):
        raise bad_request(f"quantities must match the regular expression: {value!r}")
    if isinstance(value, int | float):
        return Fraction(value)
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise bad_request(f"quantities must match the regular expression: {text!r}")
    number, suffix = match.groups()
    try:
        base = Fraction(number)
    except ValueError as error:
        raise bad_request(f"invalid quantity {text!r}") from error
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base * _DECIMAL[suffix]
    if suffix[:1] in ("e", "E"):
        return base * Fraction(10) ** int(suffix[1:])
    raise bad_request(f"invalid quantity suffix in {text!r}")


def format_quantity(value: Fraction) -> str:
    """Render whole numbers plainly and fractions of a unit in milli-units."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{round(value * 1000)}m"
