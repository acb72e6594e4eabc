"""Where per-rank work runs: in this process, in local worker processes, or on a Dask cluster.

The per-rank ingest (``ingest/ranks.py``), the per-rank attribution with its step table and
rank summary (``analysis/attribution_parts.py``) and, with a scheduler, the per-rank summaries
(``metrics/rank_summary.py``) hand a :class:`Runner` one small task per rank partition; each
task reads the store's rank folder itself, so only its results travel back. The default
runner uses local worker processes, one per core (``--jobs N``). ``--scheduler`` runs the same
tasks as ``dask.distributed`` tasks (``pip install 'traceinsight-doctor[dask]'``):

- ``local``: a ``LocalCluster`` on this machine (``--jobs`` workers);
- ``tcp://HOST:8786`` (any address a ``dask.distributed.Client`` takes): a running scheduler;
- a path to a scheduler file (``dask scheduler --scheduler-file FILE``, e.g. under Slurm).

On a cluster the store (the cache, ``TRACEINSIGHT_CACHE_DIR``, or ``-o``) and the traces must
be on storage every worker sees at the same path; the cross-rank reduction runs here.

The CLI sets the runner for a command with :func:`using`; library calls read it with
:func:`current` (default: local processes, one per core).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from traceinsight.errors import ConfigError, InstallError

__all__ = ["Runner", "current", "default_jobs", "using"]

T = TypeVar("T")
R = TypeVar("R")


def default_jobs() -> int:
    """The number of cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class Runner:
    """How per-rank tasks run: ``jobs`` local processes (None: one per core; 1: in this
    process), or a Dask ``scheduler`` (``local``, an address or a scheduler file)."""

    jobs: int | None = None
    scheduler: str | None = None
    #: recompute per-rank results instead of reading those cached in the store
    fresh: bool = False
    #: how long to try reaching a Dask scheduler
    timeout: str = "30s"
    _client: Any = field(default=None, repr=False)
    _cluster: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.jobs is not None and self.jobs < 1:
            raise ConfigError(f"--jobs must be 1 or more, not {self.jobs}")

    @property
    def workers(self) -> int:
        """Local worker processes (for a Dask scheduler: the LocalCluster's workers)."""
        return self.jobs if self.jobs is not None else default_jobs()

    def slots(self) -> int:
        """How many tasks run at once: the local workers, or the threads of every worker of
        the Dask cluster (a cluster's size, not this machine's cores)."""
        if not self.scheduler:
            return self.workers
        try:
            return max(1, sum(self.client().nthreads().values()))
        except Exception:  # a cluster that cannot say: its workers as configured
            return self.workers

    @property
    def label(self) -> str:
        """How the tasks run, in a few words (progress and benchmark lines)."""
        if self.scheduler:
            return f"dask {self.scheduler}"
        return "1 process" if self.workers == 1 else f"{self.workers} processes"

    def map(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        done: Callable[[int, int], None] | None = None,
    ) -> list[R]:
        """``fn`` of every item, in item order; ``done(finished, total)`` after each task."""
        total = len(items)
        out: list[Any] = [None] * total
        if not items:
            return []
        if self.scheduler:
            self._map_dask(fn, items, out, done)
        elif self.workers == 1 or total == 1:
            for i, item in enumerate(items):
                out[i] = fn(item)
                if done:
                    done(i + 1, total)
        else:
            self._map_local(fn, items, out, done)
        return out

    def _map_local(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        out: list[Any],
        done: Callable[[int, int], None] | None,
    ) -> None:
        # fork: the workers start at once with this process's imports (forkserver or spawn
        # would import pyarrow and pandas again in each, ~1 s, and re-run an unguarded
        # __main__); the tasks start no threads of this process's and share nothing with it
        import multiprocessing  # imported here, as the next: every command starts faster
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        n = min(self.workers, len(items))
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
            for k, fut in enumerate(as_completed(futures), 1):
                out[futures[fut]] = fut.result()
                if done:
                    done(k, len(items))

    def _map_dask(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        out: list[Any],
        done: Callable[[int, int], None] | None,
    ) -> None:
        from distributed import as_completed as dask_completed

        client = self.client()
        futures = client.map(fn, list(items), pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        for k, fut in enumerate(dask_completed(futures), 1):
            out[index[fut.key]] = fut.result()
            if done:
                done(k, len(items))

    def client(self) -> Any:
        """The ``dask.distributed.Client`` of :attr:`scheduler` (made once, closed by
        :meth:`close`)."""
        if self._client is not None:
            return self._client
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise InstallError(
                "--scheduler needs dask.distributed, which is not installed",
                hint="pip install 'traceinsight-doctor[dask]'",
            ) from None
        where = str(self.scheduler)
        hint = (
            "pass local, a scheduler address (tcp://HOST:8786) or a scheduler file written by "
            "`dask scheduler --scheduler-file FILE`"
        )
        looks_like_path = ("/" in where and "://" not in where) or where.endswith(".json")
        if looks_like_path and not Path(where).is_file():
            raise ConfigError(f"the Dask scheduler file {where} does not exist", hint=hint)
        try:
            if where == "local":
                self._cluster = LocalCluster(
                    n_workers=self.workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",
                )
                self._client = Client(self._cluster)
            elif Path(where).is_file():
                self._client = Client(scheduler_file=where, timeout=self.timeout)
            else:
                self._client = Client(where, timeout=self.timeout)
        except (OSError, TimeoutError) as e:
            raise ConfigError(f"cannot reach the Dask scheduler {where}: {e}", hint=hint) from None
        except (ValueError, KeyError, TypeError, AssertionError) as e:
            # a malformed address, or a scheduler file that is not one dask wrote
            what = "scheduler file" if Path(where).is_file() else "scheduler address"
            reason = " ".join(str(e).split())[:200] or type(e).__name__
            raise ConfigError(f"cannot use the Dask {what} {where} ({reason})", hint=hint) from None
        return self._client

    def close(self) -> None:
        """Close the Dask client (and a LocalCluster this runner started)."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


_CURRENT: contextvars.ContextVar[Runner | None] = contextvars.ContextVar(
    "traceinsight_runner", default=None
)


def current() -> Runner:
    """The runner of this command (default: local processes, one per core)."""
    r = _CURRENT.get()
    return r if r is not None else Runner()


@contextlib.contextmanager
def using(runner: Runner) -> Iterator[Runner]:
    """Run the per-rank work of this block with ``runner`` (closed at the end)."""
    token = _CURRENT.set(runner)
    try:
        yield runner
    finally:
        _CURRENT.reset(token)
        runner.close()
