"""Run facts: what the trace shows the run already does, each with the events it rests on.

One :class:`Fact` per question: ``value`` (a word, a list of words or a mapping; ``unknown``
when the trace cannot tell), ``evidence`` (the event names it rests on, with counts) and
``confidence`` (high: named events say so; medium: a pattern of events implies it; low: an
indirect reading). Everything is derived from event classes (op, annotation, NVTX, Python
frame, kernel, runtime call and memcpy names, the trace's own metadata), never from file
names. The facts are read by the rules (a recommendation's ``when`` / ``unless``, see
:mod:`traceinsight.engine.load`) and shown in the report's Run section.

Facts: ``mode``, ``engine``, ``matrix_dtypes`` (time shares of the GEMM/convolution/attention
kernels by input dtype, from :mod:`traceinsight.metrics.precision`), ``optimizer`` (class and
implementation), ``parallelism``, ``compiled``, ``attention``, ``comm_dtype``, ``dataloader``,
``vendor`` and ``interconnect``. :func:`flat_values` turns them into the dotted names the rule
conditions use (``optimizer.impl``, ``matrix_dtypes.fp32_share``, ...).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from traceinsight.analysis import Analysis

UNKNOWN = "unknown"
FACT_NAMES = (
    "mode",
    "engine",
    "matrix_dtypes",
    "optimizer",
    "parallelism",
    "compiled",
    "attention",
    "comm_dtype",
    "dataloader",
    "vendor",
    "interconnect",
)


@dataclass(frozen=True)
class Fact:
    value: Any  #: a word, a list of words or a mapping; "unknown" when the trace cannot tell
    evidence: str  #: the events it rests on
    confidence: str = "high"  #: high | medium | low (unknown facts: low)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unknown(why: str) -> Fact:
    return Fact(UNKNOWN, why, "low")


# --- the event names a trace holds -----------------------------------------------------------


@dataclass
class Names:
    """Distinct event names with their counts, per class of event."""

    ops: pd.Series  #: CPU op name -> count
    ranges: pd.Series  #: annotation / NVTX / step name -> count
    frames: pd.Series  #: Python frame name -> count
    kernels: pd.Series  #: kernel name -> total ns
    runtime: pd.Series  #: runtime call name -> count
    memcpy: pd.Series  #: memcpy name -> count
    graph_kernels: int  #: kernels launched from a CUDA/HIP graph

    def any(self, rx: re.Pattern[str], *where: str) -> list[tuple[str, float]]:
        """(name, count or ns) of the names matching ``rx`` in the given classes."""
        out: list[tuple[str, float]] = []
        for w in where:
            s: pd.Series = getattr(self, w)
            out += [(str(n), float(c)) for n, c in s.items() if rx.search(str(n))]
        return out


def _counts(s: pd.Series) -> pd.Series:
    import pandas as pd

    if not len(s):
        return pd.Series([], dtype="int64")
    vc = s.astype(object).dropna().astype(str).value_counts()
    return vc[vc > 0]


def read_names(an: Analysis) -> Names:
    """The names of ``an``'s store, read once per analysis."""
    cached = an.__dict__.get("_run_fact_names")
    if cached is not None:
        return cached
    names = _read_names(an)
    an.__dict__["_run_fact_names"] = names
    return names


def _read_names(an: Analysis) -> Names:
    import pandas as pd

    st = an.store
    ops = _counts(st.df("cpu_ops", ["name"])["name"])
    rng = _counts(st.df("ranges", ["name"])["name"])
    py = _counts(st.df("python_frames", ["name"])["name"])
    rt = _counts(st.df("runtime_calls", ["name"])["name"])
    g = st.df("gpu_activities", ["name", "kind", "dur_ns", "graph_id"])
    kind = g["kind"].astype(object)
    k = g[kind == "kernel"]
    kern = (
        k.groupby(k["name"].astype(object).astype(str))["dur_ns"].sum()
        if len(k)
        else pd.Series([], dtype="int64")
    )
    mem = _counts(g.loc[kind == "memcpy", "name"])
    graphs = int(k["graph_id"].notna().sum()) if len(k) else 0
    return Names(ops, rng, py, kern, rt, mem, graphs)


