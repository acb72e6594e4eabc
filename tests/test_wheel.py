"""The built wheel ships rules/, templates/ and py.typed, no test builders, and works from a clean
install."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

from tracegen.synth import KinetoTraceBuilder
from traceinsight import __version__


def run(args: list, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    assert res.returncode == 0, f"{args}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    return res


@pytest.mark.slow
def test_installed_wheel_ships_rules_and_templates(tmp_path: Path) -> None:
    pytest.importorskip("hatchling", reason="hatchling (the build backend, extra [dev]) is needed")
    # GIVEN a wheel built from this checkout, installed into an empty target dir
    run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            tmp_path / "dist",
            REPO,
        ]
    )
    wheel = next((tmp_path / "dist").glob("*.whl"))
    assert wheel.name.startswith(f"traceinsight_doctor-{__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    # the license file the metadata declares (BSD-3-Clause) ships in the wheel
    licenses = [n for n in names if ".dist-info/" in n and n.endswith("/LICENSE")]
    assert licenses, sorted(n for n in names if ".dist-info/" in n)
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert f"Version: {__version__}" in meta.decode()
    assert "BSD-3-Clause" in meta.decode()
    rules = {n for n in names if n.startswith("traceinsight/_data/rules/")}
    templates = {n for n in names if n.startswith("traceinsight/_data/templates/")}
    assert "traceinsight/_data/rules/comm-bound.yaml" in rules
    assert len(rules) == len(list((REPO / "rules").glob("*.yaml")))
    assert {
        f"traceinsight/_data/templates/{t}"
        for t in ("report.html", "compare.html", "trend.html", "base.html", "_macros.html")
    } <= templates
    assert "traceinsight/devices/devices.yaml" in names
    assert "traceinsight/py.typed" in names  # PEP 561: users' type checkers read our hints
    assert "traceinsight/capture/_profile_site/sitecustomize.py" in names  # `traceinsight profile`
    assert not [n for n in names if n.endswith((".swp", "~", ".pyc"))]
    # the trace builders and the simulator are for tests, samples and benchmarks only
    top = {n.split("/")[0] for n in names}
    assert not {"tracegen", "tests", "bench", "sample_traces"} & top
    assert not [
        n for n in names if Path(n).stem in ("synth", "workloads", "make_trace", "make_samples")
    ]
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            tmp_path / "site",
            wheel,
        ]
    )
    b = KinetoTraceBuilder(rank=0)
    with b.step(1, 0, 1_000_000):
        with b.cpu_op("aten::mm", 10_000, 50_000):
            b.launch("gemm", cpu_start=20_000, gpu_start=30_000, gpu_dur=100_000)
    trace = b.write(tmp_path / "t.json")
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "site"),
        "TRACEINSIGHT_CACHE_DIR": str(tmp_path / "cache"),
    }
    # WHEN the installed copy runs (cwd and PYTHONPATH keep the checkout off sys.path)
    listing = run(
        [sys.executable, "-m", "traceinsight", "rules", "--explain", "comm-bound"],
        cwd=tmp_path,
        env=env,
    ).stdout
    assert "file: comm-bound.yaml" in listing
    where = run(
        [
            sys.executable,
            "-c",
            "import traceinsight.util.resources as r; "
            "print(r.data_dir('rules')); print(r.data_dir('templates'))",
        ],
        cwd=tmp_path,
        env=env,
    ).stdout
    # THEN the rules and templates come from the installed wheel, not the checkout
    assert str(tmp_path / "site") in where and str(REPO) not in where
    run(
        [
            sys.executable,
            "-m",
            "traceinsight",
            "diagnose",
            trace,
            "--html",
            tmp_path / "r.html",
            "--json",
            tmp_path / "r.json",
        ],
        cwd=tmp_path,
        env=env,
    )
    html = (tmp_path / "r.html").read_text()
    assert "<html" in html and "traceinsight" in html
    run(
        [
            sys.executable,
            "-m",
            "traceinsight",
            "compare",
            trace,
            tmp_path / "r.json",
            "--html",
            tmp_path / "c.html",
        ],
        cwd=tmp_path,
        env=env,
    )
    assert 'id="waterfall"' in (tmp_path / "c.html").read_text()
