"""Serving metrics: per engine phase (prefill, decode, mixed) step-time distribution, tokens/s
per GPU, GPU-side time per output token, prefill time per prompt token, TTFT lower bound, the
gaps between engine steps, and decode against the HBM bandwidth roof (prefill: MFU).

Steps come from :mod:`traceinsight.analysis.serving`. Times are GPU-side: a step's time is
first start to last end of the GPU work it launched; scheduling, detokenisation and the network
are outside the trace. With several ranks (tensor parallelism) the lowest rank's steps are the
engine's steps (every TP rank runs each step).

Bytes per decode step (:func:`step_bytes`), from recorded shapes (``record_shapes``) of the
ops in the step:

* **weights** once per step: each GEMM's weight operand (``mm``/``linear``/``matmul``
  input 1, ``addmm`` input 2, a 2-D tensor) at its stored element size (packed int4 is
  counted as stored); nested GEMM ops counted once (the outermost);
* **MoE experts**: a ``*moe*`` op with a 3-D expert weight ``[E, N, K]`` reads at most
  ``min(E, tokens × top-k)`` experts (top-k from its ``[tokens, k]`` routing input; without
  one, all E): distinct routed experts are not recorded, so this is an upper bound;
* **KV cache** read by attention: SDPA-style ops with the whole K and V (``[B, Hkv, Skv, D]``):
  their bytes; paged attention ops (K of the new tokens ``[T, Hkv, D]``): the step's stated
  context tokens (vLLM ``sk``) × Hkv × D × 2 (K and V) × element size;
* **activations**: each GEMM's input and output.

The floor step time is bytes / HBM peak (the device table); achieved bandwidth is bytes /
measured step time and never shown above the peak (a model that would is flagged).
"""

from __future__ import annotations

import json
import re
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis
from traceinsight.analysis.serving import PHASES, EngineStep, ServingSteps, recognise
from traceinsight.metrics.flops import op_cost
from traceinsight.metrics.flops.dtypes import bytes_per_element
from traceinsight.metrics.registry import MetricSet, declare

_NEEDS = "LLM engine steps (vLLM / SGLang / TensorRT-LLM step annotations, HF generate)"
declare("is_serving", "bool", "1 when LLM engine steps are recognised (a serving trace), else 0")
declare("serving_engine_vllm", "bool", "1 when the serving engine is vLLM")
declare("serving_engine_sglang", "bool", "1 when the serving engine is SGLang")
for _p in PHASES:
    declare(f"serving_{_p}_steps", "count", f"engine steps of phase {_p}", needs=_NEEDS)
declare(
    "serving_decode_step_p50_ns",
    "ns",
    "median GPU-side time of a decode step (= time per output token of each sequence)",
    needs="decode steps",
)
declare(
    "serving_step_p99_over_p50_ratio",
    "ratio",
    "p99 / p50 of the GPU-side step time of the phase with most steps (serving jitter)",
    needs="3 or more engine steps of one phase",
)
declare("serving_steps_in_phase", "count", "engine steps of the phase the jitter is measured on")
declare(
    "serving_decode_tokens_per_s_per_gpu",
    "count",
    "decode tokens per second of decode step time, per GPU (divided by the TP degree)",
    needs="decode steps with their token counts",
)
declare(
    "serving_prefill_ns_per_token",
    "ns",
    "GPU-side prefill step time per prompt token",
    needs="prefill steps with their token counts",
)
declare(
    "serving_ttft_lower_bound_ns",
    "ns",
    "time to first token, lower bound: a prefill step's host start to the end of its GPU work "
    "(queueing before it is not in the trace)",
    needs="a prefill step",
)
declare(
    "serving_step_gap_pct",
    "%",
    "GPU time between consecutive engine steps (scheduler and host), % of the steps' span",
    needs="2 or more engine steps",
)
declare(
    "serving_decode_gap_in_step_pct",
    "%",
    "GPU idle inside decode steps (launch gaps), % of decode step time",
    needs="decode steps",
)
declare("serving_graph_launches", "count", "CUDA/HIP graph replays inside engine steps")
declare(
    "serving_decode_bytes_per_step",
    "bytes",
    "modelled HBM bytes one decode step reads and writes (weights, KV cache, activations)",
    needs="record_shapes on an eager decode step (graph replays record no shapes)",
)
declare(
    "serving_decode_roof_pct",
    "%",
    "achieved bandwidth of the median decode step (modelled bytes / step time), % of HBM peak",
    needs="decode bytes from shapes and a known device",
)
declare(
    "serving_decode_floor_ns",
    "ns",
    "floor of a decode step: modelled bytes / HBM peak bandwidth",
    needs="decode bytes from shapes and a known device",
)
declare(
    "serving_prefill_mfu_pct",
    "%",
    "prefill model FLOPs (GEMMs from shapes + attention) per second, % of the dense peak",
    needs="record_shapes on prefill steps and a known device",
)