def _show(hits: Iterable[tuple[str, float]], n: int = 3, unit: str = "x") -> str:
    hits = sorted(hits, key=lambda x: -x[1])
    parts = []
    for name, c in list(hits)[:n]:
        short = name if len(name) <= 70 else name[:67] + "..."
        parts.append(f"{short} {unit}{int(c)}" if unit == "x" else short)
    return ", ".join(parts)


# --- mode --------------------------------------------------------------------------------------

BACKWARD_OP = re.compile(r"Backward|^autograd::engine::evaluate_function|AccumulateGrad")
OPTIMIZER = re.compile(r"^(?:Optimizer|optimizer)\.(?:step|zero_grad)")
#: sharded / engine-managed training whose forward half alone is still training
TRAINING_MARKERS = re.compile(
    r"^FSDP::|FullyShardedDataParallel|RegisterPostBackwardFunction|DeepSpeedEngine|"
    r"deepspeed/runtime/engine\.py.*(?:backward|step)|megatron/core/pipeline_parallel|"
    r"megatron/training/training\.py|torchtitan/train|lightning/.*training_step|"
    r"pytorch_lightning/.*training_step",
)
#: kernels only a backward pass runs (a GPU-only capture)
BACKWARD_KERNEL = re.compile(
    r"_backward|backward_|bn_bw|wgrad|dgrad|igemm_bwd|igemm_wrw|BackwardKernel|_bwd_", re.I
)
#: benchmark harnesses: PARAM annotations, torch.utils.benchmark, timeit, test/bench scripts
BENCHMARK = re.compile(
    r"^\[param\||torch/utils/benchmark|timeit\.py|(?:^|/)(?:test_|bench)[\w]*\.py\(\d+\)|"
    r"(?:^|/)\w*benchmark\w*\.py\(\d+\)|\|warmup\||\|measure\|",
)
INFERENCE_ENGINES = {"vllm", "sglang", "tensorrt_llm", "hf_pipeline", "hf_generate", "diffusers"}


def mode_fact(n: Names, engine: str | None = None) -> Fact:
    if not len(n.ops) and not len(n.ranges) and not len(n.frames):
        bwd_k = n.any(BACKWARD_KERNEL, "kernels")
        if bwd_k:
            return Fact(
                "training",
                "GPU-only capture; backward kernels " + _show(bwd_k, unit="ns"),
                "low",
            )
        return unknown("no CPU ops recorded (a GPU-only capture) and no backward kernels")
    bwd = n.any(BACKWARD_OP, "ops")
    opt = n.any(OPTIMIZER, "ops", "ranges")
    marks = n.any(TRAINING_MARKERS, "ops", "ranges", "frames")
    bench = n.any(BENCHMARK, "ranges", "frames")
    if opt:
        ev = "optimizer " + _show(opt) + ("; backward " + _show(bwd) if bwd else "")
        return Fact("training", ev)
    if marks:
        return Fact("training", "training framework " + _show(marks), "medium")
    if bench:
        what = "forward+backward" if bwd else "forward only"
        return Fact("benchmark", f"benchmark harness {_show(bench)}; {what}, no optimizer step")
    if bwd:
        return Fact(
            "benchmark",
            "backward " + _show(bwd) + " but no optimizer step (a forward+backward measurement)",
            "medium",
        )
    ev = "no backward or optimizer ops (forward only)"
    if engine in INFERENCE_ENGINES:
        ev += f"; {engine} serving/generation frames"
    return Fact("inference", ev, "high" if engine in INFERENCE_ENGINES else "medium")


def runs_backward(n: Names) -> bool:
    """Forward+backward work (FLOPs of a training step), whether or not an optimizer steps."""
    if n.any(BACKWARD_OP, "ops") or n.any(OPTIMIZER, "ops", "ranges"):
        return True
    if n.any(TRAINING_MARKERS, "ops", "ranges", "frames"):
        return True
    return not len(n.ops) and bool(n.any(BACKWARD_KERNEL, "kernels"))


# --- engine / framework ------------------------------------------------------------------------

