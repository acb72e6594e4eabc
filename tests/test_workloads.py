"""The scenario generator: every preset builds, is well-formed and shows its bottleneck in raw data.

Everything here reads the builder's plain JSON data (``to_dict()``, times as exact decimal text)
with the standard library, not traceinsight's ingest or analysis code, so these numbers are an
independent check of the traces the rules engine is tested against.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tracegen.devices import DEVICE_PROPS, DEVICES
from tracegen.workloads import PRESETS, GiB, Workload, build, build_ranks

Trace = dict[str, Any]
Event = dict[str, Any]
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


# --- reading raw traces ------------------------------------------------------------------------


def _ns(x: Any) -> int:
    return int(Decimal(str(x)) * 1000)


def _load(builder: Any) -> Trace:
    """The trace as plain JSON data, each event copied with integer ns bounds ``_s`` / ``_e``."""
    d = dict(builder.to_dict())
    events = []
    for e in d["traceEvents"]:
        if "ts" in e:
            s = _ns(e["ts"])
            e = {**e, "_s": s, "_e": s + _ns(e.get("dur", 0))}
        events.append(e)
    d["traceEvents"] = events
    return d


@cache
def preset(name: str) -> Trace:
    w = PRESETS[name]
    if w.world_size > 1 and w.straggler_rank is not None:  # build() simulates every rank anyway
        return preset_ranks(name)[w.rank]
    return _load(build(w))


@cache
def preset_ranks(name: str) -> tuple[Trace, ...]:
    return tuple(_load(b) for b in build_ranks(PRESETS[name]))


def xs(d: Trace, *cats: str) -> list[Event]:
    """Complete (``X``) events, optionally of the given categories."""
    return [
        e for e in d["traceEvents"] if e.get("ph") == "X" and (not cats or e.get("cat") in cats)
    ]


def span(e: Event) -> tuple[int, int]:
    return e["_s"], e["_e"]


def union_ns(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, 0, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def is_step(e: Event) -> bool:
    return e["name"].startswith("ProfilerStep#")


def steps(d: Trace) -> list[tuple[int, int]]:
    return sorted(span(e) for e in xs(d, "user_annotation") if is_step(e))


def window(d: Trace) -> tuple[int, int]:
    """First ProfilerStep start .. max(last step end, last GPU activity end)."""
    st = steps(d)
    gpu_end = max(span(e)[1] for e in xs(d, *GPU_CATS))
    return st[0][0], max(st[-1][1], gpu_end)


def gpu_steps(d: Trace) -> list[int]:
    """GPU-aware step durations (docs/FORMATS.md §1.9): from max(host start, previous end) to
    max(host end, end of the GPU work launched in the step = its gpu_user_annotation)."""
    proj = sorted(span(e) for e in xs(d, "gpu_user_annotation") if is_step(e))
    out, prev_end = [], 0
    for (hs, he), (_gs, ge) in zip(steps(d), proj):
        start, end = max(hs, prev_end), max(he, ge)
        out.append(end - start)
        prev_end = end
    return out


def kernels(d: Trace) -> list[Event]:
    return xs(d, "kernel")


def is_nccl(name: str) -> bool:
    return "nccl" in name.lower()


def busy_fraction(d: Trace) -> float:
    w0, w1 = window(d)
    return union_ns([span(k) for k in kernels(d)]) / (w1 - w0)


def exposed_comm_fraction(d: Trace) -> float:
    """Time with an NCCL kernel running and no compute kernel, over the window."""
    comm = [span(k) for k in kernels(d) if is_nccl(k["name"])]
    comp = [span(k) for k in kernels(d) if not is_nccl(k["name"])]
    w0, w1 = window(d)
    return (union_ns(comm + comp) - union_ns(comp)) / (w1 - w0)


def is_gemm(name: str) -> bool:
    prefixes = ("sm90_xmma_gemm", "nvjet_", "ampere_", "volta_", "Cijk_", "sm70_xmma")
    return name.startswith(prefixes) or "sgemm" in name


def is_attention(name: str) -> bool:
    return "flash" in name or "fmha" in name or "Fmha" in name


def kernel_time(d: Trace, pred: Any) -> int:
    return sum(_ns(k["dur"]) for k in kernels(d) if pred(k["name"]))


def memory_events(d: Trace) -> list[Event]:
    return sorted(
        (e for e in d["traceEvents"] if e.get("name") == "[memory]"), key=lambda e: e["_s"]
    )


def total_mem(d: Trace) -> int:
    return d["deviceProperties"][0]["totalGlobalMem"]


def max_reserved(d: Trace) -> int:
    return max(e["args"]["Total Reserved"] for e in memory_events(d))


def reserved_over_allocated_at_peak(d: Trace) -> float:
    top = max_reserved(d)
    first = next(e for e in memory_events(d) if e["args"]["Total Reserved"] == top)
    return top / first["args"]["Total Allocated"]


def allocated_at_step_ends(d: Trace) -> list[int]:
    mem = memory_events(d)
    return [
        [m for m in mem if m["_s"] <= end][-1]["args"]["Total Allocated"]
        for _start, end in steps(d)
    ]


# --- every preset: well-formed ------------------------------------------------------------------


def assert_well_formed(d: Trace, w: Workload) -> None:
    ev = d["traceEvents"]
    # GIVEN the steps and the device it claims
    names = [e["name"] for e in xs(d, "user_annotation") if is_step(e)]
    assert names == [f"ProfilerStep#{w.first_step + i}" for i in range(w.steps)]
    assert d["deviceProperties"][0]["name"] == DEVICE_PROPS[w.device]["name"]

    # THEN no two activities overlap on one GPU stream
    by_stream: dict[tuple[Any, Any], list[tuple[int, int]]] = defaultdict(list)
    for e in xs(d, *GPU_CATS):
        by_stream[(e["pid"], e["tid"])].append(span(e))
    for iv in by_stream.values():
        assert all(a[1] <= b[0] for a, b in pairwise(sorted(iv)))

    # AND every GPU activity has exactly one launch with its correlation id, and starts after it
    runtime: dict[int, list[Event]] = defaultdict(list)
    for e in xs(d, "cuda_runtime", "cuda_driver"):
        runtime[e["args"]["correlation"]].append(e)
    for g in xs(d, *GPU_CATS):
        launches = runtime[g["args"]["correlation"]]
        assert len(launches) == 1, g["name"]
        r = launches[0]
        blocking = r["name"] == "hipMemcpyWithStream"  # returns after its copy
        assert g["_s"] >= (r["_s"] if blocking else r["_e"])
        assert g["args"].get("External id") == r["args"].get("External id")

    # AND ops nest properly on every CPU thread, and the External id on each launch is the one of
    # the innermost enclosing cpu_op (time nesting and External id agree, docs/FORMATS.md §1.8)
    by_tid: dict[Any, list[Event]] = defaultdict(list)
    for e in xs(d, "cpu_op", "cuda_runtime", "cuda_driver"):
        by_tid[e["tid"]].append(e)
    for tid, evs in by_tid.items():
        stack: list[Event] = []
        for e in sorted(evs, key=lambda e: (e["_s"], -e["_e"], e["cat"] != "cpu_op")):
            while stack and stack[-1]["_e"] <= e["_s"]:
                stack.pop()
            assert not stack or e["_e"] <= stack[-1]["_e"], (tid, e["name"])
            if e["cat"] == "cpu_op":
                stack.append(e)
            elif stack:
                assert e["args"].get("External id") == stack[-1]["args"]["External id"], e["name"]

    # AND flows pair up
    flows: dict[tuple[str, int], set[str]] = defaultdict(set)
    for e in ev:
        if e.get("ph") in ("s", "f"):
            flows[(e["cat"], e["id"])].add(e["ph"])
    assert flows and all(v == {"s", "f"} for v in flows.values())

    # AND [memory] totals follow the Bytes of each event; reserved never shrinks
    mem = memory_events(d)
    assert bool(mem) == w.memory
    for a, b in pairwise(mem):
        assert b["args"]["Total Allocated"] - a["args"]["Total Allocated"] == b["args"]["Bytes"]
        assert b["args"]["Total Reserved"] >= a["args"]["Total Reserved"]
        assert a["args"]["Total Reserved"] >= a["args"]["Total Allocated"]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_is_well_formed(name: str) -> None:
    assert_well_formed(preset(name), PRESETS[name])


ODD = {
    "a100-fp16-1thread": Workload(
        device="A100", dtype="fp16", layers=2, steps=2, backward_thread=False, syncs_per_step=3
    ),
    "v100-fp32-ddp-jitter": Workload(
        device="V100",
        dtype="fp32",
        layers=2,
        steps=3,
        world_size=2,
        rank=1,
        comm_bytes=32 << 20,
        comm_overlap=0.5,
        jitter=0.2,
        memory=False,
        tiny_kernels_per_layer=5,
    ),
    "mi300x-straggler": Workload(
        device="MI300X",
        layers=3,
        steps=2,
        world_size=3,
        rank=2,
        comm_bytes=64 << 20,
        straggler_rank=0,
        straggler_slowdown=2.0,
        syncs_per_step=2,
        oom=True,
    ),
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_other_workloads_are_well_formed(name: str) -> None:
    assert_well_formed(_load(build(ODD[name])), ODD[name])


def test_full_launch_queue_blocks_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a queue of 48 launches (CUDA's is ~1024; a short trace never fills that)
    monkeypatch.setattr("tracegen.rank.LAUNCH_QUEUE_DEPTH", 48)
    w = Workload(steps=4, layers=1, slow_step_every=4, slow_step_extra_ns=2_000_000)
    d = _load(build(w))
    assert_well_formed(d, w)
    # THEN launches block (cudaLaunchKernel lasts longer than launch_ns) and, once the queue is
    # full, host steps take as long as GPU steps
    launches = [e for e in xs(d, "cuda_runtime") if e["name"].startswith("cudaLaunchKernel")]
    assert max(e["_e"] - e["_s"] for e in launches) > 10 * w.launch_ns
    host, gpu = [e - s for s, e in steps(d)], gpu_steps(d)
    assert abs(host[2] - gpu[2]) < 0.05 * gpu[2]


@pytest.mark.parametrize("name", ["healthy", "mi300x", "no_stack"])
def test_backward_runs_on_its_own_thread_linked_to_forward(name: str) -> None:
    d = preset(name)
    ops = xs(d, "cpu_op")
    main = xs(d, "user_annotation")[0]["tid"]
    bwd = [o for o in ops if o["name"].startswith("autograd::engine::evaluate_function: ")]
    assert bwd and {o["tid"] for o in bwd} == {main + 17}
    # forward ops carry Sequence number + Fwd thread id 0, backward nodes the same number + 1
    fwd = [o for o in ops if o["tid"] == main and "Sequence number" in o["args"]]
    assert all(o["args"]["Fwd thread id"] == 0 for o in fwd)
    fwd_seqs = {o["args"]["Sequence number"] for o in fwd}
    nodes = [o for o in bwd if "Sequence number" in o["args"]]
    assert {
        "AddmmBackward0",
        "TBackward0",
        "NativeLayerNormBackward0",
        "GeluBackward0",
        "AddBackward0",
    } <= {o["name"].split(": ", 1)[1] for o in nodes}
    assert all(o["args"]["Sequence number"] in fwd_seqs for o in nodes)
    assert all(o["args"]["Fwd thread id"] == 1 for o in nodes)
    # a fwdbwd flow per backward node, from the forward op's start to the node's start
    flow = [e for e in d["traceEvents"] if e.get("cat") == "fwdbwd"]
    assert len(flow) == 2 * len(nodes)
    assert {e["_s"] for e in flow if e["ph"] == "s"} <= {o["_s"] for o in fwd}
    assert {e["_s"] for e in flow if e["ph"] == "f"} == {o["_s"] for o in nodes}
    # backward GEMMs: two per forward GEMM
    count = defaultdict(int)
    for o in ops:
        count[o["name"]] += 1
    assert count["aten::mm"] == 2 * count["aten::addmm"]
    # no Python frames on the autograd thread
    assert not [e for e in xs(d, "python_function") if e["tid"] != main]


def test_healthy_has_realistic_forward_structure() -> None:
    d = preset("healthy")
    w = PRESETS["healthy"]
    frames = [e["name"] for e in xs(d, "python_function")]
    assert frames.count("nn.Module: TransformerBlock_3") == w.steps
    for cls in ("Linear_15", "LayerNorm_8", "SelfAttention_0", "MLP_3", "GELU_3", "Embedding_0"):
        assert frames.count(f"nn.Module: {cls}") == w.steps
    addmm = [e for e in xs(d, "cpu_op") if e["name"] == "aten::addmm"]
    h = w.hidden
    assert addmm[0]["args"]["Input Dims"] == [[3 * h], [w.tokens, h], [h, 3 * h], [], []]
    assert {t for e in addmm for t in e["args"]["Input type"][:3]} == {"c10::BFloat16"}
    names = {k["name"] for k in kernels(d)}
    for prefix in (
        "sm90_xmma_gemm_bf16bf16_bf16f32",
        "nvjet_tst_",
        "void pytorch_flash::flash_fwd_kernel<",
        "void pytorch_flash::flash_bwd_dq_dk_dv",
    ):
        assert any(n.startswith(prefix) for n in names), prefix
    for part in (
        "vectorized_layer_norm_kernel<c10::BFloat16, float>",
        "GeluCUDAKernelImpl",
        "multi_tensor_apply_kernel",
    ):
        assert any(part in n for n in names), part
    ann = {e["name"] for e in xs(d, "user_annotation")}
    assert {
        "Optimizer.step#AdamW.step",
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    } <= ann
    # the ProfilerStep GPU projection sits on the compute stream
    assert len([e for e in xs(d, "gpu_user_annotation") if e["tid"] == 7]) == w.steps


def test_default_workload_is_deterministic() -> None:
    a = build(Workload())
    assert a.to_dict() == build(Workload()).to_dict()
    jit = Workload(
        layers=1, steps=3, jitter=0.2, tiny_kernels_per_layer=4, world_size=2, comm_bytes=1 << 20
    )
    assert build(jit).to_dict() == build(jit).to_dict()
    assert build(jit).to_dict() != build(Workload(**{**jit.__dict__, "seed": 1})).to_dict()
    # and what write() produces is valid JSON with the same events
    assert len(json.loads(a.dumps())["traceEvents"]) == len(a.to_dict()["traceEvents"])


# --- knob effects ------------------------------------------------------------------------------


def test_healthy_gpu_is_busy() -> None:
    assert busy_fraction(preset("healthy")) > 0.9
    assert busy_fraction(preset("mi300x")) > 0.9


def test_launch_bound_gpu_starves() -> None:
    d = preset("launch_bound")
    assert busy_fraction(d) < 0.6
    # tiny kernels: most run for at most 3 µs
    durs = [e - s for s, e in map(span, kernels(d))]
    assert sum(x <= 3_000 for x in durs) / len(durs) > 0.5


def test_input_bound_dataloader_share() -> None:
    d = preset("input_bound")
    loader = sum(
        e["_e"] - e["_s"]
        for e in xs(d, "user_annotation")
        if e["name"].startswith("enumerate(DataLoader)")
    )
    assert 0.30 < loader / sum(e - s for s, e in steps(d)) < 0.40
    assert busy_fraction(d) < 0.75


def test_host_sync_stalls_the_gpu() -> None:
    d = preset("host_sync")
    w = PRESETS["host_sync"]
    syncs = [e for e in xs(d, "cuda_runtime") if e["name"] == "cudaStreamSynchronize"]
    assert len(syncs) == w.steps * w.syncs_per_step
    dense = [e for e in xs(d, "cpu_op") if e["name"] == "aten::_local_scalar_dense"]
    assert len(dense) == len(syncs)
    # idle GPU time right after each DtoH copy until the stream's next activity
    acts = sorted((span(e), e["name"]) for e in xs(d, *GPU_CATS) if e["tid"] == 7)
    idle = sum(b[0][0] - a[0][1] for a, b in pairwise(acts) if a[1].startswith("Memcpy DtoH"))
    w0, w1 = window(d)
    assert idle / (w1 - w0) > 0.15
    assert busy_fraction(d) < busy_fraction(preset("healthy")) - 0.2


def test_memory_bound_vs_compute_bound_kernel_mix() -> None:
    mb, cb = preset("memory_bound"), preset("compute_bound")
    total_mb = kernel_time(mb, lambda n: True)
    total_cb = kernel_time(cb, lambda n: True)
    mem_mb = kernel_time(mb, lambda n: not is_gemm(n) and not is_attention(n))
    assert mem_mb / total_mb > 0.6
    assert kernel_time(mb, is_gemm) / total_mb < 0.25
    assert kernel_time(cb, lambda n: is_gemm(n) or is_attention(n)) / total_cb > 0.85
    assert busy_fraction(cb) > 0.9


def test_fp32_gemms_have_no_tensor_core_kernels() -> None:
    d = preset("fp32_gemms")
    gemm_ops = [e for e in xs(d, "cpu_op") if e["name"] in ("aten::addmm", "aten::mm")]
    assert gemm_ops and {t for e in gemm_ops for t in e["args"]["Input type"][:2]} == {"float"}
    names = {k["name"] for k in kernels(d) if is_gemm(k["name"])}
    tensor_core = ("bf16", "f16", "tf32", "s16816", "nvjet")
    assert names and not [n for n in names if any(s in n for s in tensor_core)]
    # the same model in bf16 spends ~989/67 less time in GEMMs
    small = {**PRESETS["fp32_gemms"].__dict__, "layers": 1, "steps": 1}
    fp32 = _load(build(Workload(**small)))
    bf16 = _load(build(Workload(**{**small, "dtype": "bf16"})))
    assert 12 < kernel_time(fp32, is_gemm) / kernel_time(bf16, is_gemm) < 16


def test_comm_bound_exposes_allreduce() -> None:
    ranks = preset_ranks("comm_bound")
    w = PRESETS["comm_bound"]
    assert [r["distributedInfo"]["rank"] for r in ranks] == list(range(w.world_size))
    for d in ranks:
        assert exposed_comm_fraction(d) > 0.30
        nccl = [k for k in kernels(d) if is_nccl(k["name"])]
        assert nccl[0]["name"] == (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
        )
        assert nccl[0]["tid"] != 7
        comms = [e for e in xs(d, "cpu_op") if e["name"] == "record_param_comms"]
        assert len(comms) == w.steps
        a = comms[0]["args"]
        assert (a["Collective name"], a["Group size"], a["dtype"]) == ("allreduce", 4, "BFloat16")
        assert sum(e["args"]["In msg nelems"] for e in comms) * 2 == w.comm_bytes * w.steps
    # the healthy single-GPU run has no collectives at all
    assert not [k for k in kernels(preset("healthy")) if is_nccl(k["name"])]


def test_overlapped_allreduce_hides_under_backward() -> None:
    w = Workload(**{**PRESETS["comm_bound"].__dict__, "comm_bytes": 64 << 20, "comm_overlap": 1.0})
    exposed = exposed_comm_fraction(_load(build(w)))
    assert exposed < 0.05 < exposed_comm_fraction(preset_ranks("comm_bound")[0])


def test_straggler_slows_one_rank_and_the_others_wait() -> None:
    ranks = preset_ranks("straggler")
    compute = [kernel_time(d, lambda n: not is_nccl(n)) for d in ranks]
    comm = [kernel_time(d, is_nccl) for d in ranks]
    others = [c for r, c in enumerate(compute) if r != 2]
    assert 1.45 < compute[2] / (sum(others) / len(others)) < 1.55
    assert all(comm[r] > 2 * comm[2] for r in (0, 1, 3))
    # collectives end together on every rank
    ends = [sorted(span(k)[1] for k in kernels(d) if is_nccl(k["name"])) for d in ranks]
    assert all(e == ends[0] for e in ends)
    # build() of one rank sees the same waiting as build_ranks()
    one = _load(build(Workload(**{**PRESETS["straggler"].__dict__, "rank": 1})))
    assert kernel_time(one, is_nccl) == comm[1]


def test_jitter_slow_steps() -> None:
    d = preset("jitter")
    w = PRESETS["jitter"]
    cpu = [e - s for s, e in steps(d)]
    slow = [c for i, c in enumerate(cpu) if (i + 1) % w.slow_step_every == 0]
    fast = [c for i, c in enumerate(cpu) if (i + 1) % w.slow_step_every != 0]
    assert min(slow) - max(fast) > 0.8 * w.slow_step_extra_ns
    g = gpu_steps(d)  # the GPU waits for the stalled host, too
    assert g[1] - g[0] > 0.8 * w.slow_step_extra_ns
    assert any(e["name"] == "<built-in function collect>" for e in xs(d, "python_function"))


def test_memory_fragmentation_pressure_and_leak() -> None:
    frag, healthy = preset("fragmentation"), preset("healthy")
    gap = max(
        e["args"]["Total Reserved"] - e["args"]["Total Allocated"] for e in memory_events(frag)
    )
    assert gap >= GiB
    assert reserved_over_allocated_at_peak(frag) > 1.75
    assert reserved_over_allocated_at_peak(healthy) < 1.15
    for name, frac in (("healthy", 0.5), ("fragmentation", 0.6), ("memory_pressure", 0.96)):
        d = preset(name)
        assert frac - 0.01 <= max_reserved(d) / total_mem(d) <= frac + 0.01
    assert max_reserved(preset("memory_pressure")) >= 0.9 * total_mem(preset("memory_pressure"))
    ends = allocated_at_step_ends(preset("leak"))
    assert all(abs(b - a - 2 * GiB) < 0.01 * GiB for a, b in pairwise(ends))
    assert len(set(allocated_at_step_ends(healthy))) == 1
    # allocs and frees pair by address
    live: dict[int, int] = {}
    for e in memory_events(healthy):
        a = e["args"]
        assert a["Device Type"] == 1
        if a["Bytes"] > 0:
            live[a["Addr"]] = a["Bytes"]
        else:
            assert live.pop(a["Addr"]) == -a["Bytes"]


def test_oom_event() -> None:
    d = _load(build(Workload(layers=1, steps=1, oom=True, peak_memory_fraction=0.95)))
    oom = [e for e in d["traceEvents"] if e.get("name") == "[OutOfMemory]"]
    assert len(oom) == 1
    a = oom[0]["args"]
    assert a["Total Reserved"] + a["Bytes"] > total_mem(d) and "Addr" not in a


def test_mi300x_looks_like_rocm() -> None:
    d = preset("mi300x")
    assert d["deviceProperties"][0]["warpSize"] == 64 and "hip_runtime_version" in d
    rt = {e["name"] for e in xs(d, "cuda_runtime")}
    assert {"hipLaunchKernel", "hipExtModuleLaunchKernel"} <= rt
    assert not [n for n in rt if n.startswith("cuda")]
    ks = kernels(d)
    assert {k["tid"] for k in ks} == {0}
    api = {e["args"]["correlation"]: e["name"] for e in xs(d, "cuda_runtime")}
    cijk = [k for k in ks if k["name"].startswith("Cijk_Alik_Bljk_BBS_BH")]
    assert cijk and {api[k["args"]["correlation"]] for k in cijk} == {"hipExtModuleLaunchKernel"}
    assert any("ck_tile" in k["name"] and "FmhaFwd" in k["name"] for k in ks)
    assert all("est. achieved occupancy %" not in k["args"] for k in ks)
    assert {k["args"]["kind"] for k in ks} == {"Dispatch Kernel"}
    assert {e["args"]["Device Type"] for e in memory_events(d)} == {6}


def test_no_stack_capture() -> None:
    d = preset("no_stack")
    assert not xs(d, "python_function")
    assert not [e for e in xs(d, "cpu_op") if "Input Dims" in e["args"]]
    assert "with_stack" not in d and "record_shapes" not in d and d["profile_memory"] == 1
    # Sequence numbers (autograd) do not depend on record_shapes
    assert [e for e in xs(d, "cpu_op") if "Sequence number" in e["args"]]


def test_single_thread_backward_and_other_devices() -> None:
    d = _load(build(Workload(layers=1, steps=1, backward_thread=False)))
    assert {e["tid"] for e in xs(d, "cpu_op")} == {xs(d, "user_annotation")[0]["tid"]}
    bwd = [
        e
        for e in xs(d, "cpu_op")
        if e["name"].startswith("autograd::engine") and "Sequence number" in e["args"]
    ]
    assert bwd and all(e["args"]["Fwd thread id"] == 1 for e in bwd)
    for device, dtype, gemm in (
        ("A100", "bf16", "ampere_bf16_s16816gemm"),
        ("V100", "fp16", "volta_fp16_s884gemm"),
    ):
        trace = _load(build(Workload(device=device, dtype=dtype, layers=1, steps=1)))
        assert any(k["name"].startswith(gemm) for k in kernels(trace))


def test_invalid_workloads_are_rejected() -> None:
    for bad in (
        {"device": "TPU"},
        {"dtype": "int8"},
        {"rank": 4, "world_size": 4},
        {"straggler_rank": 5, "world_size": 4},
        {"comm_overlap": 1.5},
        {"layers": 0},
    ):
        with pytest.raises(ValueError):
            Workload(**bad)


# --- bundled samples -----------------------------------------------------------------------------


def test_bundled_samples_are_current() -> None:
    files = [
        *sorted(SAMPLES.glob("synthetic_*.json.gz")),
        *sorted(SAMPLES.glob("synthetic_*/rank-*.json.gz")),
    ]
    assert len(files) == 12
    for f in files:
        data = f.read_bytes()
        assert len(data) < 2 * 1024 * 1024 and data[4:8] == b"\0\0\0\0"  # gzip mtime 0
    # the healthy sample is exactly what the generator writes today
    # (if this fails: python sample_traces/make_samples.py)
    healthy = (SAMPLES / "synthetic_h100_healthy.json.gz").read_bytes()
    assert gzip.decompress(healthy).decode() == build(PRESETS["healthy"]).dumps()


# --- devices and the benchmark trace ----------------------------------------------------------


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_device_peaks_come_from_the_device_table(device: str) -> None:
    """The trace's device name resolves to the table entry the simulator takes its peaks from,
    and every peak the simulator uses is the table's unless the preset overrides it."""
    from traceinsight.devices import table as devices

    dev = DEVICES[device]
    assert devices.resolve(dev.props, table=devices.builtin_table()).spec == dev.spec
    for dtype in ("bf16", "fp16", "fp32"):
        table = dev.spec.peak(dtype) or dev.spec.peak("fp32")
        assert dev.peak(dtype) == dev.peak_override.get(dtype, table)
        if dtype in dev.peak_override:  # an override is a rounding of the table, no other number
            assert dev.peak(dtype) == pytest.approx(table, rel=0.005)
    assert dev.mem_bw == (dev.mem_bw_override or dev.spec.mem_bw)
    assert dev.mem_bw == pytest.approx(dev.spec.mem_bw, rel=0.02)