GEMM_RE = re.compile(
    r"^aten::(?:mm|addmm|linear|matmul|_scaled_mm|_int_mm)$|gemm|^\w+::\w*linear\w*$", re.I
)
MOE_RE = re.compile(r"moe", re.I)
ATTN_RE = re.compile(r"attention|attn|sdpa|fmha|mha_", re.I)
_WEIGHT_IDX = {"aten::addmm": 2}


def _js(text: Any) -> list:
    if isinstance(text, list):
        return text
    if not isinstance(text, str) or not text:
        return []
    try:
        v = json.loads(text)
    except ValueError:
        return []
    return v if isinstance(v, list) else []


def _numel(d: Any) -> int:
    if not isinstance(d, list) or not d or not all(isinstance(x, int) for x in d):
        return 0
    return int(np.prod(d, dtype=np.int64))


def _el(types: list, i: int) -> int | None:
    return bytes_per_element(types[i]) if i < len(types) and isinstance(types[i], str) else None


def _outermost(ops: pd.DataFrame) -> pd.DataFrame:
    """Ops not nested in another op of the same frame (same rank and thread)."""
    if not len(ops):
        return ops
    o = ops.sort_values(["thread", "start_ns", "dur_ns"], ascending=[True, True, False])
    keep, end, th = [], -1, None
    for t, s, d in zip(o["thread"].tolist(), o["start_ns"].tolist(), o["dur_ns"].tolist()):
        if t != th:
            th, end = t, -1
        inside = s < end
        keep.append(not inside)
        if not inside:
            end = s + d
    return o[np.array(keep, bool)]


def step_bytes(ops: pd.DataFrame, step: EngineStep) -> dict[str, Any]:
    """The modelled bytes of one step's ops (module docstring); ``ops`` are the cpu ops in its
    window with ``name``, ``thread``, ``start_ns``, ``dur_ns``, ``input_dims``, ``input_types``."""
    out = {"weights": 0, "moe_experts": 0, "kv_cache": 0, "activations": 0, "gemms": 0}
    notes: list[str] = []
    names = ops["name"].astype(str)
    gem = _outermost(ops[names.str.contains(GEMM_RE) & ~names.str.contains(MOE_RE)])
    for r in gem.itertuples(index=False):
        dims, types = _js(r.input_dims), _js(r.input_types)
        wi = _WEIGHT_IDX.get(str(r.name), 1)
        if wi >= len(dims) or not isinstance(dims[wi], list) or len(dims[wi]) != 2:
            continue
        el = _el(types, wi)
        ai = wi - 1
        ael = _el(types, ai) or el
        if el is None:
            continue
        w = dims[wi]
        out["weights"] += _numel(w) * el
        out["gemms"] += 1
        a = dims[ai] if ai < len(dims) else None
        an = _numel(a)
        if an and ael and isinstance(a, list):
            k = a[-1]
            n = w[1] if w[0] == k else w[0]  # [K, N] (mm) or [N, K] (linear)
            out["activations"] += an * ael + (an // max(k, 1)) * n * ael
    moe = _outermost(ops[names.str.contains(MOE_RE)])
    for r in moe.itertuples(index=False):
        dims, types = _js(r.input_dims), _js(r.input_types)
        toks = dims[0][0] if dims and isinstance(dims[0], list) and dims[0] else None
        topk = next(
            (
                d[1]
                for i, d in enumerate(dims)
                if isinstance(d, list)
                and len(d) == 2
                and toks is not None
                and d[0] == toks
                and i < len(types)
                and "int" in str(types[i]).lower()
            ),
            None,
        )
        for i, d in enumerate(dims):
            if isinstance(d, list) and len(d) == 3 and _el(types, i):
                e = int(d[0])
                routed = e if toks is None or topk is None else min(e, int(toks) * int(topk))
                out["moe_experts"] += _numel(d) // e * routed * int(_el(types, i) or 0)
        notes.append("MoE: distinct routed experts ≤ min(experts, tokens × top-k) (upper bound)")
    att = _outermost(ops[names.str.contains(ATTN_RE) & ~names.str.contains(GEMM_RE)])
    for r in att.itertuples(index=False):
        dims, types = _js(r.input_dims), _js(r.input_types)
        if len(dims) < 3 or not all(isinstance(d, list) for d in dims[:3]):
            continue
        k, el = dims[1], _el(types, 1)
        if not el:
            continue
        if len(k) == 4:  # [B, Hkv, Skv, D]: the whole K and V are inputs
            out["kv_cache"] += (_numel(k) + _numel(dims[2])) * el
        elif len(k) == 3 and step.decode_context_tokens:
            out["kv_cache"] += int(step.context_tokens or 0) * k[1] * k[2] * 2 * el
            if "paged attention: KV read = stated context tokens × heads × dim × 2" not in notes:
                notes.append("paged attention: KV read = stated context tokens × heads × dim × 2")
    total = sum(v for k, v in out.items() if k != "gemms")
    return {**out, "total": total, "notes": notes}


def _pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q, method="linear"))


