"""CSV views of the ``top``, ``summary`` and ``compare`` tables, for spreadsheets.

One table per CSV: a header row of column names, then one row per record. Times are integer
ns, sizes bytes, shares percent (0-100) at full precision, so a cell can be checked against the
JSON; a missing value is an empty cell. Text from the trace is made safe twice: control and
bidi characters are written as visible escapes, and a cell that a spreadsheet would run as a
formula (starting with ``=``, ``+``, ``-``, ``@``) gets a leading ``'``.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from traceinsight.util.safetext import for_terminal

_FORMULA = ("=", "+", "-", "@")


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return str(int(v))  # a byte count or an exact median: no trailing .0
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple, dict)):
        v = json.dumps(v, default=str, sort_keys=True)
    text = for_terminal(str(v)).replace("\t", "\\t")
    return "'" + text if text.startswith(_FORMULA) else text


def to_csv(records: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """``records`` as CSV text; ``columns``: their order (default: the keys in first-seen
    order over all records)."""
    if columns is None:
        seen: dict[str, None] = {}
        for r in records:
            seen.update(dict.fromkeys(r))
        columns = list(seen)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([_cell(c) for c in columns])
    for r in records:
        w.writerow([_cell(r.get(c)) for c in columns])
    return buf.getvalue()


SUMMARY_COLUMNS = [
    "rank",
    "source",
    "vendor",
    "devices",
    "world_size",
    "span_ns",
    "steps",
    "kernel_count",
    "kernel_time_ns",
    "memcpy_count",
    "memcpy_time_ns",
    "memset_count",
    "memset_time_ns",
]


def summary_csv(s: Mapping[str, Any]) -> str:
    """The summary (``store.summary.summarize``) as one row per rank."""
    rows = []
    for r in s.get("ranks", []):
        row = dict(r)
        row["devices"] = "; ".join(str(d) for d in r.get("devices") or [])
        row["steps"] = len(r.get("steps") or [])
        rows.append(row)
    return to_csv(rows, SUMMARY_COLUMNS)


COMPARE_COLUMNS = ["kind", "name", "before_ns", "after_ns", "delta_ns", "status", "share_pct"]


def compare_csv(c: Mapping[str, Any]) -> str:
    """The comparison's contributors (they add up to the change of the mean step time), one
    row each, in the order the report lists them."""
    rows = list(c.get("contributors") or [])
    extra = [k for r in rows for k in r if k not in COMPARE_COLUMNS]
    return to_csv(rows, COMPARE_COLUMNS + list(dict.fromkeys(extra)))
