"""Where a run may write, checked before any work, and how files are written.

An output never destroys an input or an unrelated file: a file output may not resolve to an
input, to another output of the same run, into a trace store or under ``/proc`` / ``/sys``; a
store output (``ingest -o``) may not be the working folder, a folder above it, an input or a
folder holding inputs, and ``--force`` replaces only a folder that is a trace store. Regular
files are written whole by rename (never half-written); a character device or a FIFO given as
output (``/dev/null``, ``>(...)``) is written in place, never replaced. Temporaries left by a
killed run (``.NAME.tmp-PID-*``) are removed by the next run once their process is gone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from traceinsight.errors import OutputError

#: a file to write: a path or its text
_PathT = TypeVar("_PathT", Path, str, "Path | str")

#: kernel file systems: nothing traceinsight writes belongs there
SYSTEM_TREES = (Path("/proc"), Path("/sys"))
STORE_META = "meta.json"
STORE_FORMAT = "traceinsight-store"
_STALE_RE = re.compile(r"^\.(?P<name>.+)\.(?:tmp|old)-(?P<pid>\d+)(?:-|$)")


def _resolve(p: Path) -> Path:
    try:
        return Path(os.path.realpath(p))
    except (OSError, ValueError):
        return Path(os.path.abspath(p))


def is_store(path: Path) -> bool:
    """Whether ``path`` is a folder holding a traceinsight store's ``meta.json``."""
    f = Path(path) / STORE_META
    try:
        if not f.is_file() or f.stat().st_size > 64 << 20:
            return False
        import json

        meta = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == STORE_FORMAT


def _store_above(path: Path) -> Path | None:
    """The store folder ``path`` lies in (``path`` resolved), if any."""
    for d in [path, *path.parents]:
        if d.is_dir() and is_store(d):
            return d
    return None


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _input_paths(inputs: Iterable[Path | str]) -> list[Path]:
    return [_resolve(Path(p)) for p in inputs if str(p) != "-"]


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a == b


# --- checks before any work ---------------------------------------------------------------


def check_files(outputs: Sequence[Path | str | None], inputs: Iterable[Path | str]) -> None:
    """Refuse file outputs that would overwrite an input, another output of the run, a store's
    content, a folder or a kernel file; raises :class:`OutputError` naming the path."""
    ins = _input_paths(inputs)
    seen: dict[Path, str] = {}
    for raw in outputs:
        if raw is None or str(raw) == "-":
            continue
        out = _resolve(Path(raw))
        if out in seen:
            raise OutputError(
                "is given for two outputs of the same run",
                path=raw,
                hint="give each of --json, --markdown and --html its own file",
            )
        seen[out] = str(raw)
        for p in ins:
            if _same_file(out, p) or (p.is_dir() and _within(out, p) and is_store(p)):
                raise OutputError(
                    "is an input of this run; writing it would destroy the input",
                    path=raw,
                    hint="choose another output file name",
                )
        _check_writable_file(Path(raw), out)


def _check_writable_file(raw: Path, out: Path) -> None:
    for tree in SYSTEM_TREES:
        if _within(out, tree):
            raise OutputError(
                f"is under {tree}, a kernel file system",
                path=raw,
                hint="write the output to a regular folder",
            )
    store = _store_above(out.parent)
    if store is not None:
        raise OutputError(
            f"lies inside the trace store {store}",
            path=raw,
            hint="write reports next to the store, not into it",
        )
    try:
        st = os.stat(out)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise OutputError(
            f"cannot be used as output: {e.strerror}", path=raw, hint="check the path"
        ) from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(
                "is a folder",
                path=raw,
                hint="give a file name, e.g. " + str(Path(raw) / "report.html"),
            )
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            raise OutputError(
                "is neither a regular file, a character device nor a FIFO",
                path=raw,
                hint="write the output to a regular file",
            )
    _check_parent(raw, out.parent)


def _check_parent(raw: Path, parent: Path) -> None:
    """The folder ``parent`` exists (or can be made) and is writable."""
    probe = parent
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(
            f"cannot be created: {probe} is a file, not a folder",
            path=raw,
            hint="choose an output path inside a folder",
        )
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(
            f"cannot be written: folder {probe} is not writable",
            path=raw,
            hint="choose a folder you can write to",
        )


