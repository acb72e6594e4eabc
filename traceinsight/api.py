"""The Python API, for notebooks and scripts: a thin layer over the library.

``traceinsight.open(path)`` reads a trace (a file, the per-rank files of a run, a folder of
them or a store; through the same cache as the CLI) into a :class:`Trace`, whose tables are
pandas DataFrames loaded on first use. ``Trace.diagnose()`` runs the same analysis as
``traceinsight diagnose`` and returns a :class:`Diagnosis`; ``traceinsight.compare(a, b)``
explains the change of step time between two runs (:class:`Compare`). Diagnosis and Compare
show their summary inline in Jupyter (``_repr_html_``: a self-contained HTML fragment without
scripts, every trace-provided name escaped and its control characters made visible)::

    import traceinsight as ti
    trace = ti.open("trace.json.gz")
    trace.kernels.groupby("name")["dur_ns"].sum().nlargest(5)
    d = trace.diagnose()
    d.headline, [f.rule for f in d.findings]
"""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from traceinsight.util import fmt
from traceinsight.util.safetext import for_terminal

if TYPE_CHECKING:  # pandas and the analysis load on first use: `import traceinsight` stays cheap
    import pandas as pd

    from traceinsight.result import DiagnosisResult, Finding
    from traceinsight.result import Diagnostic as ResultDiagnostic
    from traceinsight.store.core import TraceStore

__all__ = ["Compare", "Diagnosis", "Trace", "compare", "open"]

#: how many findings the inline summary lists (the rest are counted)
MAX_FINDINGS = 12

PathLike = str | Path


