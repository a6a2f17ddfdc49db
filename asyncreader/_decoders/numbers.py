"""Text-to-number rules of TensorFlow's CSV decoder, reproduced exactly.

Integers: optional ASCII whitespace, an optional ``+`` or ``-``, decimal digits, optional
whitespace, and the value must fit the type. Floats follow C's ``strtof`` / ``strtod`` (which
TensorFlow calls): optional whitespace and sign, then decimal with optional exponent,
hexadecimal (``0x1.8p3``), ``inf`` / ``infinity`` or ``nan`` / ``nan(chars)`` in any case,
then only whitespace. float32 values are rounded once, from the exact decimal value, like
``strtof``; rounding through float64 first would differ in rare halfway cases.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["parse_float", "parse_int", "round_float32_ties"]

_WS = rb" \t\n\v\f\r"
_INT_RE = re.compile(rb"[ \t\n\v\f\r]*([+-]?[0-9]+)[ \t\n\v\f\r]*")
_FLOAT_RE = re.compile(
    rb"""[ \t\n\v\f\r]*
    (?P<sign>[+-]?)
    (?:
        (?P<inf>inf(?:inity)?)
      | (?P<nan>nan(?:\([0-9a-z_]*\))?)
      | 0x(?=\.?[0-9a-f])(?P<hexint>[0-9a-f]*)(?:\.(?P<hexfrac>[0-9a-f]*))?
            (?:p(?P<hexexp>[+-]?[0-9]+))?
      | (?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?)
    )
    [ \t\n\v\f\r]*""",
    re.VERBOSE | re.IGNORECASE,
)
_INT_LIMITS = {32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}
_FLT_MAX = float(np.finfo(np.float32).max)
# Halfway between FLT_MAX and 2**128: the threshold where float32 rounding overflows.
_FLT_OVERFLOW_MID = 2.0**128 - 2.0**103


def parse_int(text: bytes, bits: int) -> int | None:
    """The integer ``text`` spells, or None if TensorFlow rejects it for int``bits``."""
    match = _INT_RE.fullmatch(text)
    if match is None:
        return None
    digits = match.group(1)
    negative = digits[:1] == b"-"
    digits = digits.lstrip(b"+-").lstrip(b"0") or b"0"
    if len(digits) > 20:
        return None  # out of range for any type; also keeps int() under its digit limit
    value = -int(digits) if negative else int(digits)
    low, high = _INT_LIMITS[bits]
    if value < low or value > high:
        return None
    return value


def parse_float(text: bytes, single: bool) -> float | None:
    """The float ``text`` spells (rounded to float32 if ``single``), or None if invalid."""
    match = _FLOAT_RE.fullmatch(text)
    if match is None:
        return None
    negative = match.group("sign") == b"-"
    value: float
    if match.group("inf") is not None:
        value = math.inf
    elif match.group("nan") is not None:
        value = math.nan
    elif match.group("dec") is not None:
        decimal = match.group("dec")
        value = float(decimal)
        if single:
            value = _single_from_double(value, lambda: Fraction(decimal.decode("ascii")))
    else:
        exact = _hex_fraction(match)
        if exact is None:
            value = math.inf
        else:
            value = _fraction_to_double(exact)
            if single:
                value = _single_from_double(value, lambda: exact)
    return -value if negative else value


def _hex_fraction(match: re.Match[bytes]) -> Fraction | None:
    """The exact value of a hex float, or None when it certainly overflows a double."""
    digits = (match.group("hexint") or b"") + (match.group("hexfrac") or b"")
    mantissa = int(digits, 16) if digits else 0
    if mantissa == 0:
        return Fraction(0)
    exponent = int(match.group("hexexp") or b"0") - 4 * len(match.group("hexfrac") or b"")
    magnitude = exponent + mantissa.bit_length()
    if magnitude > 1100:
        return None
    if magnitude < -1200:
        # Far below the smallest subnormal: rounds to zero in both precisions.
        return Fraction(0)
    return Fraction(mantissa) * Fraction(2) ** exponent


def _fraction_to_double(exact: Fraction) -> float:
    try:
        return exact.numerator / exact.denominator
    except OverflowError:
        return math.inf


def _single_from_double(value: float, exact: Callable[[], Fraction]) -> float:
    """Round a correctly rounded, non-negative double to float32 as if from the exact value."""
    with np.errstate(over="ignore"):
        single = float(np.float32(value))
    if single == value or not math.isfinite(value):
        return single
    low, high = _neighbours(value, single)
    midpoint = _FLT_OVERFLOW_MID if math.isinf(high) else (low + high) / 2
    if value != midpoint:
        return single
    # The double landed exactly halfway between two floats: decide with the exact value.
    try:
        true_value = exact()
    except ValueError:  # beyond int()'s digit limit; keep the float64-based rounding
        return single
    if true_value > Fraction(midpoint):
        return high
    if true_value < Fraction(midpoint):
        return low
    return single  # a true tie: numpy already rounded half to even


def _neighbours(value: float, single: float) -> tuple[float, float]:
    if single < value:
        # Above FLT_MAX the next float32 is infinity: expected, not an overflow to report.
        with np.errstate(over="ignore"):
            return single, float(np.nextafter(np.float32(single), np.float32(np.inf)))
    if math.isinf(single):
        # Overflowed: the neighbours are FLT_MAX and infinity.
        return _FLT_MAX, math.inf
    return float(np.nextafter(np.float32(single), np.float32(-np.inf))), single


def round_float32_ties(doubles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round float64 values to float32 and find those that need the exact check.

    Returns the float32 array and the indices of values that sit exactly halfway between two
    float32 numbers (or at the overflow threshold); only those can round differently from
    the exact decimal, and callers re-parse them with :func:`parse_float`.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        singles = doubles.astype(np.float32)
        back = singles.astype(np.float64)
        suspect = np.isfinite(doubles) & (back != doubles)
        if not suspect.any():
            return singles, np.empty(0, dtype=np.intp)
        index = np.flatnonzero(suspect)
        d = doubles[index]
        s = singles[index]
        toward = np.where(back[index] < d, np.float32(np.inf), np.float32(-np.inf))
        other = np.nextafter(s, toward).astype(np.float64)
        mid = (back[index] + other) / 2
        overflow = ~np.isfinite(mid)
        mid[overflow] = np.copysign(_FLT_OVERFLOW_MID, d[overflow])
        return singles, index[d == mid]
