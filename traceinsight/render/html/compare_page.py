"""The view of the compare report: plain data built from the dict of
:func:`traceinsight.compare.explain.compare`, for ``templates/compare.html`` on ``base.html``
(the same
machinery as the diagnosis report: cells, charts, the report's CSS/JS and CSP). Changes of time
are signed (+ is slower, coloured as worse; − is faster)."""

from __future__ import annotations

from typing import Any

from traceinsight.render.html.cells import table, tone
from traceinsight.render.html.charts import CHARTS
from traceinsight.render.html.charts.compare_bars import COMPARE_PARTS
from traceinsight.render.html.charts.waterfall import waterfall_rows
from traceinsight.render.html.environment import render_page
from traceinsight.result import SEVERITY_RANK
from traceinsight.util import fmt
from traceinsight.util.capture_hints import MODULES, NSYS, Capture, hint
from traceinsight.util.fmt import signed_ns, signed_pct
from traceinsight.util.kernelname import short_names
from traceinsight.util.redact import redact_tokens

#: name lists (new / gone kernels and ops) longer than this start collapsed
LIST_OPEN = 12
COMPARE_NAV = [
    ("comparability", "Comparability"),
    ("step-time", "Step time"),
    ("breakdown", "GPU time"),
    ("waterfall", "Waterfall"),
    ("contributors", "Contributors"),
    ("layers", "Layers"),
    ("ops", "Operators"),
    ("classes", "Kernel classes"),
    ("kernels", "New / gone"),
    ("findings", "Findings"),
    ("diagnostics", "Data quality"),
    ("metadata", "Runs"),
]


def render_compare_html(c: dict[str, Any]) -> str:
    """The compare report (the dict of ``traceinsight.compare.explain.compare``) as one HTML
    document."""
    from traceinsight.render.compare_markdown import render_compare_markdown

    view = build_compare_view(c)
    payload = {
        "schema": "traceinsight.compare-report",
        "version": 1,
        "tool": view["tool"],
        "markdown": render_compare_markdown(c),
    }
    return render_page("compare.html", view, payload)


def _serving_lines(c: dict[str, Any]) -> list[str]:
    """Serving traces compared per token (traceinsight.compare.serving); empty otherwise."""
    from traceinsight.render.serving import compare_lines as serving_lines

    return [x.strip() for x in serving_lines(c)]


def build_compare_view(c: dict[str, Any]) -> dict[str, Any]:
    """Everything the compare template shows, as plain data."""
    c = dict(c or {})
    for key in (
        "contributors",
        "breakdown",
        "layers",
        "ops",
        "kernel_classes",
        "new_kernels",
        "gone_kernels",
        "new_ops",
        "gone_ops",
        "diagnostics",
    ):
        c[key] = list(c.get(key) or [])
    c.setdefault("before", {})
    c.setdefault("after", {})
    c.setdefault("step_time", {})
    tool = c.get("tool") or {}
    verdict, word = _compare_verdict(c)
    sides = [_compare_side(c.get(k) or {}, k) for k in ("before", "after")]
    return {
        "title": f"{sides[0]['label']} → {sides[1]['label']}",
        "tool": {
            "name": str(tool.get("name") or "traceinsight"),
            "version": str(tool.get("version") or "?"),
            "result_version": c.get("version"),
        },
        "headline": str(c.get("headline") or ""),
        "verdict": verdict,
        "word": word,
        "comparability": _comparability(c),
        "sides": sides,
        "explained_by": str(c.get("explained_by") or "?"),
        "bignums": _compare_bignums(c),
        "nav": COMPARE_NAV,
        "step_time": _compare_steps(c),
        "breakdown": _compare_breakdown(c),
        "waterfall": _waterfall(c),
        "contributors": _contributors(c),
        "layers": _aligned(
            c,
            "layers",
            "tbl-cmp-layers",
            "module",
            _no_layers(c),
        ),
        "ops": _aligned(
            c, "ops", "tbl-cmp-ops", "kernel", "No operators with device time on either side."
        ),
        "classes": _aligned(
            c,
            "kernel_classes",
            "tbl-cmp-classes",
            "class",
            "No GPU kernels on either side: nothing to split by kernel class.",
        ),
        "kernels": _new_gone(c),
        "findings": _compare_findings(c),
        "serving": _serving_lines(c),
        "diagnostics": [
            {
                "severity": str(d.get("severity") or "info"),
                "message": redact_tokens(d.get("message") or ""),
            }
            for d in sorted(
                c["diagnostics"],
                key=lambda d: {"error": 0, "warning": 1}.get(str(d.get("severity")), 2),
            )
        ],
        "metadata": _compare_metadata(c, sides),
    }