def _phase_block(steps: list[EngineStep], tp: int) -> dict[str, Any]:
    t = np.array([s.gpu_ns for s in steps if s.gpu_ns is not None], dtype=np.int64)
    toks = [s.new_tokens for s in steps]
    tok = int(sum(x for x in toks if x is not None)) if any(x is not None for x in toks) else None
    bs = [s.requests for s in steps if s.requests is not None]
    d: dict[str, Any] = {
        "steps": len(steps),
        "tokens": tok,
        "step_ms": None,
        "tpot_ms": None,
        "batch": float(np.median(bs)) if bs else None,
        "tokens_per_s_per_gpu": None,
        "gpu_ns_total": int(t.sum()) if len(t) else None,
    }
    if len(t):
        p50 = _pct(t, 50)
        d["step_ms"] = {"p50": p50 / 1e6, "p90": _pct(t, 90) / 1e6, "p99": _pct(t, 99) / 1e6}
        d["p99_over_p50"] = _pct(t, 99) / p50 if p50 > 0 else None
        if tok is not None and t.sum() > 0:
            d["tokens_per_s_per_gpu"] = tok / (t.sum() / 1e9) / max(tp, 1)
    return d


def compute(an: Analysis, ms: MetricSet) -> None:
    sv = an.cache.get("serving_steps")
    if sv is None:
        sv = an.cache["serving_steps"] = recognise(an.store)
    assert isinstance(sv, ServingSteps)
    ms.set("is_serving", 1.0 if sv.is_serving else 0.0)
    ms.set("serving_engine_vllm", 1.0 if sv.engine == "vllm" else 0.0)
    ms.set("serving_engine_sglang", 1.0 if sv.engine == "sglang" else 0.0)
    if not sv.is_serving:
        why = "no LLM engine steps recognised"
        for n in _SERVING_METRICS:
            ms.set(n, None, why_missing=why)
        return
    rank = min(s.rank for s in sv.steps)
    steps = [s for s in sv.steps if s.rank == rank]
    tp = sv.tp or 1
    by = {p: [s for s in steps if s.phase == p] for p in PHASES}
    phases = {p: _phase_block(v, tp) for p, v in by.items() if v}
    for p in PHASES:
        ms.set(f"serving_{p}_steps", float(len(by[p])))
    dec = by["decode"]
    dt = np.array([s.gpu_ns for s in dec if s.gpu_ns is not None], dtype=np.int64)
    if "mixed" in phases and phases["mixed"]["step_ms"]:
        # a decode request in a mixed step gets one token per step too
        phases["mixed"]["tpot_ms"] = phases["mixed"]["step_ms"]["p50"]
    if "decode" in phases and len(dt):
        phases["decode"]["tpot_ms"] = _pct(dt, 50) / 1e6
        ms.set("serving_decode_step_p50_ns", _pct(dt, 50))
        busy = sum(s.busy_ns for s in dec if s.gpu_ns is not None)
        ms.set(
            "serving_decode_gap_in_step_pct", 100.0 * (1 - busy / dt.sum()) if dt.sum() else None
        )
    else:
        ms.set("serving_decode_step_p50_ns", None, why_missing="no decode steps with GPU work")
        ms.set("serving_decode_gap_in_step_pct", None, why_missing="no decode steps with GPU work")
    tps = (phases.get("decode") or {}).get("tokens_per_s_per_gpu")
    ms.set("serving_decode_tokens_per_s_per_gpu", tps, why_missing="no decode token counts")
    big = max(phases, key=lambda p: phases[p]["steps"]) if phases else None
    n_big = phases[big]["steps"] if big else 0
    ratio = phases[big].get("p99_over_p50") if big and n_big >= 3 else None
    ms.set("serving_step_p99_over_p50_ratio", ratio, why_missing="fewer than 3 steps of one phase")
    ms.set("serving_steps_in_phase", float(n_big))
    pre = [s for s in by["prefill"] if s.gpu_ns and s.prefill_tokens]
    ms.set(
        "serving_prefill_ns_per_token",
        sum(s.gpu_ns or 0 for s in pre) / sum(s.prefill_tokens or 0 for s in pre) if pre else None,
        why_missing="no prefill steps with token counts",
    )
    if "prefill" in phases and pre:
        phases["prefill"]["ms_per_token"] = (
            sum(s.gpu_ns or 0 for s in pre) / sum(s.prefill_tokens or 0 for s in pre) / 1e6
        )
    ttft = [s.gpu_end_ns - s.start_ns for s in by["prefill"] if s.gpu_end_ns is not None]
    ms.set(
        "serving_ttft_lower_bound_ns",
        float(np.median(ttft)) if ttft else None,
        why_missing="no prefill step in the trace",
    )
    gaps = _gaps(steps)
    span = (
        max(s.gpu_end_ns for s in steps if s.gpu_end_ns is not None)
        - min(s.gpu_start_ns for s in steps if s.gpu_start_ns is not None)
        if any(s.gpu_ns is not None for s in steps)
        else 0
    )
    ms.set(
        "serving_step_gap_pct",
        100.0 * sum(gaps) / span if len(steps) >= 2 and span > 0 else None,
        why_missing="fewer than 2 engine steps",
    )
    ms.set("serving_graph_launches", float(sum(s.graph_launches for s in steps)))
    dev = ms.evidence.get("device") or {}
    bw = dev.get("bandwidth")
    roof = _decode_roof(an, ms, dec, dt, bw)
    mfu = _prefill_mfu(an, ms, by["prefill"], dev)
    ms.evidence["serving"] = {
        "engine": sv.engine,
        "engine_evidence": sv.engine_evidence,
        "tp": sv.tp,
        "tp_evidence": sv.tp_evidence,
        "rank": rank,
        "phases": phases,
        "recognised_by": sorted({s.how for s in steps}),
        "gaps_between_steps_ms": {
            "total": sum(gaps) / 1e6,
            "p50": float(np.median(gaps)) / 1e6 if gaps else None,
            "count": len(gaps),
        },
        "ttft_lower_bound_ms": float(np.median(ttft)) / 1e6 if ttft else None,
        "decode_roofline": roof,
        "prefill_mfu": mfu,
        "graph_launches": int(sum(s.graph_launches for s in steps)),
        "unknown_phase_steps": sum(1 for s in steps if s.phase not in PHASES),
        "steps": [s.to_dict() for s in steps[:200]],
        "steps_total": len(steps),
        "time_basis": "GPU-side: first start to last end of the GPU work each step launched; "
        "scheduling, detokenisation and network are outside the trace",
    }


