"""The view of the diagnosis report: plain dicts and lists built from a :class:`DiagnosisResult`,
so ``templates/report.html`` holds no logic beyond loops.

Large inputs are capped: the result is already downsampled by ``diagnose``; here steps are
bucketed past ``charts.steps.MAX_STEP_BARS``, timeline items are merged below one pixel, and
idle gaps, ranks, memory series and table rows are capped.
"""

from __future__ import annotations

import re
import shlex
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from traceinsight.render import describe, model_notes, run_notes
from traceinsight.render.html import overview_view, serving_view
from traceinsight.render.html.cells import css_ident, evidence_columns, table
from traceinsight.render.html.charts import CHARTS
from traceinsight.render.html.charts.breakdown import SEGMENTS
from traceinsight.render.html.charts.ranks import ranks_view
from traceinsight.render.html.charts.steps import SLOW_STEP_FACTOR
from traceinsight.render.html.environment import render_page
from traceinsight.render.html.host import host_view
from traceinsight.render.html.memory_view import capacity_share, memory_view
from traceinsight.result import (
    SEVERITY_RANK,
    DiagnosisResult,
    Finding,
    finding_sort_key,
    severity_rank,
)
from traceinsight.util import fmt
from traceinsight.util.redact import TOKEN_RE, redact_arg, redact_tokens
from traceinsight.util.vocab import CLASSES, is_more_row

MAX_STEP_ROWS = 1000
MAX_RANK_ROWS = 1024
MAX_RANK_LINES = 16
EXPOSED_COMM_WARN_PCT = 10.0
EXPOSED_COMM_BAD_PCT = 20.0
CAPTURE_FLAGS = run_notes.FLAGS
_VERSION_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")

NAV = [
    ("findings", "Findings"),
    ("steps", "Steps"),
    ("breakdown", "GPU time"),
    ("timeline", "Timeline"),
    ("layers", "Layers"),
    ("ops", "Operators"),
    ("kernels", "Kernels"),
    ("roofline", "Roofline"),
    ("memory", "Memory"),
    ("diagnostics", "Data quality"),
    ("metadata", "Run"),
]
#: a run without GPU kernels: the host view instead of the GPU sections
HOST_NAV = [
    ("findings", "Findings"),
    ("host", "Host time"),
    ("memory", "Memory"),
    ("diagnostics", "Data quality"),
    ("metadata", "Run"),
]
#: a memory snapshot (or timeline export) diagnosed without a trace
MEMORY_NAV = [
    ("findings", "Findings"),
    ("memory", "Memory"),
    ("diagnostics", "Data quality"),
    ("metadata", "Run"),
]


def render_html(result: DiagnosisResult) -> str:
    """The report as one HTML document (a string; the caller writes it)."""
    from traceinsight.render.diagnosis_markdown import render_markdown

    view = build_view(result)
    payload = {
        "schema": "traceinsight.report",
        "version": 1,
        "tool": view["tool"],
        "markdown": render_markdown(result),
        "slow_step_factor": SLOW_STEP_FACTOR,
    }
    return render_page("report.html", view, payload)


def build_view(result: DiagnosisResult) -> dict[str, Any]:
    """Everything the templates show, as plain data."""
    r = result
    findings = sorted(r.findings, key=finding_sort_key)
    # the badge says the most severe finding (the first by impact may be a minor one)
    top = min((f.severity for f in findings), key=severity_rank, default=None)
    verdict = (
        (top if top in SEVERITY_RANK else "info")
        if findings
        else ("ok" if r.metrics.get("values", {}).get("has_gpu") else "info")
    )
    host = host_view(r)
    return {
        "title": _title(r),
        "tool": {
            "name": str(r.tool.get("name") or "traceinsight"),
            "version": str(r.tool.get("version") or "?"),
            "result_version": r.version,
        },
        "command": _command_line(r.command),
        "headline": host["headline"] if host else r.headline,
        "headline_note": r.headline if host else "",
        "verdict": verdict,
        "host": host,
        "subtitle": _subtitle(r),
        "kpis": _kpis(r),
        "nav": overview_view.with_nav(
            serving_view.with_nav(
                MEMORY_NAV if r.trace.get("memory_only") else HOST_NAV if host else NAV, r
            ),
            r,
        ),
        "memory_only": bool(r.trace.get("memory_only")),
        "findings": [_finding(f, i) for i, f in enumerate(findings)],
        "rules_fired": len(findings),
        "steps": _steps(r),
        "breakdown": _breakdown(r),
        "ranks": ranks_view((r.extra or {}).get("cross_rank")),
        "timeline": _timeline(r),
        "critical_path": CHARTS["critical_path"].build(r.critical_path, r.timeline),
        "layers": _layers(r),
        "ops": _ops(r),
        "kernels": _kernels(r),
        "roofline": _roofline(r),
        "memory": memory_view(r),
        "diagnostics": _diagnostics(r),
        "metadata": _metadata(r),
        "serving": serving_view.html_view(r),
        "overview": overview_view.html_view(r),
    }