def _ref(st: dict[str, Any]) -> str:
    """The step-time statistic a compare leads with (the headline's and the waterfall's)."""
    if st.get("statistic") in ("mean", "p50"):
        return str(st["statistic"])
    return "p50" if st.get("p50_delta_pct") is not None else "mean"  # an older compare


def _compare_verdict(c: dict[str, Any]) -> tuple[str, str]:
    st = c["step_time"]
    pct = st.get("p50_delta_pct") if _ref(st) == "p50" else st.get("mean_delta_pct")
    if pct is None or not (c.get("comparability") or {}).get("comparable", True):
        return "info", "NOT COMPARABLE"
    if pct >= 5:
        return "high", "SLOWER"
    if pct >= 1:
        return "medium", "SLOWER"
    if pct <= -1:
        return "ok", "FASTER"
    return "info", "UNCHANGED"


def _comparability(c: dict[str, Any]) -> dict[str, Any]:
    """The comparability section: differences (blocking first) with what they invalidate, the
    normalisation, the layer pairing and what could not be checked; a caution badge."""
    comp = c.get("comparability")
    if not comp:
        return {
            "known": False,
            "comparable": True,
            "caution": False,
            "differences": [],
            "lede": "This compare predates the comparability checks: nothing was checked.",
            "normalised": "",
            "pairing": None,
            "unchecked": [],
        }
    diffs = [
        {
            "severity": "error" if d.get("severity") == "blocking" else "warning",
            "label": str(d.get("severity") or ""),
            "what": str(d.get("what") or ""),
            "before": str(d.get("before")),
            "after": str(d.get("after")),
            "invalidates": str(d.get("invalidates") or ""),
        }
        for d in comp.get("differences") or []
    ]
    comparable = bool(comp.get("comparable", True))
    if not diffs:
        lede = (
            "Comparable: the same device, world size, model shape, dtype and compile mode, "
            "as far as both results tell."
        )
    elif not comparable:
        lede = (
            "Not comparable: the two runs do different work, so the change of step time says "
            "nothing about the code. The numbers below are measured, not explained."
        )
    else:
        lede = (
            "Caution: the same work on a different set-up or with few steps; the numbers "
            "below compare the systems, not only the code."
        )
    n = comp.get("normalised")
    norm = ""
    if n:
        unit = {"flop": "modelled FLOP", "token": "token"}.get(str(n.get("by")))
        change = (
            signed_pct(n.get("delta_pct"))
            if n.get("delta_pct") is not None
            else f"{fmt.fmt_ns(n.get('before'))} → {fmt.fmt_ns(n.get('after'))}"
        )
        what = f"per {unit}" if unit else f"by {n.get('unit')}"
        norm = f"Normalised {what} ({n.get('basis')}): {change}."
    p = comp.get("pairing")
    pairing = None
    if p:
        pairing = {
            "by": str(p.get("by")),
            "paired": p.get("paired"),
            "added": [str(x) for x in p.get("added") or []],
            "removed": [str(x) for x in p.get("removed") or []],
            "added_count": p.get("added_count"),
            "removed_count": p.get("removed_count"),
        }
    return {
        "known": True,
        "comparable": comparable,
        "caution": comparable and bool(diffs),
        "differences": diffs,
        "lede": lede,
        "normalised": norm,
        "pairing": pairing,
        "unchecked": [
            {"what": str(u.get("what")), "why": str(u.get("why"))}
            for u in comp.get("unchecked") or []
        ],
    }


def _compare_side(s: dict[str, Any], tag: str) -> dict[str, Any]:
    devs = [str(d) for d in s.get("devices") or []]
    n = s.get("ranks") or 0
    ws = s.get("world_size")
    ranks = f"{n} rank{'s' if n != 1 else ''}" + (f" of {ws}" if ws and ws != n else "")
    return {
        "tag": tag,
        "label": redact_tokens(s.get("label") or tag),
        "devices": ", ".join(dict.fromkeys(devs)) or "no GPU recorded",
        "device": str(s.get("device") or ""),
        "vendor": str(s.get("vendor") or ""),
        "ranks": ranks,
        "headline": str(s.get("headline") or ""),
        "sources": [redact_tokens(x) for x in (s.get("sources") or [])[:64]],
        "more_sources": max(0, len(s.get("sources") or []) - 64),
    }


