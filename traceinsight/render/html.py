"""The self-contained HTML report of a :class:`DiagnosisResult`.

One file, no network: CSS and JS are inlined from ``templates/assets``, charts are inline SVG
computed here (geometry only; every text goes through Jinja's autoescape), and the little data
the script needs (the Markdown ticket body) is embedded once as ``<script type="application/json"
id="ti-data">``. A Content-Security-Policy allows no network at all and only the report's own
script (by hash), so even a name that escaped escaping could not run or load anything.

The layout is a "view": plain dicts and lists built by :func:`build_view` from the result, so the
templates hold no logic beyond loops. Large inputs are capped: the result is already downsampled
by ``diagnose``; here steps are bucketed past :data:`MAX_STEP_BARS`, timeline items are merged
below one pixel, and idle gaps, ranks and memory series are capped.
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
from collections import defaultdict
from functools import lru_cache
from typing import Any, Iterable, Sequence

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from .. import fmt
from ..fmt import signed_ns, signed_pct
from ..redact import SECRET_KEY_RE, TOKEN_RE
from ..resources import data_dir
from ..result import DiagnosisResult

SEVERITIES = ("high", "medium", "low", "info")
SEV_RANK = {s: i for i, s in enumerate(SEVERITIES)}
#: a step slower than this factor x the median step is marked slow
SLOW_STEP_FACTOR = 1.25
MAX_STEP_BARS = 160
MAX_STEP_ROWS = 1000
MAX_RANK_ROWS = 1024
MAX_RANK_BARS = 64
MAX_LANES = 24
TIMELINE_MAX_RECTS = 5000
MAX_MEMORY_CHARTS = 4
TABLE_LIMIT = 25
#: kernel classes in display order (traceinsight.analysis.categories.CLASSES)
CLASSES = ("gemm", "attention", "convolution", "elementwise", "reduction", "communication",
           "memory", "other")
#: GPU time breakdown segments: (key in the breakdown row, label, css class)
SEGMENTS = (("compute_ns", "compute", "compute"), ("comm_exposed_ns", "comm exposed", "comm"),
            ("memcpy_exposed_ns", "memcpy exposed", "memcpy"),
            ("memset_exposed_ns", "memset exposed", "memset"), ("idle_ns", "idle", "idle"))
CAPTURE_FLAGS = ("record_shapes", "profile_memory", "with_stack", "with_modules", "with_flops")
NUMERIC_FORMATS = {"ns", "bytes", "pct", "count", "ratio", "rate_flops", "rate_bytes", "share",
                   "num", "dns", "dpct", "spct"}
_MORE_ROW = re.compile(r"^\[[\d,]+ more\]$")
_VERSION_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


# --- public API -------------------------------------------------------------------------------

def render_html(result: DiagnosisResult) -> str:
    """The report as one HTML document (a string; the caller writes it)."""
    from .markdown import render_markdown

    view = build_view(result)
    env = _env()
    js = _asset("report.js")
    payload = {"schema": "traceinsight.report", "version": 1,
               "tool": view["tool"], "markdown": render_markdown(result),
               "slow_step_factor": SLOW_STEP_FACTOR}
    csp = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
           "form-action 'none'; script-src 'sha256-" + _sha256_b64(js) + "'")
    return env.get_template("report.html").render(view=view, payload=payload, csp=csp)


# --- jinja environment ------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _env() -> Environment:
    root = data_dir("templates")
    env = Environment(loader=FileSystemLoader(str(root)), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      keep_trailing_newline=False)
    env.filters.update(ns=fmt.fmt_ns, bytes=fmt.fmt_bytes, pct=fmt.fmt_pct, num=fmt.fmt_num,
                       rate=fmt.fmt_rate, kname=fmt.short_kernel_name, cell=format_cell)
    env.globals["include_file"] = include_file
    return env


@lru_cache(maxsize=None)
def _asset(name: str) -> str:
    root = (data_dir("templates") / "assets").resolve()
    path = (root / name).resolve()
    if path.parent != root or path.suffix not in (".css", ".js"):
        raise ValueError(f"not a report asset: {name}")
    text = path.read_text(encoding="utf-8")
    if re.search(r"</(script|style)", text, re.I):
        raise ValueError(f"{name} must not contain a closing script/style tag")
    return text


def include_file(name: str) -> Markup:
    """The text of ``templates/assets/NAME`` (our own CSS/JS, never data), unescaped."""
    return Markup(_asset(name))


def _sha256_b64(text: str) -> str:
    import base64

    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


# --- cells and tables -------------------------------------------------------------------------

def format_cell(v: Any, kind: str) -> str:
    """A raw value as text by its evidence column format."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    try:
        if kind == "ns":
            return fmt.fmt_ns(v)
        if kind == "bytes":
            return fmt.fmt_bytes(v)
        if kind in ("pct", "share"):
            return fmt.fmt_pct(v)
        if kind == "count":
            return fmt.fmt_num(v, 0)
        if kind == "ratio":
            return f"{float(v):.2f}"
        if kind == "num":
            return fmt.fmt_num(v)
        if kind == "rate_flops":
            return fmt.fmt_rate(v, "FLOP/s")
        if kind == "rate_bytes":
            return fmt.fmt_rate(v, "B/s")
        if kind == "dns":
            return signed_ns(v)
        if kind in ("dpct", "spct"):
            return signed_pct(v)
    except (TypeError, ValueError):
        pass
    if kind == "kernel":
        return fmt.short_kernel_name(str(v))
    if kind == "dims":
        return compact_dims(v)
    return " ".join(str(v).split()) if isinstance(v, str) else str(v)


def compact_dims(v: Any) -> str:
    """Input dims as one compact line (traces may hold them as indented JSON)."""
    return re.sub(r"\s+", "", str(v)).replace("],[", "], [") if v is not None else "–"


def _cell(v: Any, kind: str) -> dict[str, Any]:
    c: dict[str, Any] = {"t": format_cell(v, kind), "v": "", "title": "", "kind": "text",
                         "cls": "", "parent": "", "depth": 0, "bar": 0.0}
    if v is None:
        c["kind"] = "num" if kind in NUMERIC_FORMATS else "text"
        return c
    if kind in NUMERIC_FORMATS:
        try:
            x = float(v)
        except (TypeError, ValueError):
            c["v"] = str(v)
            return c
        if not math.isfinite(x):
            c["kind"] = "num"
            return c
        c["kind"] = "share" if kind == "share" else "num"
        c["v"] = _num(x, 6)
        if kind == "share":
            c["bar"] = round(max(0.0, min(100.0, x)), 1)
        elif kind in ("dns", "dpct") and x:  # a change of time: more is worse
            c["cls"] = "d-worse" if x > 0 else "d-better"
        return c
    s = str(v)
    c["v"] = s.lower()
    if kind == "kernel":
        c["kind"] = "kernel"
        if c["t"] != " ".join(s.split()):
            c["title"] = s
    elif kind == "class":
        c["kind"] = "class"
        c["cls"] = _css_ident(s)
    elif kind in ("status", "tag"):  # compare: new/gone/same, contributor kind
        c["kind"] = kind
        c["cls"] = _TAG_CLASS.get(s, "other")
    elif kind == "module":
        parts = s.split("/")
        c["kind"] = "module"
        c["t"] = parts[-1]
        c["parent"] = "/".join(parts[:-1]) + "/" if len(parts) > 1 else ""
        c["title"] = s
        c["v"] = s
    return c


def _css_ident(s: str) -> str:
    s = str(s).lower()
    return s if s in CLASSES else "other"


def _num(x: float, digits: int = 1) -> str:
    """A compact number for SVG attributes and sort keys."""
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.{digits}g}" if digits > 3 else f"{x:.{digits}f}".rstrip("0").rstrip(".")


def table(tid: str, columns: Sequence[dict[str, str] | tuple[str, str]],
          rows: Iterable[Sequence[Any]],
          *, limit: int = TABLE_LIMIT, filterable: bool = False, note: str = "",
          sortable: bool = True) -> dict[str, Any]:
    """A table view: columns ``{name, format}`` and rows of raw values; the ``[N more]`` row of
    a capped rollup goes to the footer (it never sorts)."""
    cols = [c if isinstance(c, dict) else {"name": c[0], "format": c[1]} for c in columns]
    cols = [{"name": str(c["name"]), "format": str(c.get("format") or "text"),
             "num": str(c.get("format") or "text") in NUMERIC_FORMATS,
             "title": str(c.get("title") or "")} for c in cols]
    body, foot = [], []
    for r in rows:
        cells = [_cell(v, c["format"]) for c, v in zip(cols, list(r) + [None] * len(cols))]
        first = r[0] if len(r) else None
        (foot if isinstance(first, str) and _MORE_ROW.match(first) else body).append(cells)
    for i, c in enumerate(cols):  # share bars relative to the largest share in the column
        if c["format"] == "share":
            top = max((row[i]["bar"] for row in body), default=0.0) or 1.0
            for row in body + foot:
                row[i]["bar"] = round(min(100.0, 100.0 * row[i]["bar"] / top), 1)
    return {"id": tid, "columns": cols, "rows": body, "foot": foot, "limit": int(limit),
            "filter": bool(filterable) and len(body) > limit, "note": note,
            "sortable": sortable and len(body) > 1}


def _evidence_columns(cols: list[dict[str, Any]]) -> list[dict[str, str]]:
    out = []
    for c in cols:
        name, f = str(c.get("name", "")), str(c.get("format") or "text")
        if f == "text" and name in ("kernel", "kernels"):
            f = "kernel"
        elif f == "text" and name == "class":
            f = "class"
        elif f == "text" and name in ("shapes", "input dims", "dims", "input_dims"):
            f = "dims"
        out.append({"name": name, "format": f})
    return out


# --- the view ---------------------------------------------------------------------------------

def build_view(result: DiagnosisResult) -> dict[str, Any]:
    """Everything the templates show, as plain data."""
    r = result
    findings = sorted(r.findings, key=lambda f: (-(f.impact_pct or 0.0),
                                                  SEV_RANK.get(f.severity, 9), f.rule))
    top = findings[0].severity if findings else None
    verdict = (top if top in SEV_RANK else "info") if findings else (
        "ok" if r.metrics.get("values", {}).get("has_gpu") else "info")
    return {
        "title": _title(r),
        "tool": {"name": str(r.tool.get("name") or "traceinsight"),
                 "version": str(r.tool.get("version") or "?"), "result_version": r.version},
        "command": _command_line(r.command),
        "headline": r.headline,
        "verdict": verdict,
        "subtitle": _subtitle(r),
        "kpis": _kpis(r),
        "nav": NAV,
        "findings": [_finding(f, i) for i, f in enumerate(findings)],
        "rules_fired": len(findings),
        "steps": _steps(r),
        "breakdown": _breakdown(r),
        "timeline": _timeline(r),
        "layers": _layers(r),
        "ops": _ops(r),
        "kernels": _kernels(r),
        "roofline": _roofline(r),
        "memory": _memory(r),
        "diagnostics": _diagnostics(r),
        "metadata": _metadata(r),
    }


NAV = [("findings", "Findings"), ("steps", "Steps"), ("breakdown", "GPU time"),
       ("timeline", "Timeline"), ("layers", "Layers"), ("ops", "Operators"),
       ("kernels", "Kernels"), ("roofline", "Roofline"), ("memory", "Memory"),
       ("diagnostics", "Data quality"), ("metadata", "Run")]