ENGINES: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = (
    ("vllm", re.compile(r"^vllm::|(?:^|/)vllm/"), ("ops", "frames", "ranges")),
    ("sglang", re.compile(r"^sglang|(?:^|/)sglang/|^sgl_kernel"), ("ops", "frames", "ranges")),
    (
        "tensorrt_llm",
        re.compile(r"(?:^|/)tensorrt_llm/|^trtllm|TensorRT-LLM", re.I),
        ("ops", "frames", "ranges"),
    ),
    (
        "torchrec",
        re.compile(r"(?:^|/)torchrec/|all2all_data:kjt|^fbgemm::|split_embedding_codegen"),
        ("ops", "frames", "ranges", "kernels"),
    ),
    ("diffusers", re.compile(r"(?:^|/)diffusers/"), ("frames",)),
    ("hf_pipeline", re.compile(r"(?:^|/)transformers/pipelines/"), ("frames",)),
    ("hf_generate", re.compile(r"(?:^|/)transformers/generation/"), ("frames",)),
    ("megatron", re.compile(r"(?:^|/)megatron/"), ("frames", "ranges")),
    ("deepspeed", re.compile(r"(?:^|/)deepspeed/|DeepSpeed"), ("frames", "ranges", "ops")),
    ("torchtitan", re.compile(r"(?:^|/)torchtitan/"), ("frames",)),
    ("lightning", re.compile(r"(?:^|/)(?:pytorch_)?lightning/"), ("frames", "ranges")),
    (
        "thunder",
        re.compile(r"(?:^|/)thunder/|nvfuser|CudaCodeGen|^nvFusion", re.I),
        ("frames", "ops", "kernels", "ranges"),
    ),
)
TORCH_OP = re.compile(r"^aten::|^c10d::|^torch::|^autograd::|^ProfilerStep#")


def engine_fact(n: Names, fmt: str) -> Fact:
    found = []
    for name, rx, where in ENGINES:
        hits = n.any(rx, *where)
        if hits:
            found.append((name, hits))
    if found:
        name, hits = found[0]
        also = [f for f, _ in found[1:]]
        ev = _show(hits, 2) + (f" (also {', '.join(also)})" if also else "")
        return Fact(name, ev)
    torch_ops = n.any(TORCH_OP, "ops", "ranges")
    if torch_ops:
        return Fact(
            "plain_pytorch", "PyTorch ops only, no framework frames: " + _show(torch_ops, 2)
        )
    if not len(n.kernels):
        return unknown("no GPU kernels and no framework ops")
    if fmt == "nsys" or len(n.runtime):
        return Fact("cuda_program", "GPU runtime calls and kernels without PyTorch ops", "low")
    return unknown("a GPU-only capture: no CPU ops or frames name the framework")


# --- optimizer ---------------------------------------------------------------------------------

OPT_CLASS = re.compile(r"^(?:Optimizer|optimizer)\.step#(\w+)\.step")
FUSED = re.compile(
    r"_fused_adam|_fused_sgd|_fused_adagrad|FusedAdam|FusedSGD|FusedLAMB|fused_adam|"
    r"multi_tensor_adam|FusedAdamMathFunctor",
    re.I,
)
FOREACH = re.compile(r"^aten::_foreach_(?!norm)")
EIGHT_BIT = re.compile(r"8bit|kOptimizerStatic8bit|kOptimizer32bit2State|bnb", re.I)
SPARSE_FUSED = re.compile(r"split_embedding_backward_codegen_(\w+?)_")


def optimizer_fact(n: Names) -> Fact:
    classes = sorted(
        {
            m.group(1)
            for name, _ in n.any(OPT_CLASS, "ops", "ranges")
            if (m := OPT_CLASS.search(name))
        }
    )
    sparse = sorted(
        {
            m.group(1)
            for name, _ in n.any(SPARSE_FUSED, "kernels")
            if (m := SPARSE_FUSED.search(name))
        }
    )
    if not classes and not sparse:
        return unknown("no Optimizer.step ranges or optimizer kernels")
    fused = n.any(FUSED, "ops", "kernels", "ranges")
    eight = n.any(EIGHT_BIT, "ops", "kernels", "ranges")
    foreach = n.any(FOREACH, "ops")
    if any(FUSED.search(c) for c in classes) or fused:
        impl, ev = "fused", _show(fused) or ", ".join(classes)
    elif eight or any("8bit" in c.lower() for c in classes):
        impl, ev = "8bit", _show(eight) or ", ".join(classes)
    elif foreach:
        impl, ev = "foreach", _show(foreach)
    elif len(n.ops) > 0 and classes:
        impl, ev = "for-loop", "no _foreach or fused optimizer ops recorded"
    else:
        impl, ev = UNKNOWN, "implementation not recorded"
    value = {"class": "+".join(classes) or UNKNOWN, "impl": impl}
    if sparse:
        value["sparse"] = "fused in the embedding backward (" + ", ".join(sparse) + ")"
    steps = _show(n.any(OPT_CLASS, "ranges", "ops"), 2)
    conf = "high" if impl in ("fused", "foreach", "8bit") else "medium"
    return Fact(value, "; ".join(x for x in (steps, ev) if x), conf)