def _title(r: DiagnosisResult) -> str:
    srcs = [str(s.get("name", "")) for s in r.trace.get("sources", [])]
    name = srcs[0] if srcs else "trace"
    if len(srcs) > 1:
        name += f" (+{len(srcs) - 1})"
    return name


def _subtitle(r: DiagnosisResult) -> str:
    t = r.trace
    n = len(t.get("ranks") or [])
    parts = [
        f"{n} rank{'s' if n != 1 else ''}"
        + (f" of {t['world_size']}" if t.get("world_size") and t["world_size"] != n else "")
    ]
    parts.append(describe.device_name(r))
    if describe.run_mode(r):
        parts.append(str(describe.run_mode(r)))
    steps = r.metrics.get("values", {}).get("steps")
    if steps:
        parts.append(f"{int(steps)} step{'s' if steps != 1 else ''}")
    parts.append(f"primary: {r.primary}")
    if t.get("span_ns"):
        parts.append(f"{fmt.fmt_ns(t['span_ns'])} traced")
    return " · ".join(parts)


def _command_line(cmd: Sequence[str]) -> str:
    """The command as typed, with anything that looks like a secret redacted."""
    return shlex.join([redact_arg(a) for a in cmd or []])


def _kpis(r: DiagnosisResult) -> list[dict[str, str]]:
    mv = r.metrics.get("values", {})
    out: list[dict[str, str]] = []

    def add(label: str, value: str, sub: str = "", tone: str = "") -> None:
        out.append({"label": label, "value": value, "sub": sub, "tone": tone})

    if mv.get("step_time_p50_ns") is not None:
        sub = f"p90 {fmt.fmt_ns(mv.get('step_time_p90_ns'))}" if mv.get("step_time_p90_ns") else ""
        add("Step time p50", fmt.fmt_ns(mv["step_time_p50_ns"]), sub)
    if mv.get("gpu_busy_pct") is not None:
        b = mv["gpu_busy_pct"] or 0.0  # not None here
        e = mv.get("exposed_comm_pct") or 0.0
        tone = "bad" if b < 50 else ("warn" if b < 80 else "good")
        sub = f"idle {fmt.fmt_pct(mv.get('gpu_idle_pct'), 0)}"
        if e >= EXPOSED_COMM_WARN_PCT:  # busy waiting on communication is not healthy
            tone = "bad" if tone == "bad" or e >= EXPOSED_COMM_BAD_PCT else "warn"
            sub = f"of it exposed comm {fmt.fmt_pct(e, 0)}; {sub}"
        add("GPU busy", fmt.fmt_pct(b, 0), sub, tone)
    if mv.get("exposed_comm_pct") is not None and (mv.get("comm_pct") or 0) > 0:
        e = mv["exposed_comm_pct"] or 0.0  # not None here
        add(
            "Exposed comm",
            fmt.fmt_pct(e),
            f"overlap {fmt.fmt_pct(mv.get('comm_overlap_pct'), 0)}",
            "bad" if e >= 20 else ("warn" if e >= 10 else ""),
        )
    for part in (r.host or {}).get("split") or []:  # a CPU-only run: where the step went
        label = {
            "framework ops": "Framework ops",
            "data loading": "Data loading",
            "synchronisation": "Synchronisation",
        }.get(part["part"], "Python & other")
        warn = {"Python & other": 25.0, "Data loading": 10.0, "Synchronisation": 5.0}.get(label)
        add(
            label,
            fmt.fmt_pct(part["pct"], 0),
            "of step time",
            "warn" if warn is not None and part["pct"] >= warn else "",
        )
    mfu = mv.get("mfu_pct") if mv.get("mfu_pct") is not None else mv.get("mfu_estimate_pct")
    if mfu is not None:
        c: Mapping[str, Any] = (
            (r.metrics.get("coverage") or {}).get("mfu_pct") or {}
            if mv.get("mfu_pct") is not None
            else {}
        )
        suffix = model_notes.mfu_suffix(r) if mv.get("mfu_pct") is not None else ""
        add(
            "MFU",
            ("≥ " if c.get("lower_bound") else "") + fmt.fmt_pct(mfu),
            (
                f"modelled FLOPs / peak; {fmt.fmt_pct(c['coverage_pct'], 0)} of kernel time "
                "modelled"
                if c.get("coverage_pct") is not None
                else "modelled FLOPs / peak"
            )
            + (f"; {suffix}" if suffix else ""),
        )
    if mv.get("peak_reserved_bytes") is not None:
        share = capacity_share(r)  # the same share the memory section quotes
        add(
            "Peak memory",
            fmt.fmt_bytes(mv["peak_reserved_bytes"]),
            f"reserved; {share[0]} of {share[1]}" if share else "reserved",
        )
    if mv.get("kernels_per_step") is not None:
        med = mv.get("median_kernel_ns")
        add(
            "Kernels / step",
            fmt.fmt_num(mv["kernels_per_step"], 0),
            f"median {fmt.fmt_ns(med)}" if med else "",
        )
    return out


