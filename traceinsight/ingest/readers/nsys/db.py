"""An Nsight Systems SQLite export, opened read-only, and what every table reader needs.

Exports differ by version (schema 2.x of nsys 2022 to 3.25 of nsys 2026.2): tables exist only
when they have rows, columns are added and reordered, 2.x has no ``ENUM_*`` tables. So every
query names its columns after ``PRAGMA table_info`` (an absent column reads as NULL), an absent
table reads as no rows, and enum values have built-in labels used where the export has no enum
table (docs/NSYS.md).
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import quote

from traceinsight import settings
from traceinsight.errors import TraceFormatError
from traceinsight.util.safetext import NAME_CAP, cap_name

#: SQLite's own heap limit while reading an export (PRAGMA hard_heap_limit): its page cache,
#: sorts and temporary results, not the rows handed to Python
HEAP_LIMIT_BYTES = 512 * 2**20
#: the longest single string or blob SQLite returns (SQLITE_LIMIT_LENGTH): names longer than
#: NAME_CAP are read as a prefix, so only a corrupt or crafted file reaches this
VALUE_LIMIT_BYTES = 256 * 2**20


def _timeout_s() -> float:
    return float(settings.get("TRACEINSIGHT_NSYS_TIMEOUT_S"))


#: tables that only an Nsight Systems export has (one is enough to recognise it)
NSYS_TABLES = (
    "StringIds",
    "ThreadNames",
    "TARGET_INFO_GPU",
    "TARGET_INFO_SYSTEM_ENV",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
)
#: tables with CUDA activity: an export without any of them has nothing to diagnose
CUDA_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_DRIVER",
)

# --- built-in enum maps (2.x exports have no ENUM_* tables; values are stable) ---------------

#: copyKind (ENUM_CUDA_MEMCPY_OPER) -> the direction word Kineto uses in copy names
COPY_KINDS = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "UVM HtoD",
    12: "UVM DtoH",
    13: "UVM DtoD",
}
#: ENUM_CUDA_MEMCPY_OPER names (CUDA_MEMCPY_KIND_<suffix>) -> the same words
COPY_SUFFIX = {
    "UNKNOWN": "Unknown",
    "HTOD": "HtoD",
    "DTOH": "DtoH",
    "HTOA": "HtoA",
    "ATOH": "AtoH",
    "ATOA": "AtoA",
    "ATOD": "AtoD",
    "DTOA": "DtoA",
    "DTOD": "DtoD",
    "HTOH": "HtoH",
    "PTOP": "PtoP",
    "UVM_HTOD": "UVM HtoD",
    "UVM_DTOH": "UVM DtoH",
    "UVM_DTOD": "UVM DtoD",
}
#: srcKind / dstKind / memKind (ENUM_CUDA_MEM_KIND) -> label
MEM_KINDS = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: "Unknown",
}
#: syncType (ENUM_CUPTI_SYNC_TYPE) -> the name Kineto gives the same cuda_sync event
SYNC_TYPES = {
    0: "Unknown Sync",
    1: "Event Sync",
    2: "Stream Wait Event",
    3: "Stream Sync",
    4: "Context Sync",
}
SYNC_SUFFIX = {
    "UNKNOWN": "Unknown Sync",
    "EVENT_SYNCHRONIZE": "Event Sync",
    "STREAM_WAIT_EVENT": "Stream Wait Event",
    "STREAM_SYNCHRONIZE": "Stream Sync",
    "CONTEXT_SYNCHRONIZE": "Context Sync",
}
#: CUPTI_ACTIVITY_KIND_RUNTIME.eventClass (ENUM_NSYS_EVENT_CLASS)
EVENT_CLASS_RUNTIME, EVENT_CLASS_DRIVER, EVENT_CLASS_BACKTRACE = 0, 1, 67
#: NVTX_EVENTS.eventType (ENUM_NSYS_EVENT_TYPE)
NVTX_TYPES = {
    "NvtxCategory": 33,
    "NvtxMark": 34,
    "NvtxThread": 39,
    "NvtxPushPopRange": 59,
    "NvtxStartEndRange": 60,
    "NvtxtPushPopRange": 70,
    "NvtxtStartEndRange": 71,
    "NvtxDomainCreate": 75,
    "NvtxDomainDestroy": 76,
}

#: globalTid / globalPid layout 0xHHVVPPPPPPTTTTTT: pid and tid are 24 bits each
PID_SHIFT, ID_MASK = 24, 0xFFFFFF


def _reason(e: BaseException) -> str:
    """SQLite's message, one line and short."""
    return " ".join(str(e).split())[:120] or type(e).__name__