# --- parallelism -------------------------------------------------------------------------------

PARALLEL: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ddp", re.compile(r"DistributedDataParallel|ddp\.reducer|^torch::distributed::reducer")),
    ("fsdp2", re.compile(r"torch/distributed/(?:_composable/fsdp|fsdp/_fully_shard)")),
    ("fsdp", re.compile(r"^FSDP::|FullyShardedDataParallel|RegisterPostBackwardFunction")),
    ("zero", re.compile(r"deepspeed/runtime/zero|DeepSpeedZeroOptimizer|ZeRO")),
    (
        "tp",
        re.compile(
            r"tensor_model_parallel|ColumnParallelLinear|RowParallelLinear|"
            r"torch/distributed/tensor/parallel"
        ),
    ),
    ("pp", re.compile(r"pipeline_parallel|torch/distributed/pipelining|PipelineStage")),
    ("cp", re.compile(r"context_parallel|ring_attention", re.I)),
)
COLL_OP = re.compile(r"^(?:nccl|rccl|gloo):(\w+)|^c10d::(\w+)")
A2A = re.compile(r"all_?to_?all|alltoall", re.I)
SENDRECV = re.compile(r"send|recv", re.I)


def parallelism_fact(n: Names, ranks: list[dict[str, Any]], pg_names: list[str]) -> Fact:
    found: list[str] = []
    ev: list[str] = []
    for name, rx in PARALLEL:
        hits = n.any(rx, "ops", "ranges", "frames")
        if hits and not (name == "fsdp" and "fsdp2" in found):
            found.append(name)
            ev.append(_show(hits, 1))
    for pg in pg_names:
        low = pg.lower()
        for tag in ("tp", "pp", "ep", "cp"):
            if re.search(rf"(?:^|[_:\-]){tag}(?:$|[_:\-\d])", low) and tag not in found:
                found.append(tag)
                ev.append(f"process group {pg}")
    world = max((_world(r) for r in ranks if _world(r)), default=None)
    if world == 1:  # wrappers of a degree-1 group (vLLM's tensor_model_parallel_* at tp=1)
        keep = [(f, e) for f, e in zip(found, ev) if f not in ("tp", "pp", "cp", "ep")]
        found, ev = [f for f, _ in keep], [e for _, e in keep]
    colls = n.any(COLL_OP, "ops", "ranges")
    comm_k = n.any(re.compile(r"^nccl|^rccl|ncclDevKernel|ncclKernel", re.I), "kernels")
    if colls and any(A2A.search(c) for c, _ in colls) and "ep" not in found:
        found.append("all_to_all")
        ev.append(_show([c for c in colls if A2A.search(c[0])], 1))
    if found:
        return Fact(found, "; ".join(ev) + (f"; world_size {world}" if world else ""))
    if colls or comm_k:
        return unknown(
            "collectives "
            + _show(colls or comm_k, 2)
            + " but no DDP/FSDP/ZeRO/TP/PP markers"
            + (f"; world_size {world}" if world else "")
        )
    if len(ranks) > 1:
        return unknown(f"{len(ranks)} ranks recorded but no collectives or parallel markers")
    return Fact(
        ["none"],
        "no collectives, no parallel-wrapper ops" + (f"; world_size {world}" if world else ""),
        "medium",
    )


def _world(r: dict[str, Any]) -> int | None:
    d = r.get("distributed") or r.get("distributed_info") or {}
    w = d.get("world_size") if isinstance(d, dict) else None
    return w if isinstance(w, int) else None


