"""Arrow column helpers for readers: Python values -> typed store columns, fast.

Every reader builds its tables from lists of Python values (one per event). These helpers
convert them in C where Arrow can infer the type, and value by value only when a producer
mixed types (numbers as text, floats where ints belong); values that do not fit become null
and may be counted. Repeated strings are dictionary-encoded once per distinct value.
:class:`TableBuilder` collects the columns of one table over batches of events.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.store import schema
from traceinsight.util.safetext import NAME_CAP, cap_name

__all__ = [
    "TableBuilder",
    "arrow_without_pandas",
    "build_tables",
    "dict_col",
    "dictionary",
    "float_col",
    "from_numpy",
    "id_str_col",
    "int_col",
    "json_text_col",
    "rank_col",
    "repeat_col",
    "xyz_cols",
]


_INT64 = pa.int64()
_FLOAT64 = pa.float64()
_INT32 = pa.int32()
_DICT_STR = pa.dictionary(_INT32, pa.string())
_NUMPY = {_INT32.id: np.int32, _INT64.id: np.int64, _FLOAT64.id: np.float64}


class _HoldBackPandas:
    """A meta-path finder that refuses ``pandas`` (installed only around Arrow's probe)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not needed to read a trace")


def arrow_without_pandas() -> None:
    """Arrow looks for pandas on its first conversion of a Python sequence (``pa.array``): an
    import of 0.2-0.45 s and 40 MB that reading a trace never needs. Let that first look find
    no pandas. Arrow still imports pandas the first time a conversion needs it
    (``to_pandas``, ``from_pandas``); until then ``pa.array`` of a pandas object would read it
    as a plain sequence (nothing in the package converts pandas objects that way)."""
    if "pandas" in sys.modules:
        return
    finder = _HoldBackPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)


class TableBuilder:
    """Accumulates the Arrow columns of one table over batches (columns may differ per batch).

    Rows without a usable time (``start_ns`` or ``ts_ns`` null) are invalid: counted in
    ``bad``, not stored."""

    def __init__(self, bad: Counter | None = None) -> None:
        self.batches: list[dict[str, pa.Array]] = []
        self.bad = bad if bad is not None else Counter()

    def add(self, cols: dict[str, pa.Array]) -> None:
        t = cols.get("start_ns", cols.get("ts_ns"))
        if t is not None and t.null_count:
            keep = pc.is_valid(t)
            self.bad["events without a valid ts"] += t.null_count
            cols = {k: pc.filter(v, keep) for k, v in cols.items()}
        self.batches.append(cols)

    def table(self, name: str) -> pa.Table:
        """The batches as store table ``name`` (absent columns are null)."""
        if not self.batches:
            return schema.empty_table(name)
        spec = schema.TABLES[name]
        arrays, fields = [], []
        for col in spec.columns:
            chunks = []
            for b in self.batches:
                arr = b.get(col.name)
                if arr is None:
                    arr = pa.nulls(len(next(iter(b.values()))), col.type)
                chunks.append(schema.cast_column(arr, col.type))
            arrays.append(pa.chunked_array(chunks, type=col.type))
            fields.append(pa.field(col.name, col.type, nullable=col.nullable))
        table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
        return table.unify_dictionaries().combine_chunks() if len(self.batches) > 1 else table


def build_tables(builders: dict[str, TableBuilder]) -> dict[str, pa.Table]:
    """Each builder's table, by name."""
    return {name: b.table(name) for name, b in builders.items()}