def check_store_target(out: Path, inputs: Iterable[Path | str], *, force: bool) -> None:
    """Refuse a store output (``ingest -o``) that is the working folder or above it, an input
    or a folder holding inputs, inside a store, or a folder (or file) that is not a store.
    ``force`` only ever replaces a store."""
    raw = out
    res = _resolve(Path(out))
    cwd = _resolve(Path.cwd())
    if _within(cwd, res):
        raise OutputError(
            "is the working folder or a folder above it",
            path=raw,
            hint="give the store a new folder name, e.g. -o run.tistore",
        )
    for tree in SYSTEM_TREES:
        if _within(res, tree):
            raise OutputError(
                f"is under {tree}, a kernel file system",
                path=raw,
                hint="write the store to a regular folder",
            )
    for p in _input_paths(inputs):
        if res == p or _within(p, res):
            raise OutputError(
                "is an input of this run or holds one",
                path=raw,
                hint="give the store a new folder name, e.g. -o run.tistore",
            )
    above = _store_above(res.parent)
    if above is not None:
        raise OutputError(
            f"lies inside the trace store {above}",
            path=raw,
            hint="give the store a folder of its own",
        )
    if res.exists() or res.is_symlink():
        if not res.is_dir():
            raise OutputError(
                "exists and is not a folder", path=raw, hint="give the store a new folder name"
            )
        if not is_store(res) and any(res.iterdir()):
            raise OutputError(
                "exists and is not a trace store"
                + (" (--force replaces only a trace store)" if force else ""),
                path=raw,
                hint="give the store a new folder name, or empty this folder",
            )
    _check_parent(raw, res.parent)


# --- writing ----------------------------------------------------------------------------------


def _special(path: Path) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _write_in_place(path: Path, data: bytes) -> None:
    """Write to a character device or a FIFO without replacing it (a FIFO needs a reader)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise OutputError(
                "is a FIFO that nobody reads",
                path=path,
                hint="start the reader first, or write to a regular file",
            ) from None
        raise OutputError(
            f"cannot be written: {e.strerror}", path=path, hint="check the path and its permissions"
        ) from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError as e:
        raise OutputError(
            f"cannot be written: {e.strerror}", path=path, hint="check the reader of this file"
        ) from None
    finally:
        os.close(fd)


def _tmp_for(path: Path) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    return Path(tmp)


def write_files(files: Mapping[_PathT, str | bytes]) -> None:
    """Write every file or none: regular files are written to temporaries first and renamed
    into place only once all are complete; devices and FIFOs are written in place last."""
    regular: list[tuple[Path, Path]] = []
    special: list[tuple[Path, bytes]] = []
    try:
        for raw, text in files.items():
            path = Path(raw)
            # surrogateescape: a file name read under a non-UTF-8 locale (PYTHONUTF8=0, LANG=C)
            # keeps its own bytes, which are UTF-8 on every file system the inputs came from
            data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
            if _special(path):
                special.append((path, data))
                continue
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                clean_stale(path.parent, path.name)
                tmp = _tmp_for(path)
                regular.append((tmp, path))
                tmp.write_bytes(data)
            except OSError as e:
                raise OutputError(
                    f"cannot be written: {e.strerror or e}",
                    path=raw,
                    hint="check the folder exists, is writable and has space",
                ) from None
        for tmp, path in regular:
            try:
                os.replace(tmp, path)
            except OSError as e:
                raise OutputError(
                    f"cannot be written: {e.strerror or e}",
                    path=path,
                    hint="check the folder is writable",
                ) from None
    finally:
        for tmp, _ in regular:
            with contextlib.suppress(OSError):
                tmp.unlink()
    for path, data in special:
        _write_in_place(path, data)


def write_text(path: Path | str, text: str) -> None:
    """One output file (see :func:`write_files`)."""
    write_files({path: text})


# --- stale temporaries ------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


#: a temporary file as :func:`_tmp_for` names it (``mkstemp``'s eight random characters)
_TMP_FILE_RE = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)-[a-z0-9_]{8}$")


def clean_stale(
    folder: Path, name: str | None = None, *, owned: Callable[[Path], bool] | None = None
) -> int:
    """Remove the temporaries of dead runs in ``folder`` (only those of ``name`` when given),
    and only what is provably the tool's: a ``.NAME.tmp-PID-XXXXXXXX`` file named exactly as
    :func:`_tmp_for` names one, and a ``.NAME.tmp-PID-*`` / ``.NAME.old-PID`` folder that
    ``owned`` accepts (a store's own files only; without ``owned`` no folder is removed).
    A user's file that merely looks like a temporary stays. Returns how many were removed."""
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for e in entries:
        m = _STALE_RE.match(e.name)
        if not m or (name is not None and m.group("name") != name):
            continue
        if _alive(int(m.group("pid"))):
            continue
        try:
            if e.is_dir(follow_symlinks=False):
                if owned is None or not owned(Path(e.path)):
                    continue
                shutil.rmtree(e.path, ignore_errors=True)
            elif e.is_file(follow_symlinks=False) and _TMP_FILE_RE.match(e.name):
                os.unlink(e.path)
            else:
                continue
            removed += 1
        except OSError:
            pass
    return removed