# --- compile state, attention ------------------------------------------------------------------

COMPILED = re.compile(
    r"CompiledFunction|Torch-Compiled Region|CompiledFxGraph|^Inductor|"
    r"torch/_inductor/"
)
INDUCTOR_KERNEL = re.compile(r"^triton_(?:poi|red|per|tem)_")
GRAPH_CALL = re.compile(
    r"^(?:cuda|hip)Graph(?:Launch|Instantiate)|StreamBeginCapture|"
    r"CUDAGraphNode\.record|CUDAGraph\.replay|^capture_\d+"
)


def compiled_fact(n: Names, engine: str) -> Fact:
    out, ev = [], []
    comp = n.any(COMPILED, "ops", "ranges", "frames")
    ind = n.any(INDUCTOR_KERNEL, "kernels")
    if comp or ind:
        out.append("torch_compile")
        ev.append(_show(comp, 2) if comp else "inductor kernels " + _show(ind, 2, unit=""))
    graphs = n.any(GRAPH_CALL, "runtime", "ranges", "ops")
    if graphs or n.graph_kernels:
        out.append("cuda_graphs")
        ev.append(_show(graphs, 2) or f"{n.graph_kernels} kernels launched from graphs")
        if engine in ("vllm", "sglang", "tensorrt_llm"):
            out.append("engine_managed")
            ev.append(f"{engine} captures and replays the graphs")
    if not len(n.kernels) and not len(n.ops):
        return unknown("no kernels or ops")
    if not out:
        if not len(n.ops) and not len(n.runtime):
            return unknown("GPU-only capture: compile state not recorded")
        return Fact(["eager"], "no compiled-region ops, inductor kernels or graph launches")
    return Fact(out, "; ".join(ev))


ATTENTION: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sage", re.compile(r"sage_?(?:attn|fwd|attention)|SageAttention", re.I)),
    ("flashinfer", re.compile(r"flashinfer", re.I)),
    ("xformers", re.compile(r"xformers|fmha_cutlass|cutlassF_", re.I)),
    ("triton-unified", re.compile(r"unified_attention", re.I)),
    ("paged", re.compile(r"paged_?attention|PagedAttention", re.I)),
    (
        "flash",
        re.compile(
            r"flash_?attn|flash_fwd|flash_bwd|_flash_attention|fmha|FmhaBatchPrefill|"
            r"^attn_fwd|^_attn_fwd|mha_fwd|mha_batch_prefill",
            re.I,
        ),
    ),
    ("sdpa-efficient", re.compile(r"efficient_attention|mem_efficient|fmha_cutlassF", re.I)),
    ("sdpa-cudnn", re.compile(r"cudnn_attention|cudnn.*(?:sdpa|flash)", re.I)),
    ("math", re.compile(r"_scaled_dot_product_attention_math")),
)


def attention_fact(n: Names) -> Fact:
    best: tuple[float, str, str] | None = None
    for name, rx in ATTENTION:
        hits = n.any(rx, "kernels")
        t = sum(c for _, c in hits)
        if hits and (best is None or t > best[0]):
            best = (t, name, "kernels " + _show(hits, 2, unit=""))
    if best is None:
        for name, rx in ATTENTION:
            hits = n.any(rx, "ops")
            if hits:
                best = (0.0, name, "ops " + _show(hits, 2))
                break
    if best is not None:
        return Fact(best[1], best[2])
    if not len(n.kernels):
        return unknown("no GPU kernels")
    return Fact("none", "no attention ops or kernels", "medium")


# --- dtypes, data loading, vendor --------------------------------------------------------------

MATRIX_WORDS = {"fp32_matrix": "fp32", "tensor": UNKNOWN}


MATRIX_OP = re.compile(
    r"^aten::(?:mm|addmm|bmm|baddbmm|linear|matmul|conv\w*|_convolution)$|gemm", re.I
)
OP_DTYPE = {
    "float": "fp32",
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
}


