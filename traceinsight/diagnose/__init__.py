"""``diagnose``: store -> analysis -> metrics -> rules -> :class:`DiagnosisResult`.

The library entry point behind the CLI; nothing here prints or writes files. This module runs
the steps and keeps the result cache (the store's ``derived/`` folder); :mod:`.sections`
builds the result's sections.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceinsight import __version__, settings
from traceinsight.devices.table import ENV_VAR as DEVICES_ENV
from traceinsight.errors import ConfigError
from traceinsight.options import RooflineOptions
from traceinsight.result import DiagnosisResult, clean, primary_of
from traceinsight.util.redact import redact_command
from traceinsight.util.resources import code_digest, data_dir

if TYPE_CHECKING:
    from traceinsight.store.core import TraceStore
    from traceinsight.util.progress import Progress

__all__ = ["diagnose", "headline", "result_key"]

#: names this module offers that are imported on first use: a result read back from the cache
#: needs none of the analysis stack (no pandas), so a second ``diagnose`` starts quickly
_LAZY = {
    "Analysis": ("traceinsight.analysis", "Analysis"),
    "evaluate": ("traceinsight.engine.evaluate", "evaluate"),
    "load_rules": ("traceinsight.engine.evaluate", "load_rules"),
    "compute_metrics": ("traceinsight.metrics", "compute_metrics"),
    "headline": ("traceinsight.diagnose.verdict", "headline"),
}


def _load(name: str) -> Any:
    """Module global ``name`` of :data:`_LAZY`, imported now (a value set before, e.g. by a
    test, is kept)."""
    g = globals()
    if name not in g:
        import importlib

        mod, attr = _LAZY[name]
        m = importlib.import_module(mod)
        g[name] = m if attr is None else getattr(m, attr)
    return g[name]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return _load(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def diagnose(
    store: TraceStore,
    *,
    options: RooflineOptions | None = None,
    rules_dirs: Sequence[str | Path] | None = None,
    overrides: Sequence[str] | None = None,
    command: Sequence[str] | None = None,
    cache: bool = True,
    progress: Progress | None = None,
    max_memory_mb: float | None = None,
    steps: str | None = None,
) -> DiagnosisResult:
    """Diagnose a store. With ``cache`` a result computed before from the same store by the
    same code, rules, thresholds and options is read back from the store's ``derived/``
    folder instead of recomputed (only ``command`` differs); a new result is saved there.
    ``progress`` is told each phase (attribution, metrics, rules, sections). A store whose
    analysis would need more than ``max_memory_mb`` (default: ``$TRACEINSIGHT_MAX_MEMORY_MB``
    or 4096) is analysed in step chunks, one at a time, every step in its step table, time
    breakdown, rollups and idle split (:mod:`traceinsight.diagnose.chunks`), the rest on its
    last steps that fit (:mod:`traceinsight.store.window`). ``steps`` (``"last:100"``,
    ``"20:80"``: :func:`traceinsight.store.window.parse_steps`) diagnoses exactly those steps
    (a :class:`~traceinsight.errors.ConfigError` for a bad value)."""
    from traceinsight.store.window import bounded
    from traceinsight.util.distributed import current as current_runner

    store = bounded(store, max_memory_mb, steps)
    cmd = redact_command(str(c) for c in (command or []))
    cache = cache and not current_runner().fresh  # --no-cache
    key = result_key(store, rules_dirs, overrides, options) if cache else None
    if key:
        cached = _read_cached(store, key)
        if cached is not None:
            return dataclasses.replace(cached, command=cmd)
    from traceinsight.util.progress import Progress

    rules = _load("load_rules")([Path(d) for d in rules_dirs or []], list(overrides or []))
    result = _diagnose(store, rules, options, cmd, progress or Progress("analyse", quiet=True))
    if key:
        store.write_derived(_cache_name(key), result.to_json(indent=None))
    return result


def result_key(
    store: TraceStore,
    rules_dirs: Sequence[str | Path] | None = None,
    overrides: Sequence[str] | None = None,
    options: RooflineOptions | None = None,
) -> str | None:
    """What a diagnosis depends on, hashed: the store's sources, the code, the rule files
    (shipped and ``rules_dirs``) and the ``--set`` overrides as given, the options and a user
    device table. Rules are hashed as text, not parsed, so a cached result is found without
    the analysis stack. None for a store that is not on disk."""
    if not store.path.is_dir():
        return None
    from traceinsight.util.safeyaml import read_small

    dev_file = settings.get(DEVICES_ENV)
    dev = ""
    if dev_file:
        try:
            dev = hashlib.sha256(read_small(dev_file, what="device file")).hexdigest()
        except ConfigError:  # refused again, with its reason, when the table is loaded
            dev = "unreadable:" + dev_file
    parts = {
        "schema": store.meta.get("schema_version"),
        "sources": [s.get("sha256") for s in store.meta.get("sources", [])],
        "tables": store.meta.get("tables"),
        "window": store.meta.get("window"),
        "code": code_digest(),
        "rules": _rules_digest([data_dir("rules"), *(Path(d) for d in rules_dirs or [])]),
        "overrides": [str(o).strip() for o in overrides or []],
        "options": (options or RooflineOptions()).__dict__,
        "devices": dev,
    }
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _rules_digest(dirs: list[Path]) -> list[str]:
    """sha256 of each rules folder's ``*.yaml`` files, in the order the rules load."""
    from traceinsight.util.safeyaml import read_small

    out = []
    for d in dirs:
        h = hashlib.sha256(str(d).encode() + b"\0")
        try:
            for f in sorted(d.glob("*.yaml")):
                h.update(f.name.encode() + b"\0" + read_small(f) + b"\0")
        except (OSError, ConfigError) as e:  # the rule loader refuses it with its reason
            h.update(f"unreadable: {e}".encode())
        out.append(h.hexdigest())
    return out


