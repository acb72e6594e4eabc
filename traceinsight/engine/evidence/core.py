"""Evidence providers: the tables a finding shows to back its claim.

A rule lists evidence by name (optionally with parameters); each provider returns a table
``{"kind": "table", "title", "columns": [{"name", "format"}], "rows": [[...]]}`` with raw
values; ``format`` (text, ns, bytes, pct, count, rate_flops, rate_bytes, ratio) tells renderers
how to show them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from traceinsight.metrics import MetricSet
from traceinsight.util.fmt import fmt_ns
from traceinsight.util.vocab import NO_MODULE

Provider = Callable[[MetricSet, Any, dict[str, Any]], list[dict[str, Any]]]
PROVIDERS: dict[str, Provider] = {}


def provider(name: str) -> Callable[[Provider], Provider]:
    def deco(fn: Provider) -> Provider:
        PROVIDERS[name] = fn
        return fn

    return deco


def table(
    title: str, columns: list[tuple[str, str]], rows: list[list[Any]], note: str | None = None
) -> dict[str, Any]:
    t = {
        "kind": "table",
        "title": title,
        "columns": [{"name": n, "format": f} for n, f in columns],
        "rows": rows,
    }
    if note:
        t["note"] = note
    return t


def build_evidence(specs: list[Any], ms: MetricSet, context: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for spec in specs:
        if isinstance(spec, str):
            name, params = spec, {}
        else:
            name, params = next(iter(spec.items()))
            params = params or {}
        tables = PROVIDERS[name](ms, context, params)
        out.extend(t for t in tables if t and t.get("rows"))
    return out


@provider("breakdown")
def _breakdown(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    if an is None or not an.breakdown.ranks:
        return []
    rows = []
    for r, b in sorted(an.breakdown.ranks.items()):
        w = b.wall_ns or 1
        copies = b.memcpy_exposed_ns + b.memset_exposed_ns
        rows.append(
            [
                r,
                b.wall_ns,
                100 * b.compute_ns / w,
                100 * b.comm_exposed_ns / w,
                100 * b.comm_hidden_ns / w,
                100 * copies / w,
                100 * b.idle_ns / w,
            ]
        )
    return [
        table(
            "GPU time breakdown (step windows)",
            [
                ("rank", "text"),
                ("window", "ns"),
                ("compute", "pct"),
                ("comm exposed", "pct"),
                ("comm hidden", "pct"),
                ("copies exposed", "pct"),
                ("idle", "pct"),
            ],
            rows,
        )
    ]


@provider("top_kernels")
def _top_kernels(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    if an is None:
        return []
    df = an.rollup("kernel")
    cls = p.get("cls")
    if cls:
        cls = [cls] if isinstance(cls, str) else list(cls)
        df = df[df["cls"].astype(str).isin(cls)]
    if p.get("max_mean_ns"):
        df = df[df["mean_ns"] <= float(p["max_mean_ns"])].sort_values("calls", ascending=False)
    df = df.head(int(p.get("n", 5)))
    rows = [
        [
            r.name,
            str(r.cls),
            int(r.calls),
            int(r.total_ns),
            float(r.mean_ns),
            float(r.share_pct),
            r.top_op,
        ]
        for r in df.itertuples()
    ]
    title = "Top kernels" + (f" ({', '.join(cls)})" if cls else "")
    return [
        table(
            title,
            [
                ("kernel", "kernel"),
                ("class", "class"),
                ("calls", "count"),
                ("total", "ns"),
                ("mean", "ns"),
                ("share of GPU time", "pct"),
                ("launched by", "op"),
            ],
            rows,
        )
    ]


@provider("top_ops")
def _top_ops(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    if an is None:
        return []
    df = an.rollup("op").head(int(p.get("n", 5)))
    rows = [
        [r.name, int(r.calls), int(r.device_self_ns), int(r.host_ns), float(r.share_pct)]
        for r in df.itertuples()
    ]
    return [
        table(
            "Top operators by device time",
            [
                ("operator", "op"),
                ("calls", "count"),
                ("device self", "ns"),
                ("host", "ns"),
                ("share", "pct"),
            ],
            rows,
        )
    ]


@provider("top_layers")
def _top_layers(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    if an is None:
        return []
    df = an.rollup("layer")
    df = df[df["module"] != NO_MODULE].head(int(p.get("n", 5)))
    rows = [
        [r.module, int(r.forward_ns), int(r.backward_ns), int(r.total_ns), float(r.share_pct)]
        for r in df.itertuples()
    ]
    return [
        table(
            "Top layers",
            [
                ("module", "text"),
                ("forward", "ns"),
                ("backward", "ns"),
                ("total", "ns"),
                ("share", "pct"),
            ],
            rows,
        )
    ]


def _records(title: str, recs: list[dict] | None, cols: list[tuple[str, str, str]]) -> list[dict]:
    if not recs:
        return []
    rows = [[r.get(key) for key, _, _ in cols] for r in recs]
    return [table(title, [(label, f) for _, label, f in cols], rows)]


@provider("slow_steps")
def _slow(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    return _records(
        "Slowest steps and what grew",
        ms.evidence.get("slow_steps"),
        [
            ("rank", "rank", "text"),
            ("step", "step", "text"),
            ("wall_ns", "step time", "ns"),
            ("gpu_ns", "GPU time of its work", "ns"),
            ("over_median_ns", "over median", "ns"),
            ("cause", "largest change", "text"),
            ("cause_delta_ns", "by", "ns"),
            ("also", "next change", "text"),
            ("also_delta_ns", "by", "ns"),
        ],
    )


@provider("step_times")
def _steps(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    """Every step: its window, the GPU time of the work launched in its CPU window, and
    whether the step statistics use it (see metrics.steps)."""
    recs = ms.evidence.get("steps") or []
    rows = [
        [
            s["rank"],
            s["step"],
            s["wall_ns"],
            s["host_ns"],
            s["gpu_ns"],
            s["kernels"],
            sum(v for k, v in s["parts"].items() if k.startswith("idle_")),
            s["excluded"] or "representative",
        ]
        for s in recs
    ]
    return [
        table(
            "Step times",
            [
                ("rank", "text"),
                ("step", "text"),
                ("step time", "ns"),
                ("CPU step", "ns"),
                ("GPU time of its work", "ns"),
                ("kernels", "count"),
                ("GPU idle", "ns"),
                ("used as", "text"),
            ],
            rows[:64],
        )
    ]


@provider("idle_gaps")
def _gaps(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    recs = ms.evidence.get("idle_gaps") or []
    want = p.get("cause")
    if want:
        recs = [r for r in recs if r["cause"] == want]
    recs = _with_offsets(recs[: int(p.get("n", 8))], an)
    return _records(
        "Largest GPU idle gaps",
        recs,
        [
            ("rank", "rank", "text"),
            ("step", "step", "text"),
            ("dur_ns", "idle", "ns"),
            ("cause", "cause", "text"),
            ("at_ns", "into step", "ns"),
        ],
    )


def _with_offsets(recs: list[dict], an: Any) -> list[dict]:
    """Idle gaps with ``at_ns``, where each starts in its step window: gaps of equal length in
    one step are different gaps, and the offset tells them apart (and finds them in a trace
    viewer)."""
    starts: dict[tuple[Any, Any], int] = {}
    if an is not None:
        for w in an.attribution.steps:
            starts.setdefault((w.rank, w.step), w.start_ns)
    out = []
    for r in recs:
        base = starts.get((r.get("rank"), r.get("step")))
        at = r.get("start_ns")
        out.append({**r, "at_ns": at - base if base is not None and at is not None else None})
    return out


@provider("sync_calls")
def _syncs(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    return _records(
        "Blocking synchronisations (op → call)",
        ms.evidence.get("sync_calls"),
        [
            ("call", "where", "text"),
            ("count", "calls", "count"),
            ("per_step", "per step", "ratio"),
            ("total_ns", "host time blocked", "ns"),
        ],
    )


@provider("host_stalls")
def _stalls(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    return _records(
        "Long host events that launch nothing (on the launching thread)",
        ms.evidence.get("host_stalls"),
        [
            ("event", "host event", "text"),
            ("count", "count", "count"),
            ("total_ns", "total", "ns"),
            ("max_ns", "longest", "ns"),
        ],
    )


@provider("dataloader")
def _dataloader(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    if an is None:
        return []
    from traceinsight.metrics.timing import DATALOADER_RE, rank_ranges

    frames = []
    for r in sorted(an.breakdown.ranks):
        _, _, sel = rank_ranges(an, r, DATALOADER_RE)
        frames.append(sel)
    df = pd.concat(frames) if frames else pd.DataFrame()
    if not len(df):
        return []
    agg = df.groupby(df["name"].astype(str))["dur_ns"].agg(["size", "sum", "max"]).reset_index()
    agg = agg.sort_values("sum", ascending=False).head(5)
    rows = [[r.name, int(r.size), int(r.sum), int(r.max)] for r in agg.itertuples()]
    return [
        table(
            "Input loading on the host",
            [("range", "text"), ("calls", "count"), ("total", "ns"), ("longest", "ns")],
            rows,
        )
    ]


@provider("memory_peak")
def _mem_peak(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    pk = ms.evidence.get("memory_peak")
    out = []
    if pk:
        out.append(
            table(
                "Allocator peaks",
                [
                    ("rank", "text"),
                    ("device", "text"),
                    ("peak reserved", "bytes"),
                    ("peak allocated", "bytes"),
                    ("peak reserved − peak allocated", "bytes"),
                    ("reserved at the allocated peak", "bytes"),
                    ("capacity", "bytes"),
                    ("reserved, % of capacity", "pct"),
                ],
                [
                    [
                        pk["rank"],
                        pk["device"],
                        pk["peak_reserved_bytes"],
                        pk["peak_allocated_bytes"],
                        pk["gap_at_peak_bytes"],
                        pk["reserved_at_allocated_peak"],
                        pk["capacity_bytes"],
                        pk.get("capacity_pct"),
                    ]
                ],
            )
        )
    out += _records(
        "Ops allocating most in the peak step",
        ms.evidence.get("memory_top_allocators"),
        [
            ("op", "op", "op"),
            ("bytes", "allocated", "bytes"),
            ("allocations", "allocations", "count"),
        ],
    )
    return out


@provider("copy_kinds")
def _copy_kinds(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    return _records(
        "Copies by kind",
        ms.evidence.get("copy_kinds"),
        [
            ("kind", "kind", "text"),
            ("direction", "direction", "text"),
            ("copies", "copies", "count"),
            ("total_ns", "total", "ns"),
            ("exposed_pct", "alone on the GPU, % of step time", "pct"),
            ("bytes", "bytes", "bytes"),
            ("bytes_per_s", "achieved", "rate_bytes"),
        ],
    )


@provider("memory_growth")
def _mem_growth(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    g = ms.evidence.get("memory_growth")
    if not g:
        return []
    rows = [[s, b] for s, b in zip(g["steps"], g["allocated_at_step_end"])]
    return [
        table(
            f"Allocated memory at the end of each step (rank {g['rank']})",
            [("step", "text"), ("allocated", "bytes")],
            rows,
        )
    ]


@provider("collectives")
def _coll(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    return _records(
        "Collectives",
        ms.evidence.get("collectives"),
        [
            ("collective", "collective", "text"),
            ("count", "calls", "count"),
            ("total_ns", "total", "ns"),
            ("mean_ns", "mean", "ns"),
            ("median_bytes", "message (median)", "bytes"),
            ("busbw_bytes_per_s", "bus bandwidth", "rate_bytes"),
        ],
    )


@provider("ranks")
def _ranks(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    out = _records(
        "Per-rank time per step (median)",
        ms.evidence.get("ranks"),
        [
            ("rank", "rank", "text"),
            ("compute_ns_per_step", "compute", "ns"),
            ("comm_ns_per_step", "communication", "ns"),
            ("step_ns", "step", "ns"),
        ],
    )
    skew = ms.evidence.get("collective_skew")
    if skew:
        rows = [[r, n] for r, n in sorted(skew["last_arrivals"].items())]
        out.append(
            table(
                "Last to arrive at collectives (n-th collective of each rank)",
                [("rank", "text"), ("times last", "count")],
                rows,
                note=f"median start spread {fmt_ns(skew['median_spread_ns'])}",
            )
        )
    return out


@provider("fp32_gemms")
def _fp32(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    return _records(
        "fp32 matrix kernels (CUDA cores / AMD fp32 matrix units)",
        ms.evidence.get("fp32_matrix_kernels"),
        [
            ("kernel", "kernel", "kernel"),
            ("op", "launched by", "op"),
            ("dtype", "dtype", "text"),
            ("how", "dtype from", "text"),
            ("calls", "calls", "count"),
            ("total_ns", "total", "ns"),
            ("share_pct", "of kernel time", "pct"),
        ],
    )


def _bound(title: str, key: str) -> Provider:
    def fn(ms: MetricSet, an: Any, p: dict) -> list[dict]:
        return _records(
            title,
            ms.evidence.get(key),
            [
                ("op", "op", "op"),
                ("input_dims", "shapes", "dims"),
                ("dtype", "dtype", "text"),
                ("device_ns", "device time", "ns"),
                ("arithmetic_intensity", "FLOP/byte", "ratio"),
                ("achieved_flops_per_s", "achieved", "rate_flops"),
                ("achieved_bytes_per_s", "bandwidth", "rate_bytes"),
            ],
        )

    return fn


PROVIDERS["memory_bound_ops"] = _bound("Memory-bound ops (below the ridge)", "memory_bound_ops")
PROVIDERS["compute_bound_ops"] = _bound("Compute-bound ops (above the ridge)", "compute_bound_ops")


@provider("device")
def _device(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    d = ms.evidence.get("device")
    if not d or not d.get("resolved"):
        return []
    peaks = d.get("peaks") or {}
    rows = [[k, v] for k, v in peaks.items() if v]
    bw = d.get("bandwidth")
    return [
        table(
            f"Device roofs: {d['resolved']}",
            [("dtype", "text"), ("peak", "rate_flops")],
            rows,
            note=f"memory bandwidth {bw / 1e12:.2f} TB/s" if bw else None,
        )
    ]
