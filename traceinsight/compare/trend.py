"""A baseline over time: the key figures of saved diagnosis results, run after run.

:func:`build_trend` reads :class:`~traceinsight.result.DiagnosisResult` objects (the files of
``traceinsight diagnose --json``) in the order given -- the result records no time of its own,
so the order of the arguments is the order of the runs -- and tabulates each figure per run:
the p50 of the representative steps, MFU, peak allocated memory, the exposed communication share
and the GPU idle share (any other metric of ``metrics.values`` by name on request). Between
consecutive runs it names what changed in the configuration (device, world size, matrix dtypes,
tool and runtime/driver versions), so a step change in a figure can be read against it.
:func:`regression_gate` is the CI check: the last run's step time against the median of the
runs before it.

The trend is plain data (a dict, ``schema`` ``traceinsight.trend``): the renderers read it and
``--json`` writes it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from traceinsight.errors import InputError
from traceinsight.result import DiagnosisResult

TREND_SCHEMA = "traceinsight.trend"
TREND_VERSION = 1

#: a key figure: name, label, unit (ns, pct, bytes), whether lower is better
Figure = dict[str, Any]


def _ranks(r: DiagnosisResult) -> list[dict[str, Any]]:
    return [dict(x) for x in (r.summary or {}).get("ranks", []) or []]


def _value(r: DiagnosisResult, key: str) -> float | None:
    v = ((r.metrics or {}).get("values") or {}).get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def step_time_p50(r: DiagnosisResult) -> float | None:
    """The p50 of the representative steps, of the slowest rank (the ranks step together, so the
    slowest sets the pace); the p50 of all steps where a result predates the representative
    statistics; the metric ``step_time_p50_ns`` where no rank has either."""
    for field in ("step_time_representative_ns", "step_time_ns"):
        vals = [
            float(st["p50"])
            for x in _ranks(r)
            if isinstance(st := x.get(field), dict) and isinstance(st.get("p50"), (int, float))
        ]
        if vals:
            return max(vals)
    return _value(r, "step_time_p50_ns")


def mfu(r: DiagnosisResult) -> float | None:
    """Model FLOPs utilisation (%): the modelled one, else the estimate from the op FLOPs."""
    v = _value(r, "mfu_pct")
    return v if v is not None else _value(r, "mfu_estimate_pct")


def peak_memory(r: DiagnosisResult) -> float | None:
    """The highest peak of allocated device memory over the ranks (bytes)."""
    vals = [
        float(x["peak_allocated_bytes"])
        for x in _ranks(r)
        if isinstance(x.get("peak_allocated_bytes"), (int, float))
    ]
    return max(vals) if vals else _value(r, "peak_allocated_bytes")


#: the key figures, in table order
FIGURES: list[tuple[str, str, str, bool, Callable[[DiagnosisResult], float | None]]] = [
    ("step_time", "step p50", "ns", True, step_time_p50),
    ("mfu", "MFU", "pct", False, mfu),
    ("peak_memory", "peak memory", "bytes", True, peak_memory),
    ("exposed_comm", "exposed comm", "pct", True, lambda r: _value(r, "exposed_comm_pct")),
    ("gpu_idle", "GPU idle", "pct", True, lambda r: _value(r, "gpu_idle_pct")),
]
FIGURE_NAMES = [f[0] for f in FIGURES]

_UNITS = {"ns": "ns", "pct": "pct", "%": "pct", "bytes": "bytes", "B": "bytes"}


def _figures(names: Sequence[str], results: Sequence[DiagnosisResult]) -> list[Figure]:
    """The figures asked for (all key figures when none): a key figure by its name, or any
    metric a result holds by its metric name."""
    known = {f[0]: f for f in FIGURES}
    out: list[Figure] = []
    for name in names or FIGURE_NAMES:
        if name in known:
            n, label, unit, lower, _ = known[name]
            out.append({"name": n, "label": label, "unit": unit, "lower_is_better": lower})
            continue
        units: dict[str, str] = {}
        for r in results:
            units.update((r.metrics or {}).get("units") or {})
        if not any(name in ((r.metrics or {}).get("values") or {}) for r in results):
            raise InputError(
                f"no figure or metric named {name!r} in these results",
                hint="one of " + ", ".join(FIGURE_NAMES) + ", or a metric of traceinsight rules",
            )
        unit = _UNITS.get(units.get(name, ""), "")
        if not unit:
            unit = "ns" if name.endswith("_ns") else "pct" if name.endswith("_pct") else ""
        if name.endswith("_bytes"):
            unit = "bytes"
        out.append({"name": name, "label": name, "unit": unit, "lower_is_better": None})
    return out


def _figure_value(r: DiagnosisResult, name: str) -> float | None:
    for n, _, _, _, get in FIGURES:
        if n == name:
            return get(r)
    return _value(r, name)


def configuration(r: DiagnosisResult) -> dict[str, str]:
    """What a run ran on and with, as short texts: device, world size, matrix dtypes, the
    tool's version and the runtime/driver versions the trace records."""
    t: dict[str, Any] = dict(r.trace or {})
    devices = t.get("device") or ", ".join(sorted(set(t.get("devices") or []))) or "unknown"
    cfg = {
        "device": str(devices),
        "world size": str(t.get("world_size") or len(t.get("ranks") or []) or "unknown"),
        "dtypes": ", ".join(sorted(str(d) for d in t.get("dtypes") or [])) or "unknown",
        "traceinsight": str((r.tool or {}).get("version") or "unknown"),
    }
    for k, v in sorted((t.get("versions") or {}).items()):
        if isinstance(v, (str, int, float)) and not isinstance(v, bool):
            cfg[str(k)] = str(v)
    return cfg


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """``key: old -> new`` for every configuration entry that differs (a key that one side does
    not record reads ``not recorded``)."""
    out = []
    for k in [*before, *(k for k in after if k not in before)]:
        a, b = before.get(k, "not recorded"), after.get(k, "not recorded")
        if a != b:
            out.append(f"{k}: {a} → {b}")
    return out


