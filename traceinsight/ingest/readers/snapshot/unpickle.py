"""Loading a memory-snapshot pickle without trusting it.

A snapshot is a pickle of plain containers (dicts, lists, tuples, strings, numbers), so the
unpicklers here refuse every global (``find_class``) and every persistent id: nothing a pickle
names is imported, constructed or called, so a pickle made to run a command fails before
anything runs. Two more hazards remain with plain data, and both are bounded:

- **memory**: CPython's C unpickler sizes its memo from the indexes a pickle names, so a
  10-byte pickle can ask for gigabytes. Small files go through the pure-Python unpickler
  (whose memo is a dict); larger ones through the C unpickler in a forked child process whose
  address space is capped (:data:`MEMORY_BUDGET_BYTES` plus a multiple of the file size, at most
  TRACEINSIGHT_MAX_MEMORY_MB) and
  which is stopped after a time limit; only its tables come back (Arrow IPC). Off Linux the
  pure-Python unpickler reads every file.
- **size**: files above :data:`MAX_BYTES` are refused; converting the data into tables visits
  each row once and stops at a row budget proportional to the file size (shared references
  cannot make a small pickle expand into millions of rows).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import pyarrow as pa

from traceinsight import settings
from traceinsight.errors import TraceFormatError

#: the largest snapshot read (bytes after gzip); TRACEINSIGHT_SNAPSHOT_MAX_BYTES overrides
MAX_BYTES = settings.get("TRACEINSIGHT_SNAPSHOT_MAX_BYTES")
#: files at least this large are unpickled in C in a child process (Linux)
ISOLATE_MIN_BYTES = settings.get("TRACEINSIGHT_SNAPSHOT_ISOLATE_BYTES")
#: the child's address space: what the parent maps, plus this, plus 32 bytes per file byte,
#: and never more than TRACEINSIGHT_MAX_MEMORY_MB beyond what the parent maps
MEMORY_BUDGET_BYTES = 2 << 30
#: the child's time limit: this many seconds plus one per MiB of file
TIME_LIMIT_S = settings.get("TRACEINSIGHT_SNAPSHOT_TIME_LIMIT_S")

HINT = (
    "load only snapshots written by torch.cuda.memory._dump_snapshot(); traceinsight never "
    "runs code from a pickle"
)
#: what a snapshot's values (beyond int64, of the wrong type) raise while
#: they are converted: from the child process, raised again in the parent by name, so a large
#: file gives the same one-line error as a small one (``ingest._reader_errors``)
_DATA_ERRORS: dict[str, type[BaseException]] = {
    "OverflowError": OverflowError,
    "ValueError": ValueError,
    "TypeError": TypeError,
    "ArrowInvalid": pa.ArrowInvalid,
    "ArrowNotImplementedError": pa.ArrowNotImplementedError,
}
#: a worker returns the tables and a JSON-able summary
Work = Callable[[Any], tuple[dict[str, pa.Table], dict[str, Any]]]


def _refuse_global(module: str, name: str) -> NoReturn:
    what = f"{module}.{name}"
    if len(what) > 80:
        what = what[:77] + "..."
    raise pickle.UnpicklingError(
        f"refused: the pickle asks for the Python object {what!r}, and a memory snapshot holds "
        "only plain data; nothing was loaded or run"
    )


def _refuse_pid(pid: Any) -> NoReturn:
    raise pickle.UnpicklingError(
        "refused: the pickle holds a persistent id (torch.save data?), "
        "not a memory snapshot; nothing was loaded or run"
    )


#: tuples nested deeper than this are refused while they are unpickled: hashing a tuple
#: recurses in C without a depth check, so a million nested tuples (a megabyte of pickle)
#: would overflow the interpreter's stack the moment one is hashed (a dict key, a lookup)
MAX_TUPLE_DEPTH = 1000
#: the message for nesting beyond what a snapshot holds (both unpicklers say it)
TOO_DEEP = "the pickle nests too deeply to be a memory snapshot"


class SafeUnpickler(pickle._Unpickler):
    """The pure-Python unpickler (memo in a dict), with every global refused and the nesting
    of tuples bounded (:data:`MAX_TUPLE_DEPTH`)."""

    dispatch: ClassVar[dict[int, Any]] = dict(pickle._Unpickler.dispatch)

    def __init__(self, file: Any) -> None:
        super().__init__(file)
        self._depths: dict[int, int] = {}  #: id -> depth of the tuples that hold tuples

    def find_class(self, module: str, name: str) -> NoReturn:
        _refuse_global(module, name)

    def persistent_load(self, pid: Any) -> NoReturn:
        _refuse_pid(pid)

    def _tuple_built(self) -> None:
        t = self.stack[-1]  # type: ignore[attr-defined]
        depth = 1 + max((self._depths.get(id(x), 1) for x in t if type(x) is tuple), default=0)
        if depth > MAX_TUPLE_DEPTH:
            raise RecursionError(TOO_DEEP)
        if depth > 1:
            self._depths[id(t)] = depth


def _then_check(load: Callable[[Any], None]) -> Callable[[Any], None]:
    def checked(self: SafeUnpickler) -> None:
        load(self)
        self._tuple_built()

    return checked


for _op in (pickle.TUPLE, pickle.TUPLE1, pickle.TUPLE2, pickle.TUPLE3):
    SafeUnpickler.dispatch[_op[0]] = _then_check(pickle._Unpickler.dispatch[_op[0]])


class FastUnpickler(pickle.Unpickler):
    """The C unpickler, with every global refused: only in a process with capped memory."""

    def find_class(self, module: str, name: str) -> NoReturn:
        _refuse_global(module, name)

    def persistent_load(self, pid: Any) -> NoReturn:
        _refuse_pid(pid)


def loads(data: bytes, path: str, *, fast: bool = False) -> Any:
    """The plain data of pickle ``data`` (``fast``: the C unpickler, for a capped process).

    Raises a one-line :class:`TraceFormatError` for a global, a truncated or a corrupt pickle."""
    cls = FastUnpickler if fast else SafeUnpickler
    try:
        return cls(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        text = str(e)
        if text.startswith("refused:"):
            raise TraceFormatError(text, path=path, hint=HINT) from None
        if "truncated" in text or "exhausted" in text:
            raise _truncated(path) from None
        raise TraceFormatError(
            f"is not a valid pickle ({_clip(text)})",
            path=path,
            hint="the file is damaged: copy it again",
        ) from None
    except EOFError:
        raise _truncated(path) from None
    except RecursionError:
        raise TraceFormatError(TOO_DEEP, path=path, hint=HINT) from None
    except MemoryError:
        raise
    except Exception as e:  # any other opcode trouble: a damaged or hostile file
        raise TraceFormatError(
            f"is not a valid pickle ({type(e).__name__}: {_clip(str(e))})",
            path=path,
            hint="the file is damaged: copy it again",
        ) from None


def _truncated(path: str) -> TraceFormatError:
    return TraceFormatError(
        "the pickle is truncated (the file ends before the pickle does)",
        path=path,
        hint="the copy is incomplete: copy it again, or dump the snapshot again",
    )


def _clip(text: str, n: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def check_size(data: bytes, path: str) -> None:
    if len(data) > MAX_BYTES:
        raise TraceFormatError(
            f"memory snapshot of {len(data) / 2**30:.1f} GiB is above the "
            f"{MAX_BYTES / 2**30:.1f} GiB limit",
            path=path,
            hint="dump a smaller history (max_entries) or raise TRACEINSIGHT_SNAPSHOT_MAX_BYTES",
        )


def isolate(data: bytes) -> bool:
    """Whether ``data`` is unpickled in a capped child process (large files, Linux)."""
    return len(data) >= ISOLATE_MIN_BYTES and sys.platform.startswith("linux")


def load_and_convert(
    data: bytes, path: str, work: Work, started: Callable[[], None] | None = None
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """Unpickle ``data`` and turn it into tables with ``work(obj)``, bounded as the module
    says. ``started`` is called once no process will fork any more (threads may start)."""
    check_size(data, path)
    if not isolate(data):
        if started:
            started()
        try:
            return work(loads(data, path))
        except RecursionError:
            raise TraceFormatError(TOO_DEEP, path=path, hint=HINT) from None
    return _in_child(data, path, work, started)


def _in_child(
    data: bytes, path: str, work: Work, started: Callable[[], None] | None
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    limit = _mapped_bytes() + min(MEMORY_BUDGET_BYTES + 32 * len(data), _memory_limit())
    deadline = time.monotonic() + TIME_LIMIT_S + len(data) / (1 << 20)
    with tempfile.TemporaryDirectory(prefix="traceinsight-snapshot-") as tmp:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(data, path, work, Path(tmp), limit)
        if started:
            started()
        status = _wait(pid, deadline, path)
        result = _read_json(Path(tmp) / "result.json")
        if result is None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSEGV:
            # the C unpickler and hashing recurse without a depth check: a stack overflow
            # is nesting no snapshot holds (nothing a pickle names is ever run)
            raise TraceFormatError(TOO_DEEP, path=path, hint=HINT)
        if result is None:
            how = (
                f"signal {os.WTERMSIG(status)}"
                if os.WIFSIGNALED(status)
                else f"exit {os.WEXITSTATUS(status)}"
            )
            raise TraceFormatError(
                f"loading the memory snapshot failed ({how})",
                path=path,
                hint="the file may be damaged; rerun with --debug",
            )
        if result.get("data_error") in _DATA_ERRORS:
            # what the file's values raised in the child, raised here as in-process reading
            # raises it: the ingest turns it into the same one-line error
            raise _DATA_ERRORS[result["data_error"]](str(result.get("message") or ""))
        if result.get("internal"):
            raise RuntimeError(f"reading the memory snapshot: {result['internal']}")
        if not result.get("ok"):
            raise TraceFormatError(str(result.get("message")), path=path, hint=result.get("hint"))
        tables = {}
        for name in result["tables"]:
            with pa.OSFile(str(Path(tmp) / f"{name}.arrow")) as f:
                tables[name] = pa.ipc.open_file(f).read_all()
        return tables, result["info"]


def _child(data: bytes, path: str, work: Work, tmp: Path, limit: int) -> NoReturn:
    code = 0
    try:
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass
        try:
            tables, info = work(loads(data, path, fast=True))
            for name, t in tables.items():
                with (
                    pa.OSFile(str(tmp / f"{name}.arrow"), "wb") as f,
                    pa.ipc.new_file(f, t.schema) as w,
                ):
                    w.write_table(t)
            out: dict[str, Any] = {"ok": True, "tables": list(tables), "info": info}
        except TraceFormatError as e:
            out = {"ok": False, "message": e.message, "hint": e.hint}
        except MemoryError:
            out = {
                "ok": False,
                "message": "the pickle needs more memory than a snapshot of its "
                "size can, or than the memory limit allows (a hostile or damaged file?)",
                "hint": HINT + " (TRACEINSIGHT_MAX_MEMORY_MB sets the limit)",
            }
        except RecursionError:
            out = {"ok": False, "message": TOO_DEEP, "hint": HINT}
        except tuple(_DATA_ERRORS.values()) as e:  # the file's values: raised again there
            out = {"ok": False, "data_error": type(e).__name__, "message": str(e)[:500]}
        except Exception as e:  # a bug here, not in the file: the parent raises it as such
            out = {"ok": False, "internal": f"{type(e).__name__}: {e}"}
        (tmp / "result.json.tmp").write_text(json.dumps(out, default=str))
        os.replace(tmp / "result.json.tmp", tmp / "result.json")
    except BaseException:
        code = 3
    finally:
        os._exit(code)


def _wait(pid: int, deadline: float, path: str) -> int:
    pause = 0.002
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise TraceFormatError(
                "loading the memory snapshot took too long and was stopped",
                path=path,
                hint="raise TRACEINSIGHT_SNAPSHOT_TIME_LIMIT_S for a very large snapshot",
            )
        time.sleep(pause)
        pause = min(0.05, pause * 2)


def _read_json(p: Path) -> dict[str, Any] | None:
    try:
        out = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return out if isinstance(out, dict) else None


def _memory_limit() -> int:
    """The memory limit of a run (TRACEINSIGHT_MAX_MEMORY_MB): the child never gets more."""
    return int(settings.get("TRACEINSIGHT_MAX_MEMORY_MB") * (1 << 20))


def _mapped_bytes() -> int:
    """This process's address space (what the child inherits), from /proc."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 8 << 30
