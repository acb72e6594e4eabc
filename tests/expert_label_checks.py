"""Checks of a diagnosis against the expert labels in ``traces/expected/diagnoses.yaml``.

The labels say what a senior performance engineer concluded from the raw events of each shared
Kineto trace (their header documents every field). Each ``check_*`` function compares one part
of a label with what traceinsight states and returns the disagreements as readable lines (an
empty list: the tool agrees). ``tests/test_expert_labels.py`` asserts on them; the same
functions can summarise the whole corpus outside pytest.

What the tool states is read from the result of ``diagnose`` (its JSON form) and, for the
runtime-call figures, from the store's ``runtime_calls`` table.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from conftest import TRACES

LABELS = TRACES / "expected" / "diagnoses.yaml"
NO_LABELS = (
    f"{LABELS} is absent: the expert labels come with the shared trace corpus; set "
    "TRACEINSIGHT_SHARED to the folder that holds traces/ (default: ../shared next to "
    "the repository)"
)

#: severities at which a rule counts as reported
REPORTED = ("high", "medium")
#: verdicts that are not rule ids
SPECIAL_PRIMARY = ("healthy", "not-representative")

#: ``<api>_calls``, ``<api>_total_ms``, ``<api>_max_ms``: exact figures over the runtime calls
RUNTIME_FACT = re.compile(r"^(?P<api>[A-Za-z][A-Za-z0-9_]*?)_(?P<what>calls|total_ms|max_ms)$")
#: label keys that are not facts of their own: ``last_step_gpu_tail_ns`` only widens what
#: ``step_time_ns_p50`` accepts for a single-step trace (the header's rule)
HELPER_FACTS = frozenset({"last_step_gpu_tail_ns"})


def load_labels(path: Path = LABELS) -> dict[str, dict[str, Any]]:
    """The labels by trace path (relative to the corpus root); empty without the corpus."""
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    return {str(k): v for k, v in data.items()}


def label_id(key: str) -> str:
    """A short test id: the path under ``kineto/`` with ``:`` for ``/`` (as test_golden)."""
    return key.removeprefix("kineto/").replace("/", ":")


# --- what the tool said ------------------------------------------------------------------------


@dataclass
class Diagnosed:
    """One trace's diagnosis as JSON, plus figures read from its store."""

    result: dict[str, Any]
    #: runtime call name -> (calls, total ns, max ns)
    runtime: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    @property
    def findings(self) -> list[dict[str, Any]]:
        return list(self.result.get("findings") or [])

    @property
    def values(self) -> dict[str, Any]:
        return (self.result.get("metrics") or {}).get("values") or {}

    @property
    def missing(self) -> dict[str, str]:
        return (self.result.get("metrics") or {}).get("missing") or {}

    @property
    def ranks(self) -> list[dict[str, Any]]:
        return list((self.result.get("summary") or {}).get("ranks") or [])


def diagnose_trace(key: str) -> Diagnosed:
    """Ingest and diagnose one labelled trace through the library API."""
    from traceinsight.diagnose import diagnose
    from traceinsight.ingest import ingest

    store = ingest([TRACES / key], quiet=True)
    result = diagnose(store).to_dict()
    rt = store.df("runtime_calls", ["name", "dur_ns"])
    runtime: dict[str, tuple[int, int, int]] = {}
    if len(rt):
        agg = (
            rt.assign(name=rt["name"].astype(str))
            .groupby("name")["dur_ns"]
            .agg(["size", "sum", "max"])
        )
        runtime = {
            str(n): (int(r["size"]), int(r["sum"]), int(r["max"])) for n, r in agg.iterrows()
        }
    return Diagnosed(result, runtime)


def primary_of(d: Diagnosed) -> str:
    """The result's ``primary``; where the result has no such field yet, derived the same way:
    the first finding at medium/high in the result's order, else ``healthy``."""
    p = d.result.get("primary")
    if p:
        return str(p)
    return next((f["rule"] for f in d.findings if f.get("severity") in REPORTED), "healthy")


def _reported(d: Diagnosed) -> dict[str, dict[str, Any]]:
    """Rules reported at medium/high -> their most severe finding."""
    out: dict[str, dict[str, Any]] = {}
    for f in d.findings:
        if f.get("severity") in REPORTED and (f["rule"] not in out or f["severity"] == "high"):
            out[f["rule"]] = f
    return out


def _severities(d: Diagnosed) -> str:
    return ", ".join(f"{f['rule']}={f['severity']}" for f in d.findings) or "no findings"


# --- verdict checks -------------------------------------------------------------------------


def check_primary(label: dict[str, Any], d: Diagnosed) -> list[str]:
    want = [label["primary"], *(label.get("also_acceptable_primary") or [])]
    got = primary_of(d)
    if got in want:
        return []
    return [
        (
            f"primary is {got!r}, expected {' or '.join(repr(w) for w in want)} "
            f"(headline: {d.result.get('headline', '')!r}; findings: {_severities(d)})"
        )
    ]


