"""``traceinsight summary``: a first read-out of a store, straight from its tables."""

from __future__ import annotations

import textwrap
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.store.core import TraceStore
from traceinsight.util import fmt
from traceinsight.util.kernelname import short_names
from traceinsight.util.safetext import for_terminal

SUMMARY_VERSION = 1


def _sum(arr: pa.ChunkedArray | pa.Array) -> int:
    v = pc.sum(arr).as_py()
    return int(v or 0)


def summarize(store: TraceStore, top_n: int = 10) -> dict[str, Any]:
    gpu = store.table("gpu_activities", ["rank", "kind", "name", "dur_ns", "start_ns"])
    ranges = store.table("ranges", ["rank", "kind", "step"])
    ranks_out = []
    for rm in store.ranks:
        r = rm["rank"]
        g = gpu.filter(pc.equal(gpu["rank"], r))
        kinds = g["kind"].cast(pa.string())
        totals = {}
        counts = {}
        for k in ("kernel", "memcpy", "memset", "sync"):
            sel = g.filter(pc.equal(kinds, k))
            totals[k] = _sum(sel["dur_ns"])
            counts[k] = sel.num_rows
        rr = ranges.filter(pc.equal(ranges["rank"], r))
        step_rows = rr.filter(pc.equal(rr["kind"].cast(pa.string()), "step"))
        steps = sorted(set(step_rows["step"].to_pylist()) - {None})
        span = rm.get("span_ns")
        ranks_out.append(
            {
                "rank": r,
                "source": rm.get("source"),
                "vendor": rm.get("vendor"),
                "devices": [d.get("name") for d in rm.get("devices", [])],
                "devices_used": rm.get("devices_used", []),
                "world_size": rm.get("distributed", {}).get("world_size"),
                "span_ns": (span[1] - span[0]) if span else None,
                "steps": steps,
                "kernel_count": counts["kernel"],
                "kernel_time_ns": totals["kernel"],
                "memcpy_count": counts["memcpy"],
                "memcpy_time_ns": totals["memcpy"],
                "memset_count": counts["memset"],
                "memset_time_ns": totals["memset"],
                "event_counts": store.meta.get("event_counts", {}).get(str(r), {}),
                "capture_flags": rm.get("capture_flags", {}),
            }
        )
    kern = gpu.filter(pc.equal(gpu["kind"].cast(pa.string()), "kernel"))
    top = []
    if kern.num_rows:
        agg = (
            pa.table({"name": kern["name"].cast(pa.string()), "dur_ns": kern["dur_ns"]})
            .group_by("name")
            .aggregate([("dur_ns", "sum"), ("dur_ns", "count"), ("dur_ns", "max")])
        )
        agg = agg.sort_by([("dur_ns_sum", "descending"), ("name", "ascending")]).slice(0, top_n)
        total = _sum(kern["dur_ns"])
        for row in agg.to_pylist():
            top.append(
                {
                    "name": row["name"],
                    "count": row["dur_ns_count"],
                    "total_ns": row["dur_ns_sum"],
                    "mean_ns": row["dur_ns_sum"] / row["dur_ns_count"],
                    "max_ns": row["dur_ns_max"],
                    "pct_of_kernel_time": 100.0 * row["dur_ns_sum"] / total if total else 0.0,
                }
            )
    return {
        "summary_version": SUMMARY_VERSION,
        "sources": [
            {"name": s["name"], "sha256": s["sha256"], "rank": s["rank"]}
            for s in store.meta.get("sources", [])
        ],
        "ranks": ranks_out,
        "table_rows": store.row_counts,
        "top_kernels": top,
        "diagnostics": store.meta.get("diagnostics", []),
    }


def render_summary(s: dict[str, Any]) -> str:
    out = []
    names = ", ".join(x["name"] for x in s["sources"])
    out.append(f"Trace: {names}")
    missing = [d for d in s.get("diagnostics", []) if d.get("code") == "rank-missing"]
    if missing:  # before anything else: every figure below lacks these ranks
        out.append(
            f"Warning: {len(missing)} rank file(s) could not be read ("
            + ", ".join(str(d.get("source")) for d in missing[:3])
            + "); the figures cover the other ranks only"
        )
    out.append("")
    rows = []
    for r in s["ranks"]:
        devs = sorted({d for d in r["devices"] if d}) or [
            "(GPU not named)" if r.get("kernel_count") else "(no GPU)"
        ]
        steps = r["steps"]
        step_txt = (
            f"{len(steps)} (#{steps[0]}–#{steps[-1]})"
            if len(steps) > 1
            else (f"1 (#{steps[0]})" if steps else "none")
        )
        rows.append(
            [
                r["rank"],
                fmt.shorten(", ".join(devs), 34),
                r["vendor"],
                fmt.fmt_ns(r["span_ns"]),
                step_txt,
                f"{r['kernel_count']:,}",
                fmt.fmt_ns(r["kernel_time_ns"]),
                fmt.fmt_ns(r["memcpy_time_ns"]),
                fmt.fmt_ns(r["memset_time_ns"]),
            ]
        )
    out.append(
        fmt.table(
            rows,
            [
                "rank",
                "device",
                "vendor",
                "span",
                "steps",
                "kernels",
                "kernel time",
                "memcpy",
                "memset",
            ],
            align="llllrrrrr",
        )
    )
    out.append("")
    counts: dict[str, int] = {}
    for r in s["ranks"]:
        for k, v in r["event_counts"].items():
            counts[k] = counts.get(k, 0) + v
    if counts:
        items = [f"{k}\u00a0{v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v]
        text = "Events by kind: " + ", ".join(items)  # a kind and its count never split
        wrapped = textwrap.wrap(text, fmt.terminal_width(), subsequent_indent="  ")
        out += [line.replace("\u00a0", " ") for line in wrapped]
        out.append("")
    if s["top_kernels"]:
        short = short_names(k["name"] for k in s["top_kernels"])
        rows = [
            [
                short[k["name"]],
                f"{k['count']:,}",
                fmt.fmt_ns(k["total_ns"]),
                fmt.fmt_ns(k["mean_ns"]),
                fmt.fmt_pct(k["pct_of_kernel_time"]),
            ]
            for k in s["top_kernels"]
        ]
        out.append(f"Top {len(rows)} kernels by total time")
        out.append(
            fmt.table(rows, ["kernel", "calls", "total", "mean", "share"], flex=0, middle=(0,))
        )
    else:
        out.append("No GPU kernels in this trace.")
    warn = [d for d in s["diagnostics"] if d.get("severity") in ("warning", "error")]
    if warn:
        out.append("")
        out.append(f"Data quality ({len(warn)}):")
        for d in warn[:10]:
            cnt = f" [{d['count']:,}]" if d.get("count") else ""
            out.append(f"  ! {d.get('source') or ''}: {d['message']}{cnt}")
    return for_terminal("\n".join(out))
