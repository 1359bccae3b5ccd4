"""Kubernetes quantity parsing, rounding and formatting (scheduler_core.quantities)."""

from __future__ import annotations

from fractions import Fraction as F

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler_core.quantities import (
    MAX_BINARY_QUANTITY,
    QuantityError,
    format_quantity,
    parse_quantity,
    to_mega,
    to_milli,
    to_units,
)

KI, MI, GI = 2**10, 2**20, 2**30

# Expected values follow apimachinery's TestQuantityParse table.
VALID = [
    ("0", F(0)),
    ("0m", F(0)),
    ("0Gi", F(0)),
    ("100m", F(1, 10)),
    ("0.5", F(1, 2)),
    ("1", F(1)),
    ("+1", F(1)),
    ("-1", F(-1)),
    ("1e3", F(1000)),
    ("1E3", F(1000)),
    ("1e-3", F(1, 1000)),
    ("1E-3", F(1, 1000)),
    ("1.3E+6", F(1_300_000)),
    ("0.5e-2", F(5, 1000)),
    ("128974848", F(128974848)),
    ("129e6", F(129_000_000)),
    ("129M", F(129_000_000)),
    ("123Mi", F(123 * MI)),
    ("1Gi", F(GI)),
    ("1k", F(1000)),
    ("1Ki", F(KI)),
    ("5n", F(5, 10**9)),
    ("4u", F(4, 10**6)),
    ("6G", F(6 * 10**9)),
    ("5T", F(5 * 10**12)),
    ("2P", F(2 * 10**15)),
    ("1E", F(10**18)),
    ("12E", F(12 * 10**18)),
    ("3Ei", F(3 * 2**60)),
    ("1Ei", F(2**60)),
    ("4Pi", F(4 * 2**50)),
    ("5Ti", F(5 * 2**40)),
    ("100.035k", F(100035)),
    ("0.5Mi", F(MI // 2)),
    ("100.035Ki", F(10243584, 100)),
    (".001", F(1, 1000)),
    ("1.", F(1)),
    ("1.G", F(10**9)),
    ("-1.5", F(-3, 2)),
    # Rounded away from zero to a whole nano, as ParseQuantity does.
    ("3.001n", F(4, 10**9)),
    ("1.1E-9", F(2, 10**9)),
    ("0.0000000001", F(1, 10**9)),
    ("0.00000012345", F(124, 10**9)),
    ("0.000000000001Ki", F(2, 10**9)),
    ("-0.5n", F(-1, 10**9)),
    ("1e-2000", F(1, 10**9)),
    # Binary-suffixed values are capped at the largest int64.
    ("9Ei", F(MAX_BINARY_QUANTITY)),
    ("8Ei", F(MAX_BINARY_QUANTITY)),
    ("9223372036854775807Ki", F(MAX_BINARY_QUANTITY)),
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_parses_every_kubernetes_form(text: str, expected: F) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("number", "expected"),
    [(3, F(3)), (0, F(0)), (0.5, F(1, 2)), (0.1, F(1, 10)), (1e-5, F(1, 10**5)), (2.0, F(2))],
)
def test_parses_json_numbers_by_their_text(number: int | float, expected: F) -> None:
    assert parse_quantity(number) == expected


INVALID = [
    ("", "empty"),
    ("1.2.3", "expected"),
    ("1 Gi", "no spaces"),
    (" 1", "no spaces"),
    ("1 ", "no spaces"),
    ("1\n", "no spaces"),
    ("Gi", "no digits"),
    (".", "no digits"),
    ("-.", "no digits"),
    ("e3", "no digits"),
    ("1KB", "expected"),
    ("1kk", "unknown suffix 'kk'"),
    ("1K", "unknown suffix 'K'"),
    ("1ki", "unknown suffix 'ki'"),
    ("0.1mi", "unknown suffix 'mi'"),
    ("1i", "unknown suffix 'i'"),
    ("1e", "unknown suffix 'e'"),
    ("1e+", "unknown suffix 'e+'"),
    ("-3.01e-", "unknown suffix 'e-'"),
    ("1e1.5", "expected"),
    ("1.1.M", "expected"),
    ("1+1.0M", "expected"),
    ("aoeu", "expected"),
    ("1e4294967297", "int32"),
    ("1e1001", "too large"),
    ("\u0661", "expected"),  # ARABIC-INDIC DIGIT ONE: only ASCII digits count
]


@pytest.mark.parametrize(("text", "problem"), INVALID)
def test_rejects_what_kubernetes_rejects(text: str, problem: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity(text)
    message = str(caught.value)
    assert message.startswith(f"invalid Kubernetes quantity {text!r}: ")
    assert problem in message


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, None, ["1"]])
def test_rejects_non_quantities(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)  # type: ignore[arg-type]


def test_quantity_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="'12x'"):
        parse_quantity("12x")