def pid_of(global_id: int | None) -> int | None:
    """The process id inside a ``globalPid`` / ``globalTid``."""
    return None if global_id is None else (int(global_id) >> PID_SHIFT) & ID_MASK


def tid_of(global_tid: int | None) -> int | None:
    """The thread id inside a ``globalTid``."""
    return None if global_tid is None else int(global_tid) & ID_MASK


class NsysDb:
    """A read-only connection to one export, with its tables and columns known."""

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        wal = Path(f"{path}-wal")
        if wal.is_file() and wal.stat().st_size > 0:
            raise TraceFormatError(
                f"has a write-ahead log beside it ({wal.name}, {wal.stat().st_size:,} bytes) "
                "whose rows would not be read",
                path=source,
                hint="export it again with nsys export --type sqlite, or checkpoint it once "
                "with sqlite3 FILE 'PRAGMA wal_checkpoint(TRUNCATE)'",
            )
        uri = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
        self._deadline = time.monotonic() + _timeout_s()
        try:
            self.con = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._harden()
            # tables only: a view is a query of the file's own choosing (a recursive CTE, a
            # cross join, zeroblob) and never part of an export; virtual tables likewise
            names = self.con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND coalesce(sql, '') NOT LIKE 'CREATE VIRTUAL%'"
            ).fetchall()
        except sqlite3.DatabaseError as e:
            raise TraceFormatError(
                f"cannot be read as an SQLite database ({_reason(e)})",
                path=source,
                hint="the file is damaged or not an Nsight Systems export; "
                "export it again with nsys export --type sqlite",
            ) from e
        self.tables = {str(n) for (n,) in names}
        if not self.tables & set(NSYS_TABLES):
            self.con.close()
            raise TraceFormatError(
                "is an SQLite database without Nsight Systems tables (no StringIds, "
                "TARGET_INFO_*, CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS)",
                path=source,
                hint="pass an nsys export: nsys export --type sqlite --output run.sqlite "
                "run.nsys-rep",
            )
        self._cols: dict[str, list[str]] = {}

    def _harden(self) -> None:
        """Bounds on what reading this file may cost: no extension loading, no triggers or
        schema tricks taking effect (the connection is read-only and immutable), a heap limit,
        a longest value, and a deadline checked every few thousand virtual-machine steps."""
        con = self.con
        if hasattr(con, "enable_load_extension"):
            con.enable_load_extension(False)
        if hasattr(con, "setlimit"):  # Python 3.11+
            con.setlimit(getattr(sqlite3, "SQLITE_LIMIT_LENGTH", 0), VALUE_LIMIT_BYTES)
            con.setlimit(getattr(sqlite3, "SQLITE_LIMIT_SQL_LENGTH", 1), 1_000_000)
        con.execute(f"PRAGMA hard_heap_limit = {HEAP_LIMIT_BYTES}")
        con.execute("PRAGMA trusted_schema = OFF")
        con.execute("PRAGMA temp_store = FILE")
        deadline = self._deadline
        con.set_progress_handler(lambda: int(time.monotonic() > deadline), 1_000)

    def _run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """``sql`` executed and fetched, with SQLite's errors as one-line format errors."""
        try:
            return self.con.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as e:
            raise self._error(e) from e

    def _error(self, e: sqlite3.Error) -> TraceFormatError:
        if "interrupted" in str(e).lower():
            return TraceFormatError(
                f"took longer than {_timeout_s():g} s to read",
                path=self.source,
                hint="a real export reads in seconds per GB; set TRACEINSIGHT_NSYS_TIMEOUT_S "
                "to allow longer",
            )
        return TraceFormatError(
            f"cannot be read ({_reason(e)})",
            path=self.source,
            hint="the export is damaged; export it again with nsys export --type sqlite",
        )

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> NsysDb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- tables and columns ------------------------------------------------------------------

    def has(self, table: str, *columns: str) -> bool:
        """Whether ``table`` exists (with every one of ``columns``)."""
        if table not in self.tables:
            return False
        return all(c in self.columns(table) for c in columns)

    def columns(self, table: str) -> list[str]:
        if table not in self._cols:
            rows = self._run(f'PRAGMA table_info("{table}")')
            self._cols[table] = [str(r[1]) for r in rows]
        return self._cols[table]

    def count(self, table: str, where: str = "") -> int:
        if table not in self.tables:
            return 0
        sql = f'SELECT count(*) FROM "{table}"' + (f" WHERE {where}" if where else "")
        return int(self._run(sql)[0][0])

    def select(
        self, table: str, columns: Sequence[str], *, where: str = "", order: str = ""
    ) -> dict[str, list[Any]]:
        """Columns of ``table`` by name, as lists (an absent column is all None; an absent
        table has no rows). ``where`` may only name columns the table has."""
        if table not in self.tables:
            return {c: [] for c in columns}
        have = set(self.columns(table))
        exprs = [f'"{c}"' if c in have else "NULL" for c in columns]
        sql = f'SELECT {", ".join(exprs)} FROM "{table}"'
        if where:
            sql += f" WHERE {where}"
        if order:
            sql += f" ORDER BY {order}"
        rows = self._run(sql)
        if not rows:
            return {c: [] for c in columns}
        return {c: list(v) for c, v in zip(columns, zip(*rows))}

    def scalar_rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self._run(sql)

    # --- interned strings and enums ------------------------------------------------------------

    @cached_property
    def strings(self) -> dict[int, str]:
        """``StringIds``: id -> text."""
        if not self.has("StringIds", "id", "value"):
            return {}
        # a name longer than NAME_CAP is read as its prefix, its length and a digest of the
        # whole computed from bounded slices: no megabyte-long name is held or scanned
        rows = self._run(
            f"SELECT id, substr(value, 1, {NAME_CAP}), length(value) FROM StringIds "
            "WHERE id IS NOT NULL AND value IS NOT NULL"
        )
        out: dict[int, str] = {}
        for i, v, n in rows:
            text = str(v)
            if n is not None and int(n) > NAME_CAP:
                text = cap_name(text, length=int(n), digest=self._digest(int(i), int(n)))
            out[int(i)] = text
        return out

    def _digest(self, sid: int, n: int) -> str:
        """sha256 of the whole ``StringIds`` value ``sid`` (``n`` characters), read 1 M
        characters at a time."""
        h = hashlib.sha256()
        step = 1 << 20
        for k in range(1, n + 1, step):
            (part,) = self._run(
                "SELECT substr(value, ?, ?) FROM StringIds WHERE id = ?", (k, step, sid)
            )[0]
            h.update(str(part).encode("utf-8", "surrogatepass"))
        return h.hexdigest()

    def enum(
        self, table: str, builtin: Mapping[int, str], suffixes: Mapping[str, str] | None = None
    ) -> dict[int, str]:
        """Labels of an enum: ``builtin``, overridden by the export's own ``ENUM_*`` table
        where it has one (its ``name`` column mapped through ``suffixes`` when given, else
        its ``label``)."""
        out = dict(builtin)
        if not self.has(table, "id"):
            return out
        cols = self.columns(table)
        name_col = "name" if "name" in cols else None
        label_col = "label" if "label" in cols else name_col
        if label_col is None:
            return out
        for row in self._run(
            f'SELECT id, {label_col}{", name" if name_col else ""} FROM "{table}"'
        ):
            i, label = row[0], row[1]
            if i is None:
                continue
            text = None
            if suffixes is not None and name_col and row[-1]:
                suf = str(row[-1]).rsplit("KIND_", 1)[-1].rsplit("TYPE_", 1)[-1]
                text = suffixes.get(suf)
            if text is None and int(i) not in builtin:
                text = str(label)
            if text is not None:
                out[int(i)] = text
        return out

    def nvtx_type_ids(self) -> dict[str, int]:
        """NVTX event type name -> id (the export's ENUM_NSYS_EVENT_TYPE, else built-in)."""
        out = dict(NVTX_TYPES)
        if self.has("ENUM_NSYS_EVENT_TYPE", "id", "name"):
            for i, name in self._run("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE"):
                if name in out and i is not None:
                    out[str(name)] = int(i)
        return out

    # --- metadata --------------------------------------------------------------------------------

    @cached_property
    def export_meta(self) -> dict[str, str]:
        """``META_DATA_EXPORT`` (3.x) or ``EXPORT_META_DATA`` (2.x) as name -> value."""
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.has(table, "name", "value"):
                return {
                    str(n): str(v)
                    for n, v in self._run(f'SELECT name, value FROM "{table}"')
                    if n is not None and v is not None
                }
        return {}

    def system_env(self, names: Sequence[str]) -> dict[str, str]:
        """Named rows of ``TARGET_INFO_SYSTEM_ENV`` (only those asked for: the table also holds
        host names and environment values)."""
        if not self.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
            return {}
        marks = ", ".join("?" for _ in names)
        rows = self._run(
            f"SELECT name, value FROM TARGET_INFO_SYSTEM_ENV WHERE name IN ({marks})", tuple(names)
        )
        return {str(n): str(v) for n, v in rows if v is not None}

    @cached_property
    def epoch_ns(self) -> int | None:
        """Unix time (ns) of the capture clock's zero: ``TARGET_INFO_SESSION_START_TIME``."""
        if not self.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
            return None
        row = next(iter(self._run("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")), None)
        return int(row[0]) if row and isinstance(row[0], int) and row[0] > 0 else None

    @cached_property
    def capture_end_ns(self) -> int | None:
        """End of the capture on the export's clock (``ANALYSIS_DETAILS.stopTime``)."""
        if not self.has("ANALYSIS_DETAILS", "stopTime"):
            return None
        row = next(iter(self._run("SELECT max(stopTime) FROM ANALYSIS_DETAILS")), None)
        return int(row[0]) if row and isinstance(row[0], int) else None

    @cached_property
    def process_names(self) -> dict[int, str]:
        """pid -> process name (``PROCESSES``)."""
        if not self.has("PROCESSES", "pid", "name"):
            return {}
        return {
            int(p): str(n)
            for p, n in self._run(f"SELECT pid, substr(name, 1, {NAME_CAP}) FROM PROCESSES")
            if p is not None and n is not None
        }

    @cached_property
    def thread_names(self) -> dict[int, str]:
        """globalTid -> thread name (``ThreadNames``, the highest priority name)."""
        if not self.has("ThreadNames", "globalTid", "nameId"):
            return {}
        order = "priority" if "priority" in self.columns("ThreadNames") else "rowid"
        out: dict[int, str] = {}
        for tid, name_id in self._run(
            f"SELECT globalTid, nameId FROM ThreadNames ORDER BY {order}"
        ):
            if tid is not None and name_id is not None and int(name_id) in self.strings:
                out[int(tid)] = self.strings[int(name_id)]
        return out