def _title(r: DiagnosisResult) -> str:
    srcs = [str(s.get("name", "")) for s in r.trace.get("sources", [])]
    name = srcs[0] if srcs else "trace"
    if len(srcs) > 1:
        name += f" (+{len(srcs) - 1})"
    return name


def _subtitle(r: DiagnosisResult) -> str:
    t = r.trace
    n = len(t.get("ranks") or [])
    parts = [f"{n} rank{'s' if n != 1 else ''}" + (f" of {t['world_size']}" if t.get("world_size")
                                                      and t["world_size"] != n else "")]
    devs = t.get("devices") or []
    parts.append(", ".join(map(str, devs)) if devs else "no GPU recorded")
    if t.get("mode") in ("training", "inference"):
        parts.append(str(t["mode"]))
    steps = r.metrics.get("values", {}).get("steps")
    if steps:
        parts.append(f"{int(steps)} step{'s' if steps != 1 else ''}")
    parts.append(f"primary: {r.primary}")
    if t.get("span_ns"):
        parts.append(f"{fmt.fmt_ns(t['span_ns'])} traced")
    return " · ".join(parts)


def _redact(text: Any) -> str:
    """Free text that might quote trace content, with token-looking strings replaced."""
    return TOKEN_RE.sub("***", str(text))


def _command_line(cmd: Sequence[str]) -> str:
    """The command as typed, with anything that looks like a secret replaced by ***."""
    out = []
    for a in cmd or []:
        a = TOKEN_RE.sub("***", str(a))
        if "=" in a and SECRET_KEY_RE.search(a.split("=", 1)[0]):
            a = a.split("=", 1)[0] + "=***"
        out.append(a)
    return shlex.join(out) if out else ""


def _kpis(r: DiagnosisResult) -> list[dict[str, str]]:
    mv = r.metrics.get("values", {})
    out: list[dict[str, str]] = []

    def add(label: str, value: str, sub: str = "", tone: str = "") -> None:
        out.append({"label": label, "value": value, "sub": sub, "tone": tone})

    if mv.get("step_time_p50_ns") is not None:
        sub = f"p90 {fmt.fmt_ns(mv.get('step_time_p90_ns'))}" if mv.get("step_time_p90_ns") else ""
        add("Step time p50", fmt.fmt_ns(mv["step_time_p50_ns"]), sub)
    if mv.get("gpu_busy_pct") is not None:
        b = mv["gpu_busy_pct"]
        add("GPU busy", fmt.fmt_pct(b, 0), f"idle {fmt.fmt_pct(mv.get('gpu_idle_pct'), 0)}",
            "bad" if b < 50 else ("warn" if b < 80 else "good"))
    if mv.get("exposed_comm_pct") is not None and (mv.get("comm_pct") or 0) > 0:
        e = mv["exposed_comm_pct"]
        add("Exposed comm", fmt.fmt_pct(e), f"overlap {fmt.fmt_pct(mv.get('comm_overlap_pct'), 0)}",
            "bad" if e >= 20 else ("warn" if e >= 10 else ""))
    mfu = mv.get("mfu_pct") if mv.get("mfu_pct") is not None else mv.get("mfu_estimate_pct")
    if mfu is not None:
        c = (r.metrics.get("coverage") or {}).get("mfu_pct") or {} if mv.get("mfu_pct") is not None \
            else {}
        add("MFU", ("≥ " if c.get("lower_bound") else "") + fmt.fmt_pct(mfu),
            f"modelled FLOPs / peak; {fmt.fmt_pct(c['coverage_pct'], 0)} of kernel time modelled"
            if c.get("coverage_pct") is not None else "modelled FLOPs / peak")
    if mv.get("peak_reserved_bytes") is not None:
        cap = mv.get("device_memory_bytes")
        add("Peak memory", fmt.fmt_bytes(mv["peak_reserved_bytes"]),
            f"reserved; {fmt.fmt_pct(mv.get('peak_reserved_capacity_pct'), 0)} of "
            f"{fmt.fmt_bytes(cap)}" if cap else "reserved")
    if mv.get("kernels_per_step") is not None:
        med = mv.get("median_kernel_ns")
        add("Kernels / step", fmt.fmt_num(mv["kernels_per_step"], 0),
            f"median {fmt.fmt_ns(med)}" if med else "")
    return out


def _finding(f, i: int) -> dict[str, Any]:
    measurements, tables = [], []
    for j, ev in enumerate(f.evidence or []):
        kind = ev.get("kind")
        if kind == "measurements":
            for m in ev.get("rows", []):
                shown = m.get("display", format_cell(m.get("value"), "num"))
                limit = m.get("threshold_display", m.get("threshold", ""))
                measurements.append({"metric": str(m.get("metric", "")), "display": str(shown),
                                     "op": str(m.get("op", "")), "threshold": str(limit)})
        elif kind == "table" and ev.get("columns"):
            t = table(f"ev-{i}-{j}", _evidence_columns(ev["columns"]), ev.get("rows", []), limit=10)
            t["title"] = str(ev.get("title", ""))
            t["note"] = str(ev.get("note") or "")
            tables.append(t)
    imp = f.impact_pct or 0.0
    return {"rule": f.rule, "severity": f.severity if f.severity in SEV_RANK else "info",
            "title": f.title, "category": f.category, "message": f.message,
            "impact": fmt.fmt_pct(imp) if f.impact_pct is not None else "",
            "impact_w": round(min(100.0, imp), 1),
            "measurements": measurements, "tables": tables,
            "recommendations": [str(x) for x in f.recommendations]}


# --- SVG primitives ---------------------------------------------------------------------------

class Svg:
    """Shapes with attributes; the template writes them (attributes escaped by ``xmlattr``)."""

    def __init__(self, w: int, h: int, label: str) -> None:
        self.w, self.h, self.label = w, h, label
        self.items: list[dict[str, Any]] = []

    def _add(self, el: str, attrs: dict[str, Any], text: str = "", title: str = "") -> None:
        a = {k.replace("_", "-"): (_num(v) if isinstance(v, float) else v)
             for k, v in attrs.items() if v is not None and v != ""}
        self.items.append({"el": el, "a": a, "text": text, "title": title})

    def rect(self, x: float, y: float, w: float, h: float, cls: str, title: str = "", **kw) -> None:
        self._add("rect", {"x": float(x), "y": float(y), "width": float(max(w, 0.0)),
                           "height": float(max(h, 0.0)), "class": cls, **kw}, title=title)

    def line(self, x1: float, y1: float, x2: float, y2: float, cls: str, title: str = "") -> None:
        self._add("line", {"x1": float(x1), "y1": float(y1), "x2": float(x2), "y2": float(y2),
                           "class": cls}, title=title)

    def text(self, x: float, y: float, text: str, cls: str = "lbl", anchor: str = "start",
             **kw) -> None:
        self._add("text", {"x": float(x), "y": float(y), "class": cls,
                           "text_anchor": anchor if anchor != "start" else None, **kw}, text=text)

    def circle(self, cx: float, cy: float, r: float, cls: str, title: str = "") -> None:
        self._add("circle", {"cx": float(cx), "cy": float(cy), "r": float(r), "class": cls},
                  title=title)

    def path(self, d: str, cls: str, title: str = "") -> None:
        self._add("path", {"d": d, "class": cls}, title=title)

    def to_dict(self) -> dict[str, Any]:
        return {"w": self.w, "h": self.h, "label": self.label, "items": self.items}


def _nice_step(span: float, n: int = 5) -> float:
    if span <= 0:
        return 1.0
    raw = span / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _ticks(vmax: float, n: int = 4) -> list[float]:
    step = _nice_step(vmax, n)
    out, v = [], 0.0
    while v <= vmax * 1.0001:
        out.append(v)
        v += step
    return out


def _path(points: Iterable[tuple[float, float]]) -> str:
    return "".join(("M" if i == 0 else "L") + f"{_num(x)} {_num(y)}"
                   for i, (x, y) in enumerate(points))


# --- steps ------------------------------------------------------------------------------------