def int_col(values: Sequence[Any], stats: Counter | None = None, key: str = "") -> pa.Array:
    """int64 column from Python values; non-integers (text, floats, out of range) -> null,
    counted in ``stats[key]`` when given. Integer text (``"12"``, ``"0x1f"``) is parsed."""
    try:
        arr = pa.array(values)  # infers: int64 when every value is an int (or None)
        if pa.types.is_integer(arr.type):
            return arr if arr.type == _INT64 else arr.cast(_INT64)
        if pa.types.is_null(arr.type):
            return pa.nulls(len(arr), _INT64)  # (a cast costs more)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    out = []
    bad = 0
    for v in values:
        if v is None or (v.__class__ is int and -(2**63) <= v < 2**63):
            out.append(v)
            continue
        try:
            iv = int(v, 0) if isinstance(v, str) else int(v)
            if isinstance(v, float) and iv != v:
                raise ValueError
            if not -(2**63) <= iv < 2**63:
                raise OverflowError
            out.append(iv)
        except (ValueError, TypeError, OverflowError):
            out.append(None)
            bad += 1
    if bad and stats is not None:
        stats[key] += bad
    return pa.array(out, type=pa.int64())


def float_col(values: Sequence[Any]) -> pa.Array:
    """float64 column; values that are not numbers -> null."""
    try:
        arr = pa.array(values)
        if pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type):
            return arr if arr.type == _FLOAT64 else arr.cast(_FLOAT64)
        if pa.types.is_null(arr.type):
            return pa.nulls(len(arr), _FLOAT64)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    out = []
    for v in values:
        try:
            out.append(None if v is None else float(v))
        except (TypeError, ValueError):
            out.append(None)
    return pa.array(out, type=pa.float64())


def from_numpy(values: np.ndarray, type_: pa.DataType, mask: np.ndarray | None = None) -> pa.Array:
    """A numpy array of ``type_``'s values as an Arrow array (``mask`` True: null), without a
    copy. (``pa.array`` of a numpy array imports ``numpy.ma`` on first use: 10-15 ms in each
    parsing process.)"""
    values = np.ascontiguousarray(values, dtype=_NUMPY[type_.id])
    validity = None
    if mask is not None and mask.any():
        validity = pa.py_buffer(np.packbits(~np.asarray(mask, dtype=bool), bitorder="little"))
    return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(values)])


def dictionary(codes: Any, vals: list[str], null_codes: Sequence[int] = ()) -> pa.Array:
    """A dictionary array from codes into ``vals``; duplicate strings in ``vals`` are merged
    (pandas needs unique categories) and ``null_codes`` become null entries."""
    idx = np.asarray(codes, dtype=np.int32)
    mask = np.isin(idx, np.asarray(null_codes, dtype=np.int32)) if len(null_codes) else None
    if len(set(vals)) != len(vals):
        first: dict[str, int] = {}
        remap = np.array([first.setdefault(v, len(first)) for v in vals], dtype=np.int32)
        vals = list(first)
        idx = remap[idx] if len(idx) else idx
    arr = from_numpy(idx, _INT32, mask)
    return pa.DictionaryArray.from_arrays(arr, pa.array(vals, type=pa.string()))


def dict_col(values: Sequence[Any]) -> pa.Array:
    """Dictionary-encoded strings (non-strings are converted with str()). Text and None are
    encoded by Arrow in C; a column mixing in other types finds its distinct values with a
    Python dict (one hash per value), so each distinct value is converted once."""
    n = len(values)
    try:
        # straight into a dictionary builder (first occurrence order, as dictionary_encode
        # of a string array has it): one pass instead of building the strings, then hashing
        arr = pa.array(values, type=_DICT_STR)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        arr = None
    if arr is not None and arr.null_count < n:  # (counted by Arrow: no pass over the list)
        return arr
    if arr is not None or values.count(None) == n:
        return pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array([], pa.string()))
    d: dict = {}
    sd = d.setdefault
    codes = [sd(v, len(d)) for v in values]
    vals = ["" if k is None else (k if k.__class__ is str else str(k)) for k in d]
    return dictionary(codes, vals, [d[None]] if None in d else [])


def capped_names(arr: pa.Array) -> pa.Array:
    """A dictionary column of names with every value longer than
    :data:`~traceinsight.util.safetext.NAME_CAP` characters cut to it with a digest of the whole
    (:func:`~traceinsight.util.safetext.cap_name`); only the distinct values are looked at."""
    if not pa.types.is_dictionary(arr.type) or len(arr.dictionary) == 0:
        return arr
    d = arr.dictionary
    longest = pc.max(pc.binary_length(d)).as_py()
    if longest is None or longest <= NAME_CAP:  # bytes >= characters: nothing to cut
        return arr
    vals = [cap_name(v) if v is not None else v for v in d.to_pylist()]
    return pa.DictionaryArray.from_arrays(arr.indices, pa.array(vals, pa.string()))