def matrix_fact(by_dtype_ns: dict[str, float] | None, an: Analysis | None = None) -> Fact:
    """Time shares (%) of the matrix kernels by input dtype; fp32 includes AMD fp32 MFMA. When
    no matrix kernel ran in the window (a graph capture), the matrix ops' input types."""
    if not by_dtype_ns:
        by_op = _matrix_op_dtypes(an) if an is not None else {}
        if by_op:
            total = sum(by_op.values())
            pct = {
                k: round(100.0 * v / total, 1)
                for k, v in sorted(by_op.items(), key=lambda x: -x[1])
            }
            ev = ", ".join(f"{k} x{v}" for k, v in by_op.items())
            return Fact(
                {"shares": pct, "dominant": next(iter(pct))},
                f"no matrix kernels ran; matrix ops' input types: {ev}",
                "low",
            )
        return Fact(
            {"shares": {}, "dominant": "none"}, "no GEMM/convolution/attention kernels", "medium"
        )
    shares: dict[str, float] = {}
    for d, ns in by_dtype_ns.items():
        w = MATRIX_WORDS.get(d, d)
        shares[w] = shares.get(w, 0.0) + float(ns)
    total = sum(shares.values()) or 1.0
    pct = {k: round(100.0 * v / total, 1) for k, v in sorted(shares.items(), key=lambda x: -x[1])}
    known = {k: v for k, v in pct.items() if k != UNKNOWN}
    dominant = next(iter(known), UNKNOWN)
    conf = "high" if pct.get(UNKNOWN, 0.0) < 20 else "medium"
    ev = ", ".join(f"{k} {v:.0f}%" for k, v in pct.items()) + " of matrix kernel time"
    return Fact({"shares": pct, "dominant": dominant}, ev, conf)


def _matrix_op_dtypes(an: Analysis) -> dict[str, int]:
    import json

    ops = an.store.df("cpu_ops", ["name", "input_types"])
    if not len(ops):
        return {}
    names = ops["name"].astype(object).astype(str)
    sel = ops[names.map(lambda x: bool(MATRIX_OP.search(x))) & ops["input_types"].notna()]
    out: dict[str, int] = {}
    for t in sel["input_types"].astype(str):
        try:
            first = json.loads(t)[0]
        except (ValueError, IndexError, TypeError):
            continue
        d = OP_DTYPE.get(str(first))
        if d:
            out[d] = out.get(d, 0) + 1
    return out


COMM_DTYPES = {
    "Float": "fp32",
    "BFloat16": "bf16",
    "Half": "fp16",
    "Double": "fp64",
    "Float8_e4m3fn": "fp8",
    "Float8_e5m2": "fp8",
}
COMM_KERNEL_DTYPE = re.compile(r"_(float|bf16|half|f32|f16|double|fp8\w*)\b", re.I)
KERNEL_WORD = {
    "float": "fp32",
    "f32": "fp32",
    "bf16": "bf16",
    "half": "fp16",
    "f16": "fp16",
    "double": "fp64",
}


def comm_dtype_fact(an: Analysis, n: Names) -> Fact:
    ops = an.store.df("cpu_ops", ["name", "collective_name", "dtype"])
    rows = ops[ops["collective_name"].notna()] if len(ops) else ops
    rows = (
        rows[~rows["collective_name"].astype(object).isin(["wait", "barrier"])]
        if len(rows)
        else rows
    )
    seen: dict[str, int] = {}
    for d in rows["dtype"].dropna().astype(str) if len(rows) else []:
        if d in COMM_DTYPES:
            seen[COMM_DTYPES[d]] = seen.get(COMM_DTYPES[d], 0) + 1
    if seen:
        return Fact(
            sorted(seen, key=lambda k: -seen[k]),
            "record_param_comms dtype " + ", ".join(f"{k} x{v}" for k, v in seen.items()),
        )
    comm_k = n.any(re.compile(r"^nccl|^rccl|ncclDevKernel|ncclKernel", re.I), "kernels")
    ks: dict[str, float] = {}
    for name, ns in comm_k:
        m = COMM_KERNEL_DTYPE.search(name)
        if m:
            w = KERNEL_WORD.get(m.group(1).lower(), m.group(1).lower())
            ks[w] = ks.get(w, 0.0) + ns
    if ks:
        return Fact(
            sorted(ks, key=lambda k: -ks[k]), "collective kernels " + _show(comm_k, 2, ""), "medium"
        )
    if comm_k or len(rows):
        return unknown("collectives without a recorded element type")
    return Fact([], "no collectives", "medium")


