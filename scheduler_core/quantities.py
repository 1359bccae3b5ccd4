"""Kubernetes resource quantities as exact fractions.

Owns parsing (``resource.ParseQuantity``), the integer conversions the
scheduler uses (``ScaledValue(Milli)``, ``ScaledValue(Mega)``, ``Value()``)
and a canonical formatting that parses back to the same value.

Deliberate differences from Go's ``apimachinery`` (both stricter, never more
lenient):

* Go's hand-written scanner accepts a quantity without any digit (``"."``,
  ``"-."``, ``"Gi"``, ``"e3"``) as zero. The documented grammar
  (``<signedNumber><suffix>``, a number needs a digit) and the OpenAPI
  ``quantity`` pattern reject them; so do we.
* Go accepts decimal exponents up to ``int32``; values that large are no
  resource and would need astronomically big integers here, so a decimal
  exponent above ``MAX_DECIMAL_EXPONENT`` is rejected.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

QuantityLike = Fraction | str | int | float

NANO: Final = Fraction(1, 10**9)
# Kubernetes caps binary-suffixed quantities at the largest int64 (``maxAllowed``).
MAX_BINARY_QUANTITY: Final = 2**63 - 1
# Go's ``interpret`` rejects exponents beyond int32 outright.
_MAX_GO_EXPONENT: Final = 2**31 - 1
MAX_DECIMAL_EXPONENT: Final = 1000

DECIMAL_SI_EXPONENTS: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
BINARY_SI_EXPONENTS: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

# Same split as Go's scanner: sign, integer digits, optional fraction, then
# suffix letters, an optional sign and digits. ``[0-9]`` not ``\d``: ASCII only.
_QUANTITY_RE: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)"
)
_EXPONENT_RE: Final = re.compile(r"[+-]?[0-9]+")

# Canonical output uses the decimal SI suffixes from nano up to exa.
_FORMAT_SUFFIXES: Final = sorted(
    ((exponent, suffix) for suffix, exponent in DECIMAL_SI_EXPONENTS.items()), reverse=True
)


class QuantityError(ValueError):
    """A string (or number) that Kubernetes would not accept as a quantity."""

    def __init__(self, value: object, problem: str) -> None:
        super().__init__(f"invalid Kubernetes quantity {value!r}: {problem}")
        self.value = value
        self.problem = problem


def parse_quantity(value: QuantityLike) -> Fraction:
    """Parse a quantity exactly as ``resource.ParseQuantity`` values it.

    Non-zero values are rounded away from zero to a whole nano (Kubernetes:
    "if you want some resources, you should get some resources") and
    binary-suffixed values are capped at ``2**63 - 1``.
    """
    if isinstance(value, Fraction):
        return value
    if isinstance(value, bool):
        raise QuantityError(value, "a boolean is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(value, "not a finite number")
        # A JSON number reaches the API server as its text; repr is that text.
        return _parse_text(repr(value), original=value)
    if isinstance(value, str):
        return _parse_text(value, original=value)
    raise QuantityError(value, f"expected a string or a number, got {type(value).__name__}")


def _parse_text(text: str, *, original: object) -> Fraction:
    if not text:
        raise QuantityError(original, "empty string")
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise QuantityError(
            original,
            "expected <sign><digits>[.<digits>]<suffix> with no spaces, e.g. 100m, 1.5, 128Mi, 1e3",
        )
    whole, frac, suffix = match["whole"], match["frac"] or "", match["suffix"]
    if not whole and not frac:
        raise QuantityError(original, "no digits before the suffix")
    negative = match["sign"] == "-"
    digits = whole + frac
    try:
        mantissa = int(digits)
    except ValueError as err:  # more digits than Python converts (sys int_max_str_digits)
        raise QuantityError(original, "too many digits") from err

    if suffix in DECIMAL_SI_EXPONENTS:
        magnitude = _decimal(mantissa, DECIMAL_SI_EXPONENTS[suffix] - len(frac), original=original)
    elif suffix in BINARY_SI_EXPONENTS:
        magnitude = Fraction(mantissa * 2 ** BINARY_SI_EXPONENTS[suffix], 10 ** len(frac))
        magnitude = min(_round_up_to_nano(magnitude), Fraction(MAX_BINARY_QUANTITY))
    elif len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT_RE.fullmatch(suffix[1:]):
        exponent = int(suffix[1:])
        if abs(exponent) > _MAX_GO_EXPONENT:
            raise QuantityError(original, f"exponent {exponent} is outside the int32 range")
        magnitude = _decimal(mantissa, exponent - len(frac), original=original)
    else:
        raise QuantityError(
            original,
            f"unknown suffix {suffix!r}; expected one of n u m k M G T P E, "
            "Ki Mi Gi Ti Pi Ei, or an exponent such as e3 or E-6",
        )
    return -magnitude if negative else magnitude


def _decimal(mantissa: int, exponent: int, *, original: object) -> Fraction:
    """``mantissa * 10**exponent`` rounded up to a nano, without huge intermediates."""
    if mantissa == 0:
        return Fraction(0)
    if exponent > MAX_DECIMAL_EXPONENT:
        raise QuantityError(original, f"decimal exponent {exponent} is too large to be a resource")
    if exponent <= -(len(str(mantissa)) + 9):
        # The value is below one nano: Kubernetes rounds it up to exactly 1n.
        return NANO
    return _round_up_to_nano(Fraction(mantissa) * Fraction(10) ** exponent)


def _round_up_to_nano(magnitude: Fraction) -> Fraction:
    return Fraction(math.ceil(magnitude * 10**9), 10**9)


def _scaled_value(quantity: QuantityLike, factor: Fraction) -> int:
    """Go ``ScaledValue``: ``quantity * factor`` with its magnitude rounded up.

    Positive remainders round toward +infinity (``ceil``), so a request is
    never under-counted. For negative values Go is inconsistent between its
    internal representations; we follow the int64 one that ``ParseQuantity``
    produces for ordinary strings (away from zero: ``-1.5 -> -2``).
    Validated requests and allocatable are never negative.
    """
    scaled = parse_quantity(quantity) * factor
    return math.ceil(scaled) if scaled >= 0 else math.floor(scaled)


def to_milli(quantity: QuantityLike) -> int:
    """Go ``ScaledValue(resource.Milli)``: e.g. CPU cores to millicores, rounded up."""
    return _scaled_value(quantity, Fraction(1000))


def to_mega(quantity: QuantityLike) -> int:
    """Go ``ScaledValue(resource.Mega)``: bytes to megabytes (10**6), rounded up."""
    return _scaled_value(quantity, Fraction(1, 10**6))


def to_units(quantity: QuantityLike) -> int:
    """Go ``Value()``: whole units (e.g. GPUs), rounded up."""
    return _scaled_value(quantity, Fraction(1))


def format_quantity(quantity: QuantityLike) -> str:
    """Canonical decimal-SI text: integer mantissa, largest suffix from ``n`` to ``E``.

    ``parse_quantity(format_quantity(q)) == q`` for every value Kubernetes can
    hold (whole nanos). Other values are first rounded away from zero to a
    whole nano, as ``ParseQuantity`` would.
    """
    value = parse_quantity(quantity)
    nanos = math.ceil(abs(value) * 10**9)
    if nanos == 0:
        return "0"
    sign = "-" if value < 0 else ""
    for exponent, suffix in _FORMAT_SUFFIXES:
        unit = 10 ** (exponent + 9)
        if nanos % unit == 0:
            return f"{sign}{nanos // unit}{suffix}"
    return f"{sign}{nanos}n"  # not reached: the 'n' row above divides every count
