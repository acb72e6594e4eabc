"""The HTML report's Overview section (``result.overview``): the GPU summary (tensor cores,
SM efficiency, occupancy), the step time breakdown chart and table, the tensor-core kernels
and the operators by input shape. Reads the result only."""

from __future__ import annotations

from typing import Any

from traceinsight.render import describe
from traceinsight.render.html.charts.step_parts import PARTS
from traceinsight.result import DiagnosisResult
from traceinsight.util import fmt

MAX_STACK_SHOWN = 6
MAX_STEP_ROWS = 1000  #: step rows in the table (the chart averages past its bar limit)


def short_frame(frame: str) -> str:
    """``/long/path/pkg/file.py(12): fn`` -> ``pkg/file.py(12): fn`` (the last two parts)."""
    path, sep, rest = str(frame).partition("(")
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) + sep + rest


def with_nav(nav: list[tuple[str, str]], r: DiagnosisResult) -> list[tuple[str, str]]:
    """The section list with Overview after the GPU time breakdown (when the result has it)."""
    if not r.overview or not any(sid == "breakdown" for sid, _ in nav):
        return nav
    i = next(k + 1 for k, (sid, _) in enumerate(nav) if sid == "breakdown")
    return [*nav[:i], ("overview", "Overview"), *nav[i:]]


def gpu_summary(ov: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value, how it is measured) for the summary pills."""
    tc = ov.get("tensor_cores") or {}
    sm = ov.get("sm_efficiency") or {}
    occ = ov.get("occupancy") or {}
    return [
        (
            "Kernel time using tensor cores",
            fmt.fmt_pct(tc.get("tensor_core_pct")) if tc else "–",
            str(tc.get("rule") or ""),
        ),
        (
            "Est. SM efficiency",
            fmt.fmt_pct(sm.get("pct")) if sm.get("pct") is not None else "not recorded",
            str(sm.get("rule") or ""),
        ),
        (
            "Est. achieved occupancy",
            fmt.fmt_pct(occ.get("pct")) if occ.get("pct") is not None else "not recorded",
            str(occ.get("rule") or ""),
        ),
    ]


def html_view(r: DiagnosisResult) -> dict[str, Any] | None:
    from traceinsight.render.html.cells import table
    from traceinsight.render.html.charts import CHARTS

    if not r.overview:
        return None
    ov: dict[str, Any] = dict(r.overview)
    sb = ov.get("step_breakdown") or {}
    parts = list(PARTS)
    step_rows = [
        [
            f"{s.get('step')}" if s.get("step") is not None else "all",
            s.get("rank"),
            s.get("step_ns"),
            *[s.get(f"{p}_ns") for p in parts],
        ]
        for s in (sb.get("steps") or [])[:MAX_STEP_ROWS]
    ]
    tc = ov.get("tensor_cores") or {}
    tc_rows = [
        [
            k.get("name"),
            k.get("dtype") or "–",
            "yes" if k.get("tensor_cores") else "no",
            k.get("calls"),
            k.get("total_ns"),
            k.get("pct"),
        ]
        for k in tc.get("top") or []
    ]
    ob = ov.get("ops_by_shape") or {}
    op_rows = [
        [
            o.get("name"),
            o.get("input_dims") or "–",
            o.get("calls"),
            o.get("device_self_ns"),
            o.get("device_total_ns"),
            o.get("host_self_ns"),
            o.get("host_total_ns"),
            " ← ".join(short_frame(f) for f in (o.get("stack") or [])[:MAX_STACK_SHOWN]) or "–",
        ]
        for o in ob.get("rows") or []
    ]
    return {
        "summary": gpu_summary(ov),
        "chart": CHARTS["step_parts"].build(sb),
        "legend": [(lab, cls) for lab, cls in PARTS.values()],
        "definition": str(sb.get("definition") or ""),
        "steps": table(
            "overview-steps",
            [("step", "text"), ("rank", "count"), ("step", "ns")]
            + [(PARTS[p][0], "ns") for p in parts],
            step_rows,
        ),
        "tensor_cores": table(
            "overview-tc",
            [
                ("kernel", "kernel"),
                ("dtype", "text"),
                ("tensor cores", "text"),
                ("calls", "count"),
                ("total", "ns"),
                ("% of kernel time", "pct"),
            ],
            tc_rows,
        )
        if tc_rows
        else None,
        "ops": table(
            "overview-ops",
            [
                ("op", "op"),
                ("input dims", "dims"),
                ("calls", "count"),
                ("device self", "ns"),
                ("device total", "ns"),
                ("host self", "ns"),
                ("host total", "ns"),
                ("call stack (innermost first)", "op"),
            ],
            op_rows,
            filterable=True,
        )
        if op_rows
        else None,
        "ops_note": " ".join(
            describe.with_capture_hint(text, r, setting)
            for text, setting, has in (
                ("No call stacks, so not where each op is called", "stack", "has_stack"),
                ("No input shapes", "shapes", "has_shapes"),
            )
            if not ob.get(has)
        ),
    }
