"""``.nsys-rep`` / ``.qdrep`` reports: converted to SQLite by the ``nsys`` executable.

The report container is proprietary; only ``nsys export`` reads it, and only an nsys at least
as new as the one that wrote it. With ``nsys`` on PATH the report is exported into the store
cache (``<cache>/nsys-exports/<sha256>.sqlite``, written under a temporary name and renamed, so
a half-written export is never used and never left behind); without it, or when the report is
newer than the installed nsys, the error names the exact command to run elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from traceinsight.errors import TraceFormatError, UnsupportedTraceVersion
from traceinsight.ingest.cache import cache_root
from traceinsight.ingest.source import SQLITE_MAGIC

REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
_REPORT_VERSION = re.compile(rb"NVIDIA Tegra Profiler Report (\d{4})@(\d+)@(\d+)")
_NSYS_VERSION = re.compile(r"(\d{4})\.(\d+)\.(\d+)")
EXPORT_TIMEOUT_S = 3600


def is_report(head: bytes) -> bool:
    """An Nsight Systems report container (``.nsys-rep``, ``.qdrep``)."""
    return REPORT_MAGIC in head[:256]


def report_version(head: bytes) -> tuple[int, int, int] | None:
    """The Nsight Systems version that wrote a report (reports before 2023.4 do not say)."""
    m = _REPORT_VERSION.search(head[:256])
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _fmt(v: tuple[int, ...]) -> str:
    return ".".join(str(x) for x in v)


def export_command(name: str) -> str:
    """The command that exports report ``name`` next to it."""
    stem = name.rsplit(".", 1)[0] if "." in name else name
    return f"nsys export --type sqlite --output {stem}.sqlite {name}"


def installed_version(exe: str) -> tuple[int, int, int] | None:
    """``nsys --version`` of the executable ``exe`` (None when it does not say)."""
    try:
        out = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    m = _NSYS_VERSION.search(out.stdout + out.stderr)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _refuse(name: str, why: str, needs: tuple[int, int, int] | None) -> UnsupportedTraceVersion:
    where = (
        f"a machine with Nsight Systems {_fmt(needs)} or newer"
        if needs
        else "a machine with Nsight Systems"
    )
    return UnsupportedTraceVersion(
        f"is an Nsight Systems report{f' ({_fmt(needs)})' if needs else ''}: {why}",
        path=name,
        hint=f"on {where}, run: {export_command(name)}; then pass the .sqlite",
    )


def exported(path: Path, data: bytes, name: str, progress: Callable[[str, float], None]) -> Path:
    """The SQLite export of the report at ``path`` (bytes ``data``), made once and cached."""
    needs = report_version(data)
    exe = shutil.which("nsys")
    if exe is None:
        raise _refuse(name, "no nsys executable on PATH to convert it", needs)
    have = installed_version(exe)
    if needs and have and have < needs:
        raise _refuse(
            name, f"newer than the installed nsys {_fmt(have)}, which cannot open it", needs
        )
    folder = cache_root() / "nsys-exports"
    out = folder / f"{hashlib.sha256(data).hexdigest()[:32]}.sqlite"
    if _is_sqlite(out):
        from traceinsight.ingest.cache_admin import touch

        touch(out)  # its last use, for the cache's least-recently-used bound
        return out
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TraceFormatError(
            f"cannot create the export folder: {e.strerror or e}",
            path=folder,
            hint="set TRACEINSIGHT_CACHE_DIR to a writable folder",
        ) from None
    tmp = folder / f"{out.stem}.tmp-{os.getpid()}.sqlite"
    progress("export", 0.0)
    try:
        try:
            run = subprocess.run(
                [
                    exe,
                    "export",
                    "--type",
                    "sqlite",
                    "--force-overwrite",
                    "true",
                    "--output",
                    str(tmp),
                    str(path),
                ],
                capture_output=True,
                text=True,
                timeout=EXPORT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as e:
            raise _refuse(name, f"nsys export could not run ({e})", needs) from None
        said = (run.stdout + "\n" + run.stderr).strip()
        if "newer than" in said.lower():
            raise _refuse(
                name,
                "newer than the installed nsys"
                + (f" {_fmt(have)}" if have else "")
                + ", which cannot open it",
                needs,
            )
        if run.returncode != 0 or not _is_sqlite(tmp):
            last = said.splitlines()[-1][:200] if said else "no output"
            raise TraceFormatError(
                f"nsys export failed (exit {run.returncode}): {last}",
                path=name,
                hint=f"run it by hand: {export_command(name)}",
            )
        os.replace(tmp, out)
    finally:
        for stale in folder.glob(f"{tmp.name}*"):
            stale.unlink(missing_ok=True)
    progress("export", 1.0)
    return out


def _is_sqlite(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False
