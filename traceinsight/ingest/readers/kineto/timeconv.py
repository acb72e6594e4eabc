"""Exact conversion of Kineto microsecond values to int64 nanoseconds.

Kineto writes ``ts``/``dur`` in µs as integers (``1623142623460172``), as decimals with three
fractional digits (``1712195495519689.047``, ``1419247333430.849``) or, from some producers,
as strings. Read as float64, absolute 3-decimal timestamps land on the wrong nanosecond
99.6% of the time, so the JSON decoder hands us floats as their *text* and this module turns
text into integers without ever going through float64.

All functions are vectorised over whole columns (pyarrow compute); only values in exponent
notation (written by re-serialising tools, never by Kineto) take a per-value slow path.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.ingest.columns import from_numpy

_INT64 = pa.int64()
_FLOAT64 = pa.float64()
_NUM_RE = r"^(?P<sign>[-+]?)(?P<int>\d*)(?:\.(?P<frac>\d*))?$"


@dataclass
class ConversionStats:
    rounded: int = 0  #: values with more than 3 fractional digits (rounded to the nearest ns)
    invalid: int = 0  #: values that are not numbers (become null)
    negative: int = 0  #: negative values (kept; callers clamp durations)


def _decimal_ns(text: str) -> int | None:
    try:
        d = Decimal(text)
    except InvalidOperation:
        return None
    if not d.is_finite():
        return None
    return int((d * 1000).to_integral_value())


#: Below this magnitude (µs) the float64 nearest to a 3-decimal value identifies it exactly:
#: the float spacing is <= 2**-10 µs (0.977 ns), so the float is within 0.489 ns of the true
#: value. Converting as ``floor(x) * 1000 + rint((x - floor(x)) * 1000)`` keeps that error
#: (``x - floor(x)`` is exact, and scaling a number below 1 adds ~1e-13 ns), so ``rint``
#: lands on the true nanosecond. Relative Kineto timestamps stay below 2**43 µs (101 days;
#: the base time is floored to a quarter), so only absolute epoch values need the text path.
#: The naive ``rint(x * 1000)`` is wrong for 0.3% of values between 2**40 and 2**43 µs.
EXACT_FLOAT_LIMIT_US = float(2**43)


class NeedExactText(Exception):
    """A float column is too large for exact float64 conversion: re-read the numbers as text."""


def us_to_ns(values: list, stats: ConversionStats | None = None) -> pa.Array:
    """Convert a column of µs values (int, float, numeric text, or None) to int64 ns.

    ``None`` stays null. Integers are exact. Floats are exact below 2**43 µs (about 101 days,
    i.e. every relative Kineto timestamp and every duration); a float column beyond that raises
    :class:`NeedExactText` so the caller re-decodes the numbers as text. Text is parsed digit
    by digit (``"12.3456"`` -> 12,346 ns, rounded half up and counted in ``stats.rounded``).
    """
    stats = stats if stats is not None else ConversionStats()
    if not values:
        return pa.array([], pa.int64())
    try:
        arr = pa.array(values)  # infers int64 (all ints), double (ints and floats) or string
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        arr = None
    if arr is not None and pa.types.is_integer(arr.type):
        try:
            res = pc.multiply_checked(arr if arr.type == _INT64 else arr.cast(_INT64), 1000)
        except (pa.ArrowInvalid, OverflowError):
            res = None  # beyond int64 ns: let the text path report it
        if res is not None:
            stats.negative += count_negative(res)
            return res
    elif arr is not None and (pa.types.is_floating(arr.type) or pa.types.is_null(arr.type)):
        floats = arr if arr.type == _FLOAT64 else arr.cast(_FLOAT64)
        x = (pc.fill_null(floats, 0.0) if floats.null_count else floats).to_numpy(
            zero_copy_only=False
        )
        too_big = len(x) and float(np.max(np.abs(x))) >= EXACT_FLOAT_LIMIT_US
        if not np.isfinite(x).all() or too_big:
            raise NeedExactText()
        whole = np.floor(x)
        ns = whole.astype(np.int64) * 1000 + np.rint((x - whole) * 1000.0).astype(np.int64)
        stats.negative += int(np.count_nonzero(ns < 0))
        null = floats.null_count
        mask = None if not null else ~pc.is_valid(floats).to_numpy(zero_copy_only=False)
        return from_numpy(ns, _INT64, mask)
    elif arr is not None and pa.types.is_string(arr.type):
        return text_us_to_ns(arr, stats)
    text = pa.array(
        [v if v.__class__ is str or v is None else _to_text(v) for v in values], type=pa.string()
    )
    return text_us_to_ns(text, stats)


def count_negative(arr: pa.Array) -> int:
    """How many values of the integer array ``arr`` are below 0 (nulls are not)."""
    if arr.null_count == 0:  # numpy on Arrow's buffer: a pyarrow compute call costs more
        return int(np.count_nonzero(arr.to_numpy() < 0))
    return int(pc.sum(pc.less(arr, 0)).as_py() or 0)


def _to_text(v: object) -> str | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float, Decimal)):
        return str(v)
    return None


def text_us_to_ns(text: pa.Array, stats: ConversionStats | None = None) -> pa.Array:
    """Parse a string array of decimal µs into int64 ns (exact; see :func:`us_to_ns`)."""
    stats = stats if stats is not None else ConversionStats()
    text = pc.utf8_trim_whitespace(text)
    parts = pc.extract_regex(text, _NUM_RE)
    matched = pc.is_valid(parts)
    # Values that are not plain decimals (exponents, garbage): per-value slow path.
    slow_idx = np.flatnonzero(
        np.logical_and(
            pc.is_valid(text).to_numpy(zero_copy_only=False),
            ~matched.to_numpy(zero_copy_only=False),
        )
    )
    sign = pc.struct_field(parts, "sign")
    int_part = pc.struct_field(parts, "int")
    frac = pc.struct_field(parts, "frac")
    int_part = pc.if_else(pc.equal(int_part, ""), "0", int_part)
    frac_len = pc.utf8_length(frac)
    frac3 = pc.utf8_slice_codeunits(pc.utf8_rpad(frac, 3, "0"), 0, 3)
    extra = pc.greater(frac_len, 3)
    n_extra = int(pc.sum(extra).as_py() or 0)
    ns = pc.add_checked(
        pc.multiply_checked(pc.cast(int_part, pa.int64()), 1000), pc.cast(frac3, pa.int64())
    )
    if n_extra:
        stats.rounded += n_extra
        fourth = pc.utf8_slice_codeunits(pc.utf8_rpad(frac, 4, "0"), 3, 4)
        round_up = pc.and_(extra, pc.greater_equal(fourth, "5"))
        ns = pc.add_checked(ns, pc.cast(round_up, pa.int64()))
    neg = pc.equal(sign, "-")
    ns = pc.if_else(neg, pc.negate_checked(ns), ns)
    stats.negative += int(pc.sum(neg).as_py() or 0)
    if len(slow_idx):
        out = pc.fill_null(ns, 0).to_numpy(zero_copy_only=False).copy()
        mask = np.logical_not(pc.is_valid(ns).to_numpy(zero_copy_only=False))
        for i in slow_idx:
            v = _decimal_ns(text[int(i)].as_py())
            if v is None:
                stats.invalid += 1
                mask[i] = True
            else:
                out[i] = v
                mask[i] = False
        return from_numpy(out, _INT64, mask)
    return ns