def test_bench_trace_streams_to_the_requested_size(tmp_path: Path) -> None:
    from tracegen.bench import write_trace

    out = tmp_path / "b.json"
    info = write_trace(out, size_mb=1.5, quiet=True, layers=2)
    d = json.loads(out.read_text())
    events = d["traceEvents"]
    assert info["bytes"] == out.stat().st_size >= 1_500_000
    assert info["events"] == len(events) and info["steps"] >= 2
    steps = [
        e
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    assert len(steps) == info["steps"]
    # every launch finds its kernel, every kernel its launch, in the streamed pieces
    corr = defaultdict(set)
    for e in events:
        if e.get("ph") == "X" and "correlation" in e.get("args", {}):
            corr[e["args"]["correlation"]].add(e["cat"])
    assert all(
        cats == {"cuda_runtime", "kernel"} or "gpu_memcpy" in cats or cats == {"cuda_runtime"}
        for cats in corr.values()
    )
    assert min(corr) > 675_000
    cats = {e.get("cat") for e in events}
    assert {"python_function", "fwdbwd", "ac2g", "cpu_instant_event", "kernel"} <= cats
    assert d["distributedInfo"]["world_size"] == 8 and d["trace_id"]
    # memory is scaled once (by the first step): allocated stays within the device
    mem = [e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"]
    assert mem and 0 < min(mem) <= max(mem) < DEVICES["H100"].total_mem
