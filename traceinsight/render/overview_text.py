"""The overview (``result.overview``) as text: the Markdown body's summary line and its short
table of the mean step breakdown per rank. Reads the result only."""

from __future__ import annotations

from typing import Any

from traceinsight.render.mdtext import esc, md_table
from traceinsight.util import fmt

#: part -> label (the TensorBoard plugin's names)
PART_LABELS = {
    "kernel": "Kernel",
    "memcpy": "Memcpy",
    "memset": "Memset",
    "runtime": "Runtime",
    "dataloader": "DataLoader",
    "cpu_exec": "CPU Exec",
    "other": "Other",
}
MAX_RANK_ROWS = 8  #: ranks in the Markdown table


def summary_line(ov: dict[str, Any]) -> str:
    """Tensor cores, SM efficiency and occupancy in one line ("not recorded" where missing)."""
    tc = ov.get("tensor_cores") or {}
    sm = (ov.get("sm_efficiency") or {}).get("pct")
    occ = (ov.get("occupancy") or {}).get("pct")
    parts = [
        f"kernel time on tensor cores {fmt.fmt_pct(tc.get('tensor_core_pct'))}" if tc else "",
        f"est. SM efficiency {fmt.fmt_pct(sm) if sm is not None else 'not recorded'}",
        f"est. achieved occupancy {fmt.fmt_pct(occ) if occ is not None else 'not recorded'}",
    ]
    return "; ".join(p for p in parts if p)


def mean_rows(ov: dict[str, Any]) -> list[tuple[Any, float, list[tuple[str, float, float]]]]:
    """Per rank: (rank, mean step ns, [(label, ns, % of step)])."""
    out = []
    for m in (ov.get("step_breakdown") or {}).get("mean") or []:
        step = float(m.get("step_ns") or 0)
        parts = [
            (lab, float(m.get(f"{p}_ns") or 0), 100.0 * float(m.get(f"{p}_ns") or 0) / step)
            if step
            else (lab, 0.0, 0.0)
            for p, lab in PART_LABELS.items()
        ]
        out.append((m.get("rank"), step, parts))
    return out


def terminal_lines(ov: dict[str, Any] | None, width: int) -> list[str]:
    """The terminal report's Overview: the GPU summary and the mean step over all steps (all
    ranks) by part."""
    import textwrap

    if not ov:
        return []
    steps = (ov.get("step_breakdown") or {}).get("steps") or []
    out = [
        "Overview",
        *textwrap.wrap(summary_line(ov), width, initial_indent="  ", subsequent_indent="  "),
    ]
    total = sum(float(r.get("step_ns") or 0) for r in steps)
    if steps and total:
        parts = [
            f"{lab} {fmt.fmt_pct(100.0 * sum(float(r.get(f'{p}_ns') or 0) for r in steps) / total)}"
            for p, lab in PART_LABELS.items()
        ]
        head = f"mean step {fmt.fmt_ns(total / len(steps))}: "
        out += textwrap.wrap(
            head + " · ".join(parts), width, initial_indent="  ", subsequent_indent="    "
        )
    out.append("")
    return out


def markdown_lines(ov: dict[str, Any] | None) -> list[str]:
    if not ov:
        return []
    out = [f"**Overview**: {esc(summary_line(ov))}.", ""]
    rows = mean_rows(ov)
    if len(rows) == 1:  # one rank: its mean step on one line (the ticket body stays compact)
        _, step, parts = rows[0]
        out[0] = out[0][:-1] + (
            f"; mean step {fmt.fmt_ns(step)}: "
            + ", ".join(
                f"{esc(label)} {fmt.fmt_ns(ns)} ({fmt.fmt_pct(pct)})" for label, ns, pct in parts
            )
            + "."
        )
    elif rows:
        headers = ["rank", "mean step", *PART_LABELS.values()]
        out += md_table(
            headers,
            [
                [str(rank), fmt.fmt_ns(step)]
                + [f"{fmt.fmt_ns(ns)} ({fmt.fmt_pct(pct)})" for _, ns, pct in parts]
                for rank, step, parts in rows[:MAX_RANK_ROWS]
            ],
            "l" + "r" * (len(headers) - 1),
        )
        if len(rows) > MAX_RANK_ROWS:
            out.append(f"({len(rows) - MAX_RANK_ROWS} more ranks in the JSON result)")
        out.append("")
    return out


def user_frame(stack: list[str]) -> str:
    """The innermost frame of a call stack (innermost first) outside torch and the Python
    builtins, else the innermost one; "–" without a stack."""
    for f in stack:
        if not f.startswith(("<", "nn.Module: ")) and "torch/" not in f:
            return f
    return stack[0] if stack else "–"


def shape_table(rows: list[Any]) -> str:
    """``top --by shape``: ops by name and input shape (rows of ``rollup("shape")``)."""
    body = [
        [
            str(r.name),
            fmt.shapes_text(r.input_dims, 40) or "–",
            f"{int(r.calls):,}",
            fmt.fmt_ns(r.device_self_ns),
            fmt.fmt_ns(r.device_total_ns),
            fmt.fmt_ns(r.host_self_ns),
            fmt.fmt_ns(r.host_total_ns),
            user_frame(getattr(r, "stack", None) or []),
        ]
        for r in rows
    ]
    return fmt.table(
        body,
        [
            "operator",
            "input shapes",
            "calls",
            "device self",
            "device total",
            "host self",
            "host total",
            "called from",
        ],
        align="llrrrrrl",
        flex=7,
    )