def check_must_report(label: dict[str, Any], d: Diagnosed) -> list[str]:
    rep = _reported(d)
    sev = {f["rule"]: f["severity"] for f in reversed(d.findings)}
    return [
        f"{rule} must be reported at medium/high, got "
        f"{sev.get(rule, 'nothing (rule did not fire)')}"
        for rule in label.get("must_report") or []
        if rule not in rep
    ]


def check_must_report_one_of(label: dict[str, Any], d: Diagnosed) -> list[str]:
    options = list(label.get("must_report_one_of") or [])
    if not options or any(r in _reported(d) for r in options):
        return []
    return [
        (f"one of {', '.join(options)} must be reported at medium/high; findings: {_severities(d)}")
    ]


def check_must_not_report(label: dict[str, Any], d: Diagnosed) -> list[str]:
    rep = _reported(d)
    out = []
    for item in label.get("must_not_report") or []:
        f = rep.get(item["rule"])
        if f is not None:
            out.append(
                f"{item['rule']} reported at {f['severity']} ({f.get('title', '')!r}, "
                f"impact {f.get('impact_pct')}) but must not be: {item['reason']}"
            )
    return out


def check_must_not_recommend(label: dict[str, Any], d: Diagnosed) -> list[str]:
    out = []
    for item in label.get("must_not_recommend") or []:
        pat = re.compile(item["pattern"])
        for f in d.findings:
            for rec in f.get("recommendations") or []:
                m = pat.search(rec)
                if m:
                    out.append(
                        f"{f['rule']} ({f['severity']}) advises {item['text']!r}: matched "
                        f"{m.group(0)!r} in {rec[:160]!r}; wrong because: {item['reason']}"
                    )
    return out


# --- facts -----------------------------------------------------------------------------------


class NotStated(Exception):
    """The tool has no figure for this fact (no field, no metric)."""


Getter = Callable[[Diagnosed], Any]
Compare = Callable[[Any, Any], bool]


def _exact(got: Any, want: Any) -> bool:
    return got == want


def _points(tol: float) -> Compare:
    return lambda got, want: abs(float(got) - float(want)) <= tol + 1e-9


def _relative(tol: float) -> Compare:
    return lambda got, want: abs(float(got) - float(want)) <= tol * abs(float(want)) + 1e-9


def _rank_sum(key: str) -> Getter:
    def get(d: Diagnosed) -> Any:
        vals = [r.get(key) for r in d.ranks]
        if not vals or any(v is None for v in vals):
            return None
        return sum(vals)

    return get


def _rank_max(key: str) -> Getter:
    def get(d: Diagnosed) -> Any:
        vals = [r.get(key) for r in d.ranks if r.get(key) is not None]
        return max(vals) if vals else None

    return get


def _metric(name: str, scale: float = 1.0) -> Getter:
    def get(d: Diagnosed) -> Any:
        v = d.values.get(name)
        return None if v is None else v * scale

    return get


def _step_p50(d: Diagnosed) -> Any:
    st = d.ranks[0].get("step_time_ns") if d.ranks else None
    return (st or {}).get("p50")


def _steps_by_start(d: Diagnosed) -> list[dict[str, Any]]:
    steps = (d.result.get("breakdown") or {}).get("steps") or []
    rank = min((s["rank"] for s in steps), default=None)
    return sorted((s for s in steps if s["rank"] == rank), key=lambda s: s["start_ns"])


def _step_field(index: int, key: str) -> Getter:
    def get(d: Diagnosed) -> Any:
        steps = _steps_by_start(d)
        return steps[index].get(key) if steps else None

    return get


def _comm_kernels(d: Diagnosed) -> Any:
    classes = (d.result.get("rollups") or {}).get("classes") or []
    return sum(int(c["kernels"]) for c in classes if c.get("cls") == "communication")


def _devices(d: Diagnosed) -> Any:
    return list((d.result.get("trace") or {}).get("devices") or [])