def _compare_bignums(c: dict[str, Any]) -> list[dict[str, str]]:
    st = c["step_time"]
    ref = _ref(st)
    a, b = (st.get("before") or {}).get(ref), (st.get("after") or {}).get(ref)
    out = []
    if a is not None and b is not None:
        d = st.get(f"{ref}_delta_ns")
        pct = st.get(f"{ref}_delta_pct")
        out.append(
            {
                "label": f"Step time {ref}",
                "before": fmt.fmt_ns(a),
                "after": fmt.fmt_ns(b),
                "delta": signed_ns(d),
                "pct": signed_pct(pct),
                "tone": tone(d, pct),
                "sub": "",
            }
        )
    t = c.get("throughput")
    if t:
        out.append(
            {
                "label": "Throughput (steps/s)",
                "before": f"{t['before_steps_per_s']:.3g}",
                "after": f"{t['after_steps_per_s']:.3g}",
                "delta": f"×{t['ratio']:.3f}",
                "pct": signed_pct(t.get("delta_pct")),
                "tone": tone(t.get("delta_pct"), t.get("delta_pct"), more_is_better=True),
                "sub": "",
            }
        )
    a0, b0 = c.get("before_step_ns"), c.get("after_step_ns")
    if a0 and b0:
        d = c.get("total_delta_ns")
        pct = 100.0 * d / a0 if d is not None else None
        n = sum(1 for x in c["contributors"] if x.get("delta_ns"))
        out.append(
            {
                "label": "Mean step (explained)",
                "before": fmt.fmt_ns(a0),
                "after": fmt.fmt_ns(b0),
                "delta": signed_ns(d),
                "pct": signed_pct(pct),
                "tone": tone(d, pct),
                "sub": f"{n} contributor{'s' if n != 1 else ''} changed",
            }
        )
    return out


def _compare_steps(c: dict[str, Any]) -> dict[str, Any]:
    st = c["step_time"]
    sa, sb = st.get("before") or {}, st.get("after") or {}
    if all(sa.get(q) is None and sb.get(q) is None for q in ("p50", "mean")):
        return {
            "empty": "Neither side has GPU step windows: there are no step times to compare "
            "(see Data quality)."
        }
    if c.get("per") == "second":
        return {
            "empty": "A time slice without step markers on a side: no step time to compare; "
            "every part below is per second of capture (see the headline for the unit of "
            "work both sides were normalised by)."
        }
    rows = []
    for q, label in (
        ("p50", "step time p50"),
        ("p90", "p90"),
        ("p99", "p99"),
        ("max", "max"),
        ("mean", "mean"),
    ):
        va, vb = sa.get(q), sb.get(q)
        d = None if va is None or vb is None else vb - va
        pct = 100.0 * d / va if d is not None and va else None
        rows.append(
            {
                "label": label,
                "before": fmt.fmt_ns(va),
                "after": fmt.fmt_ns(vb),
                "delta": signed_ns(d),
                "pct": signed_pct(pct),
                "tone": tone(d, pct, ndigits=0.05),
                "lead": q == _ref(st),
            }
        )
    na, nb = sa.get("steps"), sb.get("steps")
    rows.append(
        {
            "label": "steps measured",
            "before": fmt.fmt_num(na, 0) if na else "–",
            "after": fmt.fmt_num(nb, 0) if nb else "–",
            "delta": "",
            "pct": "",
            "tone": "",
            "lead": False,
        }
    )
    ca, cb = sa.get("cv_pct"), sb.get("cv_pct")
    if ca is not None or cb is not None:
        rows.append(
            {
                "label": "step-to-step variation (CV)",
                "before": fmt.fmt_pct(ca),
                "after": fmt.fmt_pct(cb),
                "delta": "",
                "pct": "",
                "tone": "",
                "lead": False,
            }
        )
    t = c.get("throughput")
    thr = None
    if t:
        thr = {
            "label": "throughput (steps/s)",
            "before": f"{t['before_steps_per_s']:.4g}",
            "after": f"{t['after_steps_per_s']:.4g}",
            "delta": f"×{t['ratio']:.3f}",
            "pct": signed_pct(t.get("delta_pct")),
            "tone": tone(t.get("delta_pct"), t.get("delta_pct"), more_is_better=True, ndigits=0.05),
        }
    note = ""
    if (na or 0) <= 1 or (nb or 0) <= 1:
        note = (
            "One ProfilerStep (or none) on a side: p50, p90, p99, max and mean are the same "
            "window there."
        )
    return {
        "empty": "",
        "rows": rows,
        "throughput": thr,
        "ref": _ref(st),
        "note": note,
        "missing": ""
        if sa.get("mean") is not None and sb.get("mean") is not None
        else "One side has no GPU step windows: its step times are missing (see Data quality).",
    }