def _cache_name(key: str) -> str:
    return f"diagnosis-{key}.json"


def _read_cached(store: TraceStore, key: str) -> DiagnosisResult | None:
    """The result saved under ``key``; None when there is none or it is damaged (then it is
    recomputed and overwritten)."""
    text = store.read_derived(_cache_name(key))
    if not text:
        return None
    try:
        return DiagnosisResult.from_dict(json.loads(text))
    except Exception:  # any damage to the cache file means: recompute
        return None


def _diagnose(
    store: TraceStore,
    rules: list[Any],
    options: RooflineOptions | None,
    cmd: list[str],
    progress: Progress,
) -> DiagnosisResult:
    from traceinsight.analysis import plain_strings

    with plain_strings():
        return _diagnose_plain(store, rules, options, cmd, progress)


def _diagnose_plain(
    store: TraceStore,
    rules: list[Any],
    options: RooflineOptions | None,
    cmd: list[str],
    progress: Progress,
) -> DiagnosisResult:
    import traceinsight.analysis.critical_path  # noqa: F401 - registers its per-rank product
    from traceinsight.analysis import WHOLE_STEPS, Analysis
    from traceinsight.analysis.host import host_view
    from traceinsight.diagnose import chunks, quality, sections
    from traceinsight.diagnose import memory as memory_parts
    from traceinsight.diagnose.critical import critical_path
    from traceinsight.diagnose.viewer import open_in_viewer
    from traceinsight.engine.evaluate import evaluate
    from traceinsight.metrics import REGISTRY, coverage_table
    from traceinsight.metrics.roofline_checks import above_peak_diagnostic
    from traceinsight.metrics.slices import slice_rates
    from traceinsight.util.capture_hints import Capture, fit_diagnostics

    compute_metrics = _load("compute_metrics")  # a module global (a test may replace it)
    progress.stage("attribution", 0.0)
    chunked = chunks.analyse_chunks(store)  # a windowed store's earlier steps, before the window
    an = Analysis(store)
    an.attribution  # noqa: B018 - computed here so that the phase shows as its own
    if chunked is not None:
        chunks.merge_into(an, chunked)
    chosen = getattr(store, "keep_steps", None)  # --steps: the chosen steps' rows only
    merged = (
        chunks.restrict(an, chosen, getattr(store, "own_from_ns", None))
        if chosen is not None
        else None
    )
    whole = chunks.finish(an, chunked) if chunked is not None else None
    if whole is not None:  # every step's time split, idle causes and kernels for the metrics
        an.cache[WHOLE_STEPS] = whole
    progress.stage("metrics", 0.4)
    ms = compute_metrics(an, options)
    progress.stage("rules", 0.75)
    ev = evaluate(rules, ms, an)
    progress.stage("sections", 0.85)
    has_gpu = bool(ms.values.get("has_gpu"))
    findings = list(ev.findings)
    diags = list(store.meta.get("diagnostics", [])) + an.attribution.diagnostics.to_list()
    above = above_peak_diagnostic(ms.evidence.get("model_above_peak") or [])
    if above is not None:
        diags.append(above)
    window = getattr(store, "window", None)
    if window is not None:
        diags.insert(0, window.diagnostic())
    diags = quality.explain(diags)
    # how to mark steps in the input's own vocabulary; no PyTorch hint for a program without it
    diags = fit_diagnostics(diags, Capture.from_dict(ms.evidence.get("capture")))
    dev = ms.evidence.get("device") or {}
    mem_only = memory_parts.is_memory_only(store)  # a snapshot diagnosed without a trace
    mem = memory_parts.section(an, ms, sections.memory(ms))
    if dev.get("how") in ("unknown", "gfx-guess") and dev.get("message") and not mem_only:
        diags.append(
            {
                "code": "device-unknown" if dev["how"] == "unknown" else "device-guessed",
                "message": dev["message"],
                "severity": "warning",
                "hint": "pass --device NAME (traceinsight devices lists them) or "
                "--peak-tflops/--peak-bw",
            }
            if has_gpu
            else {
                "code": "device-unknown",
                "severity": "info",
                "message": "no GPU in this trace, so no device to identify (device "
                "peaks only matter for GPU kernels)",
            }
        )
    for err in ms.evidence.get("metric_errors", []):
        diags.append(
            {
                "code": "metric-error",
                "severity": "error",
                "message": f"metrics '{err['group']}' failed: {err['error']}",
            }
        )
    summary = sections.summary(an, ms)
    timeline = sections.timeline(an, ms)
    critical = critical_path(an, ms, findings, diags, timeline) if has_gpu else None
    if whole is not None:  # every step's breakdown and rollups, from the chunks' sums
        an.breakdown = whole.breakdown  # read by the sections below
        merged = whole.figures
    breakdown = sections.breakdown(an)
    rollups = {
        **sections.rollups(an, merged),
        "step_basis": sections.step_basis(an, ms, merged),
        "slice": slice_rates(an, sections.trace_format(store)),
        "module_types": (
            merged.rollups.module_types()
            if merged is not None and merged.rollups is not None
            else an.rollup("module-type")
        ).to_dict("records"),
    }
    # the sections as built (plain dicts); from_dict below reads them back as the typed result
    parts: dict[str, Any] = dict(
        tool={"name": "traceinsight", "version": __version__},
        command=cmd,
        trace={
            **sections.trace_info(store, an, dev, ms=ms, options=options),
            **memory_parts.trace_extra(store),
            **({"window": window.to_dict()} if window is not None else {}),
        },
        headline=sections.missing_ranks(store)
        + (
            memory_parts.headline(findings, ms, mem)
            if mem_only
            else _load("headline")(findings, ms.values, an)
        ),
        primary=primary_of(findings),
        findings=findings,
        rules=[s.to_dict() for s in ev.statuses],
        rule_errors=[{"rule": e["rule"], "error": e["error"]} for e in ev.errors],
        summary=summary,
        metrics={
            "values": ms.values,
            "units": {k: REGISTRY[k].unit for k in ms.values},
            "missing": ms.missing,
            "per_rank": {str(k): v for k, v in ms.per_rank.items()},
            "coverage": coverage_table(ms.values),
        },
        breakdown=breakdown,
        rollups=rollups,
        roofline=ms.evidence.get("roofline") or sections.roofline_why(ms),
        memory=mem,
        timeline=timeline,
        diagnostics=diags,
        extra={
            "device": dev,
            "idle_gaps": ms.evidence.get("idle_gaps", []),
            "collectives": ms.evidence.get("collectives", []),
            "coverage": an.attribution.coverage(),
            "cross_rank": ms.evidence.get("cross_rank"),
            "options": {
                k: v for k, v in (options or RooflineOptions()).__dict__.items() if v is not None
            },
            "open_in_viewer": open_in_viewer(store, timeline),
            "capture": ms.evidence.get("capture"),
        },
        host=None if has_gpu or mem_only else (ms.evidence.get("host_view") or host_view(an)),
        serving=ms.evidence.get("serving"),
        run=ms.evidence.get("run") or {},
        critical_path=critical,
        overview=ms.evidence.get("overview") if has_gpu else None,
    )
    result = DiagnosisResult(**parts)
    return DiagnosisResult.from_dict(clean(result.to_dict()))