class Trace:
    """One run's trace store. Every table of the store is a pandas DataFrame, read on first
    access and kept: :attr:`kernels`, :attr:`gpu_activities`, :attr:`ops`, :attr:`runtime`,
    :attr:`steps`, :attr:`ranges`, :attr:`memory`, :attr:`memory_timeline`, :attr:`collectives`,
    :attr:`memcpy`, or any store table by
    name with :meth:`table` (:attr:`tables` lists them). Times are int64 nanoseconds
    (``start_ns``, ``dur_ns``), as the store keeps them."""

    def __init__(self, store: TraceStore, paths: Sequence[PathLike] = ()) -> None:
        self.store = store
        self.paths = [Path(p) for p in paths]
        self._frames: dict[str, pd.DataFrame] = {}

    def __repr__(self) -> str:
        counts = self.row_counts
        return (
            f"<traceinsight.Trace {self.name!r}: {len(self.store.ranks)} rank(s), "
            f"{counts.get('gpu_activities', 0)} GPU activities, {counts.get('cpu_ops', 0)} CPU ops>"
        )

    def _repr_html_(self) -> str:
        """The input, its ranks and devices, and each table's row count (nothing is read)."""
        devices = sorted(
            {str(d.get("name") or "") for r in self.ranks for d in r.get("devices") or []} - {""}
        )
        formats = sorted({str(r.get("format") or "") for r in self.ranks} - {""})
        about = ", ".join([f"{len(self.ranks)} rank(s)", *formats, *devices])
        rows = [[_t(k), _t(v)] for k, v in self.row_counts.items() if v]
        title = f"traceinsight trace: {self.name}"
        parts = [
            f'<div class="traceinsight-trace" style="{_STYLE}">',
            f'<div style="font-weight:600;font-size:15px">{_t(title)}</div>',
            f"<p>{_t(about)}</p>",
            _table(["table", "rows"], rows),
            "</div>",
        ]
        return "".join(parts)

    @property
    def name(self) -> str:
        """The input's name (the first path given, else the store's folder)."""
        return self.paths[0].name if self.paths else Path(self.store.path or "store").name

    @property
    def tables(self) -> list[str]:
        """The names of the store's tables (:meth:`table`)."""
        from traceinsight.store.schema import TABLES

        return list(TABLES)

    @property
    def row_counts(self) -> dict[str, int]:
        """Rows per store table, without reading them."""
        return dict(self.store.row_counts)

    @property
    def ranks(self) -> list[dict[str, Any]]:
        """One entry per rank: its number, source file, device (the store's meta)."""
        return list(self.store.ranks)

    def table(self, name: str) -> pd.DataFrame:
        """The store table ``name`` as a DataFrame (read once, then kept)."""
        if name not in self._frames:
            if name not in self.tables:
                raise KeyError(f"no table {name!r} in a store: one of {', '.join(self.tables)}")
            self._frames[name] = self.store.df(name)
        return self._frames[name]

    def _where(self, name: str, column: str, values: Sequence[str] | None = None) -> pd.DataFrame:
        df = self.table(name)
        keep = df[column].notna() if values is None else df[column].isin(list(values))
        return df[keep].reset_index(drop=True)

    @property
    def gpu_activities(self) -> pd.DataFrame:
        """Everything on the GPU timeline: kernels, memory copies, memsets, syncs (``kind``)."""
        return self.table("gpu_activities")

    @property
    def kernels(self) -> pd.DataFrame:
        """GPU kernels: the ``gpu_activities`` rows of kind ``kernel`` (grid, block,
        registers, occupancy where the trace records them)."""
        return self._where("gpu_activities", "kind", ["kernel"])

    @property
    def memcpy(self) -> pd.DataFrame:
        """Memory copies and memsets on the GPU (``bytes``, ``copy_kind``)."""
        return self._where("gpu_activities", "kind", ["memcpy", "memset"])

    @property
    def collectives(self) -> pd.DataFrame:
        """Communication kernels: the GPU activities that carry a collective name (NCCL /
        RCCL), with their process group (``pg_name``) and sequence number (``seq``)."""
        return self._where("gpu_activities", "collective")

    @property
    def ops(self) -> pd.DataFrame:
        """CPU operators (``aten::*`` and the like) with their shapes and call stacks."""
        return self.table("cpu_ops")

    @property
    def runtime(self) -> pd.DataFrame:
        """CUDA / HIP runtime and driver API calls (launches, synchronisations, copies)."""
        return self.table("runtime_calls")

    @property
    def ranges(self) -> pd.DataFrame:
        """Named ranges: profiler steps, annotations, NVTX ranges (``kind``)."""
        return self.table("ranges")

    @property
    def steps(self) -> pd.DataFrame:
        """The profiler steps (``ProfilerStep#N`` on the host; ``step`` is N): the ``ranges``
        rows of kind ``step``. Empty for a trace without step markers."""
        return self._where("ranges", "kind", ["step"])

    @property
    def memory(self) -> pd.DataFrame:
        """Allocator events (``[memory]``: allocations and frees, bytes, totals)."""
        return self.table("memory_events")

    @property
    def memory_timeline(self) -> pd.DataFrame:
        """Memory by category over time (an ``export_memory_timeline`` export): each row adds
        or removes bytes of one category. A memory snapshot's segments, blocks and allocator
        actions are the tables ``memory_segments``, ``memory_blocks``, ``memory_actions``."""
        return self.table("memory_categories")

    def diagnose(
        self,
        *,
        device: str | None = None,
        peak_tflops: float | None = None,
        peak_bw: float | None = None,
        params: float | None = None,
        tokens_per_step: float | None = None,
        mode: str | None = None,
        rules_dirs: Sequence[PathLike] = (),
        overrides: Sequence[str] = (),
        recompute: bool = False,
        max_memory_mb: float | None = None,
        steps: str | None = None,
    ) -> Diagnosis:
        """The diagnosis, as ``traceinsight diagnose`` computes it: the keyword arguments are
        its options (``--device``, ``--peak-tflops``, ``--peak-bw`` in GB/s, ``--params``,
        ``--tokens-per-step``, ``--mode``, ``--rules``, ``--set`` as ``overrides``,
        ``--recompute``, ``--max-memory``, ``--steps`` as ``steps``, e.g. ``"last:100"`` or
        ``"20:80"``). The result is cached in the store like the CLI's."""
        from traceinsight.diagnose import diagnose as run_diagnose
        from traceinsight.options import RooflineOptions

        opts = RooflineOptions(
            device=device,
            peak_tflops=peak_tflops,
            peak_bw_gbs=peak_bw,
            params=params,
            tokens_per_step=tokens_per_step,
            mode=mode,
        )
        result = run_diagnose(
            self.store,
            options=opts,
            rules_dirs=list(rules_dirs),
            overrides=list(overrides),
            command=["traceinsight", "diagnose", *(str(p) for p in self.paths)],
            cache=not recompute,
            max_memory_mb=max_memory_mb,
            steps=steps,
        )
        from traceinsight.ingest.inputs import skipped_entries

        extra = skipped_entries(self.paths, self.store)  # as the CLI: a note per stray entry
        if extra:
            notes = cast("list[ResultDiagnostic]", extra)
            result = dataclasses.replace(result, diagnostics=[*result.diagnostics, *notes])
        return Diagnosis(result, name=self.name)


def open(
    path: PathLike | Sequence[PathLike],
    *,
    memory_snapshots: Sequence[PathLike] = (),
    salvage: bool = False,
    use_cache: bool = True,
    strict: bool = False,
) -> Trace:
    """Open a trace file, the per-rank files of one run (a list), a folder of them or a
    store, as :class:`Trace`. Traces are ingested through the cache the CLI uses (a second
    open of an unchanged trace reads parquet); ``memory_snapshots`` joins CUDA memory
    snapshots of the same run, as ``--memory-snapshot`` does."""
    from traceinsight.ingest import load

    paths = [path] if isinstance(path, (str, Path)) else list(path)
    store = load(
        paths,
        salvage=salvage,
        quiet=True,
        use_cache=use_cache,
        strict=strict,
        memory=memory_snapshots,
    )
    return Trace(store, paths)