def _compare_breakdown(c: dict[str, Any]) -> dict[str, Any]:
    rows = {str(r.get("part")): r for r in c["breakdown"]}
    have = [rows[p] for p, _, _ in COMPARE_PARTS if p in rows]
    if not have or any(r.get("before_ns") is None or r.get("after_ns") is None for r in have):
        return {
            "empty": "One side has no GPU step windows: there is no per-step breakdown to compare."
        }
    tot = {
        "before": sum(float(r["before_ns"] or 0) for r in have),
        "after": sum(float(r["after_ns"] or 0) for r in have),
    }
    chart = CHARTS["compare_bars"].build(
        rows, tot, {"before": c.get("before") or {}, "after": c.get("after") or {}}
    )
    d = tot["after"] - tot["before"]
    pct = 100.0 * d / tot["before"] if tot["before"] else None
    table_rows = []
    ta, tb = tot["before"], tot["after"]
    for part, lab, cls in COMPARE_PARTS:
        r = rows.get(part)
        if not r:
            continue
        va, vb = float(r["before_ns"] or 0), float(r["after_ns"] or 0)
        dd = r.get("delta_ns")
        table_rows.append(
            {
                "part": lab,
                "cls": cls,
                "before": fmt.fmt_ns(va),
                "after": fmt.fmt_ns(vb),
                "before_pct": fmt.fmt_pct(100 * va / ta) if ta else "–",
                "after_pct": fmt.fmt_pct(100 * vb / tb) if tb else "–",
                "delta": signed_ns(dd),
                "pct": signed_pct(100.0 * dd / va)
                if dd is not None and va
                else ("new" if dd else "–"),
                "tone": tone(dd, None),
            }
        )
    return {
        "empty": "",
        "chart": chart,
        "rows": table_rows,
        "total": {
            "before": fmt.fmt_ns(tot["before"]),
            "after": fmt.fmt_ns(tot["after"]),
            "delta": signed_ns(d),
            "pct": signed_pct(pct),
            "tone": tone(d, pct),
        },
        "legend": [
            (lab, cls)
            for part, lab, cls in COMPARE_PARTS
            if part in ("compute", "idle")
            or any((rows.get(part) or {}).get(k) for k in ("before_ns", "after_ns"))
        ],
    }


def _waterfall(c: dict[str, Any]) -> dict[str, Any]:
    a0 = int(c.get("before_step_ns") or 0)
    b0 = int(c.get("after_step_ns") or 0)
    total = int(c.get("total_delta_ns") or 0)
    if not c["contributors"] or not a0 or not b0:
        return {
            "empty": "One side has no GPU step windows: there is no step time to decompose "
            "into contributors."
        }
    if not any(x.get("delta_ns") for x in c["contributors"]):
        return {
            "empty": f"Nothing to explain: every contributor takes the same time per step on "
            f"both sides (mean step {fmt.fmt_ns(a0)})."
        }
    rows = waterfall_rows(c)
    chart, zoom = CHARTS["waterfall"].build(rows, a0, b0, total)
    n_changed = sum(1 for x in c["contributors"] if x.get("delta_ns"))
    n_bars = sum(1 for r in rows if r["role"] == "contrib")
    others = next((r for r in rows if r["role"] == "others"), None)
    return {
        "empty": "",
        "chart": chart,
        "zoom": fmt.fmt_ns(zoom) if zoom is not None else "",
        "before": fmt.fmt_ns(a0),
        "after": fmt.fmt_ns(b0),
        "delta": signed_ns(total),
        "pct": signed_pct(100.0 * total / a0),
        "tone": tone(total, 100.0 * total / a0),
        "bars": n_bars,
        "changed": n_changed,
        "others": others["count"] if others else 0,
        "others_delta": signed_ns(others["delta"]) if others else "",
        "explained_by": str(c.get("explained_by") or "?"),
    }