def _steps(r: DiagnosisResult) -> dict[str, Any]:
    mv = r.metrics.get("values", {})
    rows = [s for s in r.breakdown.get("steps") or [] if s.get("step") is not None]
    if not mv.get("has_gpu"):
        return {"empty": "No GPU activity in this trace: step times need GPU kernels "
                         "(record with activities=[CPU, CUDA])."}
    if not rows:
        return {"empty": "No ProfilerStep markers: the whole GPU span is one window. Record with "
                         "a torch.profiler schedule and call prof.step() every iteration."}
    by_step: dict[Any, list[dict]] = defaultdict(list)
    for s in rows:
        by_step[s["step"]].append(s)
    steps = sorted(by_step, key=lambda k: (isinstance(k, str), k))
    multi = len({s["rank"] for s in rows}) > 1
    reps = []
    for k in steps:
        rs = by_step[k]
        worst = max(rs, key=lambda s: s.get("wall_ns") or 0)
        reps.append({"step": k, "rank": worst["rank"], "row": worst,
                     "min": min(s.get("wall_ns") or 0 for s in rs),
                     "max": worst.get("wall_ns") or 0, "n": len(rs)})
    # the median and the slow steps over the representative steps (metrics.steps)
    kept = [x for x in reps if not x["row"].get("excluded")] or reps
    median = _median(sorted(x["max"] for x in kept))
    threshold = SLOW_STEP_FACTOR * median
    slow = [x for x in kept if median and x["max"] > threshold]
    slow_ids = {id(x) for x in slow}
    # bucket consecutive steps when there are too many bars to draw
    size = max(1, math.ceil(len(reps) / MAX_STEP_BARS))
    buckets = [reps[i:i + size] for i in range(0, len(reps), size)]
    W, H, L, R, T, B = 960, (250 if len(reps) > 2 else 180), 72, 16, 18, 38
    pw, ph = W - L - R, H - T - B
    vmax = max(x["max"] for x in reps) * 1.08 or 1.0
    svg = Svg(W, H, "Step time per step, stacked by what the GPU did")
    for v in _ticks(vmax):
        y = T + ph - ph * v / vmax
        svg.line(L, y, L + pw, y, "grid")
        svg.text(L - 6, y + 4, fmt.fmt_ns(v), "axis", "end")
    slot = pw / len(buckets)
    bw = max(1.0, min(64.0, slot * 0.62))
    label_every = max(1, math.ceil(len(buckets) / 16))
    for i, bk in enumerate(buckets):
        x = L + slot * i + (slot - bw) / 2
        comp = {key: sum((b["row"].get(key) or 0) for b in bk) / len(bk) for key, _, _ in SEGMENTS}
        wall = sum(b["max"] for b in bk) / len(bk)
        top = max(b["max"] for b in bk)
        low = min(b["min"] for b in bk)
        name = (f"step {bk[0]['step']}" if len(bk) == 1 else
                f"steps {bk[0]['step']}–{bk[-1]['step']} (mean of {len(bk)})")
        is_slow = any(id(b) in slow_ids for b in bk)
        tip = [f"{name}: {fmt.fmt_ns(wall)}" + (f" (slowest rank {bk[0]['rank']})"
                                                 if multi and len(bk) == 1 else "")]
        tip += [f"{lab} {fmt.fmt_ns(comp[key])}" for key, lab, _ in SEGMENTS if comp[key]]
        if multi:
            tip.append(f"ranks: {fmt.fmt_ns(low)} – {fmt.fmt_ns(top)}")
        if is_slow:
            tip.append(f"SLOW: > {SLOW_STEP_FACTOR}× median {fmt.fmt_ns(median)}")
        title = "\n".join(tip)
        y = T + ph
        total = sum(comp.values()) or wall or 1
        scale = wall / total  # segments sum to the window; scale to the bar's wall
        for key, lab, cls in SEGMENTS:
            h = ph * comp[key] * scale / vmax
            if h <= 0:
                continue
            y -= h
            svg.rect(x, y, bw, h, f"seg-{cls}", title)
        if is_slow:
            ytop = T + ph - ph * top / vmax
            svg.rect(x - 1, ytop, bw + 2, T + ph - ytop, "slow-outline", title)
            svg.path(f"M{_num(x + bw / 2)} {_num(ytop - 3)}l-4 -7h8z", "slow-mark", title)
        if multi and top > low:
            cx = x + bw / 2
            svg.line(cx, T + ph - ph * top / vmax, cx, T + ph - ph * low / vmax, "whisker", title)
        if i % label_every == 0:
            svg.text(x + bw / 2, T + ph + 14, str(bk[0]["step"]), "axis", "middle")
    if median:
        ym = T + ph - ph * median / vmax
        svg.line(L, ym, L + pw, ym, "median")
        svg.text(L + pw - 2, ym - 4, f"median {fmt.fmt_ns(median)}", "axis median-lbl", "end")
        yt = T + ph - ph * threshold / vmax
        if threshold < vmax:
            svg.line(L, yt, L + pw, yt, "threshold")
            svg.text(L + pw - 2, yt - 4, f"{SLOW_STEP_FACTOR}× median", "axis", "end")
    svg.line(L, T + ph, L + pw, T + ph, "axis-line")
    svg.text(L + pw / 2, H - 4, "ProfilerStep" + (" (bucketed)" if size > 1 else ""), "axis",
             "middle")
    # the table: one row per step (its slowest rank), the slowest MAX_STEP_ROWS steps
    order = {id(x): i for i, x in enumerate(reps)}
    listed = sorted(reps, key=lambda x: -x["max"])[:MAX_STEP_ROWS]
    listed.sort(key=lambda x: order[id(x)])
    step_rows = [[x["step"], x["rank"], x["max"], x["min"] if multi else None,
                  *[_pct(x["row"].get(k), x["row"].get("wall_ns")) for k, _, _ in SEGMENTS],
                  x["row"].get("comm_hidden_ns"), x["row"].get("kernels")] for x in listed]
    step_cols = [("step", "text"), ("slowest rank" if multi else "rank", "text"), ("wall", "ns"),
                 ("fastest rank", "ns"), ("compute", "pct"), ("comm exposed", "pct"),
                 ("memcpy exposed", "pct"), ("memset exposed", "pct"), ("idle", "pct"),
                 ("comm hidden", "ns"), ("kernels", "count")]
    if not multi:
        step_cols.pop(3)
        step_rows = [r[:3] + r[4:] for r in step_rows]
    left = [f"step {x['step']} ({x['row']['excluded']})" for x in reps if x["row"].get("excluded")]
    note = "; ".join(([f"the {len(listed)} slowest of {len(reps)} steps"]
                      if len(listed) < len(reps) else [])
                     + ([f"left out of the step statistics: {', '.join(left[:8])}"] if left else []))
    step_table = table("tbl-steps", step_cols, step_rows, limit=20, note=note)
    return {
        "empty": "", "chart": svg.to_dict(), "median": fmt.fmt_ns(median),
        "count": len(reps), "multi": multi, "factor": SLOW_STEP_FACTOR, "bucket": size,
        "slow": [{"step": str(x["step"]), "time": fmt.fmt_ns(x["max"]), "rank": x["rank"],
                  "ratio": f"{x['max'] / median:.2f}×"} for x in slow[:20]],
        "slow_more": max(0, len(slow) - 20),
        "legend": [(lab, cls) for key, lab, cls in SEGMENTS
                   if key in ("compute_ns", "idle_ns") or any(s.get(key) for s in rows)],
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


# --- GPU time breakdown -----------------------------------------------------------------------

def _breakdown(r: DiagnosisResult) -> dict[str, Any]:
    ranks = sorted(r.breakdown.get("ranks") or [], key=lambda x: x.get("rank", 0))
    if not ranks or not r.metrics.get("values", {}).get("has_gpu"):
        return {"empty": "No GPU activity in this trace: record with activities=[CPU, CUDA] "
                         "(ProfilerActivity.CUDA) on a GPU machine."}
    shown = ranks[:MAX_RANK_BARS]
    W, L, R, T = 960, 78, 150, 8
    row_h, gap = (22, 10) if len(shown) <= 16 else (14, 4)
    pw = W - L - R
    H = T + len(shown) * (row_h + gap) + 4
    svg = Svg(W, H, "GPU time per rank: compute, exposed communication and copies, idle")
    for i, w in enumerate(shown):
        wall = float(w.get("wall_ns") or 0) or 1.0
        y = T + i * (row_h + gap)
        svg.text(L - 8, y + row_h / 2 + 4, f"rank {w.get('rank')}", "axis", "end")
        x = float(L)
        for key, lab, cls in SEGMENTS:
            v = float(w.get(key) or 0)
            if v <= 0:
                continue
            ww = pw * v / wall
            pct = 100 * v / wall
            svg.rect(x, y, ww, row_h, f"seg-{cls}",
                     f"rank {w.get('rank')} · {lab} {fmt.fmt_pct(pct)} ({fmt.fmt_ns(v)})")
            if ww > 54 and row_h >= 18:
                svg.text(x + 5, y + row_h / 2 + 4, fmt.fmt_pct(pct, 0), f"seg-lbl seg-lbl-{cls}")
            x += ww
        hidden = float(w.get("comm_hidden_ns") or 0)
        if hidden > 0:
            hw = pw * min(hidden, float(w.get("compute_ns") or 0) or hidden) / wall
            tip = (f"rank {w.get('rank')} · communication hidden under compute: "
                   f"{fmt.fmt_ns(hidden)} ({fmt.fmt_pct(100 * hidden / wall)} of the window)")
            svg.rect(L, y + row_h - 4, hw, 4, "seg-hidden", tip)
            svg.text(L + pw + 8, y + row_h / 2 + 4,
                     f"comm hidden {fmt.fmt_pct(100 * hidden / wall)}", "axis hidden-lbl")
        else:
            svg.text(L + pw + 8, y + row_h / 2 + 4, fmt.fmt_ns(wall), "axis")
    summ = {s.get("rank"): s for s in r.summary.get("ranks", [])}
    rows = []
    for w in ranks[:MAX_RANK_ROWS]:
        s = summ.get(w.get("rank"), {})
        wall = w.get("wall_ns")
        q = s.get("step_time_ns") or {}
        rows.append([w.get("rank"), s.get("device"), wall,
                     *[_pct(w.get(k), wall) for k, _, _ in SEGMENTS],
                     _pct(w.get("comm_hidden_ns"), wall), s.get("steps"), q.get("p50"),
                     s.get("kernel_time_ns"), s.get("peak_reserved_bytes")])
    cls_rows = r.rollups.get("classes") or []
    tot = sum(float(c.get("total_ns") or 0) for c in cls_rows) or 1.0
    order = {c: i for i, c in enumerate(CLASSES)}
    cls_rows = sorted(cls_rows, key=lambda c: order.get(str(c.get("cls")), 99))
    csvg = Svg(W, 30, "Kernel time by class, all ranks")
    x = 0.0
    for c in cls_rows:
        v = float(c.get("total_ns") or 0)
        ww = W * v / tot
        if ww <= 0:
            continue
        name = str(c.get("cls"))
        csvg.rect(x, 0, ww, 30, f"cls-{_css_ident(name)}",
                  f"{name}: {fmt.fmt_pct(100 * v / tot)} of GPU time ({fmt.fmt_ns(v)}, "
                  f"{fmt.fmt_num(c.get('kernels'), 0)} kernels)")
        lbl = f"{name} {fmt.fmt_pct(100 * v / tot, 0)}"
        if ww > 14 + 7 * len(lbl):
            csvg.text(x + 6, 19, lbl, "seg-lbl")
        x += ww
    totals = {k: sum(float(w.get(k) or 0) for w in ranks) for k in
              ("wall_ns", "compute_ns", "comm_exposed_ns", "comm_hidden_ns", "comm_ns",
               "memcpy_exposed_ns", "memset_exposed_ns", "idle_ns")}
    wall = totals["wall_ns"] or 1.0
    return {
        "empty": "", "chart": svg.to_dict(), "more_ranks": max(0, len(ranks) - len(shown)),
        "legend": [(lab, cls) for key, lab, cls in SEGMENTS
                   if totals[key] > 0 or key in ("compute_ns", "idle_ns")]
        + ([("comm hidden (under compute)", "hidden")] if totals["comm_hidden_ns"] > 0 else []),
        "summary": [(lab, fmt.fmt_pct(100 * totals[key] / wall), cls) for key, lab, cls in SEGMENTS
                    if totals[key] > 0 or key in ("compute_ns", "idle_ns")],
        "hidden": fmt.fmt_pct(100 * totals["comm_hidden_ns"] / wall) if totals["comm_ns"] else "",
        "definition": str(r.breakdown.get("definition") or ""),
        "classes": csvg.to_dict() if cls_rows else None,
        "class_legend": [(str(c.get("cls")), _css_ident(str(c.get("cls"))),
                          fmt.fmt_pct(100 * float(c.get("total_ns") or 0) / tot))
                         for c in cls_rows],
        "table": table("tbl-ranks", [("rank", "text"), ("device", "text"), ("window", "ns"),
                                     ("compute", "pct"), ("comm exposed", "pct"),
                                     ("memcpy exposed", "pct"), ("memset exposed", "pct"),
                                     ("idle", "pct"), ("comm hidden", "pct"), ("steps", "count"),
                                     ("step p50", "ns"), ("kernel time", "ns"),
                                     ("peak reserved", "bytes")], rows, limit=16),
    }


# --- timeline ---------------------------------------------------------------------------------

def _timeline(r: DiagnosisResult) -> dict[str, Any]:
    tl = r.timeline
    if not tl or not tl.get("lanes") or not any(l.get("items") for l in tl["lanes"]):
        why = ("No GPU kernels in this trace: record with activities=[CPU, CUDA]."
               if not r.metrics.get("values", {}).get("has_gpu")
               else "No representative step could be chosen (no GPU work inside a step window).")
        return {"empty": why}
    span = float(tl.get("span_ns") or 1)
    names = [str(n) for n in tl.get("names") or []]
    lanes = sorted(tl["lanes"], key=lambda l: (-len(l.get("items") or []),))
    lanes = sorted(lanes[:MAX_LANES], key=lambda l: (l.get("device") is None,
                                                     l.get("device") or 0, l.get("stream") or 0))
    dropped = tl["lanes"][MAX_LANES:] if len(tl["lanes"]) > MAX_LANES else []
    if len(tl["lanes"]) > MAX_LANES:
        kept = {id(l) for l in lanes}
        rest = [it for l in tl["lanes"] if id(l) not in kept for it in l.get("items") or []]
        lanes = lanes + [{"device": None, "stream": None, "items": sorted(rest), "other": True}]
    W, L, R, T = 960, 150, 14, 26
    lane_h, gap = 20, 6
    pw = W - L - R
    n_rows = len(lanes) + 1
    H = T + n_rows * (lane_h + gap) + 18
    svg = Svg(W, H, f"GPU streams during step {tl.get('step')} of rank {tl.get('rank')}")
    px = pw / span
    for v in _ticks(span, 8):
        x = L + v * px
        svg.line(x, T - 6, x, H - 18, "grid")
        svg.text(x, T - 10, fmt.fmt_ns(v) if v else "0", "axis", "middle")
    # idle row: where no stream of the rank is busy
    busy = _union((float(it[0]), float(it[0]) + float(it[1]))
                  for l in lanes for it in l.get("items") or [])
    gaps, prev = [], 0.0
    for s, e in busy:
        if s > prev:
            gaps.append((prev, s))
        prev = max(prev, e)
    if prev < span:
        gaps.append((prev, span))
    y = float(T)
    svg.text(L - 8, y + lane_h / 2 + 4, "GPU idle", "axis lane-lbl", "end")
    svg.rect(L, y, pw, lane_h, "lane-busy", "GPU busy (any stream)")
    idle_total = sum(e - s for s, e in gaps)
    _idle_bins(svg, gaps, span, L, y, pw, lane_h)
    n_rects = 0
    budget = max(200, TIMELINE_MAX_RECTS // max(1, len(lanes)))
    for li, lane in enumerate(lanes):
        y = T + (li + 1) * (lane_h + gap)
        items = lane.get("items") or []
        if lane.get("other"):
            label = f"{len(dropped)} more streams"
        else:
            dev = lane.get("device")
            label = (f"GPU {dev} · " if dev is not None else "") + f"stream {lane.get('stream')}"
        svg.text(L - 8, y + lane_h / 2 + 4, label, "axis lane-lbl", "end")
        kern_ns = sum(float(it[1]) for it in items)
        svg.rect(L, y, pw, lane_h, "lane-bg",
                 f"{label}: {sum(int(it[4]) if len(it) > 4 else 1 for it in items):,} activities, "
                 f"busy {fmt.fmt_ns(kern_ns)} of {fmt.fmt_ns(span)}")
        merged = _merge_pixels(items, px, budget)
        for m in merged:
            n_rects += 1
            svg.rect(L + m["s"] * px, y + 1, max(0.6, (m["e"] - m["s"]) * px), lane_h - 2,
                     f"cls-{_css_ident(m['cls'])}", _item_title(m, names))
    present = sorted({_css_ident(str(it[2])) for l in lanes for it in l.get("items") or []},
                     key=lambda c: CLASSES.index(c))
    return {"empty": "", "chart": svg.to_dict(), "rank": tl.get("rank"), "step": tl.get("step"),
            "span": fmt.fmt_ns(span), "idle": fmt.fmt_pct(100 * idle_total / span),
            "idle_gaps": len(gaps), "lanes": len(lanes),
            "rects": n_rects, "legend": present,
            "items": sum(len(l.get("items") or []) for l in lanes)}


def _idle_bins(svg: Svg, gaps: list[tuple[float, float]], span: float, x0: float, y: float,
               pw: float, h: float) -> None:
    """Idle time as density: the plot is cut into 2-px bins, each shaded by the share of it the
    GPU was idle (gaps far below a pixel stay visible); runs of equal shade are one rectangle."""
    n = max(1, int(pw // 2))
    width = span / n
    idle = [0.0] * n
    for s, e in gaps:
        i = min(n - 1, int(s // width))
        while s < e and i < n:
            be = (i + 1) * width
            idle[i] += min(e, be) - s
            s = be
            i += 1
    levels = [min(10, int(round(10 * v / width))) for v in idle]
    i = 0
    while i < n:
        lv, j = levels[i], i
        while j + 1 < n and levels[j + 1] == lv:
            j += 1
        if lv > 0:
            t0, t1 = i * width, (j + 1) * width
            frac = sum(idle[i:j + 1]) / (t1 - t0)
            svg.rect(x0 + pw * i / n, y, pw * (j + 1 - i) / n, h, "idle-gap",
                     f"idle {fmt.fmt_pct(100 * frac, 0)} of +{fmt.fmt_ns(t0)} … +{fmt.fmt_ns(t1)}",
                     fill_opacity=_num(0.12 + 0.88 * lv / 10, 2))
        i = j + 1


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def _merge_pixels(items: list[list[Any]], px: float, budget: int) -> list[dict[str, Any]]:
    """Merge neighbours closer than half a pixel (and sub-pixel runs of mixed classes), so a lane
    draws at most a few rectangles per pixel column; widen the merge until under ``budget``."""
    its = sorted(items, key=lambda it: float(it[0]))
    tol = 0.5
    while True:
        out: list[dict[str, Any]] = []
        for it in its:
            s, d = float(it[0]), float(it[1])
            cls, idx = str(it[2]), int(it[3]) if len(it) > 3 and it[3] is not None else -1
            cnt = int(it[4]) if len(it) > 4 and it[4] else 1
            e = s + d
            if out:
                m = out[-1]
                close = (s - m["e"]) * px < tol
                tiny = (m["e"] - m["s"]) * px < 2 * tol and d * px < 2 * tol
                if close and (m["cls"] == cls or tiny):
                    m["e"] = max(m["e"], e)
                    m["n"] += cnt
                    m["by"][cls] += d
                    m["names"].add(idx)
                    m["busy"] += d
                    if m["by"][cls] > m["by"][m["cls"]]:
                        m["cls"] = cls
                    continue
            by: dict[str, float] = defaultdict(float)
            by[cls] += d
            out.append({"s": s, "e": e, "cls": cls, "n": cnt, "by": by, "names": {idx}, "busy": d,
                        "idx": idx})
        if len(out) <= budget or tol > 64:
            return out
        tol *= 2


def _tip_name(name: str) -> str:
    return fmt.shorten(fmt.short_kernel_name(name), 120)


def _item_title(m: dict[str, Any], names: list[str]) -> str:
    when = f"+{fmt.fmt_ns(m['s'])} … +{fmt.fmt_ns(m['e'])}"
    if m["n"] == 1 and len(m["names"]) == 1:
        idx = m["idx"]
        name = _tip_name(names[idx]) if 0 <= idx < len(names) else "?"
        return f"{name}\n{m['cls']} · {fmt.fmt_ns(m['e'] - m['s'])} · {when}"
    mix = sorted(m["by"].items(), key=lambda kv: -kv[1])
    busy = m["busy"] or 1.0
    parts = ", ".join(f"{c} {100 * v / busy:.0f}%" for c, v in mix[:3])
    tops = [_tip_name(names[i]) for i in sorted(m["names"])[:3] if 0 <= i < len(names)]
    return (f"{m['n']:,} activities merged ({parts}) · busy {fmt.fmt_ns(m['busy'])} · {when}"
            + ("\n" + "\n".join(tops) if tops else ""))


# --- rollup tables ----------------------------------------------------------------------------

def _layers(r: DiagnosisResult) -> dict[str, Any]:
    ro = r.rollups or {}
    rows = ro.get("layers") or []
    if not r.metrics.get("values", {}).get("has_gpu"):
        return {"empty": "No GPU kernels to attribute to layers (CPU-only trace)."}
    if not ro.get("has_modules") or not rows:
        return {"empty": "No nn.Module hierarchy in this trace: record with with_stack=True "
                         "(and with_modules=True) to see device time per layer; operators below."}
    data = [[x.get("module"), x.get("forward_ns"), x.get("backward_ns"), x.get("other_ns"),
             x.get("total_ns"), x.get("kernels"), x.get("share_pct")] for x in rows]
    t = table("tbl-layers", [("module", "module"), ("forward", "ns"), ("backward", "ns"),
                             ("other", "ns"), ("total", "ns"), ("kernels", "count"),
                             ("share", "share")], data, filterable=True)
    for cells, x in zip(t["rows"], [x for x in rows if not (isinstance(x.get("module"), str)
                                                             and _MORE_ROW.match(x["module"]))]):
        cells[0]["depth"] = int(x.get("depth") or 0)
    return {"empty": "", "table": t, "count": len(t["rows"])}


def _ops(r: DiagnosisResult) -> dict[str, Any]:
    ro = r.rollups or {}
    rows = ro.get("ops") or []
    if not rows:
        return {"empty": "No operators with device time in this trace.", "annotations": None}
    data = [[x.get("name"), x.get("calls"), x.get("device_self_ns"), x.get("device_total_ns"),
             x.get("host_ns"), x.get("share_pct"), x.get("input_dims")] for x in rows]
    t = table("tbl-ops", [("operator", "text"), ("calls", "count"), ("device self", "ns"),
                          ("device total", "ns"), ("host", "ns"), ("share", "share"),
                          ("input dims", "dims")], data, filterable=True)
    ann = ro.get("annotations") or []
    at = None
    if ann:
        at = table("tbl-annotations", [("annotation", "text"), ("device time", "ns"),
                                       ("kernels", "count"), ("share", "share")],
                   [[x.get("annotation"), x.get("device_ns"), x.get("kernels"), x.get("share_pct")]
                    for x in ann], limit=10)
    return {"empty": "", "table": t, "annotations": at, "count": len(t["rows"])}


def _kernels(r: DiagnosisResult) -> dict[str, Any]:
    rows = (r.rollups or {}).get("kernels") or []
    if not rows:
        return {"empty": "No GPU kernels in this trace: record with activities=[CPU, CUDA]."}
    data = [[x.get("name"), x.get("cls"), x.get("calls"), x.get("total_ns"), x.get("mean_ns"),
             x.get("min_ns"), x.get("max_ns"), x.get("share_pct"), x.get("top_op")] for x in rows]
    t = table("tbl-kernels", [("kernel", "kernel"), ("class", "class"), ("calls", "count"),
                              ("total", "ns"), ("mean", "ns"), ("min", "ns"), ("max", "ns"),
                              ("share", "share"), ("launched by", "text")], data, filterable=True)
    return {"empty": "", "table": t, "count": len(t["rows"])}


# --- roofline ---------------------------------------------------------------------------------

def _roofline(r: DiagnosisResult) -> dict[str, Any]:
    rf = r.roofline
    pts = [p for p in (rf or {}).get("points") or []
           if (p.get("ai") or 0) > 0 and (p.get("flops_per_s") or 0) > 0]
    if not rf or not pts:
        return {"empty": _roofline_why(r)}
    bw = float(rf.get("bandwidth") or 0)
    peaks: dict[float, list[str]] = defaultdict(list)
    for k, v in (rf.get("peaks") or {}).items():
        if v:
            peaks[float(v)].append(str(k))
    W, H, L, R, T, B = 960, 440, 100, 170, 16, 46
    pw, ph = W - L - R, H - T - B
    xs = [math.log10(p["ai"]) for p in pts] + ([math.log10(v / bw) for v in peaks] if bw else [])
    ys = [math.log10(p["flops_per_s"]) for p in pts] + [math.log10(v) for v in peaks]
    x0, x1 = math.floor(min(xs) - 0.3), math.ceil(max(xs) + 0.3)
    y0, y1 = math.floor(min(ys) - 0.3), math.ceil(max(ys) + 0.2)
    if x1 - x0 < 3:
        x1 = x0 + 3
    if y1 - y0 < 3:
        y0 = y1 - 3

    def X(v: float) -> float:
        return L + pw * (v - x0) / (x1 - x0)

    def Y(v: float) -> float:
        return T + ph - ph * (v - y0) / (y1 - y0)

    svg = Svg(W, H, "Roofline: achieved FLOP/s against arithmetic intensity, log-log")
    for e in range(x0, x1 + 1):
        svg.line(X(e), T, X(e), T + ph, "grid")
        svg.text(X(e), T + ph + 16, _pow10(e), "axis", "middle")
    for e in range(y0, y1 + 1):
        svg.line(L, Y(e), L + pw, Y(e), "grid")
        svg.text(L - 6, Y(e) + 4, fmt.fmt_rate(10.0 ** e, "FLOP/s"), "axis", "end")
    svg.rect(L, T, pw, ph, "plot-frame")
    top = max(peaks) if peaks else None
    if bw and top:
        # memory roof: FLOP/s = AI x bandwidth, up to the highest ridge
        xa = max(x0, y0 - math.log10(bw))
        xb = math.log10(top / bw)
        svg.path(_path([(X(xa), Y(xa + math.log10(bw))), (X(xb), Y(xb + math.log10(bw)))]),
                 "roof-bw", f"memory bandwidth roof: {fmt.fmt_rate(bw, 'B/s')}")
        ang = -math.degrees(math.atan2(Y(xa + 1 + math.log10(bw)) - Y(xa + math.log10(bw)),
                                       X(xa + 1) - X(xa)))
        lx = X(xa) + 0.18 * (X(xb) - X(xa))
        ly = Y(math.log10(bw) + xa + 0.18 * (xb - xa)) - 8
        svg.text(lx, ly, f"{fmt.fmt_rate(bw, 'B/s')}", "roof-lbl", "start",
                 transform=f"rotate({_num(-ang)} {_num(lx)} {_num(ly)})")
    for v, keys in sorted(peaks.items()):
        xr = math.log10(v / bw) if bw else x0
        xr = min(max(xr, x0), x1)
        svg.path(_path([(X(xr), Y(math.log10(v))), (X(x1), Y(math.log10(v)))]), "roof-peak",
                 f"{'/'.join(keys)} peak: {fmt.fmt_rate(v, 'FLOP/s')}"
                 + (f"; ridge at {v / bw:.0f} FLOP/byte" if bw else ""))
        svg.text(X(x1) + 6, Y(math.log10(v)) + 4,
                 f"{'/'.join(keys)} {fmt.fmt_rate(v, 'FLOP/s')}", "roof-lbl")
    tmax = max(float(p.get("device_ns") or 0) for p in pts) or 1.0
    for p in sorted(pts, key=lambda p: -float(p.get("device_ns") or 0)):
        rad = 3.0 + 11.0 * math.sqrt(float(p.get("device_ns") or 0) / tmax)
        bound = "memory" if p.get("bound") == "memory" else "compute"
        dims = f" {compact_dims(p['dims'])}" if p.get("dims") else ""
        title = (f"{p.get('op')}{dims} · {p.get('dtype') or '?'}\n{fmt.fmt_num(p.get('calls'), 0)} "
                 f"calls · {fmt.fmt_ns(p.get('device_ns'))}\nAI {p['ai']:.3g} FLOP/byte · "
                 f"{fmt.fmt_rate(p['flops_per_s'], 'FLOP/s')} · {bound}-bound")
        svg.circle(X(math.log10(p["ai"])), Y(math.log10(p["flops_per_s"])), rad, f"pt-{bound}",
                   title)
    svg.text(L + pw / 2, H - 8, "Arithmetic intensity (FLOP / byte)", "axis axis-title", "middle")
    svg.text(14, T + ph / 2, "Achieved FLOP/s", "axis axis-title", "middle",
             transform=f"rotate(-90 14 {_num(T + ph / 2)})")
    rows = [[p.get("op"), p.get("dims"), p.get("dtype"), p.get("calls"), p.get("device_ns"),
             p.get("ai"), p.get("flops_per_s"), p.get("bound")] for p in pts]
    mv = r.metrics.get("values", {})
    t_all = sum(float(p.get("device_ns") or 0) for p in pts) or 1.0
    t_mem = sum(float(p.get("device_ns") or 0) for p in pts if p.get("bound") == "memory")
    mem_pct = mv.get("memory_bound_time_pct")
    mem_pct = 100.0 * t_mem / t_all if mem_pct is None else mem_pct
    cmp_pct = mv.get("compute_bound_time_pct")
    cmp_pct = 100.0 - mem_pct if cmp_pct is None else cmp_pct
    return {"empty": "", "chart": svg.to_dict(), "points": len(pts),
            "device": str((r.extra.get("device") or {}).get("resolved")
                          or r.trace.get("device") or ""),
            "memory_pct": fmt.fmt_pct(mem_pct), "compute_pct": fmt.fmt_pct(cmp_pct),
            "coverage": fmt.fmt_pct(mv["flops_modelled_pct"])
            if mv.get("flops_modelled_pct") is not None else "",
            "eff": fmt.fmt_pct(mv.get("roof_efficiency_pct")) if mv.get("roof_efficiency_pct")
            is not None else "",
            "table": table("tbl-roofline", [("operator", "text"), ("input dims", "dims"),
                                            ("dtype", "text"), ("calls", "count"),
                                            ("device time", "ns"), ("FLOP/byte", "ratio"),
                                            ("achieved", "rate_flops"), ("bound", "text")],
                           rows, limit=12)}


def _pow10(e: int) -> str:
    v = 10.0 ** e
    if e < 0:
        return f"{v:g}"
    if e < 3:
        return f"{int(v)}"
    return {3: "1k", 4: "10k", 5: "100k", 6: "1M", 7: "10M", 8: "100M"}.get(e, f"1e{e}")


def _roofline_why(r: DiagnosisResult) -> str:
    mv = r.metrics.get("values", {})
    miss = r.metrics.get("missing", {})
    flags = r.trace.get("capture_flags") or {}
    if not mv.get("has_gpu"):
        return "No GPU kernels in this trace: nothing to place on a roofline."
    if not flags.get("record_shapes"):
        return ("No op shapes: record with record_shapes=True so FLOPs and bytes can be modelled "
                "for the roofline.")
    dev = r.extra.get("device") or {}
    if not dev.get("resolved") and not dev.get("peaks"):
        return ("No device peaks: the roofline needs a known GPU — pass --device NAME "
                "(traceinsight devices) or --peak-tflops/--peak-bw.")
    why = miss.get("roof_efficiency_pct") or miss.get("flops_modelled_pct")
    return f"No roofline points: {why}." if why else "No op could be modelled for the roofline."


# --- memory -----------------------------------------------------------------------------------

def _memory(r: DiagnosisResult) -> dict[str, Any]:
    mem = r.memory
    series = [s for s in (mem or {}).get("timeline") or [] if s.get("ts_ns")]
    if not mem or not series:
        return {"empty": "No [memory] events: record with profile_memory=True to see allocated "
                         "and reserved memory over time."}
    peak = mem.get("peak") or {}
    cap = peak.get("capacity_bytes") or r.metrics.get("values", {}).get("device_memory_bytes")
    key = (peak.get("rank"), peak.get("device"))
    series = sorted(series, key=lambda s: ((s.get("rank"), s.get("device")) != key,
                                           -max(s.get("reserved") or [0]), s.get("rank") or 0))
    charts = [_memory_chart(s, cap) for s in series[:MAX_MEMORY_CHARTS]]
    tops = mem.get("top_allocators") or []
    growth = mem.get("growth") or {}
    g_rows = []
    if growth.get("steps") and growth.get("allocated_at_step_end"):
        g_rows = [[s, b] for s, b in zip(growth["steps"], growth["allocated_at_step_end"])]
    return {
        "empty": "", "charts": charts, "more": max(0, len(series) - MAX_MEMORY_CHARTS),
        "peak": {"rank": peak.get("rank"), "device": peak.get("device"),
                 "allocated": fmt.fmt_bytes(peak.get("peak_allocated_bytes")),
                 "reserved": fmt.fmt_bytes(peak.get("peak_reserved_bytes")),
                 "gap": fmt.fmt_bytes(peak.get("gap_at_peak_bytes")),
                 "capacity": fmt.fmt_bytes(cap) if cap else "unknown",
                 "capacity_pct": fmt.fmt_pct(100 * float(peak.get("peak_reserved_bytes") or 0)
                                             / cap) if cap else "–"},
        "top": table("tbl-allocators", [("op", "text"), ("allocated", "bytes"),
                                        ("allocations", "count")],
                     [[t.get("op"), t.get("bytes"), t.get("allocations")] for t in tops],
                     limit=10) if tops else None,
        "growth": table("tbl-growth", [("step", "text"), ("allocated at step end", "bytes")],
                        g_rows, limit=10, sortable=False) if g_rows else None,
        "slope": fmt.fmt_bytes(growth.get("slope")) if growth.get("slope") is not None else "",
    }


def _byte_unit(v: float) -> tuple[float, str]:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= scale:
            return float(scale), unit
    return 1.0, "B"


def _memory_chart(s: dict[str, Any], cap: float | None) -> dict[str, Any]:
    ts = [float(t) for t in s.get("ts_ns") or []]
    al = [float(v or 0) for v in s.get("allocated") or []]
    rs = [float(v or 0) for v in s.get("reserved") or []]
    n = min(len(ts), len(al), len(rs))
    ts, al, rs = ts[:n], al[:n], rs[:n]
    W, H, L, R, T, B = 960, 250, 78, 16, 18, 38
    pw, ph = W - L - R, H - T - B
    t0 = ts[0] if ts else 0.0
    span = (ts[-1] - t0) if n > 1 else 1.0
    span = span or 1.0
    dmax = max(rs + al + [1.0])
    on_scale = bool(cap) and cap <= 1.6 * dmax
    vmax = (float(cap) * 1.04) if on_scale else dmax * 1.12
    scale, unit = _byte_unit(vmax)
    svg = Svg(W, H, f"Memory of rank {s.get('rank')} device {s.get('device')}: allocated and "
                    "reserved over time")

    def X(t: float) -> float:
        return L + pw * (t - t0) / span

    def Y(v: float) -> float:
        return T + ph - ph * v / vmax

    for v in _ticks(vmax / scale, 4):
        y = Y(v * scale)
        svg.line(L, y, L + pw, y, "grid")
        svg.text(L - 6, y + 4, f"{v:g} {unit}", "axis", "end")
    for v in _ticks(span, 8):
        svg.text(X(t0 + v), T + ph + 16, fmt.fmt_ns(v) if v else "0", "axis", "middle")
    if n:
        base = Y(0)
        area = [(X(ts[0]), base)] + [(X(t), Y(a)) for t, a in zip(ts, al)] + [(X(ts[-1]), base)]
        svg.path(_path(area) + "Z", "mem-alloc-area")
        svg.path(_path((X(t), Y(a)) for t, a in zip(ts, al)), "mem-alloc",
                 f"allocated (peak {fmt.fmt_bytes(max(al))})")
        svg.path(_path((X(t), Y(v)) for t, v in zip(ts, rs)), "mem-reserved",
                 f"reserved (peak {fmt.fmt_bytes(max(rs))})")
        i = max(range(n), key=lambda k: al[k])
        svg.circle(X(ts[i]), Y(al[i]), 4, "mem-peak",
                   f"peak allocated {fmt.fmt_bytes(al[i])} at +{fmt.fmt_ns(ts[i] - t0)}; "
                   f"reserved then {fmt.fmt_bytes(rs[i])}")
    if cap:
        yc = Y(float(cap)) if on_scale else T + 1
        svg.line(L, yc, L + pw, yc, "mem-cap" if on_scale else "mem-cap off-scale",
                 f"device capacity {fmt.fmt_bytes(cap)}")
        lbl = (f"capacity {fmt.fmt_bytes(cap)}" if on_scale else
               f"capacity {fmt.fmt_bytes(cap)} ↑ off scale (peak reserved "
               f"{fmt.fmt_pct(100 * dmax / float(cap), 1)})")
        svg.text(L + pw - 4, yc + 13, lbl, "axis cap-lbl", "end")
    svg.line(L, T + ph, L + pw, T + ph, "axis-line")
    return {"rank": s.get("rank"), "device": s.get("device"), "chart": svg.to_dict(),
            "points": n}


# --- diagnostics and metadata -----------------------------------------------------------------

def _diagnostics(r: DiagnosisResult) -> dict[str, Any]:
    order = {"error": 0, "warning": 1, "info": 2}
    diags = sorted(r.diagnostics or [], key=lambda d: order.get(str(d.get("severity")), 3))
    items = [{"severity": str(d.get("severity") or "info"), "code": str(d.get("code") or ""),
              "message": _redact(d.get("message") or ""), "source": _redact(d.get("source") or ""),
              "count": fmt.fmt_num(d["count"], 0) if d.get("count") else "",
              "hint": _redact(d.get("hint") or "")} for d in diags]
    rules = r.rules or []
    not_eval = [{"rule": str(x.get("rule")), "reason": str(x.get("reason") or ""),
                 "hint": str(x.get("hint") or "")}
                for x in rules if x.get("status") == "not-evaluated"]
    other = [{"rule": str(x.get("rule")), "status": str(x.get("status") or ""),
              "reason": str(x.get("reason") or "")} for x in rules
             if x.get("status") != "not-evaluated"]
    cov = r.extra.get("coverage") or {}
    missing = sorted((str(k), str(v)) for k, v in (r.metrics.get("missing") or {}).items())
    return {"items": items, "not_evaluated": not_eval, "other_rules": other,
            "errors": [{"rule": str(e.get("rule")), "error": str(e.get("error"))}
                       for e in r.rule_errors or []],
            "coverage": fmt.fmt_pct(cov["coverage_pct"])
            if cov.get("coverage_pct") is not None else "",
            "unattributed": fmt.fmt_num(cov.get("unattributed_kernels"), 0)
            if cov.get("unattributed_kernels") else "",
            "missing": missing,
            "passed": sum(1 for x in rules if x.get("status") == "passed"),
            "not_applicable": sum(1 for x in rules if x.get("status") == "not-applicable")}


def _metadata(r: DiagnosisResult) -> dict[str, Any]:
    """Only allow-listed fields of ``trace`` (never free-form trace metadata)."""
    t = r.trace or {}
    flags = t.get("capture_flags") or {}
    flag_rows = [(k, bool(flags.get(k))) for k in CAPTURE_FLAGS]
    versions = [(str(k), str(v)) for k, v in sorted((t.get("versions") or {}).items())
                if isinstance(k, str) and _VERSION_KEY.match(k) and not isinstance(v, bool)
                and isinstance(v, (int, float, str)) and len(str(v)) <= 64
                and not TOKEN_RE.search(str(v))]
    ranks = [int(x) for x in t.get("ranks") or [] if isinstance(x, (int, float))]
    rank_txt = ", ".join(map(str, ranks[:32]))
    if len(ranks) > 32:
        rank_txt += f" … (+{len(ranks) - 32})"
    sources = [{"name": _redact(s.get("name", "")), "rank": s.get("rank"),
                "sha": str(s.get("sha256") or "")[:16]} for s in (t.get("sources") or [])[:64]]
    opts = [(str(k), str(v)) for k, v in sorted((r.extra.get("options") or {}).items())
            if isinstance(v, (int, float, str)) and not isinstance(v, bool) and len(str(v)) < 64]
    dev = r.extra.get("device") or {}
    rows = [("Ranks", rank_txt or "–"), ("World size", str(t.get("world_size") or "–")),
            ("Backend", str(t.get("backend") or "–")),
            ("Devices", ", ".join(map(str, t.get("devices") or [])) or "none recorded"),
            ("Roofline device", str(t.get("device") or dev.get("resolved") or "unknown")),
            ("Vendor", str(t.get("vendor") or "–")), ("Format", str(t.get("format") or "kineto")),
            ("Traced span", fmt.fmt_ns(t.get("span_ns")) if t.get("span_ns") else "–"),
            ("ProfilerStep markers", "yes" if t.get("has_step_markers") else "no")]
    return {"rows": rows, "flags": flag_rows, "versions": versions, "sources": sources,
            "more_sources": max(0, len(t.get("sources") or []) - 64), "options": opts}


# --- the compare report -----------------------------------------------------------------------
#
# ``render_compare_html(c)`` draws the dict of :func:`traceinsight.compare.compare` with the same
# machinery: a plain view (``build_compare_view``), ``templates/compare.html`` on ``base.html``,
# inline SVG from :class:`Svg`, the report's CSS/JS and CSP. Changes of time are signed (+ is
# slower, coloured as worse; − is faster).

#: contributors drawn one bar each in the waterfall; the rest are summed into one "others" bar
WATERFALL_TOP = 15
#: name lists (new / gone kernels and ops) longer than this start collapsed
LIST_OPEN = 12
#: css class per contributor kind and per row status (``tag`` / ``status`` cells)
_TAG_CLASS = {"layer": "k-layer", "op": "k-op", "class": "k-class", "concurrency": "k-concurrency",
              "comm": "k-comm", "memcpy": "k-memcpy", "memset": "k-memset", "idle": "k-idle",
              "new": "st-new", "gone": "st-gone", "same": "st-same"}
#: breakdown parts of a compare (``part`` -> label, css segment class)
COMPARE_PARTS = (("compute", "compute", "compute"), ("comm exposed", "comm exposed", "comm"),
                 ("memcpy exposed", "memcpy exposed", "memcpy"),
                 ("memset exposed", "memset exposed", "memset"), ("idle", "idle", "idle"))
COMPARE_NAV = [("step-time", "Step time"), ("breakdown", "GPU time"), ("waterfall", "Waterfall"),
               ("contributors", "Contributors"), ("layers", "Layers"), ("ops", "Operators"),
               ("classes", "Kernel classes"), ("kernels", "New / gone"), ("findings", "Findings"),
               ("diagnostics", "Data quality"), ("metadata", "Runs")]


def render_compare_html(c: dict[str, Any]) -> str:
    """The compare report (the dict of ``traceinsight.compare.compare``) as one HTML document."""
    from .markdown import render_compare_markdown

    view = build_compare_view(c)
    js = _asset("report.js")
    payload = {"schema": "traceinsight.compare-report", "version": 1, "tool": view["tool"],
               "markdown": render_compare_markdown(c)}
    csp = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
           "form-action 'none'; script-src 'sha256-" + _sha256_b64(js) + "'")
    return _env().get_template("compare.html").render(view=view, payload=payload, csp=csp)


def _tone(delta: Any, pct: Any = None, *, more_is_better: bool = False,
          ndigits: float = 1.0) -> str:
    """``bad`` / ``good`` / "" for a change (a change under ``ndigits`` % is no change)."""
    if delta is None or not float(delta):
        return ""
    if pct is not None and abs(float(pct)) < ndigits:
        return ""
    worse = float(delta) > 0
    if more_is_better:
        worse = not worse
    return "bad" if worse else "good"


def build_compare_view(c: dict[str, Any]) -> dict[str, Any]:
    """Everything the compare template shows, as plain data."""
    c = dict(c or {})
    for key in ("contributors", "breakdown", "layers", "ops", "kernel_classes", "new_kernels",
                "gone_kernels", "new_ops", "gone_ops", "diagnostics"):
        c[key] = list(c.get(key) or [])
    c.setdefault("before", {})
    c.setdefault("after", {})
    c.setdefault("step_time", {})
    tool = c.get("tool") or {}
    verdict, word = _compare_verdict(c)
    sides = [_compare_side(c.get(k) or {}, k) for k in ("before", "after")]
    return {
        "title": f"{sides[0]['label']} → {sides[1]['label']}",
        "tool": {"name": str(tool.get("name") or "traceinsight"),
                 "version": str(tool.get("version") or "?"),
                 "result_version": c.get("version")},
        "headline": str(c.get("headline") or ""),
        "verdict": verdict, "word": word,
        "sides": sides,
        "explained_by": str(c.get("explained_by") or "?"),
        "bignums": _compare_bignums(c),
        "nav": COMPARE_NAV,
        "step_time": _compare_steps(c),
        "breakdown": _compare_breakdown(c),
        "waterfall": _waterfall(c),
        "contributors": _contributors(c),
        "layers": _aligned(c, "layers", "tbl-cmp-layers", "module",
                           "No nn.Module hierarchy on either side: record with with_stack=True "
                           "(and with_modules=True) to align layers by module path."),
        "ops": _aligned(c, "ops", "tbl-cmp-ops", "kernel",
                        "No operators with device time on either side."),
        "classes": _aligned(c, "kernel_classes", "tbl-cmp-classes", "class",
                            "No GPU kernels on either side: nothing to split by kernel class."),
        "kernels": _new_gone(c),
        "findings": _compare_findings(c),
        "diagnostics": [{"severity": str(d.get("severity") or "info"),
                         "message": _redact(d.get("message") or "")}
                        for d in sorted(c["diagnostics"], key=lambda d: {"error": 0, "warning": 1}
                                        .get(str(d.get("severity")), 2))],
        "metadata": _compare_metadata(c, sides),
    }


def _ref(st: dict[str, Any]) -> str:
    """The step-time statistic a compare leads with: p50, else the mean."""
    return "p50" if st.get("p50_delta_pct") is not None else "mean"


def _compare_verdict(c: dict[str, Any]) -> tuple[str, str]:
    st = c["step_time"]
    pct = st.get("p50_delta_pct") if _ref(st) == "p50" else st.get("mean_delta_pct")
    if pct is None:
        return "info", "NOT COMPARABLE"
    if pct >= 5:
        return "high", "SLOWER"
    if pct >= 1:
        return "medium", "SLOWER"
    if pct <= -1:
        return "ok", "FASTER"
    return "info", "UNCHANGED"


def _compare_side(s: dict[str, Any], tag: str) -> dict[str, Any]:
    devs = [str(d) for d in s.get("devices") or []]
    n = s.get("ranks") or 0
    ws = s.get("world_size")
    ranks = f"{n} rank{'s' if n != 1 else ''}" + (f" of {ws}" if ws and ws != n else "")
    return {"tag": tag, "label": _redact(s.get("label") or tag),
            "devices": ", ".join(dict.fromkeys(devs)) or "no GPU recorded",
            "device": str(s.get("device") or ""), "vendor": str(s.get("vendor") or ""),
            "ranks": ranks, "headline": str(s.get("headline") or ""),
            "sources": [_redact(x) for x in (s.get("sources") or [])[:64]],
            "more_sources": max(0, len(s.get("sources") or []) - 64)}


def _compare_bignums(c: dict[str, Any]) -> list[dict[str, str]]:
    st = c["step_time"]
    ref = _ref(st)
    a, b = (st.get("before") or {}).get(ref), (st.get("after") or {}).get(ref)
    out = []
    if a is not None and b is not None:
        d = st.get(f"{ref}_delta_ns")
        pct = st.get(f"{ref}_delta_pct")
        out.append({"label": f"Step time {ref}", "before": fmt.fmt_ns(a), "after": fmt.fmt_ns(b),
                    "delta": signed_ns(d), "pct": signed_pct(pct), "tone": _tone(d, pct),
                    "sub": ""})
    t = c.get("throughput")
    if t:
        out.append({"label": "Throughput (steps/s)", "before": f"{t['before_steps_per_s']:.3g}",
                    "after": f"{t['after_steps_per_s']:.3g}", "delta": f"×{t['ratio']:.3f}",
                    "pct": signed_pct(t.get("delta_pct")),
                    "tone": _tone(t.get("delta_pct"), t.get("delta_pct"), more_is_better=True),
                    "sub": ""})
    a0, b0 = c.get("before_step_ns"), c.get("after_step_ns")
    if a0 and b0:
        d = c.get("total_delta_ns")
        pct = 100.0 * d / a0 if d is not None else None
        n = sum(1 for x in c["contributors"] if x.get("delta_ns"))
        out.append({"label": "Mean step (explained)", "before": fmt.fmt_ns(a0),
                    "after": fmt.fmt_ns(b0), "delta": signed_ns(d), "pct": signed_pct(pct),
                    "tone": _tone(d, pct),
                    "sub": f"{n} contributor{'s' if n != 1 else ''} changed"})
    return out


def _compare_steps(c: dict[str, Any]) -> dict[str, Any]:
    st = c["step_time"]
    sa, sb = st.get("before") or {}, st.get("after") or {}
    if all(sa.get(q) is None and sb.get(q) is None for q in ("p50", "mean")):
        return {"empty": "Neither side has GPU step windows: there are no step times to compare "
                         "(see Data quality)."}
    rows = []
    for q, label in (("p50", "step time p50"), ("p90", "p90"), ("p99", "p99"), ("max", "max"),
                     ("mean", "mean")):
        va, vb = sa.get(q), sb.get(q)
        d = None if va is None or vb is None else vb - va
        pct = 100.0 * d / va if d is not None and va else None
        rows.append({"label": label, "before": fmt.fmt_ns(va), "after": fmt.fmt_ns(vb),
                     "delta": signed_ns(d), "pct": signed_pct(pct),
                     "tone": _tone(d, pct, ndigits=0.05), "lead": q == _ref(st)})
    na, nb = sa.get("steps"), sb.get("steps")
    rows.append({"label": "steps measured", "before": fmt.fmt_num(na, 0) if na else "–",
                 "after": fmt.fmt_num(nb, 0) if nb else "–", "delta": "", "pct": "", "tone": "",
                 "lead": False})
    ca, cb = sa.get("cv_pct"), sb.get("cv_pct")
    if ca is not None or cb is not None:
        rows.append({"label": "step-to-step variation (CV)", "before": fmt.fmt_pct(ca),
                     "after": fmt.fmt_pct(cb), "delta": "", "pct": "", "tone": "",
                     "lead": False})
    t = c.get("throughput")
    thr = None
    if t:
        thr = {"label": "throughput (steps/s)", "before": f"{t['before_steps_per_s']:.4g}",
               "after": f"{t['after_steps_per_s']:.4g}", "delta": f"×{t['ratio']:.3f}",
               "pct": signed_pct(t.get("delta_pct")),
               "tone": _tone(t.get("delta_pct"), t.get("delta_pct"), more_is_better=True,
                             ndigits=0.05)}
    note = ""
    if (na or 0) <= 1 or (nb or 0) <= 1:
        note = ("One ProfilerStep (or none) on a side: p50, p90, p99, max and mean are the same "
                "window there.")
    return {"empty": "", "rows": rows, "throughput": thr, "ref": _ref(st), "note": note,
            "missing": "" if sa.get("mean") is not None and sb.get("mean") is not None else
            "One side has no GPU step windows: its step times are missing (see Data quality)."}


def _compare_breakdown(c: dict[str, Any]) -> dict[str, Any]:
    rows = {str(r.get("part")): r for r in c["breakdown"]}
    have = [rows[p] for p, _, _ in COMPARE_PARTS if p in rows]
    if not have or any(r.get("before_ns") is None or r.get("after_ns") is None for r in have):
        return {"empty": "One side has no GPU step windows: there is no per-step breakdown to "
                         "compare."}
    tot = {"before": sum(float(r["before_ns"] or 0) for r in have),
           "after": sum(float(r["after_ns"] or 0) for r in have)}
    vmax = max(tot.values()) or 1.0
    W, L, R, T = 960, 150, 190, 26
    bar_h, gap = 34, 16
    pw = W - L - R
    H = T + 2 * bar_h + gap + 30
    svg = Svg(W, H, "Mean step per side, stacked by what the GPU did: before above, after below")

    def X(v: float) -> float:
        return L + pw * v / vmax

    for v in _ticks(vmax, 6):
        svg.line(X(v), T - 6, X(v), T + 2 * bar_h + gap + 4, "grid")
        svg.text(X(v), T - 10, fmt.fmt_ns(v) if v else "0", "axis", "middle")
    sides = {"before": c.get("before") or {}, "after": c.get("after") or {}}
    for i, side in enumerate(("before", "after")):
        y = T + i * (bar_h + gap)
        total = tot[side] or 1.0
        dev = ", ".join(dict.fromkeys(str(d) for d in sides[side].get("devices") or []))
        svg.text(L - 10, y + bar_h / 2, side, "axis side-lbl", "end")
        svg.text(L - 10, y + bar_h / 2 + 14, fmt.shorten(dev or "no GPU recorded", 24), "axis",
                 "end")
        x = float(L)
        for part, lab, cls in COMPARE_PARTS:
            v = float((rows.get(part) or {}).get(f"{side}_ns") or 0)
            if v <= 0:
                continue
            ww = pw * v / vmax
            svg.rect(x, y, ww, bar_h, f"seg-{cls}",
                     f"{side}: {lab} {fmt.fmt_ns(v)} per step ({fmt.fmt_pct(100 * v / total)})")
            lbl = fmt.fmt_ns(v)
            if ww > 16 + 6.5 * len(lbl):
                svg.text(x + 6, y + bar_h / 2 + 4, lbl, f"seg-lbl seg-lbl-{cls}")
            x += ww
        svg.text(X(tot[side]) + 8, y + bar_h / 2 + 4, fmt.fmt_ns(tot[side]), "axis bd-total")
    d = tot["after"] - tot["before"]
    pct = 100.0 * d / tot["before"] if tot["before"] else None
    yb = T + bar_h + gap + bar_h / 2 + 4
    svg.text(W - 4, yb, f"{signed_ns(d)} ({signed_pct(pct)})",
             f"axis bd-delta tone-{_tone(d, pct) or 'none'}", "end")
    table_rows = []
    ta, tb = tot["before"], tot["after"]
    for part, lab, cls in COMPARE_PARTS:
        r = rows.get(part)
        if not r:
            continue
        va, vb = float(r["before_ns"] or 0), float(r["after_ns"] or 0)
        dd = r.get("delta_ns")
        table_rows.append({"part": lab, "cls": cls, "before": fmt.fmt_ns(va),
                           "after": fmt.fmt_ns(vb),
                           "before_pct": fmt.fmt_pct(100 * va / ta) if ta else "–",
                           "after_pct": fmt.fmt_pct(100 * vb / tb) if tb else "–",
                           "delta": signed_ns(dd),
                           "pct": signed_pct(100.0 * dd / va) if dd is not None and va else
                           ("new" if dd else "–"),
                           "tone": _tone(dd, None)})
    return {"empty": "", "chart": svg.to_dict(), "rows": table_rows,
            "total": {"before": fmt.fmt_ns(tot["before"]), "after": fmt.fmt_ns(tot["after"]),
                      "delta": signed_ns(d), "pct": signed_pct(pct), "tone": _tone(d, pct)},
            "legend": [(lab, cls) for part, lab, cls in COMPARE_PARTS
                       if part in ("compute", "idle") or any(
                           (rows.get(part) or {}).get(k) for k in ("before_ns", "after_ns"))]}


def _ticks_between(lo: float, hi: float, n: int = 6) -> list[float]:
    step = _nice_step(hi - lo, n)
    v = math.ceil(lo / step - 1e-9) * step
    out = []
    while v <= hi * 1.0000001 + 1e-9:
        out.append(v)
        v += step
    return out


def waterfall_rows(c: dict[str, Any], top: int = WATERFALL_TOP) -> list[dict[str, Any]]:
    """The waterfall's bars in order: ``start`` (before step), one ``contrib`` per top changed
    contributor (by |delta|), ``others`` (the sum of the rest, when more than one is left), ``end``
    (after step). Each has ``from``/``to`` levels; the deltas add up to ``total_delta_ns``."""
    a0 = int(c.get("before_step_ns") or 0)
    b0 = int(c.get("after_step_ns") or 0)
    changed = [x for x in c.get("contributors") or [] if x.get("delta_ns")]
    changed.sort(key=lambda x: (-abs(x["delta_ns"]), str(x.get("kind")), str(x.get("name"))))
    shown, rest = changed[:top], changed[top:]
    if len(rest) == 1:
        shown, rest = changed, []
    rows: list[dict[str, Any]] = [{"role": "start", "kind": "", "name": "before: mean step",
                                   "from": 0, "to": a0, "delta": a0}]
    level = a0
    for x in shown:
        d = int(x["delta_ns"])
        rows.append({"role": "contrib", "kind": str(x.get("kind") or ""),
                     "name": str(x.get("name") or ""), "from": level, "to": level + d,
                     "delta": d, "before": x.get("before_ns"), "after": x.get("after_ns")})
        level += d
    if rest:
        d = sum(int(x["delta_ns"]) for x in rest)
        rows.append({"role": "others", "kind": "", "name": f"{len(rest)} others",
                     "from": level, "to": level + d, "delta": d, "count": len(rest),
                     "before": sum(int(x.get("before_ns") or 0) for x in rest),
                     "after": sum(int(x.get("after_ns") or 0) for x in rest)})
        level += d
    rows.append({"role": "end", "kind": "", "name": "after: mean step", "from": 0, "to": b0,
                 "delta": b0})
    return rows


def _waterfall(c: dict[str, Any]) -> dict[str, Any]:
    a0 = int(c.get("before_step_ns") or 0)
    b0 = int(c.get("after_step_ns") or 0)
    total = int(c.get("total_delta_ns") or 0)
    if not c["contributors"] or not a0 or not b0:
        return {"empty": "One side has no GPU step windows: there is no step time to decompose "
                         "into contributors."}
    if not any(x.get("delta_ns") for x in c["contributors"]):
        return {"empty": f"Nothing to explain: every contributor takes the same time per step on "
                         f"both sides (mean step {fmt.fmt_ns(a0)})."}
    rows = waterfall_rows(c)
    levels = [a0, b0] + [r["to"] for r in rows if r["role"] in ("contrib", "others")]
    hi, lo = float(max(levels)), float(min(levels))
    span = (hi - lo) or max(hi * 0.01, 1.0)
    x0 = lo - 0.12 * span
    zoom = x0 > 0.25 * hi
    if zoom:
        x0 = math.floor(x0 / _nice_step(span * 1.3, 6)) * _nice_step(span * 1.3, 6)
        x1 = hi + 0.06 * span
    else:
        x0, x1 = 0.0, hi * 1.03
    W, L, R, T, K = 960, 380, 96, 30, 84
    row_h, gap = 20, 8
    pw = W - L - R
    H = T + len(rows) * (row_h + gap) + 6
    svg = Svg(W, H, f"Waterfall from the before step ({fmt.fmt_ns(a0)}) to the after step "
                    f"({fmt.fmt_ns(b0)}): one bar per contributor's change per step")

    def X(v: float) -> float:
        return L + pw * (min(max(v, x0), x1) - x0) / (x1 - x0)

    for v in _ticks_between(x0, x1, 6):
        svg.line(X(v), T - 6, X(v), H - 4, "grid")
        svg.text(X(v), T - 10, fmt.fmt_ns(v) if v else "0", "axis", "middle")
    name_chars = int((L - K - 14) / 6.3)
    for i, r in enumerate(rows):
        y = T + i * (row_h + gap)
        role = r["role"]
        ty = y + row_h / 2 + 4
        if role in ("start", "end"):
            cls = "wf-total"
            val = fmt.fmt_ns(r["to"])
            title = (f"{r['name']}: {fmt.fmt_ns(r['to'])} per step (rank and step window mean)"
                     + (f"; the axis starts at {fmt.fmt_ns(x0)}" if zoom else ""))
            svg.text(L - 8, ty, r["name"], "wf-name wf-total-lbl", "end")
        else:
            up = r["delta"] > 0
            cls = ("wf-others-" if role == "others" else "wf-") + ("up" if up else "down")
            val = signed_ns(r["delta"])
            share = f"{100.0 * r['delta'] / total:.0f}% of the change" if total else ""
            if role == "others":
                title = (f"{r['count']} other contributors, summed: {signed_ns(r['delta'])} per "
                         f"step ({fmt.fmt_ns(r['before'])} → {fmt.fmt_ns(r['after'])})"
                         + (f"; {share}" if share else ""))
                svg.text(L - 8, ty, f"[{r['name']}]", "wf-name wf-others-lbl", "end")
            else:
                title = (f"{r['kind']}: {r['name']}\n{fmt.fmt_ns(r['before'])} → "
                         f"{fmt.fmt_ns(r['after'])} per step: {signed_ns(r['delta'])}"
                         + (f" ({share})" if share else "")
                         + f"\nrunning: {fmt.fmt_ns(r['from'])} → {fmt.fmt_ns(r['to'])}")
                svg.text(4, ty, r["kind"], "axis wf-kind")
                short = (_tail_path(r["name"], name_chars) if r["kind"] == "layer"
                         else fmt.shorten(r["name"], name_chars))
                svg.text(L - 8, ty, short, "wf-name", "end")
        xa, xb = X(min(r["from"], r["to"])), X(max(r["from"], r["to"]))
        if role in ("start", "end"):
            xa = X(x0)
        w = max(xb - xa, 1.5)
        if role not in ("start", "end") and xb - xa < 1.5:
            xa -= (1.5 - (xb - xa)) / 2
        svg.rect(xa, y, w, row_h, f"wf-bar {cls}", title, data_role=role,
                 data_delta=str(r["delta"]))
        if zoom and role in ("start", "end"):
            zig = f"l-5 {_num(row_h + 2)}"
            svg.path(f"M{_num(L + 9)} {_num(y - 1)}{zig}M{_num(L + 14)} {_num(y - 1)}{zig}",
                     "wf-break")
        svg.text(W - 4, ty, val, f"wf-val {cls}-val", "end")
        if i + 1 < len(rows):
            xc = X(r["to"])
            svg.line(xc, y + row_h, xc, y + row_h + gap, "wf-conn")
    n_changed = sum(1 for x in c["contributors"] if x.get("delta_ns"))
    n_bars = sum(1 for r in rows if r["role"] == "contrib")
    others = next((r for r in rows if r["role"] == "others"), None)
    return {"empty": "", "chart": svg.to_dict(), "zoom": fmt.fmt_ns(x0) if zoom else "",
            "before": fmt.fmt_ns(a0), "after": fmt.fmt_ns(b0), "delta": signed_ns(total),
            "pct": signed_pct(100.0 * total / a0), "tone": _tone(total, 100.0 * total / a0),
            "bars": n_bars, "changed": n_changed, "others": others["count"] if others else 0,
            "others_delta": signed_ns(others["delta"]) if others else "",
            "explained_by": str(c.get("explained_by") or "?")}


def _tail_path(name: str, width: int) -> str:
    """A module path cut from the left (``…/Block_3/Attention_3``): the tail tells layers apart."""
    name = " ".join(str(name).split())
    if len(name) <= width:
        return name
    parts = name.split("/")
    out = parts[-1]
    for p in reversed(parts[:-1]):
        if len(out) + len(p) + 3 > width:
            break
        out = p + "/" + out
    return "…/" + out if len(out) + 2 <= width else fmt.shorten(parts[-1], width)


def _contributors(c: dict[str, Any]) -> dict[str, Any]:
    rows = c["contributors"]
    if not rows:
        return {"empty": "No contributors: one side has no GPU step windows."}
    total = c.get("total_delta_ns") or 0
    data = [[x.get("kind"), x.get("name"), x.get("before_ns"), x.get("after_ns"), x.get("delta_ns"),
             100.0 * x["delta_ns"] / x["before_ns"] if x.get("before_ns") else None,
             100.0 * x["delta_ns"] / total if total else None] for x in rows]
    t = table("tbl-contributors", [("kind", "tag"), ("name", "kernel"), ("before / step", "ns"),
                                   ("after / step", "ns"), ("delta", "dns"), ("delta %", "dpct"),
                                   {"name": "share of change", "format": "spct",
                                    "title": "delta / total change (negative: it offsets it)"}],
              data, filterable=True)
    return {"empty": "", "table": t, "count": len(rows),
            "changed": sum(1 for x in rows if x.get("delta_ns")),
            "total": signed_ns(total), "explained_by": str(c.get("explained_by") or "?")}


def _aligned(c: dict[str, Any], key: str, tid: str, name_fmt: str, why: str) -> dict[str, Any]:
    rows = c.get(key) or []
    if not rows:
        return {"empty": why}
    data = [[x.get("name"), x.get("status"), x.get("before_ns"), x.get("after_ns"),
             x.get("delta_ns"), x.get("delta_pct")] for x in rows]
    label = {"module": "module path", "kernel": "operator", "class": "kernel class"}[name_fmt]
    t = table(tid, [(label, name_fmt), ("status", "status"), ("before / step", "ns"),
                    ("after / step", "ns"), ("delta", "dns"), ("delta %", "dpct")], data,
              filterable=True)
    if name_fmt == "module":
        for cells in t["rows"]:
            cells[0]["depth"] = 0
    return {"empty": "", "table": t, "count": len(rows),
            "new": sum(1 for x in rows if x.get("status") == "new"),
            "gone": sum(1 for x in rows if x.get("status") == "gone")}


def _new_gone(c: dict[str, Any]) -> dict[str, Any]:
    lists = []
    for key, label, kernel in (("new_kernels", "New kernels", True),
                               ("gone_kernels", "Gone kernels", True),
                               ("new_ops", "New operators", False),
                               ("gone_ops", "Gone operators", False)):
        names = [str(x) for x in c.get(key) or []]
        items = []
        for n in names:
            short = fmt.short_kernel_name(n) if kernel else " ".join(n.split())
            items.append({"t": short, "title": n if short != n else ""})
        lists.append({"id": key.replace("_", "-"), "label": label, "items": items,
                      "open": len(items) <= LIST_OPEN,
                      "capped": len(items) >= 200,
                      "status": "new" if key.startswith("new") else "gone"})
    empty = "" if any(x["items"] for x in lists) else (
        "The same kernels and operators ran on both sides: none is new or gone.")
    return {"empty": empty, "lists": lists}


def _compare_findings(c: dict[str, Any]) -> dict[str, Any]:
    f = c.get("findings") or {}

    def sev(s: Any) -> str:
        return str(s) if s in SEV_RANK else "info"

    def brief(x: dict[str, Any]) -> dict[str, Any]:
        return {"rule": str(x.get("rule")), "severity": sev(x.get("severity")),
                "title": str(x.get("title") or ""), "message": str(x.get("message") or ""),
                "impact": fmt.fmt_pct(x["impact_pct"]) if x.get("impact_pct") is not None else ""}

    appeared = [brief(x) for x in f.get("appeared") or []]
    gone = [brief(x) for x in f.get("disappeared") or []]
    changed = [{"rule": str(x.get("rule")), "title": str(x.get("title") or ""),
                "before": sev(x.get("before")), "after": sev(x.get("after")),
                "direction": "worse" if x.get("direction") == "worse" else "better",
                "impact_before": fmt.fmt_pct(x.get("impact_before_pct")),
                "impact_after": fmt.fmt_pct(x.get("impact_after_pct"))}
               for x in f.get("changed") or []]
    same = [{"rule": str(x.get("rule")), "severity": sev(x.get("severity")),
             "impact_before": fmt.fmt_pct(x.get("impact_before_pct")),
             "impact_after": fmt.fmt_pct(x.get("impact_after_pct"))}
            for x in f.get("unchanged") or []]
    empty = ""
    if not (appeared or gone or changed or same):
        empty = "No rule fired on either side."
    return {"empty": empty, "appeared": appeared, "disappeared": gone, "changed": changed,
            "unchanged": same,
            "summary": (f"{len(appeared)} appeared, {len(gone)} disappeared, {len(changed)} "
                        f"changed severity, {len(same)} unchanged")}


def _compare_metadata(c: dict[str, Any], sides: list[dict[str, Any]]) -> dict[str, Any]:
    st = c["step_time"]
    out = []
    for s in sides:
        q = st.get(s["tag"]) or {}
        rows = [("Label", s["label"]), ("Devices", s["devices"]),
                ("Roofline device", s["device"] or "unknown"), ("Vendor", s["vendor"] or "–"),
                ("Ranks", s["ranks"]),
                ("Steps", fmt.fmt_num(q.get("steps"), 0) if q.get("steps") else "–"),
                ("Diagnosis", s["headline"] or "–")]
        out.append({"tag": s["tag"], "rows": rows, "sources": s["sources"],
                    "more_sources": s["more_sources"]})
    return {"sides": out, "explained_by": str(c.get("explained_by") or "?"),
            "schema": f"{c.get('schema') or 'traceinsight.compare'} v{c.get('version') or '?'}"}