WORKERS0 = re.compile(r"_SingleProcessDataLoaderIter")
WORKERS_N = re.compile(r"_MultiProcessingDataLoaderIter")
PAGEABLE = re.compile(r"HtoD.*Pageable|Pageable -> Device")
PINNED = re.compile(r"HtoD.*Pinned|Pinned -> Device")


def dataloader_fact(n: Names) -> Fact:
    w0 = n.any(WORKERS0, "ops", "ranges", "frames")
    wn = n.any(WORKERS_N, "ops", "ranges", "frames")
    workers = ">0" if wn else "0" if w0 else UNKNOWN
    pg, pn = n.any(PAGEABLE, "memcpy"), n.any(PINNED, "memcpy")
    h2d = "both" if pg and pn else "pageable" if pg else "pinned" if pn else "none"
    if workers == UNKNOWN and h2d == "none":
        return unknown("no DataLoader iterator ops and no host-to-device copies")
    ev = "; ".join(x for x in (_show(wn or w0, 1), _show(pg + pn, 2)) if x)
    return Fact({"workers": workers, "h2d": h2d}, ev)


def vendor_fact(ranks: list[dict[str, Any]], n: Names) -> Fact:
    vendors = sorted({str(r.get("vendor")) for r in ranks if r.get("vendor")})
    if len(vendors) == 1:
        devs = sorted(
            {
                str(d.get("name"))
                for r in ranks
                for d in r.get("devices") or []
                if d.get("name") and not str(d.get("name")).startswith("[")
            }
        )
        return Fact(vendors[0], "trace metadata" + (f": {', '.join(devs[:2])}" if devs else ""))
    if n.any(re.compile(r"^hip"), "runtime"):
        return Fact("amd", "hip* runtime calls", "medium")
    if n.any(re.compile(r"^cuda|^cu[A-Z]"), "runtime"):
        return Fact("nvidia", "cuda* runtime calls", "medium")
    return unknown("no device metadata or runtime calls")


def interconnect_fact(vendor: str, device: str | None, world: int | None) -> Fact:
    """The fabric class the device is built for (not a measurement)."""
    name = (device or "").lower()
    if not name:
        return unknown("device unknown")
    if vendor == "amd" and re.search(r"mi(?:2\d\d|3\d\d)", name):
        return Fact(
            "xgmi", f"{device}: Instinct OAM parts link GPUs by xGMI (Infinity Fabric)", "low"
        )
    if vendor == "nvidia":
        if "pcie" in name:
            return Fact("pcie", f"{device}: a PCIe card", "low")
        if re.search(r"sxm|hbm3|pg509|dgx|h200|b200|gb200|b100", name):
            return Fact("nvlink", f"{device}: an SXM/HGX part (NVLink/NVSwitch)", "low")
    return unknown(f"{device}: fabric class not known")


# --- all of them -------------------------------------------------------------------------------


def compute(
    an: Analysis, matrix_dtypes_ns: dict[str, float] | None, device: str | None
) -> dict[str, Fact]:
    n = read_names(an)
    ranks = an.store.ranks
    fmt = str(an.store.meta.get("format") or "")
    eng = engine_fact(n, fmt)
    vend = vendor_fact(ranks, n)
    pgs = _pg_names(an)
    world = max((w for r in ranks if (w := _world(r))), default=None)
    return {
        "mode": mode_fact(n, eng.value),
        "engine": eng,
        "matrix_dtypes": matrix_fact(matrix_dtypes_ns, an),
        "optimizer": optimizer_fact(n),
        "parallelism": parallelism_fact(n, ranks, pgs),
        "compiled": compiled_fact(n, str(eng.value)),
        "attention": attention_fact(n),
        "comm_dtype": comm_dtype_fact(an, n),
        "dataloader": dataloader_fact(n),
        "vendor": vend,
        "interconnect": interconnect_fact(str(vend.value), device, world),
    }