def id_str_col(values: list) -> pa.Array:
    """Process / thread ids as dictionary strings (producers mix ints and names); all-integer
    columns are encoded in C and only their distinct values become strings."""
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return dict_col(values)
    if pa.types.is_integer(arr.type):
        enc = arr.dictionary_encode()
        idx = enc.indices
        return pa.DictionaryArray.from_arrays(
            idx if idx.type == _INT32 else idx.cast(_INT32), enc.dictionary.cast(pa.string())
        )
    if pa.types.is_string(arr.type):  # all text (2021 traces write thread ids so)
        return arr.dictionary_encode()
    return dict_col(values)


def repeat_col(vals: Sequence[Any], counts: Sequence[int]) -> pa.Array:
    """Dictionary strings where ``vals[i]`` repeats ``counts[i]`` times (None -> null): a
    column that is constant within runs of rows costs no per-row work."""
    idx = np.repeat(np.arange(len(vals), dtype=np.int32), counts)
    text = ["" if v is None else (v if v.__class__ is str else str(v)) for v in vals]
    return dictionary(idx, text, [i for i, v in enumerate(vals) if v is None])


def rank_col(n: int, rank: int) -> pa.Array:
    """The ``rank`` column of ``n`` rows."""
    return from_numpy(np.full(n, rank, dtype=np.int32), _INT32)


_PRETTY_NL = re.compile(r"[ \t\r]*\n[ \t\r]*")


def json_text_col(raws: Sequence[Any]) -> pa.Array:
    """Raw JSON values (bytes) as text; JSON ``null`` and absent values become null.

    All values are joined with NUL, which valid JSON text cannot contain, and split again in
    Arrow: one C-level pass instead of a Python call per value.
    """
    if not raws:
        return pa.array([], pa.string())
    blob = b"\x00".join([r if r is not None else b"null" for r in raws])
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError:
        text = blob.decode("utf-8", "replace")
    if "\n" in text:
        # pretty-printed files: literal newlines only occur between JSON tokens (inside strings
        # they are escaped), so the indentation around them can go
        text = _PRETTY_NL.sub("", text)
    parts = pc.list_flatten(pc.split_pattern(pa.array([text], pa.string()), "\x00"))
    if len(parts) != len(raws):  # pragma: no cover - NUL inside JSON text is invalid JSON
        return pa.array(
            [
                None if r is None or bytes(r) == b"null" else bytes(r).decode("utf-8", "replace")
                for r in raws
            ],
            pa.string(),
        )
    return pc.if_else(pc.equal(parts, "null"), pa.scalar(None, pa.string()), parts)


def xyz_cols(values: Sequence[Any]) -> list[pa.Array]:
    """x, y, z int64 columns of ``[x, y, z]`` lists (grid and block sizes)."""
    try:
        arr = pa.array(values, type=pa.list_(pa.int64()))
        n = len(arr)
        if n and not arr.null_count:
            flat = arr.flatten()
            if (
                len(flat) == 3 * n
                and not flat.null_count
                and (np.diff(arr.offsets.to_numpy()) == 3).all()
            ):  # the usual case
                xyz = flat.to_numpy().reshape(n, 3)
                return [from_numpy(xyz[:, i], _INT64) for i in range(3)]
        if pc.min(pc.list_value_length(arr)).as_py() in (None, 3) or arr.null_count == len(arr):
            return [
                pc.list_element(arr, i)
                if arr.null_count < len(arr)
                else pa.nulls(len(arr), pa.int64())
                for i in range(3)
            ]
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    out = []
    for i in range(3):
        col = []
        for v in values:
            ok = isinstance(v, list) and len(v) > i and v[i].__class__ is int
            col.append(v[i] if ok else None)
        out.append(pa.array(col, type=pa.int64()))
    return out