class Diagnosis:
    """A diagnosis (:class:`~traceinsight.result.DiagnosisResult` as :attr:`result`): the
    headline, the findings ordered by impact, the metrics; :meth:`to_json` is the JSON of
    ``diagnose --json`` (docs/RESULT.md), :meth:`to_html` / :meth:`to_markdown` the reports."""

    def __init__(self, result: DiagnosisResult, name: str = "") -> None:
        self.result = result
        self.name = name

    def __repr__(self) -> str:
        return f"<traceinsight.Diagnosis {self.name!r}: {self.headline}>"

    @property
    def headline(self) -> str:
        return self.result.headline

    @property
    def findings(self) -> list[Finding]:
        return list(self.result.findings)

    @property
    def metrics(self) -> dict[str, float | None]:
        """Every metric's value by name (units in ``result.metrics['units']``)."""
        return dict(self.result.metrics.get("values", {}))

    @property
    def step_stats(self) -> dict[str, float | None]:
        """Step time over the representative steps: p50, p90, p99, max, mean (ns), the step
        counts and the coefficient of variation, as compare uses them."""
        from traceinsight.compare.explain import step_stats

        return step_stats(self.result)

    def to_dict(self) -> dict[str, Any]:
        return self.result.to_dict()

    def to_json(self, indent: int | None = 2) -> str:
        return self.result.to_json(indent=indent)

    def to_html(self) -> str:
        """The full self-contained HTML report (``diagnose --html``)."""
        from traceinsight.render.html import render_html

        return render_html(self.result)

    def to_markdown(self) -> str:
        from traceinsight.render.markdown import render_markdown

        return render_markdown(self.result)

    def _repr_html_(self) -> str:
        return diagnosis_html(self.result, self.name)


class Compare:
    """Two runs compared (:attr:`data` is the JSON of ``compare --json``): the headline, the
    step-time change and its largest contributors."""

    def __init__(self, data: dict[str, Any], before: Diagnosis, after: Diagnosis) -> None:
        self.data = data
        self.before = before
        self.after = after

    def __repr__(self) -> str:
        return f"<traceinsight.Compare: {self.headline}>"

    @property
    def headline(self) -> str:
        return str(self.data.get("headline", ""))

    @property
    def contributors(self) -> list[dict[str, Any]]:
        return list(self.data.get("contributors", []))

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.data, indent=indent, default=str)

    def to_html(self) -> str:
        """The full self-contained compare report (``compare --html``)."""
        from traceinsight.render.html import render_compare_html

        return render_compare_html(self.data)

    def _repr_html_(self) -> str:
        return compare_html(self.data)


def _diagnosis_of(x: PathLike | Trace | Diagnosis) -> Diagnosis:
    if isinstance(x, Diagnosis):
        return x
    if isinstance(x, Trace):
        return x.diagnose()
    p = Path(x)
    if p.is_file() and p.suffix == ".json" and _is_result(p):  # written by diagnose --json
        from traceinsight.result import DiagnosisResult

        return Diagnosis(DiagnosisResult.load(str(p)), name=p.name)
    return open(p).diagnose()


def _is_result(path: Path) -> bool:
    """Whether ``path`` starts like a saved diagnosis result (its schema tag), as the CLI
    tells a result JSON from a trace."""
    try:
        with path.open("rb") as f:
            return b'"traceinsight.diagnosis"' in f.read(4096)
    except OSError:
        return False


def compare(
    before: PathLike | Trace | Diagnosis,
    after: PathLike | Trace | Diagnosis,
    *,
    by: str = "auto",
    tokens: tuple[float | None, float | None] = (None, None),
) -> Compare:
    """Explain the change of step time from ``before`` to ``after`` (each a path, a
    :class:`Trace` or a :class:`Diagnosis`), as ``traceinsight compare`` does."""
    from traceinsight.compare.explain import compare as run_compare

    a, b = _diagnosis_of(before), _diagnosis_of(after)
    labels = (a.name or "before", b.name or "after")
    if labels[0] == labels[1]:
        labels = (f"{labels[0]} (before)", f"{labels[1]} (after)")
    return Compare(run_compare(a.result, b.result, by=by, labels=labels, tokens=tokens), a, b)


# --- the inline summaries ------------------------------------------------------------------

