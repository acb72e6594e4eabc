"""Parsing in forked helper processes (Linux): the machinery, free of any trace format.

A reader hands :func:`fork_and_join` a ``work(i)`` function; each forked helper inherits this
process's memory copy-on-write (the file's bytes, decoded events), runs its part and hands
back its tables as Arrow IPC files (memory-mapped here, so nothing large is pickled) plus a
small picklable state. Meanwhile this process may parse its own part. A helper that will not
read a range of the inherited bytes again gives its pages back (:func:`release_pages`), so the
file does not count twice in the memory of the process tree.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from traceinsight import settings

#: files with at least this many events are parsed by two processes (fork, Linux)
PARALLEL_MIN_EVENTS = 300_000

#: a helper's tables and its state (anything picklable)
Part = tuple[dict[str, pa.Table], Any]

# what the forked helpers inherit (set just before the pool forks, cleared right after)
_SHARED: dict[str, Any] = {}


def workers(n_events: int | None = None) -> int:
    """How many processes should parse ``n_events`` events (None: a file large enough).

    ``TRACEINSIGHT_WORKERS`` overrides; forking is used on Linux only."""
    env = settings.get("TRACEINSIGHT_WORKERS")
    if env is not None:
        return int(env)
    if n_events is not None and n_events < PARALLEL_MIN_EVENTS:
        return 1
    if not sys.platform.startswith("linux"):
        return 1
    return max(1, min(2, os.cpu_count() or 1))


@functools.cache
def _madvise() -> Callable[..., int] | None:
    """libc's madvise, looked up once (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def release_pages(data: bytes, a: int, b: int) -> None:
    """In a forked helper only: give back the pages of ``data[a:b]`` it will not read again.

    After ``fork`` the helper maps every page the parent had, so the 300 MB of JSON would count
    twice in the memory of the process tree. ``MADV_DONTNEED`` drops the helper's private
    copy-on-write view of whole pages inside the range (they would read as zeros here; the
    parent's pages are untouched). A no-op off Linux."""
    fn = _madvise()
    if fn is None or b <= a:
        return
    import ctypes
    import mmap

    base = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0
    page = mmap.PAGESIZE
    start = -(-(base + a) // page) * page
    end = ((base + b) // page) * page
    if end > start:
        fn(start, end - start, 4)  # MADV_DONTNEED


def _quiet_orphan(parent: int) -> None:
    """In a forked helper, first thing: die with the parent (Linux ``PR_SET_PDEATHSIG``)
    instead of printing a worker traceback when it is killed; Ctrl-C is the parent's."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(0)


# --- chunks claimed one at a time, results handed on in order ------------------------------

#: chunks this process may parse ahead of the one it hands on next (each waits in memory)
AHEAD = 1
#: chunks a helper may claim ahead of the one handed on next (their rows wait on disk)
HELPER_AHEAD = 6


def write_ipc(tables: dict[str, pa.Table], folder: str, prefix: str) -> dict[str, str]:
    """``tables`` as Arrow IPC files in ``folder`` (the paths, by table name)."""
    files = {}
    for name, t in tables.items():
        if t.num_rows == 0:
            continue
        path = os.path.join(folder, f"{prefix}_{name}.arrow")
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)
        files[name] = path
    return files


def read_ipc(files: dict[str, str]) -> dict[str, pa.Table]:
    """The tables of :func:`write_ipc` (memory-mapped; the files are removed once mapped)."""
    out = {}
    for name, path in files.items():
        out[name] = pa.ipc.open_file(pa.memory_map(path)).read_all()
        os.unlink(path)  # the mapping keeps the data until the table is dropped
    return out


def _claimer(n: int, counter: Any, emitted: Any = None, ahead: int = 0) -> Callable[[], int | None]:
    """``claim()``: the next unclaimed index (None: all claimed). With ``emitted`` (a shared
    count of results handed on) it first waits while the next index is more than ``ahead``
    past it, so a fast helper does not pile up results the parent has yet to take."""
    import time

    def claim() -> int | None:
        while emitted is not None and counter.value - emitted.value > ahead:
            time.sleep(0.005)
        with counter.get_lock():
            k = counter.value
            if k >= n:
                return None
            counter.value = k + 1
            return k

    return claim


def _picklable(e: BaseException) -> BaseException:
    import pickle

    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


def _claiming_helper(
    conn: Any,
    claim: Callable[[], int | None],
    work: Callable[[int], Part],
    folder: str,
    parent: int,
) -> None:
    """A forked helper: parse the chunks it claims, hand each one's tables on as IPC files."""
    _quiet_orphan(parent)
    try:
        while (k := claim()) is not None:
            tables, extra = work(k)
            conn.send(("ok", k, write_ipc(tables, folder, f"c{k}"), extra))
            del tables
        conn.send(("done",))
    except BaseException as e:
        with contextlib.suppress(Exception):
            conn.send(("error", _picklable(e)))
    finally:
        conn.close()
        os._exit(0)


def in_order(
    n: int,
    work: Callable[[int], Part],
    emit: Callable[[int, Part], None],
    *,
    helpers: int = 1,
    forked: Callable[[], None] | None = None,
) -> None:
    """Run ``work(k)`` for every ``k < n`` and call ``emit(k, result)`` here, in order of ``k``.

    This process and ``helpers`` forked helpers each claim the next unclaimed ``k`` in turn,
    so the work balances itself (this process also emits: it claims fewer). A helper's tables
    come back as Arrow IPC files; its other result must be picklable. ``forked()`` is called
    once the helpers exist (threads may start then). An exception in a helper, or raised by
    ``emit``, stops the helpers and is raised here. Without helpers everything runs here.
    """
    import multiprocessing
    import multiprocessing.connection
    import tempfile

    if helpers < 1 or n < 2:
        if forked:
            forked()
        for k in range(n):
            emit(k, work(k))
        return
    ctx = multiprocessing.get_context("fork")
    counter, emitted = ctx.Value("q", 0), ctx.Value("q", 0)
    claim = _claimer(n, counter)
    helper_claim = _claimer(n, counter, emitted, HELPER_AHEAD)
    with tempfile.TemporaryDirectory(prefix="traceinsight-parse-") as tmp:
        procs, conns = [], []
        try:
            for _ in range(helpers):
                mine, theirs = ctx.Pipe(duplex=False)
                p = ctx.Process(
                    target=_claiming_helper,
                    daemon=True,
                    args=(theirs, helper_claim, work, tmp, os.getpid()),
                )
                p.start()
                theirs.close()
                procs.append(p)
                conns.append(mine)
            if forked:
                forked()
            _drive(n, work, emit, claim, conns, emitted)
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
                p.join()
            for c in conns:
                c.close()


def _drive(
    n: int,
    work: Callable[[int], Part],
    emit: Callable[[int, Part], None],
    claim: Callable[[], int | None],
    conns: list[Any],
    emitted: Any,
) -> None:
    import multiprocessing.connection

    ready: dict[int, tuple[bool, Any, Any]] = {}  # k -> (here, tables or files, extra)
    live = list(conns)
    mine_done = False
    nxt = 0

    def receive(conn: Any) -> None:
        try:
            msg = conn.recv()
        except EOFError:
            raise RuntimeError("a parse helper process ended unexpectedly") from None
        if msg[0] == "ok":
            ready[msg[1]] = (False, msg[2], msg[3])
        elif msg[0] == "done":
            live.remove(conn)
        else:
            raise msg[1]

    while nxt < n:
        if nxt in ready:
            here, tables, extra = ready.pop(nxt)
            emit(nxt, (tables if here else read_ipc(tables), extra))
            nxt += 1
            emitted.value = nxt
            continue
        polled = [c for c in live if c.poll()]
        for c in polled:
            receive(c)
        if polled:
            continue
        if not mine_done and sum(1 for r in ready.values() if r[0]) < AHEAD:
            k = claim()
            if k is None:
                mine_done = True
            else:
                tables, extra = work(k)
                ready[k] = (True, tables, extra)
            continue
        if not live:
            raise RuntimeError(f"chunk {nxt} of {n} was never parsed")
        for c in multiprocessing.connection.wait(live):
            receive(c)


def _helper(i: int) -> tuple[dict[str, str], Any]:
    """In a forked helper: run part ``i``, write its tables as Arrow IPC files."""
    work, outdir = _SHARED["work"], _SHARED["dir"]
    tables, state = work(i)
    files = {}
    for name, t in tables.items():
        path = os.path.join(outdir, f"w{i}_{name}.arrow")
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)
        files[name] = path
    return files, state


def fork_and_join(
    work: Callable[[int], Part],
    helpers: int,
    *,
    here: Callable[[], dict[str, pa.Table]] | None = None,
    forked: Callable[[], None] | None = None,
    done: Callable[[int], None] | None = None,
) -> tuple[dict[str, pa.Table], list[Any]]:
    """Run ``work(i)`` for each ``i < helpers`` in forked processes and join the tables.

    ``forked()`` is called once the helpers exist (threads may start then), ``here()`` parses
    this process's own part meanwhile, ``done(i)`` reports each helper's end. The tables of
    each name are joined in order (this process's part first, then the helpers'); the
    helpers' states are returned in order. An exception in a helper is raised here.
    """
    import multiprocessing
    import tempfile

    with tempfile.TemporaryDirectory(prefix="traceinsight-parse-") as tmp:
        _SHARED.update(work=work, dir=tmp)
        pool = multiprocessing.get_context("fork").Pool(
            helpers, initializer=_quiet_orphan, initargs=(os.getpid(),)
        )
        try:
            _SHARED.clear()
            results = pool.imap(_helper, range(helpers))
            if forked:
                forked()
            mine = here() if here else {}
            handed = []
            for i, r in enumerate(results):
                handed.append(r)
                if done:
                    done(i)
        except BaseException:
            pool.terminate()
            raise
        else:
            pool.close()
        finally:
            _SHARED.clear()
            pool.join()
        tables = {}
        names = list(handed[0][0] if handed else mine)
        for name in names:  # one name at a time: each part is freed once joined
            parts = [mine.pop(name)] if name in mine else []
            parts += [
                pa.ipc.open_file(pa.memory_map(files[name])).read_all() for files, _ in handed
            ]
            tables[name] = pa.concat_tables(parts).unify_dictionaries().combine_chunks()
            del parts
    return tables, [state for _, state in handed]