def unique_labels(paths: Sequence[str]) -> list[str]:
    """Short names for the runs: the file name, with as many parent folders as it takes to tell
    it from another run of the same name; ``#N`` appended where the same path is given twice."""
    parts = [p.replace("\\", "/").split("/") for p in paths]
    depth = [1] * len(parts)
    while True:
        labels = ["/".join(p[-d:]) for p, d in zip(parts, depth, strict=True)]
        count: dict[str, int] = {}
        for lab in labels:
            count[lab] = count.get(lab, 0) + 1
        grow = [i for i, lab in enumerate(labels) if count[lab] > 1 and depth[i] < len(parts[i])]
        if not grow:
            break
        for i in grow:
            depth[i] += 1
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab} #{seen[lab]}")
    return out


def build_trend(
    results: Sequence[DiagnosisResult],
    paths: Sequence[str],
    metrics: Sequence[str] = (),
) -> dict[str, Any]:
    """The trend of ``results`` (in run order; ``paths`` name them): per run its figures, its
    configuration and what changed from the run before."""
    figures = _figures(metrics, results)
    labels = unique_labels([str(p) for p in paths])
    runs: list[dict[str, Any]] = []
    prev: dict[str, str] | None = None
    for i, (r, label) in enumerate(zip(results, labels, strict=True)):
        cfg = configuration(r)
        runs.append(
            {
                "index": i + 1,
                "label": label,
                "headline": r.headline,
                "values": {f["name"]: _figure_value(r, f["name"]) for f in figures},
                "config": cfg,
                "changes": changes(prev, cfg) if prev is not None else [],
            }
        )
        prev = cfg
    tool = dict(results[-1].tool) if results else {"name": "traceinsight", "version": ""}
    return {
        "schema": TREND_SCHEMA,
        "version": TREND_VERSION,
        "tool": tool,
        "order": "arguments",
        "figures": figures,
        "runs": runs,
    }


def regression_gate(trend: dict[str, Any], pct: float) -> tuple[int, str, dict[str, Any]]:
    """Exit code, one line, and the numbers: 1 when the last run's step time is more than
    ``pct`` percent above the median step time of the runs before it, 0 when not, 2 when there
    is no baseline (a single run) or the step times are missing."""
    runs = trend.get("runs") or []
    if len(runs) < 2:
        return 2, "no baseline: --fail-if-regressed needs at least two results", {}
    last = runs[-1]["values"].get("step_time")
    if last is None:
        return 2, f"no step time in the last run ({runs[-1]['label']}): cannot gate", {}
    base = [r["values"].get("step_time") for r in runs[:-1]]
    have = [float(v) for v in base if v is not None]
    if not have:
        return 2, "no step time in any earlier run: no baseline to gate against", {}
    median = statistics.median(have)
    change = (float(last) - median) / median * 100.0 if median > 0 else 0.0
    facts = {
        "threshold_pct": pct,
        "baseline_ns": median,
        "baseline_runs": len(have),
        "last_ns": float(last),
        "change_pct": change,
        "regressed": change > pct,
    }
    from traceinsight.util import fmt

    text = (
        f"step time {fmt.fmt_ns(last)} vs the median {fmt.fmt_ns(median)} of {len(have)} "
        f"earlier run{'s' if len(have) != 1 else ''}: {change:+.1f}%"
    )
    if change > pct:
        return 1, f"regressed: {text} (more than {pct:g}%)", facts
    return 0, f"within {pct:g}%: {text}", facts
