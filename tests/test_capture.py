"""Tests of traceinsight.capture.

The recording tests need torch (the ``[torch]`` extra) and skip without it; the
import/error/sanitize tests run everywhere.
"""

from __future__ import annotations

import gzip
import importlib
import json
import sys
import warnings
from pathlib import Path

import pytest

TORCH_REASON = "torch not installed (extra [torch])"


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def _events(path: Path) -> list[dict]:
    return _load(path)["traceEvents"]


def _step_names(events: list[dict]) -> list[str]:
    return sorted(
        e["name"]
        for e in events
        if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")
    )


def _train(torch, prof, iterations: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(iterations):
        x = torch.randn(16, 8)
        with torch.profiler.record_function("forward"):
            loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        prof.step()


# ---------------------------------------------------------------- no torch needed


def test_import_and_profile_without_torch(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    monkeypatch.setitem(sys.modules, "torch.profiler", None)
    monkeypatch.delitem(sys.modules, "traceinsight.capture", raising=False)
    capture = importlib.import_module("traceinsight.capture")

    with pytest.raises(capture.CaptureUnavailable) as info:
        capture.profile(tmp_path / "t.pt.trace.json.gz")
    assert isinstance(info.value, RuntimeError)
    assert str(info.value) == (
        "torch is not installed; install the extra: pip install 'traceinsight-doctor[torch]'"
    )
    assert not list(tmp_path.iterdir())
    assert capture.steps_needed(wait=1, warmup=1, active=3, repeat=2) == 10


def test_sanitize_trace_rewrites_paths_and_host(tmp_path):
    from traceinsight.capture import sanitize_file, sanitize_trace

    script = tmp_path / "proj" / "train.py"
    trace = {
        "traceName": "/home/alice/runs/t.pt.trace.json",
        "host_name": "alice-laptop",
        "baseTimeNanoseconds": 1,
        "traceEvents": [
            {
                "ph": "X",
                "cat": "python_function",
                "ts": 1.5,
                "dur": 2,
                "name": "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py(1): "
                "_call_impl",
            },
            {"ph": "X", "cat": "python_function", "ts": 2, "dur": 1, "name": f"{script}(12): step"},
            {
                "ph": "X",
                "cat": "python_function",
                "ts": 2,
                "dur": 1,
                "name": "/srv/users/bob/lib.py(3): f",
            },
            {
                "ph": "X",
                "cat": "python_function",
                "ts": 2,
                "dur": 1,
                "name": "torch/nn/functional.py(9): linear",
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "ts": 3,
                "dur": 1,
                "name": "aten::addmm",
                "args": {"Input Dims": [[4, 8], [8, 2]], "Concrete Inputs": ["", "1"]},
            },
        ],
    }
    clean = sanitize_trace(trace, script=script)
    assert clean["traceName"] == "t.pt.trace.json"
    assert clean["host_name"] == "localhost"
    names = [e["name"] for e in clean["traceEvents"]]
    assert names[0] == "<site-packages>/torch/nn/modules/module.py(1): _call_impl"
    assert names[1] == "<script>/train.py(12): step"
    assert names[2] == "<abs>/lib.py(3): f"
    assert names[3] == "torch/nn/functional.py(9): linear"
    assert clean["traceEvents"][4] == trace["traceEvents"][4]
    dumped = json.dumps(clean)
    for leak in ("alice", "bob", "/opt/conda", str(tmp_path)):
        assert leak not in dumped

    path = tmp_path / "t.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    sanitize_file(path, script=script)
    again = _load(path)
    assert again["traceName"] == "t.pt.trace.json.gz"
    assert [e["name"] for e in again["traceEvents"]] == names


# ---------------------------------------------------------------- with torch


def test_profile_records_steps_shapes_and_modules(tmp_path):
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    from traceinsight.capture import profile

    out = tmp_path / "linear.pt.trace.json.gz"
    session = profile(out, wait=1, warmup=1, active=3)
    with session as prof:
        assert isinstance(prof, torch.profiler.profile)
        _train(torch, prof, iterations=6)  # one more than the schedule needs
    assert session.outputs == [out]
    assert out.read_bytes()[:2] == b"\x1f\x8b"

    trace = _load(out)
    events = trace["traceEvents"]
    # wait=step 0, warmup=step 1, active=steps 2..4; step 5 is after the window
    assert _step_names(events) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    ops_with_dims = [
        e for e in events if e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {})
    ]
    assert ops_with_dims
    assert any(e["name"] in ("aten::addmm", "aten::linear") for e in ops_with_dims)
    modules = {
        e["name"]
        for e in events
        if e.get("cat") == "python_function" and e.get("name", "").startswith("nn.Module: ")
    }
    assert "nn.Module: Linear_0" in modules
    assert any(e.get("name") == "[memory]" and e.get("ph") == "i" for e in events)
    assert sum(1 for e in events if e.get("name") == "forward") == 3
    for flag in ("record_shapes", "profile_memory", "with_stack"):
        assert trace.get(flag) == 1


@pytest.mark.filterwarnings("ignore:.*Profiler clears events:UserWarning")
def test_profile_gzip_naming_cycles_and_sanitize(tmp_path):
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    from traceinsight.capture import profile

    plain = profile(tmp_path / "plain.json", wait=0, warmup=1, active=1, gzip=False)
    with plain as prof:
        _train(torch, prof, iterations=2)
    assert plain.outputs == [tmp_path / "plain.json"]
    assert json.loads((tmp_path / "plain.json").read_text())["traceEvents"]

    session = profile(
        tmp_path / "run.pt.trace.json", wait=0, warmup=1, active=1, repeat=2, sanitize=True
    )
    assert session.path == tmp_path / "run.pt.trace.json.gz"
    with session as prof:
        _train(torch, prof, iterations=4)
    assert session.outputs == [
        tmp_path / "run.pt.trace.json.gz",
        tmp_path / "run.cycle1.pt.trace.json.gz",
    ]
    first, second = (_load(p) for p in session.outputs)
    assert _step_names(first["traceEvents"]) == ["ProfilerStep#1"]
    assert _step_names(second["traceEvents"]) == ["ProfilerStep#3"]
    assert first["traceName"] == "run.pt.trace.json.gz"
    assert first["host_name"] == "localhost"


def test_profile_warns_when_loop_ends_before_window(tmp_path):
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    from traceinsight.capture import profile

    session = profile(tmp_path / "never.pt.trace.json.gz", wait=2, warmup=1, active=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with session as prof:
            _train(torch, prof, iterations=1)
    assert session.outputs == []
    assert not (tmp_path / "never.pt.trace.json.gz").exists()
    assert any("no trace written" in str(w.message) for w in caught)
