"""The Dask path: per-rank ingest and per-rank analysis as ``dask.distributed`` tasks on a small
LocalCluster (2 workers in this process), reached by its address and by a scheduler file, with
the same store and the same result as local processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SAMPLES

from traceinsight.diagnose import diagnose
from traceinsight.errors import ConfigError
from traceinsight.ingest import ingest
from traceinsight.store.schema import TABLES
from traceinsight.util.distributed import Runner, using

distributed = pytest.importorskip("distributed")

STRAGGLER = SAMPLES / "synthetic_straggler_4rank"


@pytest.fixture(scope="module")
def cluster():
    c = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    )
    yield c
    c.close()


def _strip(result) -> dict:
    d = json.loads(result.to_json())
    d["extra"].pop("open_in_viewer", None)
    return d


def test_dask_ingest_and_analysis_match_local_processes(
    cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEINSIGHT_WORKERS", "1")  # the tasks set it in this process
    with using(Runner(jobs=2)):
        local = ingest([STRAGGLER], tmp_path / "local", quiet=True)
        want = diagnose(local, cache=False)
    with using(Runner(scheduler=cluster.scheduler_address, fresh=True)) as runner:
        st = ingest([STRAGGLER], tmp_path / "dask", quiet=True)
        got = diagnose(st, cache=False)
        assert runner.client().scheduler_info()["workers"]
    for name in TABLES:
        assert st.table(name).equals(local.table(name)), name
    assert _strip(got)["extra"]["cross_rank"] == _strip(want)["extra"]["cross_rank"]
    assert _strip(got)["findings"] == _strip(want)["findings"]
    # the per-rank summaries were computed by the tasks and cached in the rank partitions
    for r in range(4):
        assert list((st.path / f"rank={r}" / "derived").glob("rank-summary-*.json"))


def test_scheduler_file(cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEINSIGHT_WORKERS", "1")
    sched = tmp_path / "scheduler.json"
    # what `dask scheduler --scheduler-file FILE` writes (its address is what a client reads)
    sched.write_text(json.dumps({"type": "Scheduler", "address": cluster.scheduler_address}))
    with using(Runner(scheduler=str(sched))):
        st = ingest([STRAGGLER], tmp_path / "s", quiet=True)
        r = diagnose(st, cache=False)
    assert r.extra["cross_rank"]["straggler"]["rank"] == 2


def test_unreachable_scheduler_is_a_config_error(tmp_path: Path) -> None:
    runner = Runner(scheduler="tcp://127.0.0.1:9", timeout="2s")
    with using(runner), pytest.raises(ConfigError, match="cannot reach the Dask scheduler"):
        ingest([STRAGGLER], tmp_path / "s", quiet=True)