def _finding(f: Finding, i: int) -> dict[str, Any]:
    measurements, tables = [], []
    for j, ev in enumerate(f.evidence or []):
        kind = ev.get("kind")
        if kind == "measurements":
            for m in ev.get("rows", []):
                shown = m.get("display", fmt.format_cell(m.get("value"), "num"))
                limit = m.get("threshold_display", m.get("threshold", ""))
                measurements.append(
                    {
                        "metric": str(m.get("metric", "")),
                        "display": str(shown),
                        "op": str(m.get("op", "")),
                        "threshold": str(limit),
                    }
                )
        elif kind == "table" and ev.get("columns"):
            t = table(f"ev-{i}-{j}", evidence_columns(ev["columns"]), ev.get("rows", []), limit=10)
            t["title"] = str(ev.get("title", ""))
            t["note"] = str(ev.get("note") or "")
            tables.append(t)
    imp = f.impact_pct or 0.0
    return {
        "rule": f.rule,
        "severity": f.severity if f.severity in SEVERITY_RANK else "info",
        "title": f.title,
        "category": f.category,
        "message": f.message,
        "impact": fmt.fmt_pct(imp) if f.impact_pct is not None else "",
        "impact_w": round(min(100.0, imp), 1),
        "measurements": measurements,
        "tables": tables,
        "recommendations": [str(x) for x in f.recommendations],
        "confidence": describe.confidence_text(f.confidence),
        "withheld": [
            {"text": str(w.get("text", "")), "reason": str(w.get("reason", ""))}
            for w in f.withheld or []
            if isinstance(w, dict)
        ],
    }


# --- steps and GPU time -----------------------------------------------------------------------