def _pg_names(an: Analysis) -> list[str]:
    out: set[str] = set()
    for tbl in ("cpu_ops", "gpu_activities"):
        s = an.store.df(tbl, ["pg_name"])["pg_name"]
        out |= {str(x) for x in s.dropna().astype(object).unique()}
    for r in an.store.ranks:
        d = r.get("distributed") or r.get("distributed_info") or {}
        for pg in (d.get("pg_config") or []) if isinstance(d, dict) else []:
            if isinstance(pg, dict) and pg.get("pg_desc"):
                out.add(str(pg["pg_desc"]))
    return sorted(out)


def flat_values(facts: dict[str, Fact]) -> dict[str, Any]:
    """The dotted names rule conditions read: a fact's value, or for a mapping its keys
    (``optimizer.impl``); ``matrix_dtypes.<dtype>_share`` for every dtype (0 when absent)."""
    out: dict[str, Any] = {}
    for k, f in facts.items():
        v = f.value
        if k == "matrix_dtypes" and isinstance(v, dict):
            shares = v.get("shares") or {}
            out["matrix_dtypes.dominant"] = v.get("dominant")
            for d in (
                "fp32",
                "tf32",
                "bf16",
                "fp16",
                "fp8",
                "fp4",
                "mxfp4",
                "nvfp4",
                "mxfp8",
                "int8",
                "fp64",
                UNKNOWN,
            ):
                out[f"matrix_dtypes.{d}_share"] = float(shares.get(d, 0.0))
            low = sum(
                float(shares.get(d, 0.0)) for d in shares if d not in ("fp32", "fp64", UNKNOWN)
            )
            out["matrix_dtypes.low_precision_share"] = low
            out["matrix_dtypes"] = list(shares)
        elif isinstance(v, dict):
            out[k] = v.get("class", UNKNOWN) if k == "optimizer" else UNKNOWN
            for kk, vv in v.items():
                out[f"{k}.{kk}"] = vv
        else:
            out[k] = v
    if facts.get("optimizer") and facts["optimizer"].value == UNKNOWN:
        out["optimizer.class"] = out["optimizer.impl"] = UNKNOWN
    if facts.get("dataloader") and facts["dataloader"].value == UNKNOWN:
        out["dataloader.workers"] = out["dataloader.h2d"] = UNKNOWN
    return out


#: the dotted names a rule condition may use, with what they mean (the docs and load checks)
FLAT_NAMES = {
    "mode": "training | inference | benchmark | unknown",
    "engine": "vllm | sglang | tensorrt_llm | torchrec | diffusers | hf_pipeline | hf_generate | "
    "megatron | deepspeed | torchtitan | lightning | thunder | plain_pytorch | cuda_program",
    "matrix_dtypes": "the dtypes the matrix kernels run in (a list)",
    "matrix_dtypes.dominant": "the dtype with the most matrix kernel time",
    "matrix_dtypes.low_precision_share": "% of matrix kernel time in TF32 or narrower",
    **{
        f"matrix_dtypes.{d}_share": f"% of matrix kernel time in {d}"
        for d in (
            "fp32",
            "tf32",
            "bf16",
            "fp16",
            "fp8",
            "fp4",
            "mxfp4",
            "nvfp4",
            "mxfp8",
            "int8",
            "fp64",
            UNKNOWN,
        )
    },
    "optimizer": "the optimizer class(es), e.g. SGD, AdamW, FusedAdam",
    "optimizer.class": "the optimizer class(es)",
    "optimizer.impl": "fused | foreach | 8bit | for-loop | unknown",
    "optimizer.sparse": "a sparse optimizer fused into the embedding backward",
    "parallelism": "a list of ddp, fsdp, fsdp2, zero, tp, pp, ep, cp, all_to_all, none",
    "compiled": "a list of eager, torch_compile, cuda_graphs, engine_managed",
    "attention": "flash | sdpa-efficient | sdpa-cudnn | xformers | flashinfer | paged | "
    "triton-unified | sage | math | none",
    "comm_dtype": "the element types of the collectives (a list)",
    "dataloader": "unknown when no DataLoader or host copies are seen",
    "dataloader.workers": "0 | >0 | unknown",
    "dataloader.h2d": "pageable | pinned | both | none",
    "vendor": "nvidia | amd",
    "interconnect": "nvlink | xgmi | pcie | unknown (the device's fabric class)",
}
