"""The diagnosis result: the one typed object between analysis and the renderers.

``DiagnosisResult.to_dict()`` is the JSON contract of ``diagnose --json`` (documented in
docs/RESULT.md, versioned by ``RESULT_VERSION``); ``from_dict`` reads it back with defaults so
older files still load. ``report`` and ``compare`` read results, they never re-parse traces.
Tables inside are plain lists of dicts with raw numbers (ns, bytes, %).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, TypedDict

from traceinsight.errors import InputError

RESULT_SCHEMA = "traceinsight.diagnosis"
RESULT_VERSION = 1

#: finding severities, most severe first
SEVERITIES = ("high", "medium", "low", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


def severity_rank(severity: str) -> int:
    """0 for high .. 3 for info; an unknown severity sorts after info."""
    return SEVERITY_RANK.get(severity, len(SEVERITIES))


def finding_sort_key(f: Finding) -> tuple[float, int, str]:
    """The one finding order: estimated impact first, then severity, then rule id."""
    return (-(f.impact_pct or 0.0), severity_rank(f.severity), f.rule)


#: the primary verdict when nothing of medium weight was found
HEALTHY = "healthy"
#: the rule saying the window is no steady state; when it fires it is the primary verdict
NOT_REPRESENTATIVE = "not-representative"


def primary_of(findings: list[Finding]) -> str:
    """The rule id a diagnosis leads with: ``not-representative`` when that rule fired, else
    the first finding of medium or high severity in the finding order, else ``healthy``."""
    major = [f for f in findings if severity_rank(f.severity) <= SEVERITY_RANK["medium"]]
    if any(f.rule == NOT_REPRESENTATIVE for f in major):
        return NOT_REPRESENTATIVE
    return major[0].rule if major else HEALTHY


# --- the sections of a result, typed (the JSON contract; docs/RESULT.md, docs/result.schema.json)
# Every section is a TypedDict with total=False: older files lack keys added since, and readers
# must ignore unknown keys. Nested tables stay lists of plain rows.

Row = dict[str, Any]  #: one row of a table inside a result (raw numbers: ns, bytes, %)


class ToolInfo(TypedDict):
    name: str
    version: str


class SourceInfo(TypedDict, total=False):
    name: str
    sha256: str
    rank: int | None


class TraceInfo(TypedDict, total=False):
    """What was diagnosed: files, ranks, devices, capture flags, and what compare needs."""

    sources: list[SourceInfo]
    format: str
    ranks: list[int]
    world_size: int | None
    backend: str | None
    devices: list[str]
    device: str | None
    vendor: str
    capture_flags: dict[str, bool | None]
    versions: dict[str, Any]
    span_ns: int | None
    has_step_markers: bool
    mode: str | None
    steps: int
    module_signature: str | None
    module_count: int
    op_shape_signature: str | None
    op_shape_count: int
    params: float | None
    tokens_per_step: float | None
    flops_per_step: float | None
    dtypes: list[str]
    compiled: bool
    window: dict[str, Any]  #: only when the trace was too large for --max-memory, or --steps
    #: with memory inputs (snapshots, memory-timeline exports)
    memory_only: bool
    memory_inputs: list[Row]
    allocator_settings: dict[str, Any]


class RuleStatus(TypedDict, total=False):
    rule: str
    status: str  #: passed | not-applicable | not-evaluated
    reason: str
    hint: str
    setting: str  #: the capture setting that would let it be evaluated (one hint per setting)


class RuleError(TypedDict):
    rule: str
    error: str


class RankSummary(TypedDict, total=False):
    rank: int
    device: str | None
    kernel_time_ns: int
    comm_kernel_time_ns: int
    memcpy_time_ns: int
    memset_time_ns: int
    kernels: int
    window_ns: int
    gpu_busy_ns: int
    gpu_idle_ns: int
    compute_ns: int
    comm_exposed_ns: int
    steps: int
    step_time_ns: dict[str, float | None] | None
    #: the statistics of the representative steps (what the reports and compare show)
    step_time_representative_ns: dict[str, float | None] | None
    steps_representative: int
    steps_excluded: list[Row]
    steps_kept: list[Row]  #: steps kept although excluded would leave the capture no work
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    attributed_pct: float | None
    op_attributed_pct: float | None


class Summary(TypedDict, total=False):
    ranks: list[RankSummary]


class CoverageEntry(TypedDict):
    metric: str
    coverage_pct: float | None
    lower_bound: bool


class MetricsSection(TypedDict, total=False):
    values: dict[str, float | None]
    units: dict[str, str]
    missing: dict[str, str]
    per_rank: dict[str, dict[str, float | None]]
    coverage: dict[str, CoverageEntry]


class Breakdown(TypedDict, total=False):
    ranks: list[Row]
    steps: list[Row]
    steps_total: int
    definition: str


class Rollups(TypedDict, total=False):
    windows: int
    kernels: list[Row]
    ops: list[Row]
    layers: list[Row]
    annotations: list[Row]
    classes: list[Row]
    has_modules: bool
    step_basis: dict[str, Any]
    module_types: list[Row]
    #: a capture without step markers: kernel time per second and per repeated unit
    slice: dict[str, Any] | None


class Roofline(TypedDict, total=False):
    bandwidth: float | None
    peaks: dict[str, Any]
    points: list[Row]
    why: str
    coverage_pct: float | None
    coverage_metric: str
    #: op shapes whose modelled FLOP/s or bytes/s exceed the device's peak: counted nowhere
    excluded: list[Row]
    #: what the FLOP model assumed / inferred from context for the counted op shapes
    assumptions: list[Row]
    inferences: list[Row]


class MemorySection(TypedDict, total=False):
    timeline: list[Row]
    peak: dict[str, Any]
    growth: dict[str, Any]
    top_allocators: list[Row]
    snapshot: dict[str, Any] | None
    snapshots: list[Row]
    categories: list[Row]
    #: [memory] events recorded but without a curve (no totals before PyTorch 1.10)
    recorded: dict[str, Any]


class Timeline(TypedDict, total=False):
    rank: int
    step: int | None
    window: str
    start_ns: int
    span_ns: int
    idle: list[Any]
    names: list[str]
    lanes: list[Any]
    item_format: list[str]


class Extra(TypedDict, total=False):
    device: dict[str, Any]
    idle_gaps: list[Row]
    collectives: list[Row]
    coverage: dict[str, Any]
    cross_rank: dict[str, Any] | None
    options: dict[str, Any]
    open_in_viewer: dict[str, Any] | None


class HostSection(TypedDict, total=False):
    """Where the host time of the steps went, for a run without GPU kernels."""

    headline: str
    window_ns: int
    steps: dict[str, Any]
    split: list[Row]
    ops: list[Row]
    modules: list[Row]
    annotations: list[Row]
    matmul_pct: float | None


class OverviewSection(TypedDict, total=False):
    """The TensorBoard plugin's overview figures (analysis/overview.py, analysis/op_shapes.py):
    tensor-core kernel time, estimated SM efficiency and achieved occupancy, the step time
    breakdown, the operators by input shape."""

    tensor_cores: dict[str, Any] | None
    sm_efficiency: dict[str, Any]
    occupancy: dict[str, Any]
    step_breakdown: dict[str, Any]
    ops_by_shape: dict[str, Any] | None


class Diagnostic(TypedDict, total=False):
    code: str
    severity: str
    message: str
    source: str
    count: int
    hint: str
    count_of: str
    impact: str


class CompareSide(TypedDict, total=False):
    label: str
    sources: list[Any]
    devices: list[str]
    device: str | None
    vendor: str | None
    ranks: int
    world_size: int | None
    headline: str


class Contributor(TypedDict, total=False):
    kind: str  #: layer | op | class | concurrency | comm | memcpy | memset | idle
    name: str
    before_ns: int
    after_ns: int
    delta_ns: int
    status: str  #: paired | added | removed


class CompareResult(TypedDict, total=False):
    """``compare --json`` (``traceinsight.compare``): the change of the mean step explained."""

    schema: str
    version: int
    tool: ToolInfo
    before: CompareSide
    after: CompareSide
    comparability: dict[str, Any] | None
    explained_by: str
    step_time: dict[str, Any]
    throughput: dict[str, Any]
    total_delta_ns: int
    before_step_ns: int
    after_step_ns: int
    contributors: list[Contributor]
    breakdown: list[Row]
    layers: list[Row]
    ops: list[Row]
    kernel_classes: list[Row]
    new_kernels: list[Any]
    gone_kernels: list[Any]
    new_ops: list[Any]
    gone_ops: list[Any]
    findings: dict[str, list[Row]]
    diagnostics: list[Row]
    headline: str


@dataclass
class Finding:
    rule: str
    severity: str
    title: str
    category: str
    message: str
    impact_pct: float | None  #: share of step time the fix could recover; None: not estimated
    evidence: list[dict[str, Any]]
    recommendations: list[str]
    value: float | None = None
    headline: str | None = None
    #: for a rule resting on modelled work: coverage metric, its value, the minimum for high and
    #: medium, and why the severity was capped (None when it was not)
    confidence: dict[str, Any] | None = None
    #: what fixing it would win: ``pct``, ``ns`` (per step), ``method`` (``what-if``: the step
    #: replayed with the cause removed; ``estimate``: the rule's metric times a factor, less the
    #: time other findings own, engine/impacts.py), ``target`` (the fix assumed, in words), and
    #: for estimates ``basis`` and ``shared_with``; None when not estimated
    impact: dict[str, Any] | None = None
    #: recommendations not given because the run facts contradict them: {text, reason}
    withheld: list[dict[str, Any]] = field(default_factory=list)
    #: the culprit the evidence names and its class, when the first recommendation is its fix
    cause: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(
            rule=d.get("rule", "?"),
            severity=d.get("severity", "info"),
            title=d.get("title", ""),
            category=d.get("category", ""),
            message=d.get("message", ""),
            impact_pct=None if d.get("impact_pct") is None else float(d["impact_pct"]),
            evidence=list(d.get("evidence", [])),
            recommendations=list(d.get("recommendations", [])),
            value=d.get("value"),
            headline=d.get("headline"),
            confidence=d.get("confidence"),
            impact=d.get("impact") if isinstance(d.get("impact"), dict) else None,
            withheld=list(d.get("withheld") or []),
            cause=d.get("cause"),
        )


@dataclass
class DiagnosisResult:
    #: fields ``to_dict`` leaves out when they are None (the JSON Schema does not require them)
    OMITTED_WHEN_NONE: ClassVar[tuple[str, ...]] = ("serving",)
    tool: ToolInfo
    command: list[str]
    trace: TraceInfo
    headline: str
    findings: list[Finding]
    rules: list[RuleStatus]  #: status of every rule that did not fire
    rule_errors: list[RuleError]
    summary: Summary
    metrics: MetricsSection
    breakdown: Breakdown
    rollups: Rollups
    roofline: Roofline | None
    memory: MemorySection | None
    timeline: Timeline | None
    diagnostics: list[Diagnostic]
    version: int = RESULT_VERSION
    extra: Extra = field(default_factory=lambda: Extra())
    host: HostSection | None = None  #: the host view of a run without GPU kernels
    #: the rule id the headline leads with, ``healthy`` or ``not-representative`` (primary_of)
    primary: str = HEALTHY
    #: LLM serving view (engine steps by phase, decode roofline); None when not a serving trace
    serving: dict[str, Any] | None = None
    #: what the run already does (traceinsight.analysis.run_facts): fact -> {value, evidence,
    #: confidence}; empty for results written before the field existed
    run: dict[str, Any] = field(default_factory=dict)
    #: per rank and step: measured and replayed step, the critical path by category, its top
    #: items, the what-ifs (docs/RESULT.md); None for a run without GPU work
    critical_path: dict[str, Any] | None = None
    #: TensorBoard-style overview: tensor cores, SM efficiency, occupancy, step time breakdown,
    #: ops by input shape (docs/RESULT.md); None for results written before the field existed
    overview: OverviewSection | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schema": RESULT_SCHEMA, "version": self.version}
        body = asdict(self)
        body.pop("version")
        for k, v in body.items():
            if k == "serving" and v is None:
                continue  # only serving traces carry the block
            if k != "primary":
                d[k] = v
            if k == "headline":
                d["primary"] = self.primary
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=_json_default, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "result") -> DiagnosisResult:
        if not isinstance(d, dict) or d.get("schema") != RESULT_SCHEMA:
            raise InputError(
                f"is not a traceinsight diagnosis result (no schema {RESULT_SCHEMA!r})",
                path=source,
                hint="pass the file written by traceinsight diagnose --json",
            )
        _check_shape(d, source)
        v = int(d.get("version", 0))
        if v > RESULT_VERSION:
            raise InputError(
                f"result version {v} is newer than this traceinsight reads ({RESULT_VERSION})",
                path=source,
                hint="upgrade traceinsight-doctor",
            )
        findings = [Finding.from_dict(f) for f in d.get("findings", [])]
        return cls(
            tool=d.get("tool", {}),
            command=d.get("command", []),
            trace=d.get("trace", {}),
            headline=d.get("headline", ""),
            # files written before the field existed: derived from their findings
            primary=str(d.get("primary") or primary_of(findings)),
            findings=findings,
            rules=d.get("rules", []),
            rule_errors=d.get("rule_errors", []),
            summary=d.get("summary", {"ranks": []}),
            metrics=d.get("metrics", {}),
            breakdown=d.get("breakdown", {}),
            rollups=d.get("rollups", {}),
            roofline=d.get("roofline"),
            memory=d.get("memory"),
            timeline=d.get("timeline"),
            diagnostics=d.get("diagnostics", []),
            version=v,
            extra=d.get("extra", {}),
            host=d.get("host"),
            serving=d.get("serving"),
            run=d.get("run") or {},
            critical_path=d.get("critical_path"),
            overview=d.get("overview"),
        )

    @classmethod
    def load(cls, path: str) -> DiagnosisResult:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise InputError("no such file", path=path, hint="check the path") from None
        except (ValueError, RecursionError) as e:
            raise InputError(
                f"invalid JSON ({str(e)[:200]})",
                path=path,
                hint="pass a result written by traceinsight diagnose --json",
            ) from None
        return cls.from_dict(data, source=path)


#: the JSON type of each top-level field of a result (None: may be null)
_SHAPE: dict[str, tuple[type | None, ...]] = {
    "version": (int,),
    "tool": (dict,),
    "command": (list,),
    "trace": (dict,),
    "headline": (str,),
    "primary": (str,),
    "findings": (list,),
    "rules": (list,),
    "rule_errors": (list,),
    "summary": (dict,),
    "metrics": (dict,),
    "breakdown": (dict,),
    "rollups": (dict,),
    "roofline": (dict, None),
    "memory": (dict, None),
    "timeline": (dict, None),
    "diagnostics": (list,),
    "extra": (dict,),
    "host": (dict, None),
    "serving": (dict, None),
    "run": (dict,),
    "critical_path": (dict, None),
    "overview": (dict, None),
}


def _check_shape(d: dict[str, Any], source: str) -> None:
    """A clear error for a result whose fields have the wrong JSON types (hand-edited or
    damaged) instead of a crash in the renderers."""

    def bad(what: str) -> InputError:
        return InputError(
            f"is a damaged diagnosis result: {what}",
            path=source,
            hint="write it again with traceinsight diagnose --json",
        )

    for key, types in _SHAPE.items():
        if key not in d:
            continue
        v = d[key]
        ok = any(
            v is None if t is None else isinstance(v, t) and not isinstance(v, bool) for t in types
        )
        if not ok:
            raise bad(f"{key!r} is {type(v).__name__}")
    for key in ("findings", "rules", "rule_errors", "diagnostics"):
        if any(not isinstance(x, dict) for x in d.get(key) or []):
            raise bad(f"an entry of {key!r} is not an object")
    for f in d.get("findings") or []:
        for k, t in (
            ("rule", str),
            ("severity", str),
            ("evidence", list),
            ("recommendations", list),
        ):
            if k in f and not isinstance(f[k], t):
                raise bad(f"a finding's {k!r} is {type(f[k]).__name__}")
        if f.get("impact_pct") is not None and not isinstance(f["impact_pct"], (int, float)):
            raise bad("a finding's 'impact_pct' is not a number")
    for key in ("summary", "breakdown"):
        ranks = (d.get(key) or {}).get("ranks", [])
        if not isinstance(ranks, list) or any(not isinstance(r, dict) for r in ranks):
            raise bad(f"{key}.ranks is not a list of objects")


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, set):
        return sorted(o)
    return str(o)


def clean(obj: Any) -> Any:
    """Make a structure JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        with contextlib.suppress(ValueError, AttributeError):
            obj = obj.item()
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    return obj
