"""Sentences every renderer says the same way: the device line, the step count, the rule
statuses that could not be evaluated, where to open the trace in a viewer, the host view.

The terminal, Markdown and HTML renderers call these, so a run reads the same everywhere.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from traceinsight.result import DiagnosisResult
from traceinsight.util import capture_hints, fmt

#: diagnostics the device line already says (rendered there, not as data-quality warnings)
DEVICE_CODES = ("device-unknown", "device-guessed")


def has_gpu(r: DiagnosisResult) -> bool:
    """Whether the run recorded GPU kernels (CPU-only traces get the host view instead)."""
    return bool((r.metrics.get("values") or {}).get("has_gpu"))


#: diagnostic of a file read up to a cut (--salvage): no GPU in it does not mean a CPU run
SALVAGED = "truncated-salvaged"
NO_GPU_CUT = "no GPU events (truncated trace: the cut lost them)"


def no_gpu_text(r: DiagnosisResult) -> str:
    """Why a result has no GPU: a CPU-only trace, or a salvaged one cut before its GPU part."""
    if any(d.get("code") == SALVAGED for d in r.diagnostics or []):
        return NO_GPU_CUT
    return "no GPU (CPU-only trace)"


def kernel_count(r: DiagnosisResult) -> int:
    cov = r.extra.get("coverage") or {}
    return int(cov.get("kernels") or 0)


#: the device line of a memory snapshot (or timeline export) diagnosed without a trace
MEMORY_ONLY = "memory input only (no profiler trace)"


def device_line(r: DiagnosisResult) -> str:
    """One line: which device the run used and how traceinsight knows."""
    dev = r.extra.get("device") or {}
    names = [str(n) for n in r.trace.get("devices") or []]
    resolved = dev.get("resolved")
    how = dev.get("how")
    raw = dev.get("name")
    if r.trace.get("memory_only"):
        return MEMORY_ONLY
    if not has_gpu(r):
        return no_gpu_text(r)
    if how == "matched" and resolved:
        shown = ", ".join(dict.fromkeys(names)) or str(raw or resolved)
        peaks = f"; roofline peaks of {resolved}" if shown != resolved else ""
        return f"{shown} (named in the trace's device properties{peaks})"
    if how == "override" and resolved:
        opts = r.extra.get("options") or {}
        given = [
            f"--{k.replace('_gbs', '').replace('_', '-')} {v}"
            for k, v in opts.items()
            if k in ("device", "peak_tflops", "peak_bw_gbs")
        ]
        trace = f"; the trace says {raw!r}" if raw and raw != resolved else ""
        return f"{resolved} (set with {' '.join(given) or 'the command line'}{trace})"
    if how == "gfx-guess" and resolved:
        m = re.search(r"from its architecture, (.*?) \(", str(dev.get("message") or ""))
        arch = f", {m.group(1)}" if m else ""
        named = f"; the trace calls it {raw!r}" if raw else "; the trace gives no device name"
        return f"{resolved} (identified from its architecture{arch}{named}; --device overrides)"
    n = kernel_count(r)
    kern = f"{n:,} kernel{'s' if n != 1 else ''} recorded" if n else "GPU activity recorded"
    if raw:
        return f"{raw} ({kern}; not in the device table: --device NAME gives roofline and MFU)"
    return (
        f"GPU not named in the trace ({kern}, no device properties; --device NAME gives "
        "roofline and MFU)"
    )


def device_name(r: DiagnosisResult) -> str:
    """The device in a few words (headers): its name, or why there is none."""
    dev = r.extra.get("device") or {}
    names = list(dict.fromkeys(str(n) for n in r.trace.get("devices") or []))
    if r.trace.get("memory_only"):
        return MEMORY_ONLY
    if not has_gpu(r):
        return no_gpu_text(r)
    if dev.get("how") == "matched" and names:
        return ", ".join(names)
    if dev.get("resolved"):
        return str(dev["resolved"]) + (" (guessed)" if dev.get("how") == "gfx-guess" else "")
    return ", ".join(names) or "unnamed GPU"


#: trace.mode -> the word the headers use
RUN_MODES = {"train": "training", "infer": "inference"}


def run_mode(r: DiagnosisResult) -> str | None:
    """``training``, ``inference`` or ``benchmark`` (the run fact; for results without one,
    the result's ``trace.mode``), None when unknown."""
    fact = (r.run or {}).get("mode") or {}
    if fact.get("value") in ("training", "inference", "benchmark"):
        return str(fact["value"])
    return RUN_MODES.get(str(r.trace.get("mode")))


#: run fact -> its label in the reports, in the order shown
RUN_LABELS = {
    "mode": "Mode",
    "engine": "Framework / engine",
    "matrix_dtypes": "Matrix dtypes (time share)",
    "optimizer": "Optimizer",
    "parallelism": "Parallelism",
    "compiled": "Compile state",
    "attention": "Attention",
    "comm_dtype": "Collective dtypes",
    "dataloader": "Data loading",
    "vendor": "GPU vendor",
    "interconnect": "Interconnect class",
}


def fact_text(name: str, value: Any) -> str:
    """A run fact's value as the reports show it."""
    if name == "matrix_dtypes" and isinstance(value, dict):
        shares = value.get("shares") or {}
        if not shares:
            return "none (no GEMM/convolution kernels)"
        return ", ".join(f"{k} {float(v):.0f}%" for k, v in shares.items())
    if name == "optimizer" and isinstance(value, dict):
        out = f"{value.get('class', 'unknown')} ({value.get('impl', 'unknown')})"
        return out + (f"; sparse: {value['sparse']}" if value.get("sparse") else "")
    if name == "dataloader" and isinstance(value, dict):
        w = {"0": "no workers", "multi": "worker processes"}.get(str(value.get("workers")), "")
        h = value.get("h2d")
        return ", ".join(x for x in (w, f"{h} host-to-device copies" if h else "") if x)
    if isinstance(value, list):
        return ", ".join(str(x) for x in value) or "none"
    return str(value)


def run_rows(r: DiagnosisResult) -> list[tuple[str, str, str, str]]:
    """(label, value, evidence, confidence) of each run fact, for the Run sections."""
    out = []
    for k, label in RUN_LABELS.items():
        f = (r.run or {}).get(k)
        if not isinstance(f, dict):
            continue
        out.append(
            (
                label,
                fact_text(k, f.get("value")),
                str(f.get("evidence") or ""),
                str(f.get("confidence") or ""),
            )
        )
    return out


def run_summary(r: DiagnosisResult) -> str:
    """One line of the facts a reader checks first (engine, dtypes, optimizer, compile
    state, parallelism), the known ones only."""
    parts = []
    for k in ("engine", "matrix_dtypes", "optimizer", "compiled", "parallelism", "attention"):
        f = (r.run or {}).get(k) or {}
        v = f.get("value")
        if v in (None, "unknown") or (k == "attention" and v == "none"):
            continue
        text = fact_text(k, v)
        if k == "matrix_dtypes":
            text = "matmuls " + text
        elif k == "parallelism":
            text = "no parallelism" if v == ["none"] else text
        elif k == "optimizer":
            text = "optimizer " + text
        elif k == "attention":
            text = "attention " + text
        parts.append(text)
    return " · ".join(parts)


def steps_text(r: DiagnosisResult) -> str:
    """``4 steps × 4 ranks``, ``6 steps`` or ``no step markers`` (the step windows)."""
    srs = [x for x in r.summary.get("ranks", []) if x.get("step_time_ns")]
    ranks = len(r.trace.get("ranks") or []) or len(srs)
    if not r.trace.get("has_step_markers"):
        return "no step markers (the whole trace is one window)"
    counts = sorted({int(x.get("steps") or 0) for x in srs})
    if not counts:
        return "no step markers (the whole trace is one window)"
    per = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    noun = "step" if counts[-1] == 1 else "steps"
    return f"{per} {noun} × {ranks} ranks" if ranks > 1 else f"{per} {noun}"


def run_name(side: dict[str, Any]) -> str:
    """A compared run by the name it was given (a folder's name for a folder of rank files),
    with its file count; a lone trace file by its own name."""
    label = str(side.get("label") or "")
    srcs = [str(x) for x in side.get("sources") or []]
    if label and srcs != [label]:
        return f"{label} ({len(srcs)} files)" if len(srcs) > 1 else label
    return srcs[0] if srcs else label or "?"


# --- rules that could not be evaluated ---------------------------------------------------------

_PAREN = re.compile(r"\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*$")
_TOKENS = re.compile(r"--[\w-]+|\w+=\w+|\[\w+\]")


def reason_and_hint(reason: str, hint: str | None) -> tuple[str, str]:
    """A not-evaluated reason without the metric prefix and without a closing parenthesis
    that the hint says again (``(record_shapes=True needed)`` next to ``record with
    record_shapes=True``); the hint, or "" when the reason already says all of it."""
    text = re.sub(r"^[a-z0-9_]+: ", "", str(reason or "").strip())
    hint = str(hint or "").strip()
    if hint:
        m = _PAREN.search(text)
        if m:
            tokens = _TOKENS.findall(m.group(1))
            if tokens and all(t in hint for t in tokens):
                text = text[: m.start()].rstrip()
        if _norm(hint) in _norm(text):
            hint = ""
    return text, hint


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def not_evaluated(rules: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rules that could not be evaluated, grouped by their (cleaned) reason and hint:
    ``[{"rules": [...], "reason": ..., "hint": ...}]`` in the order of first appearance."""
    groups: dict[Any, dict[str, Any]] = {}
    for x in rules or []:
        if x.get("status") != "not-evaluated":
            continue
        reason, hint = reason_and_hint(str(x.get("reason") or ""), x.get("hint"))
        # one line per missing capture setting: the rules needing it share its hint
        key = ("setting", x["setting"]) if x.get("setting") else (reason, hint)
        g = groups.setdefault(key, {"rules": [], "reasons": [], "hint": hint})
        g["rules"].append(str(x.get("rule")))
        if reason and reason not in g["reasons"]:
            g["reasons"].append(reason)
    return [
        {"rules": g["rules"], "reason": "; ".join(g["reasons"]), "hint": g["hint"]}
        for g in groups.values()
    ]


# --- opening the original trace --------------------------------------------------------------


def viewer_hint(r: DiagnosisResult) -> str:
    """How to open the trace file in Perfetto or chrome://tracing at the step the report
    shows ("" when the result does not know the file)."""
    v = r.extra.get("open_in_viewer") or {}
    src = v.get("source")
    ts = v.get("ts_us") or []
    if not src or len(ts) != 2:
        return ""
    return capture_hints.viewer_text(v.get("tool"), str(src), v.get("rank"), ts, v.get("marker"))


def capture_hint(r: DiagnosisResult, setting: str) -> str:
    """How to record ``setting`` in the vocabulary of the result's input tool ("" when it does
    not apply to that input)."""
    cap = capture_hints.Capture.from_dict(r.extra.get("capture"))
    return capture_hints.hint(setting, cap) or ""


def with_capture_hint(text: str, r: DiagnosisResult, setting: str) -> str:
    """``text: <how to record setting>.``, or ``text.`` where no hint applies."""
    h = capture_hint(r, setting)
    return f"{text}: {h}." if h else f"{text}."


def viewer_title(r: DiagnosisResult) -> str:
    """The viewer the trace opens in: ``Open in Perfetto`` / ``Open in Nsight Systems``."""
    return capture_hints.viewer_title((r.extra.get("open_in_viewer") or {}).get("tool"))


# --- the host view (CPU-only runs) ---------------------------------------------------------------


def host_lines(r: DiagnosisResult, width: int, n: int = 8) -> list[str]:
    """The host view as plain-text lines (terminal and Markdown code blocks)."""
    h = r.host or {}
    if not h or h.get("empty"):
        return []
    out = [
        "Host time (step windows"
        + (", all ranks)" if (h.get("steps") or {}).get("ranks", 1) > 1 else ")")
    ]
    parts = h.get("split") or []
    out.append(_wrap("  ".join(f"{p['part']} {fmt.fmt_pct(p['pct'])}" for p in parts), width))
    ann = [a for a in h.get("annotations") or [] if a["pct"] >= 1.0][:6]
    if ann:
        out.append(
            _wrap(
                "by annotation: " + ", ".join(f"{a['name']} {fmt.fmt_pct(a['pct'])}" for a in ann),
                width,
            )
        )
    ops = h.get("ops") or []
    if ops:
        rows = [
            [
                x["name"],
                f"{x['calls']:,}",
                fmt.fmt_ns(x["self_ns"]),
                fmt.fmt_pct(x["self_pct"]),
                fmt.fmt_ns(x["total_ns"]),
                fmt.fmt_pct(x["total_pct"]),
            ]
            for x in ops[:n]
        ]
        out.append("")
        out.append("Top CPU ops by self time")
        out += [
            "  " + ln
            for ln in fmt.table(
                rows,
                ["op", "calls", "self", "of step", "total", "of step"],
                align="lrrrrr",
                max_width=width - 2,
                flex=0,
            ).splitlines()
        ]
    mods = h.get("modules") or []
    if mods:
        rows = [
            [
                f"{x['type']} ×{x['instances']}",
                f"{x['calls']:,}",
                fmt.fmt_ns(x["total_ns"]),
                fmt.fmt_pct(x["pct"]),
            ]
            for x in mods[:n]
        ]
        out.append("")
        out.append("Host time by nn.Module type (with its sub-modules)")
        out += [
            "  " + ln
            for ln in fmt.table(
                rows,
                ["module", "calls", "time", "of step"],
                align="lrrr",
                max_width=width - 2,
                flex=0,
            ).splitlines()
        ]
    out.append("")
    return out


def _wrap(text: str, width: int, indent: str = "  ") -> str:
    return "\n".join(
        textwrap.wrap(
            text,
            width=width,
            initial_indent=indent,
            subsequent_indent=indent + ("  " if not indent else ""),
            break_on_hyphens=False,
        )
    )


def confidence_text(conf: dict[str, Any] | None) -> str:
    """``confidence medium: rests on 4 steps × 2 ranks, 62% modelled (4 representative ...)``
    for a renderer (empty for a finding written before this existed)."""
    if not conf or not conf.get("level"):
        return ""
    on = conf.get("rests_on") or {}
    parts = []
    if on.get("steps") is not None:
        parts.append(f"{on['steps']} step{'s' if on['steps'] != 1 else ''}")
    if on.get("ranks"):
        parts.append(f"{on['ranks']} rank{'s' if on['ranks'] != 1 else ''}")
    if on.get("modelled_pct") is not None:
        what = on.get("modelled_what") or "of kernel time modelled"
        parts.append(f"{fmt.fmt_pct(on['modelled_pct'], 0)} {what}")
    s = f"confidence {conf['level']}"
    if parts:
        s += ": rests on " + ", ".join(parts)
    if conf.get("reasons") and conf["level"] != "high":
        s += f" ({'; '.join(conf['reasons'])})"
    return s