_SERVING_METRICS = (
    *(f"serving_{p}_steps" for p in PHASES),
    "serving_decode_step_p50_ns",
    "serving_step_p99_over_p50_ratio",
    "serving_steps_in_phase",
    "serving_decode_tokens_per_s_per_gpu",
    "serving_prefill_ns_per_token",
    "serving_ttft_lower_bound_ns",
    "serving_step_gap_pct",
    "serving_decode_gap_in_step_pct",
    "serving_graph_launches",
    "serving_decode_bytes_per_step",
    "serving_decode_roof_pct",
    "serving_decode_floor_ns",
    "serving_prefill_mfu_pct",
)


def _gaps(steps: list[EngineStep]) -> list[int]:
    g = sorted((s for s in steps if s.gpu_ns is not None), key=lambda s: s.gpu_start_ns or 0)
    return [max(0, int(b.gpu_start_ns or 0) - int(a.gpu_end_ns or 0)) for a, b in pairwise(g)]


def _ops_in(an: Analysis, steps: list[EngineStep]) -> dict[int, pd.DataFrame]:
    """The cpu ops that start inside each step's host window (binary search per rank)."""
    ops = an.store.df(
        "cpu_ops", ["rank", "name", "thread", "start_ns", "dur_ns", "input_dims", "input_types"]
    )
    by_rank = {
        int(r): g.sort_values("start_ns", kind="stable") for r, g in ops.groupby("rank", sort=False)
    }
    out = {}
    for i, s in enumerate(steps):
        g = by_rank.get(s.rank)
        if g is None:
            out[i] = ops.iloc[:0]
            continue
        t = g["start_ns"].to_numpy(np.int64)
        lo, hi = np.searchsorted(t, s.start_ns, "left"), np.searchsorted(t, s.end_ns, "left")
        out[i] = g.iloc[lo:hi]
    return out