def _steps(r: DiagnosisResult) -> dict[str, Any]:
    mv = r.metrics.get("values", {})
    rows = [s for s in r.breakdown.get("steps") or [] if s.get("step") is not None]
    if not mv.get("has_gpu"):
        return {
            "empty": describe.with_capture_hint(
                "No GPU activity in this trace: step times need GPU kernels", r, "gpu"
            )
        }
    if not rows:
        return {
            "empty": describe.with_capture_hint(
                "No step markers: the whole GPU span is one window", r, "steps"
            )
        }
    by_step: dict[Any, list[dict]] = defaultdict(list)
    for s in rows:
        by_step[s["step"]].append(s)
    steps = sorted(by_step, key=lambda k: (isinstance(k, str), k))
    multi = len({s["rank"] for s in rows}) > 1
    reps = []
    for k in steps:
        rs = by_step[k]
        top_wall = max(s.get("wall_ns") or 0 for s in rs)
        # ranks of one step end together (they wait in collectives): among walls within 1%
        # of the longest, the rank that computed most is the one holding the step back
        worst = max(
            (s for s in rs if (s.get("wall_ns") or 0) >= 0.99 * top_wall),
            key=lambda s: (s.get("compute_ns") or 0, s.get("wall_ns") or 0),
        )
        reps.append(
            {
                "step": k,
                "rank": worst["rank"],
                "row": worst,
                "min": min(s.get("wall_ns") or 0 for s in rs),
                "max": worst.get("wall_ns") or 0,
                "n": len(rs),
            }
        )
    # the median and the slow steps over the representative steps (metrics.steps)
    kept = [x for x in reps if not x["row"].get("excluded")] or reps
    median = _median(sorted(x["max"] for x in kept))
    threshold = SLOW_STEP_FACTOR * median
    slow = [x for x in kept if median and x["max"] > threshold]
    rank_compute: dict[Any, list[float | None]] = {}
    if multi:
        pos = {k: i for i, k in enumerate(steps)}
        for srow in rows:
            line = rank_compute.setdefault(srow["rank"], [None] * len(steps))
            line[pos[srow["step"]]] = float(srow.get("compute_ns") or 0)
        if len(rank_compute) > MAX_RANK_LINES:  # the slowest and fastest ranks, by median
            by_median = sorted(
                rank_compute, key=lambda k: _median([v for v in rank_compute[k] if v is not None])
            )
            keep = set(by_median[: MAX_RANK_LINES // 2] + by_median[-(MAX_RANK_LINES // 2) :])
            rank_compute = {k: v for k, v in rank_compute.items() if k in keep}
    chart, size = CHARTS["steps"].build(reps, median, {id(x) for x in slow}, multi, rank_compute)
    # the table: one row per step (its slowest rank), the slowest MAX_STEP_ROWS steps
    order = {id(x): i for i, x in enumerate(reps)}
    listed = sorted(reps, key=lambda x: -x["max"])[:MAX_STEP_ROWS]
    listed.sort(key=lambda x: order[id(x)])
    step_rows = [
        [
            x["step"],
            x["rank"],
            x["max"],
            x["min"] if multi else None,
            *[_pct(x["row"].get(k), x["row"].get("wall_ns")) for k, _, _ in SEGMENTS],
            x["row"].get("comm_hidden_ns"),
            x["row"].get("kernels"),
        ]
        for x in listed
    ]
    step_cols = [
        ("step", "text"),
        ("slowest rank" if multi else "rank", "text"),
        ("wall", "ns"),
        ("fastest rank", "ns"),
        ("compute", "pct"),
        ("comm exposed", "pct"),
        ("memcpy exposed", "pct"),
        ("memset exposed", "pct"),
        ("idle", "pct"),
        ("comm hidden", "ns"),
        ("kernels", "count"),
    ]
    if not multi:
        step_cols.pop(3)
        step_rows = [r[:3] + r[4:] for r in step_rows]
    left = [f"step {x['step']} ({x['row']['excluded']})" for x in reps if x["row"].get("excluded")]
    notes = [f"the {len(listed)} slowest of {len(reps)} steps"] if len(listed) < len(reps) else []
    if left:
        notes.append(f"left out of the step statistics: {', '.join(left[:8])}")
    note = "; ".join(notes)
    step_table = table("tbl-steps", step_cols, step_rows, limit=20, note=note)
    return {
        "empty": "",
        "chart": chart,
        "median": fmt.fmt_ns(median),
        "count": len(reps),
        "multi": multi,
        "factor": SLOW_STEP_FACTOR,
        "bucket": size,
        "slow": [
            {
                "step": str(x["step"]),
                "time": fmt.fmt_ns(x["max"]),
                "rank": x["rank"],
                "ratio": f"{x['max'] / median:.2f}×",
            }
            for x in slow[:20]
        ],
        "slow_more": max(0, len(slow) - 20),
        "legend": [
            (lab, cls)
            for key, lab, cls in SEGMENTS
            if key in ("compute_ns", "idle_ns") or any(s.get(key) for s in rows)
        ]
        + ([("compute time of each rank (one line per rank)", "rankline")] if multi else []),
        "rank_lines": len(rank_compute),
        "table": step_table,
    }


def _median(v: list[float]) -> float:
    if not v:
        return 0.0
    s = sorted(v)
    n = len(s)
    return float(s[n // 2]) if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def _pct(part: Any, whole: Any) -> float | None:
    if part is None or not whole:
        return None
    return 100.0 * float(part) / float(whole)


def _breakdown(r: DiagnosisResult) -> dict[str, Any]:
    ranks = sorted(r.breakdown.get("ranks") or [], key=lambda x: x.get("rank", 0))
    if not ranks or not r.metrics.get("values", {}).get("has_gpu"):
        return {"empty": describe.with_capture_hint("No GPU activity in this trace", r, "gpu")}
    shown = ranks  # every rank: past 64 the chart takes its compact form
    summ = {s.get("rank"): s for s in r.summary.get("ranks", [])}
    rows = []
    for w in ranks[:MAX_RANK_ROWS]:
        s: Mapping[str, Any] = summ.get(w.get("rank"), {})
        wall = w.get("wall_ns")
        q = s.get("step_time_representative_ns") or s.get("step_time_ns") or {}
        rows.append(
            [
                w.get("rank"),
                s.get("device"),
                wall,
                *[_pct(w.get(k), wall) for k, _, _ in SEGMENTS],
                _pct(w.get("comm_hidden_ns"), wall),
                s.get("steps"),
                q.get("p50"),
                s.get("kernel_time_ns"),
                s.get("peak_reserved_bytes"),
            ]
        )
    cls_rows = r.rollups.get("classes") or []
    tot = sum(float(c.get("total_ns") or 0) for c in cls_rows) or 1.0
    order = {c: i for i, c in enumerate(CLASSES)}
    cls_rows = sorted(cls_rows, key=lambda c: order.get(str(c.get("cls")), 99))
    totals = {
        k: sum(float(w.get(k) or 0) for w in ranks)
        for k in (
            "wall_ns",
            "compute_ns",
            "comm_exposed_ns",
            "comm_hidden_ns",
            "comm_ns",
            "memcpy_exposed_ns",
            "memset_exposed_ns",
            "idle_ns",
        )
    }
    wall = totals["wall_ns"] or 1.0
    return {
        "empty": "",
        "chart": CHARTS["ranks_gpu_time"].build(shown),
        "more_ranks": max(0, len(ranks) - len(shown)),
        "legend": [
            (lab, cls)
            for key, lab, cls in SEGMENTS
            if totals[key] > 0 or key in ("compute_ns", "idle_ns")
        ]
        + ([("comm hidden (under compute)", "hidden")] if totals["comm_hidden_ns"] > 0 else []),
        "summary": [
            (lab, fmt.fmt_pct(100 * totals[key] / wall), cls)
            for key, lab, cls in SEGMENTS
            if totals[key] > 0 or key in ("compute_ns", "idle_ns")
        ],
        "hidden": fmt.fmt_pct(100 * totals["comm_hidden_ns"] / wall) if totals["comm_ns"] else "",
        "definition": str(r.breakdown.get("definition") or ""),
        "classes": CHARTS["kernel_classes"].build(cls_rows, tot) if cls_rows else None,
        "class_legend": [
            (
                str(c.get("cls")),
                css_ident(str(c.get("cls"))),
                fmt.fmt_pct(100 * float(c.get("total_ns") or 0) / tot),
            )
            for c in cls_rows
        ],
        "table": table(
            "tbl-ranks",
            [
                ("rank", "text"),
                ("device", "text"),
                ("window", "ns"),
                ("compute", "pct"),
                ("comm exposed", "pct"),
                ("memcpy exposed", "pct"),
                ("memset exposed", "pct"),
                ("idle", "pct"),
                ("comm hidden", "pct"),
                ("steps", "count"),
                ("step p50", "ns"),
                ("kernel time", "ns"),
                ("peak reserved", "bytes"),
            ],
            rows,
            limit=16,
        ),
    }


def _timeline(r: DiagnosisResult) -> dict[str, Any]:
    tl = r.timeline
    if not tl or not tl.get("lanes") or not any(ln.get("items") for ln in tl["lanes"]):
        why = (
            describe.with_capture_hint("No GPU kernels in this trace", r, "gpu")
            if not r.metrics.get("values", {}).get("has_gpu")
            else "No representative step could be chosen (no GPU work inside a step window)."
        )
        return {"empty": why}
    return {
        "empty": "",
        **CHARTS["timeline"].build(tl),
        "viewer": describe.viewer_hint(r),
        "viewer_title": describe.viewer_title(r),
    }


# --- rollup tables ----------------------------------------------------------------------------


def _layers(r: DiagnosisResult) -> dict[str, Any]:
    ro = r.rollups or {}
    rows = ro.get("layers") or []
    if not r.metrics.get("values", {}).get("has_gpu"):
        why = (
            "CPU-only trace"
            if describe.no_gpu_text(r) != describe.NO_GPU_CUT
            else "truncated trace: the cut lost them"
        )
        return {"empty": f"No GPU kernels to attribute to layers ({why})."}
    if not ro.get("has_modules") or not rows:
        return {
            "empty": describe.with_capture_hint(
                (
                    "No NVTX layer ranges in this capture"
                    if run_notes.capture_of(r).tool == "nsys"
                    else "No nn.Module hierarchy in this trace"
                )
                + ", so no device time per layer (operators below)",
                r,
                "modules",
            )
        }
    data = [
        [
            x.get("module"),
            x.get("forward_ns"),
            x.get("backward_ns"),
            x.get("other_ns"),
            x.get("total_ns"),
            x.get("kernels"),
            x.get("share_pct"),
        ]
        for x in rows
    ]
    t = table(
        "tbl-layers",
        [
            ("module", "module"),
            ("forward", "ns"),
            ("backward", "ns"),
            ("other", "ns"),
            ("total", "ns"),
            ("kernels", "count"),
            ("share", "share"),
        ],
        data,
        filterable=True,
    )
    for cells, x in zip(t["rows"], [x for x in rows if not is_more_row(x.get("module"))]):
        cells[0]["depth"] = int(x.get("depth") or 0)
    types = [x for x in ro.get("module_types") or [] if x.get("module_type")]
    tt = (
        table(
            "tbl-module-types",
            [
                ("module type", "text"),
                ("instances", "count"),
                ("forward", "ns"),
                ("backward", "ns"),
                ("other", "ns"),
                ("total", "ns"),
                ("kernels", "count"),
                ("share", "share"),
            ],
            [
                [
                    f"{x['module_type']} ×{x.get('instances')}",
                    x.get("instances"),
                    x.get("forward_ns"),
                    x.get("backward_ns"),
                    x.get("other_ns"),
                    x.get("total_ns"),
                    x.get("kernels"),
                    x.get("share_pct"),
                ]
                for x in types
            ],
            limit=12,
        )
        if types
        else None
    )
    return {"empty": "", "table": t, "count": len(t["rows"]), "types": tt}


def _ops(r: DiagnosisResult) -> dict[str, Any]:
    ro = r.rollups or {}
    rows = ro.get("ops") or []
    if not rows:
        return {"empty": "No operators with device time in this trace.", "annotations": None}
    data = [
        [
            x.get("name"),
            x.get("calls"),
            x.get("device_self_ns"),
            x.get("device_total_ns"),
            x.get("host_ns"),
            x.get("share_pct"),
            x.get("input_dims"),
        ]
        for x in rows
    ]
    t = table(
        "tbl-ops",
        [
            ("operator", "op"),
            ("calls", "count"),
            ("device self", "ns"),
            ("device total", "ns"),
            ("host", "ns"),
            ("share", "share"),
            ("input dims", "dims"),
        ],
        data,
        filterable=True,
    )
    ann = ro.get("annotations") or []
    at = None
    if ann:
        at = table(
            "tbl-annotations",
            [
                ("annotation", "text"),
                ("device time", "ns"),
                ("kernels", "count"),
                ("share", "share"),
            ],
            [
                [x.get("annotation"), x.get("device_ns"), x.get("kernels"), x.get("share_pct")]
                for x in ann
            ],
            limit=10,
        )
    return {"empty": "", "table": t, "annotations": at, "count": len(t["rows"])}


def _kernels(r: DiagnosisResult) -> dict[str, Any]:
    rows = (r.rollups or {}).get("kernels") or []
    if not rows:
        return {"empty": describe.with_capture_hint("No GPU kernels in this trace", r, "gpu")}
    data = [
        [
            x.get("name"),
            x.get("cls"),
            x.get("calls"),
            x.get("total_ns"),
            x.get("mean_ns"),
            x.get("min_ns"),
            x.get("max_ns"),
            x.get("share_pct"),
            x.get("top_op"),
        ]
        for x in rows
    ]
    t = table(
        "tbl-kernels",
        [
            ("kernel", "kernel"),
            ("class", "class"),
            ("calls", "count"),
            ("total", "ns"),
            ("mean", "ns"),
            ("min", "ns"),
            ("max", "ns"),
            ("share", "share"),
            ("launched by", "op"),
        ],
        data,
        filterable=True,
    )
    return {"empty": "", "table": t, "count": len(t["rows"])}


# --- roofline and memory ----------------------------------------------------------------------


def _roofline(r: DiagnosisResult) -> dict[str, Any]:
    rf = r.roofline
    pts = [
        p
        for p in (rf or {}).get("points") or []
        if (p.get("ai") or 0) > 0 and (p.get("flops_per_s") or 0) > 0
    ]
    if not rf or not pts:
        return {"empty": _roofline_why(r)}
    chart = CHARTS["roofline"].build(pts, rf.get("bandwidth"), rf.get("peaks") or {})
    rows = [
        [
            p.get("op"),
            p.get("dims"),
            p.get("dtype"),
            p.get("calls"),
            p.get("device_ns"),
            p.get("ai"),
            p.get("flops_per_s"),
            p.get("bound"),
        ]
        for p in pts
    ]
    mv = r.metrics.get("values", {})
    t_all = sum(float(p.get("device_ns") or 0) for p in pts) or 1.0
    t_mem = sum(float(p.get("device_ns") or 0) for p in pts if p.get("bound") == "memory")
    mem_pct = mv.get("memory_bound_time_pct")
    mem_pct = 100.0 * t_mem / t_all if mem_pct is None else mem_pct
    cmp_pct = mv.get("compute_bound_time_pct")
    cmp_pct = 100.0 - mem_pct if cmp_pct is None else cmp_pct
    return {
        "empty": "",
        "chart": chart,
        "points": len(pts),
        "device": str((r.extra.get("device") or {}).get("resolved") or r.trace.get("device") or ""),
        "memory_pct": fmt.fmt_pct(mem_pct),
        "compute_pct": fmt.fmt_pct(cmp_pct),
        "coverage": fmt.fmt_pct(mv["flops_modelled_pct"])
        if mv.get("flops_modelled_pct") is not None
        else "",
        "eff": fmt.fmt_pct(mv.get("roof_efficiency_pct"))
        if mv.get("roof_efficiency_pct") is not None
        else "",
        "notes": model_notes.model_notes(r),
        "table": table(
            "tbl-roofline",
            [
                ("operator", "text"),
                ("input dims", "dims"),
                ("dtype", "text"),
                ("calls", "count"),
                ("device time", "ns"),
                ("FLOP/byte", "ratio"),
                ("achieved", "rate_flops"),
                ("bound", "text"),
            ],
            rows,
            limit=12,
        ),
    }


def _roofline_why(r: DiagnosisResult) -> str:
    mv = r.metrics.get("values", {})
    miss = r.metrics.get("missing", {})
    flags = r.trace.get("capture_flags") or {}
    if not mv.get("has_gpu"):
        return "No GPU kernels in this trace: nothing to place on a roofline."
    if not flags.get("record_shapes"):
        return describe.with_capture_hint(
            "No op shapes, so FLOPs and bytes cannot be modelled for the roofline", r, "shapes"
        )
    dev = r.extra.get("device") or {}
    if not dev.get("resolved") and not dev.get("peaks"):
        return describe.with_capture_hint(
            "No device peaks: the roofline needs a known GPU", r, "device"
        )
    why = miss.get("roof_efficiency_pct") or miss.get("flops_modelled_pct")
    return f"No roofline points: {why}." if why else "No op could be modelled for the roofline."


# --- diagnostics and metadata -----------------------------------------------------------------


def _diagnostics(r: DiagnosisResult) -> dict[str, Any]:
    order = {"error": 0, "warning": 1, "info": 2}
    diags = sorted(
        (d for d in r.diagnostics or [] if d.get("code") not in describe.DEVICE_CODES),
        key=lambda d: order.get(str(d.get("severity")), 3),
    )
    items = [
        {
            "severity": str(d.get("severity") or "info"),
            "code": str(d.get("code") or ""),
            "message": redact_tokens(d.get("message") or ""),
            "source": redact_tokens(d.get("source") or ""),
            "count": run_notes.count_text(d)
            if d.get("count") and run_notes.count_text(d) not in str(d.get("message") or "")
            else "",
            "impact": redact_tokens(d.get("impact") or ""),
            "hint": redact_tokens(d.get("hint") or ""),
        }
        for d in diags
    ]
    rules = r.rules or []
    not_eval = [
        {"rule": ", ".join(g["rules"]), "reason": g["reason"], "hint": g["hint"]}
        for g in describe.not_evaluated(rules)
    ]
    other = [
        {
            "rule": str(x.get("rule")),
            "status": str(x.get("status") or ""),
            "reason": str(x.get("reason") or ""),
        }
        for x in rules
        if x.get("status") != "not-evaluated"
    ]
    cov = r.extra.get("coverage") or {}
    missing = sorted((str(k), str(v)) for k, v in (r.metrics.get("missing") or {}).items())
    return {
        "items": items,
        "device": describe.device_line(r),
        "not_evaluated_count": sum(1 for x in rules if x.get("status") == "not-evaluated"),
        "not_evaluated": not_eval,
        "other_rules": other,
        "errors": [
            {"rule": str(e.get("rule")), "error": str(e.get("error"))} for e in r.rule_errors or []
        ],
        "coverage": fmt.fmt_pct(cov["coverage_pct"]) if cov.get("coverage_pct") is not None else "",
        "unattributed": fmt.fmt_num(cov.get("unattributed_kernels"), 0)
        if cov.get("unattributed_kernels")
        else "",
        "missing": missing,
        "passed": sum(1 for x in rules if x.get("status") == "passed"),
        "not_applicable": sum(1 for x in rules if x.get("status") == "not-applicable"),
    }


def _metadata(r: DiagnosisResult) -> dict[str, Any]:
    """Only allow-listed fields of ``trace`` (never free-form trace metadata)."""
    t = r.trace or {}
    flag_rows = run_notes.capture_flags(r)  # (flag, "on" | "off" | "not recorded", note)
    versions = [
        (str(k), str(v))
        for k, v in sorted((t.get("versions") or {}).items())
        if isinstance(k, str)
        and _VERSION_KEY.match(k)
        and not isinstance(v, bool)
        and isinstance(v, (int, float, str))
        and len(str(v)) <= 64
        and not TOKEN_RE.search(str(v))
    ]
    ranks = [int(x) for x in t.get("ranks") or [] if isinstance(x, (int, float))]
    rank_txt = ranks_traced(ranks)
    sources = [
        {
            "name": redact_tokens(s.get("name", "")),
            "rank": s.get("rank"),
            "sha": str(s.get("sha256") or "")[:16],
        }
        for s in (t.get("sources") or [])[:64]
    ]
    opts = [
        (str(k), str(v))
        for k, v in sorted((r.extra.get("options") or {}).items())
        if isinstance(v, (int, float, str)) and not isinstance(v, bool) and len(str(v)) < 64
    ]
    dev = r.extra.get("device") or {}
    rows = [
        ("Ranks traced", rank_txt or "–"),
        ("World size", str(t.get("world_size") or "–")),
        ("Backend", str(t.get("backend") or "–")),
        ("Device", describe.device_line(r)),
        ("Roofline device", str(t.get("device") or dev.get("resolved") or "unknown")),
        ("Vendor", str(t.get("vendor") or "–")),
        ("Format", str(t.get("format") or "–")),
        ("Traced span", fmt.fmt_ns(t.get("span_ns")) if t.get("span_ns") else "–"),
        ("Step markers", "yes" if t.get("has_step_markers") else "no"),
    ]
    return {
        "rows": rows,
        "facts": describe.run_rows(r),
        "flags": flag_rows,
        "flags_title": "Capture options"
        if run_notes.capture_of(r).tool == "nsys"
        else "Capture flags",
        "versions": versions,
        "sources": sources,
        "more_sources": max(0, len(t.get("sources") or []) - 64),
        "options": opts,
    }


def ranks_traced(ranks: list[int]) -> str:
    """The ranks of a run as a count and their ids (``1 (rank 0)``, ``4 (ranks 0–3)``), so a
    lone rank 0 never reads as a count of zero."""
    if not ranks:
        return ""
    ids = sorted(set(ranks))
    if len(ids) == 1:
        return f"1 (rank {ids[0]})"
    if ids == list(range(ids[0], ids[0] + len(ids))):
        return f"{len(ids)} (ranks {ids[0]}–{ids[-1]})"
    txt = ", ".join(map(str, ids[:32])) + (f" … (+{len(ids) - 32})" if len(ids) > 32 else "")
    return f"{len(ids)} (ranks {txt})"