_STYLE = (
    "font-family:system-ui,sans-serif;font-size:13px;line-height:1.4;max-width:960px;"
    "overflow-wrap:anywhere"
)
_TABLE = "border-collapse:collapse;margin:4px 0 8px 0"
_CELL = "border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top"
_SEVERITY_COLOUR = {
    "critical": "#8b0000",
    "high": "#b22222",
    "medium": "#b8860b",
    "low": "#2f4f4f",
    "info": "#555",
}


def _t(text: object) -> str:
    """Trace-provided text for HTML: control and bidi characters as visible escapes, then
    HTML-escaped."""
    return html.escape(for_terminal(str(text)), quote=True)


def _row(cells: Sequence[str], head: bool = False) -> str:
    tag = "th" if head else "td"
    return "<tr>" + "".join(f'<{tag} style="{_CELL}">{c}</{tag}>' for c in cells) + "</tr>"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    body = _row([_t(h) for h in head], head=True) + "".join(_row(r) for r in rows)
    return f'<table style="{_TABLE}">{body}</table>'


def _ns(v: float | None) -> str:
    return "–" if v is None else _t(fmt.fmt_ns(v))


def diagnosis_html(r: DiagnosisResult, name: str = "") -> str:
    """The inline summary of a diagnosis: headline, findings (severity, impact, first
    recommendation), step statistics and the trace's source."""
    from traceinsight.compare.explain import step_stats

    parts = [f'<div class="traceinsight-diagnosis" style="{_STYLE}">']
    title = f"traceinsight diagnosis: {name}" if name else "traceinsight diagnosis"
    parts.append(f'<div style="font-weight:600;font-size:15px">{_t(title)}</div>')
    parts.append(f"<p>{_t(r.headline)}</p>")
    if r.findings:
        rows = []
        for f in r.findings[:MAX_FINDINGS]:
            colour = _SEVERITY_COLOUR.get(f.severity, "#555")
            sev = f'<span style="color:{colour};font-weight:600">{_t(f.severity)}</span>'
            impact = "–" if f.impact_pct is None else _t(fmt.fmt_pct(f.impact_pct))
            fix = _t(f.recommendations[0]) if f.recommendations else "–"
            rows.append([sev, f"<code>{_t(f.rule)}</code>", _t(f.title), impact, fix])
        parts.append(_table(["severity", "rule", "finding", "impact", "first fix"], rows))
        more = len(r.findings) - MAX_FINDINGS
        if more > 0:
            parts.append(f"<p>… and {more} more finding(s): see <code>.findings</code>.</p>")
    else:
        parts.append("<p>No findings.</p>")
    st = step_stats(r)
    if st.get("p50") is not None:
        steps = st.get("steps_representative") or st.get("steps")
        head = ["steps", "p50", "p90", "p99", "max", "mean", "CV"]
        cv = st.get("cv_pct")
        row = [
            _t("–" if steps is None else int(steps)),
            *(_ns(st.get(k)) for k in ("p50", "p90", "p99", "max", "mean")),
            "–" if cv is None else _t(fmt.fmt_pct(cv)),
        ]
        parts.append('<div style="font-weight:600">Step time</div>')
        parts.append(_table(head, [row]))
    sources = [s.get("name", "") for s in r.trace.get("sources", [])]
    if sources:
        shown = ", ".join(str(s) for s in sources[:4]) + (" …" if len(sources) > 4 else "")
        parts.append(f'<p style="color:#555">Source: {_t(shown)}</p>')
    parts.append("</div>")
    return "".join(parts)


def compare_html(c: dict[str, Any]) -> str:
    """The inline summary of a comparison: headline, step time of each side and the largest
    contributors to the change."""
    parts = [f'<div class="traceinsight-compare" style="{_STYLE}">']
    parts.append('<div style="font-weight:600;font-size:15px">traceinsight compare</div>')
    parts.append(f"<p>{_t(c.get('headline', ''))}</p>")
    st = c.get("step_time") or {}
    sides = [(c.get(k) or {}, st.get(k) or {}) for k in ("before", "after")]
    if any(s for _, s in sides):
        rows = [
            [_t(side.get("label", "")), *(_ns(s.get(k)) for k in ("p50", "p90", "max", "mean"))]
            for side, s in sides
        ]
        parts.append(_table(["run", "p50", "p90", "max", "mean"], rows))
    contribs = c.get("contributors") or []
    if contribs:
        per = " per second" if c.get("per") == "second" else " per step"
        rows = []
        for k in contribs[:MAX_FINDINGS]:
            delta = k.get("delta_ns")
            d = "–" if delta is None else _t(("+" if delta > 0 else "") + fmt.fmt_ns(delta))
            rows.append([_t(k.get("kind", "")), _t(k.get("name", "")), d, _t(k.get("status", ""))])
        parts.append(f'<div style="font-weight:600">Largest contributors{per}</div>')
        parts.append(_table(["kind", "name", "change", "status"], rows))
    parts.append("</div>")
    return "".join(parts)