def _decode_roof(
    an: Analysis, ms: MetricSet, dec: list[EngineStep], dt: np.ndarray, bw: float | None
) -> dict[str, Any]:
    roof: dict[str, Any] = {
        "bytes_per_step": None,
        "achieved_gbps": None,
        "peak_gbps": bw / 1e9 if bw else None,
        "fraction_of_peak": None,
        "floor_ms": None,
        "split_ms": None,
        "why": None,
        "assumptions": [],
    }
    dec = [s for s in dec if s.gpu_ns]
    if not dec:
        roof["why"] = "no decode steps with GPU work"
    else:
        ops = _ops_in(an, dec)
        per = [step_bytes(ops[i], s) for i, s in enumerate(dec)]
        known = [(s, b) for s, b in zip(dec, per) if b["weights"] or b["moe_experts"]]
        graphed = [s for s, _ in known if s.graph_launches]
        if graphed:
            roof["bytes_eager_lower_bound"] = float(np.median([b["total"] for _, b in known]))
            roof["why"] = (
                "the decode step replays CUDA/HIP graphs, whose GEMMs record no shapes: only "
                "the eager ops' bytes are known (a lower bound, in bytes_eager_lower_bound)"
            )
            known = []
        elif not known:
            roof["why"] = (
                "no GEMM weight shapes in the decode steps (graph replays and GPU-only captures "
                "record none; record an eager decode step with record_shapes=True)"
            )
        else:
            b = np.array([x[1]["total"] for x in known], dtype=np.float64)
            t = np.array([x[0].gpu_ns for x in known], dtype=np.float64)
            nb = float(np.median(b))
            mid = known[int(np.argsort(t)[len(t) // 2])]
            roof["bytes_per_step"] = nb
            roof["bytes"] = {k: v for k, v in mid[1].items() if k not in ("notes", "total")}
            roof["assumptions"] = [
                "weights read once per step, at their stored element size",
                "activations: each GEMM's input and output once",
                *mid[1]["notes"],
            ]
            ts = float(np.median(t))
            ach = nb / (ts / 1e9)
            roof["achieved_gbps"] = ach / 1e9
            if bw:
                frac = ach / bw
                if frac > 1.0:
                    roof["assumptions"].append(
                        f"the byte model implies {frac:.2f}x the HBM peak: it over-counts "
                        "(weights shared between GEMMs or cache-resident); shown capped at 1"
                    )
                    frac = 1.0
                    roof["achieved_gbps"] = bw / 1e9
                roof["fraction_of_peak"] = frac
                floor = nb / bw * 1e9
                roof["floor_ms"] = floor / 1e6
                s = mid[0]
                busy = s.busy_ns
                roof["split_ms"] = {
                    "step": (s.gpu_ns or 0) / 1e6,
                    "at_roof": min(floor, busy) / 1e6,
                    "kernels_below_roof": max(0.0, busy - floor - s.sampling_ns) / 1e6,
                    "sampling_logits": s.sampling_ns / 1e6,
                    "launch_gaps_in_step": max(0, (s.gpu_ns or 0) - busy) / 1e6,
                    "host_between_steps": (float(np.median(_gaps(dec))) / 1e6)
                    if len(dec) >= 2
                    else None,
                }
            else:
                roof["why"] = "unknown device: no HBM peak (pass --device or --peak-bw)"
    ms.set("serving_decode_bytes_per_step", roof["bytes_per_step"], why_missing=roof["why"])
    frac = roof["fraction_of_peak"]
    ms.set("serving_decode_roof_pct", None if frac is None else 100 * frac, why_missing=roof["why"])
    fl = roof["floor_ms"]
    ms.set("serving_decode_floor_ns", None if fl is None else fl * 1e6, why_missing=roof["why"])
    return roof


def _prefill_mfu(
    an: Analysis, ms: MetricSet, pre: list[EngineStep], dev: dict[str, Any]
) -> dict[str, Any] | None:
    pre = [s for s in pre if s.gpu_ns]
    peaks = dev.get("peaks") or {}
    if not pre:
        ms.set("serving_prefill_mfu_pct", None, why_missing="no prefill steps with GPU work")
        return None
    ops = _ops_in(an, pre)
    flops = 0.0
    attn = 0.0
    dtype = None
    for i, s in enumerate(pre):
        o = ops[i]
        # the outermost op with a cost (composite ops such as aten::linear included): each
        # FLOP counted once whether or not the child op was recorded
        costs = [
            op_cost(str(r.name), r.input_dims, r.input_types, include_composite=True)
            for r in o.itertuples(index=False)
        ]
        keep = np.array([c is not None and c.flops > 0 for c in costs], bool)
        if keep.any():
            costed = o[keep].assign(_c=[c for c in costs if c is not None and c.flops > 0])
            for c in _outermost(costed)["_c"]:
                flops += c.flops
                if c.kind == "gemm" and dtype is None:
                    dtype = c.dtype
        # attention of ops the shape model does not cost: 4 · Σ(sq·sk) · H · D per layer
        att = _outermost(o[o["name"].astype(str).str.contains(ATTN_RE)])
        for r in att.itertuples(index=False):
            if op_cost(str(r.name), r.input_dims, r.input_types, include_composite=True):
                continue
            q = _js(r.input_dims)
            if q and isinstance(q[0], list) and len(q[0]) == 3 and s.attn_pairs:
                attn += 4.0 * s.attn_pairs * q[0][1] * q[0][2] * 0.5  # causal: half the pairs
    total = flops + attn
    t = sum(s.gpu_ns or 0 for s in pre) / 1e9
    peak = peaks.get(dtype or "bf16") or peaks.get("bf16")
    if not total or not peak or not t:
        why = "no FLOPs from shapes in the prefill steps" if not total else "unknown device peak"
        ms.set("serving_prefill_mfu_pct", None, why_missing=why)
        return {"flops": total or None, "mfu_pct": None, "why": why}
    raw = 100.0 * total / t / peak
    mfu = min(100.0, raw)
    ms.set("serving_prefill_mfu_pct", mfu)
    notes = [
        "GEMM and attention FLOPs from recorded shapes; paged attention from the step's "
        "Σ new×context tokens (causal: half)"
    ]
    if raw > 100.0:
        notes.append(
            f"the FLOP model implies {raw / 100:.2f}x the dense peak: it over-counts; shown capped "
            "at 100%"
        )
    return {
        "flops": total,
        "attention_flops": attn,
        "dtype": dtype or "bf16",
        "peak_tflops": peak / 1e12,
        "mfu_pct": mfu,
        "assumptions": notes,
    }