def _contributors(c: dict[str, Any]) -> dict[str, Any]:
    rows = c["contributors"]
    if not rows:
        return {"empty": "No contributors: one side has no GPU step windows."}
    total = c.get("total_delta_ns") or 0
    data = [
        [
            x.get("kind"),
            x.get("name"),
            x.get("before_ns"),
            x.get("after_ns"),
            x.get("delta_ns"),
            100.0 * x["delta_ns"] / x["before_ns"] if x.get("before_ns") else None,
            _share(x, total),
        ]
        for x in rows
    ]
    t = table(
        "tbl-contributors",
        [
            ("kind", "tag"),
            ("name", "kernel"),
            ("before / step", "ns"),
            ("after / step", "ns"),
            ("delta", "dns"),
            ("delta %", "dpct"),
            {
                "name": "share of change",
                "format": "spct",
                "title": "delta / |total change|: the sign of the contributor's own change "
                "(+ adds time, − saves it), its size relative to the whole change",
            },
        ],
        data,
        filterable=True,
    )
    return {
        "empty": "",
        "table": t,
        "count": len(rows),
        "changed": sum(1 for x in rows if x.get("delta_ns")),
        "total": signed_ns(total),
        "notes": [str(n.get("text") or "") for n in c.get("notes") or []],
        "explained_by": str(c.get("explained_by") or "?"),
    }


def _share(x: dict[str, Any], total: int) -> float | None:
    """A contributor's share of the change: delta / |total change| (signed like the delta)."""
    if x.get("share_pct") is not None:
        return float(x["share_pct"])
    return 100.0 * x["delta_ns"] / abs(total) if total else None


def _no_layers(c: dict[str, Any]) -> str:
    """Why no layers align, and how to record them, in the vocabulary of the sides' tool."""
    comp = c.get("comparability") or {}
    caps = [Capture.from_dict((comp.get(k) or {}).get("capture")) for k in ("before", "after")]
    hints = list(dict.fromkeys(hint(MODULES, cap) for cap in caps))
    if all(cap.tool == NSYS for cap in caps):
        text = "No NVTX layer ranges on either side"
    else:
        text = "No nn.Module hierarchy on either side"
    how = "; ".join(h for h in hints if h)
    return f"{text}: {how}, to align layers by path." if how else f"{text}."


def _aligned(c: dict[str, Any], key: str, tid: str, name_fmt: str, why: str) -> dict[str, Any]:
    rows = c.get(key) or []
    if not any(x.get("name") and not str(x["name"]).startswith("[") for x in rows):
        return {"empty": why}  # nothing but the bucket ([no module]): no group to show
    data = [
        [
            x.get("name"),
            x.get("status"),
            x.get("before_ns"),
            x.get("after_ns"),
            x.get("delta_ns"),
            x.get("delta_pct"),
        ]
        for x in rows
    ]
    label = {"module": "module path", "kernel": "operator", "class": "kernel class"}[name_fmt]
    t = table(
        tid,
        [
            (label, name_fmt),
            ("status", "status"),
            ("before / step", "ns"),
            ("after / step", "ns"),
            ("delta", "dns"),
            ("delta %", "dpct"),
        ],
        data,
        filterable=True,
    )
    if name_fmt == "module":
        for cells in t["rows"]:
            cells[0]["depth"] = 0
    return {
        "empty": "",
        "table": t,
        "count": len(rows),
        "new": sum(1 for x in rows if x.get("status") == "new"),
        "gone": sum(1 for x in rows if x.get("status") == "gone"),
    }


def _new_gone(c: dict[str, Any]) -> dict[str, Any]:
    lists = []
    for key, label, kernel in (
        ("new_kernels", "New kernels", True),
        ("gone_kernels", "Gone kernels", True),
        ("new_ops", "New operators", False),
        ("gone_ops", "Gone operators", False),
    ):
        names = [str(x) for x in c.get(key) or []]
        items = []
        short_of = short_names(names) if kernel else {}
        for n in names:
            short = short_of.get(n) or " ".join(n.split())
            items.append({"t": short, "title": n if short != n else ""})
        lists.append(
            {
                "id": key.replace("_", "-"),
                "label": label,
                "items": items,
                "open": len(items) <= LIST_OPEN,
                "capped": len(items) >= 200,
                "status": "new" if key.startswith("new") else "gone",
            }
        )
    empty = (
        ""
        if any(x["items"] for x in lists)
        else ("The same kernels and operators ran on both sides: none is new or gone.")
    )
    return {"empty": empty, "lists": lists}