#: fact -> (what the tool states for it, how it must match, the tolerance in words)
FACTS: dict[str, tuple[Getter, Compare, str]] = {
    "n_kernels": (_rank_sum("kernels"), _exact, "exact"),
    "kernel_time_ns": (_rank_sum("kernel_time_ns"), _exact, "exact"),
    "comm_kernel_time_ns": (_rank_sum("comm_kernel_time_ns"), _exact, "exact"),
    "n_comm_kernels": (_comm_kernels, _exact, "exact"),
    "memcpy_time_ns": (_rank_sum("memcpy_time_ns"), _exact, "exact"),
    "steps": (_rank_sum("steps"), _exact, "exact"),
    "window_ns": (_rank_sum("window_ns"), _exact, "exact"),
    "step_time_ns_p50": (_step_p50, _relative(0.03), "3%"),
    "first_step_ns": (_step_field(0, "wall_ns"), _relative(0.03), "3%"),
    "last_step_ns": (_step_field(-1, "wall_ns"), _relative(0.03), "3%"),
    "last_step_kernels": (_step_field(-1, "kernels"), _exact, "exact"),
    "gpu_busy_pct": (_metric("gpu_busy_pct"), _points(1.5), "±1.5 pt"),
    "exposed_comm_pct": (_metric("exposed_comm_pct"), _points(1.5), "±1.5 pt"),
    "comm_overlap_pct": (_metric("comm_overlap_pct"), _points(1.5), "±1.5 pt"),
    "idle_input_pct": (_metric("idle_input_pct"), _points(1.5), "±1.5 pt"),
    "kernels_lt_10us_pct": (_metric("small_kernel_pct"), _points(1.5), "±1.5 pt"),
    "fp32_simt_gemm_kernel_time_pct": (_metric("fp32_gemm_time_pct"), _points(1.5), "±1.5 pt"),
    "fp32_simt_gemm_kernel_time_ns": (_metric("fp32_gemm_time_ns"), _exact, "exact"),
    "median_kernel_us": (_metric("median_kernel_ns", 1e-3), _points(0.5), "±0.5 µs"),
    "peak_allocated_bytes": (_rank_max("peak_allocated_bytes"), _exact, "exact"),
    "peak_reserved_bytes": (_rank_max("peak_reserved_bytes"), _exact, "exact"),
    # a share of device capacity, not of time: only the capacity definition may differ
    "peak_reserved_capacity_pct": (_metric("peak_reserved_capacity_pct"), _points(0.5), "±0.5 pt"),
    "device": (_devices, lambda got, want: want in got, "the recorded device name"),
}
#: where a missing figure would be looked up for the reason
_METRIC_OF = {
    "gpu_busy_pct": "gpu_busy_pct",
    "exposed_comm_pct": "exposed_comm_pct",
    "comm_overlap_pct": "comm_overlap_pct",
    "idle_input_pct": "idle_input_pct",
    "kernels_lt_10us_pct": "small_kernel_pct",
    "fp32_simt_gemm_kernel_time_pct": "fp32_gemm_time_pct",
    "fp32_simt_gemm_kernel_time_ns": "fp32_gemm_time_ns",
    "median_kernel_us": "median_kernel_ns",
    "peak_allocated_bytes": "peak_allocated_bytes",
    "peak_reserved_bytes": "peak_reserved_bytes",
    "peak_reserved_capacity_pct": "peak_reserved_capacity_pct",
}


def _runtime_fact(d: Diagnosed, api: str, what: str) -> Any:
    calls, total, mx = d.runtime.get(api, (0, 0, 0))
    return {"calls": calls, "total_ms": total / 1e6, "max_ms": mx / 1e6}[what]


def _default_compare(name: str) -> tuple[Compare, str]:
    if name.endswith("_pct"):
        return _points(1.5), "±1.5 pt"
    if name.endswith(("_ns", "_bytes")) or name.startswith("n_"):
        return _exact, "exact"
    return _relative(0.03), "3%"


def fact_check(name: str, d: Diagnosed) -> tuple[Any, Compare, str]:
    """The tool's figure for a fact, how to compare it and the tolerance; raises
    :class:`NotStated` when the tool has nothing for it. A fact without a mapping is looked
    up as a metric of the same name, so a metric added later is checked at once."""
    m = RUNTIME_FACT.match(name)
    if m:
        # the label's ms figures are exact sums rounded to 3 decimals
        tol = (_exact, "exact") if m["what"] == "calls" else (_points(0.0005), "±0.0005 ms")
        return _runtime_fact(d, m["api"], m["what"]), *tol
    if name in FACTS:
        get, cmp, tol = FACTS[name]
        return get(d), cmp, tol
    if name in d.values or name in d.missing:
        return d.values.get(name), *_default_compare(name)
    raise NotStated(name)


def check_facts(label: dict[str, Any], d: Diagnosed) -> tuple[list[str], list[str]]:
    """(disagreements, facts the tool cannot state)."""
    facts = dict(label.get("facts") or {})
    bad: list[str] = []
    unstated: list[str] = []
    for name, want in facts.items():
        if name in HELPER_FACTS:
            continue
        try:
            got, cmp, tol = fact_check(name, d)
        except NotStated:
            unstated.append(name)
            continue
        if got is None:
            metric = _METRIC_OF.get(name, name)
            why = d.missing.get(metric, "no value in the result")
            bad.append(f"{name}: expected {want!r}, the tool states nothing ({why})")
            continue
        ok = cmp(got, want)
        if not ok and name == "step_time_ns_p50" and facts.get("steps") == 1:
            # one step: a window extended to the end of the step's GPU work is also right
            alt = want + int(facts.get("last_step_gpu_tail_ns") or 0)
            ok = cmp(got, alt)
        if not ok:
            bad.append(f"{name}: got {_fmt(got)}, expected {_fmt(want)} ({tol})")
    return bad, unstated


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) < 1e6 else f"{v:.0f}"
    return repr(v)


CHECKS: dict[str, Callable[[dict[str, Any], Diagnosed], list[str]]] = {
    "primary": check_primary,
    "must_report": check_must_report,
    "must_report_one_of": check_must_report_one_of,
    "must_not_report": check_must_not_report,
    "must_not_recommend": check_must_not_recommend,
    "facts": lambda label, d: check_facts(label, d)[0],
}


def applies(check: str, label: dict[str, Any]) -> bool:
    """Whether a label has anything for ``check`` (an empty list checks nothing)."""
    return bool(label.get(check))