@pytest.mark.parametrize(
    ("text", "milli", "mega", "units"),
    [
        ("1", 1000, 1, 1),
        ("100m", 100, 1, 1),
        ("1500m", 1500, 1, 2),
        ("0.0001", 1, 1, 1),  # below a milli: rounded up, never to 0
        ("1n", 1, 1, 1),
        ("0", 0, 0, 0),
        ("1M", 10**9, 1, 10**6),
        ("1000001", 1000001000, 2, 1000001),
        ("1Gi", GI * 1000, 1074, GI),
        ("123Mi", 123 * MI * 1000, 129, 123 * MI),
        # Negative magnitudes round away from zero (Go's int64 path).
        ("-1500u", -2, -1, -1),
        ("-1.5", -1500, -1, -2),
    ],
)
def test_scaled_values_round_up(text: str, milli: int, mega: int, units: int) -> None:
    assert (to_milli(text), to_mega(text), to_units(text)) == (milli, mega, units)


def test_conversions_accept_fractions_and_text_alike() -> None:
    assert to_milli(F(1, 3)) == to_milli("333334u") == 334


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (F(0), "0"),
        (F(1, 10), "100m"),
        (F(3, 2), "1500m"),
        (F(1000), "1k"),
        (F(GI), "1073741824"),
        (F(129_000_000), "129M"),
        (F(10**18), "1E"),
        (F(10**21), "1000E"),
        (F(1, 10**9), "1n"),
        (F(-5, 10**6), "-5u"),
        (F(1, 3), "333333334n"),  # not whole nanos: rounded up like ParseQuantity
    ],
)
def test_formats_canonically(value: F, text: str) -> None:
    assert format_quantity(value) == text


nanos = st.integers(min_value=-(10**30), max_value=10**30)


@given(nanos)
def test_format_then_parse_round_trips(count: int) -> None:
    value = F(count, 10**9)
    assert parse_quantity(format_quantity(value)) == value


@given(st.fractions(max_denominator=10**12))
def test_formatting_never_shrinks_a_magnitude(value: F) -> None:
    parsed = parse_quantity(format_quantity(value))
    assert abs(parsed) >= abs(value)
    assert abs(parsed) - abs(value) < F(1, 10**9)


@given(st.fractions(min_value=0, max_value=10**15))
def test_scaled_values_never_under_count(value: F) -> None:
    assert 0 <= to_milli(value) - value * 1000 < 1
    assert 0 <= to_mega(value) - value / 10**6 < 1
    assert 0 <= to_units(value) - value < 1


@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "e-3"]),
)
def test_suffix_multiplies_the_number(number: int, suffix: str) -> None:
    multiplier = {
        "": F(1),
        "m": F(1, 1000),
        "k": F(1000),
        "M": F(10**6),
        "G": F(10**9),
        "Ki": F(KI),
        "Mi": F(MI),
        "Gi": F(GI),
        "e3": F(1000),
        "e-3": F(1, 1000),
    }[suffix]
    assert parse_quantity(f"{number}{suffix}") == number * multiplier