def _compare_findings(c: dict[str, Any]) -> dict[str, Any]:
    f = c.get("findings") or {}

    def sev(s: Any) -> str:
        return str(s) if s in SEVERITY_RANK else "info"

    def brief(x: dict[str, Any]) -> dict[str, Any]:
        return {
            "rule": str(x.get("rule")),
            "severity": sev(x.get("severity")),
            "title": str(x.get("title") or ""),
            "message": str(x.get("message") or ""),
            "impact": fmt.fmt_pct(x["impact_pct"]) if x.get("impact_pct") is not None else "",
        }

    appeared = [brief(x) for x in f.get("appeared") or []]
    gone = [brief(x) for x in f.get("disappeared") or []]
    changed = [
        {
            "rule": str(x.get("rule")),
            "title": str(x.get("title") or ""),
            "before": sev(x.get("before")),
            "after": sev(x.get("after")),
            "direction": "worse" if x.get("direction") == "worse" else "better",
            "impact_before": fmt.fmt_pct(x.get("impact_before_pct")),
            "impact_after": fmt.fmt_pct(x.get("impact_after_pct")),
        }
        for x in f.get("changed") or []
    ]
    same = [
        {
            "rule": str(x.get("rule")),
            "severity": sev(x.get("severity")),
            "impact_before": fmt.fmt_pct(x.get("impact_before_pct")),
            "impact_after": fmt.fmt_pct(x.get("impact_after_pct")),
        }
        for x in f.get("unchanged") or []
    ]
    empty = ""
    if not (appeared or gone or changed or same):
        empty = "No rule fired on either side."
    return {
        "empty": empty,
        "appeared": appeared,
        "disappeared": gone,
        "changed": changed,
        "unchanged": same,
        "summary": (
            f"{len(appeared)} appeared, {len(gone)} disappeared, {len(changed)} "
            f"changed severity, {len(same)} unchanged"
        ),
    }


def _compare_metadata(c: dict[str, Any], sides: list[dict[str, Any]]) -> dict[str, Any]:
    st = c["step_time"]
    out = []
    for s in sides:
        q = st.get(s["tag"]) or {}
        rows = [
            ("Label", s["label"]),
            ("Devices", s["devices"]),
            ("Roofline device", s["device"] or "unknown"),
            ("Vendor", s["vendor"] or "–"),
            ("Ranks", s["ranks"]),
            ("Steps", fmt.fmt_num(q.get("steps"), 0) if q.get("steps") else "–"),
            *_signature_rows((c.get("comparability") or {}).get(s["tag"]) or {}),
            ("Diagnosis", s["headline"] or "–"),
        ]
        out.append(
            {
                "tag": s["tag"],
                "rows": rows,
                "sources": s["sources"],
                "more_sources": s["more_sources"],
            }
        )
    return {
        "sides": out,
        "explained_by": str(c.get("explained_by") or "?"),
        "schema": f"{c.get('schema') or 'traceinsight.compare'} v{c.get('version') or '?'}",
    }


def _signature_rows(g: dict[str, Any]) -> list[tuple[str, str]]:
    """What the comparability checks read from one side, as metadata rows."""
    if not g:
        return []
    compiled = g.get("compiled")

    def tree(n: Any, sig: Any) -> str:
        return f"{fmt.fmt_num(n, 0)} (#{str(sig)[:8]})" if sig else "not recorded"

    rows = [
        ("Run mode", str(g.get("mode") or "–")),
        ("Module paths", tree(g.get("module_count"), g.get("module_signature"))),
        ("Op input shapes", tree(g.get("op_shape_count"), g.get("op_shape_signature"))),
        ("Compute dtypes", " + ".join(str(x) for x in g.get("dtypes") or []) or "–"),
        ("Compiled", "–" if compiled is None else ("torch.compile" if compiled else "eager")),
    ]
    for key, label in (
        ("params", "Parameters"),
        ("tokens_per_step", "Tokens per step"),
        ("flops_per_step", "Modelled FLOPs per step"),
    ):
        if g.get(key):
            rows.append((label, f"{float(g[key]):,.4g}"))
    return rows
