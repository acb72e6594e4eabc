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
from typing import TYPE_CHECKING, Any

from traceinsight.analysis import attribution_parts
from traceinsight.analysis.run_names import (  # noqa: F401 - the names mode.py and tests use
    FACT_NAMES,
    UNKNOWN,
    Fact,
    Names,
    _show,
    read_names,
    unknown,
)
from traceinsight.analysis.run_stack import (  # noqa: F401
    _world,
    attention_fact,
    compiled_fact,
    engine_fact,
    mode_fact,
    optimizer_fact,
    parallelism_fact,
    runs_backward,
)

if TYPE_CHECKING:
    from traceinsight.analysis import Analysis

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
    all_ns = sum(shares.values()) or 1.0
    pct = {k: round(100.0 * v / all_ns, 1) for k, v in sorted(shares.items(), key=lambda x: -x[1])}
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
    workers = "multi" if wn else "0" if w0 else UNKNOWN
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


def _table_pg_names(an: Analysis) -> set[str]:
    """The process-group names the ops and GPU activities of ``an``'s store carry."""
    out: set[str] = set()
    for tbl in ("cpu_ops", "gpu_activities"):
        s = an.store.df(tbl, ["pg_name"])["pg_name"]
        out |= {str(x) for x in s.dropna().astype(object).unique()}
    return out


# read per rank partition next to its attribution (in the worker, from the tables it read)
attribution_parts.product(
    "pg_names", __name__, _table_pg_names, lambda values: set().union(*values)
)


def _pg_names(an: Analysis) -> list[str]:
    pre = an.cache.get("pg_names")  # the rank partitions' own, joined
    out: set[str] = set(pre) if pre is not None else _table_pg_names(an)
    for r in an.store.ranks:
        d = r.get("distributed") or r.get("distributed_info") or {}
        for pg in (d.get("pg_config") or []) if isinstance(d, dict) else []:
            if isinstance(pg, dict) and pg.get("pg_desc"):
                out.add(str(pg["pg_desc"]))
    return sorted(out)


#: the matrix dtypes a rule condition may name (``matrix_dtypes.<dtype>_share``)
MATRIX_DTYPES = (
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


def flat_values(facts: dict[str, Fact]) -> dict[str, Any]:
    """The dotted names rule conditions read: a fact's value, or for a mapping its keys
    (``optimizer.impl``); ``matrix_dtypes.<dtype>_share`` for every dtype (0 when absent)."""
    out: dict[str, Any] = {}
    for k, f in facts.items():
        v = f.value
        if k == "matrix_dtypes" and isinstance(v, dict):
            shares = v.get("shares") or {}
            out["matrix_dtypes.dominant"] = v.get("dominant")
            for d in MATRIX_DTYPES:
                out[f"matrix_dtypes.{d}_share"] = float(shares.get(d, 0.0))
            low = 0.0 + sum(
                float(shares.get(d, 0.0)) for d in shares if d not in ("fp32", "fp64", UNKNOWN)
            )
            out["matrix_dtypes.low_precision_share"] = low
            out["matrix_dtypes.wide_share"] = sum(
                float(shares.get(d, 0.0)) for d in ("fp32", "tf32", "fp64")
            )
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
    "matrix_dtypes.wide_share": "% of matrix kernel time in fp32, TF32 or fp64",
    **{f"matrix_dtypes.{d}_share": f"% of matrix kernel time in {d}" for d in MATRIX_DTYPES},
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
    "dataloader.workers": "0 (in the main process) | multi (worker processes) | unknown",
    "dataloader.h2d": "pageable | pinned | both | none",
    "vendor": "nvidia | amd",
    "interconnect": "nvlink | xgmi | pcie | unknown (the device's fabric class)",
}
