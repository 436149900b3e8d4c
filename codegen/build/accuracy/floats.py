"""Floats as ordered integers: the error of a result in bits, the floats between it and the truth.
"""

from __future__ import annotations

import math
import struct

import mpmath

_FORMATS = {"float64": ("<d", "<q", 64), "float32": ("<f", "<i", 32)}
_SMALLEST_NORMAL = {"float64": 2.2250738585072014e-308, "float32": 1.1754943508222875e-38}
_LARGEST = {"float64": 1.7976931348623157e308, "float32": 3.4028234663852886e38}


# -- sampling -------------------------------------------------------------------------------------


def _ordered(value: float, dtype: str = "float64") -> int:
    """The float's place in the order of all floats of ``dtype`` (-0.0 and 0.0 both 0)."""
    fmt, ifmt, _ = _FORMATS[dtype]
    bits = struct.unpack(ifmt, struct.pack(fmt, value))[0]
    return bits if bits >= 0 else -(bits & ((1 << (_FORMATS[dtype][2] - 1)) - 1))


def _from_ordered(place: int, dtype: str = "float64") -> float:
    fmt, ifmt, width = _FORMATS[dtype]
    bits = place if place >= 0 else (-place) | (1 << (width - 1))
    if bits >= 1 << (width - 1):
        bits -= 1 << width
    return struct.unpack(fmt, struct.pack(ifmt, bits))[0]


def _rounded(value: float, dtype: str) -> float:
    """``value`` rounded to ``dtype`` (inf past its largest float, as a cast gives)."""
    if dtype == "float64" or not math.isfinite(value):
        return value
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


# -- error in bits --------------------------------------------------------------------------------


def bits(result: float, truth: mpmath.mpf, dtype: str) -> float:
    """log2(1 + floats of ``dtype`` between ``result`` and ``truth`` rounded to ``dtype``)."""
    width = _FORMATS[dtype][2]
    if not math.isfinite(result):
        return float(width)
    target = _rounded(float(truth), dtype)
    if not math.isfinite(target):
        return 0.0 if result == target else float(width)
    return min(float(width), math.log2(1 + abs(_ordered(result, dtype) - _ordered(target, dtype))))
