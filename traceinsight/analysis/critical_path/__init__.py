"""Critical path, replay and what-if per rank and step window.

:func:`step_models` builds each step's dependency graph (:mod:`.graph`), walks its critical
path on the recorded timeline (:mod:`.path`) and replays it (:mod:`.replay`);
:func:`analyse` adds the what-ifs (:mod:`.whatif`) and returns the result section
``critical_path`` (documented in docs/RESULT.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from traceinsight.analysis import attribution_parts, by_rank
from traceinsight.analysis.critical_path import graph as gr
from traceinsight.analysis.critical_path import whatif as wi
from traceinsight.analysis.critical_path.path import CriticalPath, top_items, walk
from traceinsight.analysis.critical_path.prep import prep, rank_latency
from traceinsight.analysis.critical_path.replay import inputs, replay
from traceinsight.result import severity_rank

#: a step whose replay differs from the measured step by more than this gets a diagnostic
REPLAY_TOLERANCE_PCT = 3.0


@dataclass
class StepModel:
    graph: gr.StepGraph
    path: CriticalPath
    replayed_ns: int
    base: tuple[Any, int]  #: the recorded replay inputs and their replayed end
    #: the path's top items by ``top_n``, computed once (in the worker that built the model)
    tops: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    def top(self, top_n: int) -> list[dict[str, Any]]:
        """The path's ``top_n`` largest items (:func:`.path.top_items`)."""
        if top_n not in self.tops:
            self.tops[top_n] = top_items(self.graph, self.path, top_n)
        return self.tops[top_n]

    @property
    def error_pct(self) -> float:
        m = self.graph.measured_ns
        return 100.0 * (self.replayed_ns - m) / m if m else 0.0


def _host_ranges(store) -> tuple[dict[int, tuple[str, str]], dict[int, Any]]:
    """Per rank: the thread of its ProfilerStep ranges, and its host annotations."""
    rng = store.table(
        "ranges", ["rank", "kind", "name", "process", "thread", "start_ns", "dur_ns"]
    ).to_pandas()
    kind = rng["kind"].astype(str)
    st = rng[kind == "step"]
    out: dict[int, tuple[str, str]] = {}
    for r, grp in st.groupby("rank", observed=True):
        row = grp.sort_values("dur_ns").iloc[-1]
        out[int(r)] = (str(row["process"]), str(row["thread"]))
    ann = rng[kind == "annotation"]
    return out, {int(r): grp for r, grp in ann.groupby("rank", observed=True)}


def step_models(an, ranks: Iterable[int] | None = None, step: int | None = None) -> list[StepModel]:
    """Every step window's model, rank by rank (``step``: that step only). Every step of
    every rank is what each rank partition's worker built next to its attribution, when it
    did (:class:`PackedModels`)."""
    from traceinsight.analysis import plain_strings

    if ranks is None and step is None and "step_models" in an.cache:
        return [m for p in an.cache["step_models"] for m in p.models()]
    with plain_strings():
        return list(_models(an, ranks, step))


#: the top items a worker's models carry (the diagnosis's ``top_n``)
PARTITION_TOP_N = 8


@dataclass
class PackedModels:
    """One rank's step models as the worker that built them sends them back: pickled and
    compressed (a 90 MB rank's 33 models: 18.3 MB pickled, 2.5 MB packed), unpacked one rank
    at a time by :func:`analyse`, so the client never holds every rank's graphs at once.
    ``compute_ns`` (per model: rank, step, compute kernel ns) is what the cross-rank
    straggler what-if needs before any model is unpacked."""

    rank: int
    compute_ns: list[tuple[int, int | None, int]]
    blob: bytes

    @classmethod
    def pack(cls, rank: int, models: list[StepModel]) -> PackedModels:
        import pickle
        import zlib

        for m in models:
            m.top(PARTITION_TOP_N)
        blob = zlib.compress(pickle.dumps(models, protocol=pickle.HIGHEST_PROTOCOL), 1)
        return cls(rank, [_compute_of(m) for m in models], blob)

    def models(self) -> list[StepModel]:
        import pickle
        import zlib

        # the bytes a worker of this run pickled (never read from a file or a trace)
        return pickle.loads(zlib.decompress(self.blob))


def _compute_of(m: StepModel) -> tuple[int, int | None, int]:
    G = m.graph
    return (G.rank, G.step, int(G.g_dur[G.g_cat == gr.CAT["compute"]].sum()))


def _partition_models(an) -> list[PackedModels]:
    """A rank partition's step models, packed rank by rank (none without GPU work)."""
    if not len(an.attribution.gpu):
        return []
    by: dict[int, list[StepModel]] = {}
    for m in step_models(an):
        by.setdefault(m.graph.rank, []).append(m)
    return [PackedModels.pack(r, ms) for r, ms in by.items()]


# every step's model, built per rank partition next to its attribution (in its worker)
attribution_parts.product(
    "step_models", __name__, _partition_models, attribution_parts.concat_lists
)


def _models(an, ranks: Iterable[int] | None, step: int | None) -> Iterator[StepModel]:
    at = an.attribution
    mains, anns = _host_ranges(an.store)
    ranks = sorted({w.rank for w in at.steps}) if ranks is None else list(ranks)
    for rank in ranks:
        wins = [w for w in at.steps if w.rank == rank and (step is None or w.step == step)]
        if not wins:
            continue
        g = by_rank.rows(at.gpu, rank)
        rt = by_rank.rows(at.runtime, rank)
        ops = by_rank.rows(at.ops, rank)
        sy = by_rank.rows(at.syncs, rank) if len(at.syncs) else at.syncs
        lat = rank_latency(g)
        pre = prep(rt, ops, anns.get(rank), g, sy)
        for w in wins:
            if w.dur_ns <= 0:
                continue
            G = gr.build(rank, w, g, rt, ops, sy, mains.get(rank), lat, pre)
            cp = walk(G)
            x0 = inputs(G)
            rp = replay(G, x0)
            yield StepModel(G, cp, int(rp.end - G.ws), (x0, int(rp.end)))


#: at most this many path segments of the focus step go into the result (merged below)
MAX_SEGMENTS = 2000


def path_segments(m: StepModel) -> list[list[Any]]:
    """The path of a step for drawing: ``[offset_ns, dur_ns, category, stream]`` from the
    window start (``stream`` null for host time), neighbours of the same category and place
    merged; past :data:`MAX_SEGMENTS`, segments under 1/5000 of the step join the previous."""
    G = m.graph
    out: list[list[Any]] = []
    floor = G.measured_ns / 5000 if len(m.path.segments) > MAX_SEGMENTS else 0
    for sg in m.path.segments:
        lane = int(G.g_stream[sg.item]) if sg.node == 1 else None
        cat = gr.CATEGORIES[sg.cat]
        d = int(sg.end - sg.start)
        if out and ((out[-1][2] == cat and out[-1][3] == lane) or d < floor):
            out[-1][1] += d
            continue
        out.append([int(sg.start - G.ws), d, cat, lane])
    return out[: MAX_SEGMENTS * 2]


def _missing_dependency(G: gr.StepGraph) -> str:
    """The GPU item that started longest after all its known dependencies."""
    x = inputs(G)
    if not len(G.g_start):
        return "no GPU work in the step: host time the trace does not break down"
    prev = G.g_prev()
    ge = G.g_start + G.g_dur
    pe = np.where(prev >= 0, ge[np.clip(prev, 0, None)], G.g_floor)
    ls = np.where(G.g_launch >= 0, gr.take(G.h_start, G.g_launch, 0) + x.g_lat, gr.NEG)
    ready = np.maximum(pe, ls)
    late = np.where(ready > gr.NEG // 2, G.g_start - ready, -1)
    k = int(np.argmax(late))
    if late[k] <= 0:
        return (
            "every GPU item starts on its known dependencies: the host time between calls "
            "depends on something the trace does not record (another thread, a peer rank)"
        )
    from traceinsight.util.kernelname import simplify
    from traceinsight.util.safetext import for_terminal

    # the kernel's short name, as the tables show it (plain text in every output)
    name = for_terminal(simplify(str(G.g_name[k])))[:80]
    return (
        f"{name} on stream {int(G.g_stream[k])} started {late[k] / 1000:.1f} µs after its "
        "last known dependency (launch, stream order, event wait): a dependency the trace "
        "does not record (a cross-stream event, a peer rank, a graph node order)"
    )


def _straggler_ctx(computes: list[tuple[int, int | None, int]]) -> dict[str, Any]:
    """The straggler what-if's context from each step model's (rank, step, compute ns)."""
    comp: dict[int, list[int]] = {}
    for rank, _step, c in computes:
        comp.setdefault(rank, []).append(c)
    if len(comp) < 2:
        return {}
    med = {r: float(np.median(v)) for r, v in comp.items()}
    s = max(med, key=lambda r: med[r])
    typical = float(np.median(list(med.values())))
    if med[s] <= 0 or typical >= med[s]:
        return {}
    scale = typical / med[s]
    waits = {}
    for rank, step, _c in computes:
        if rank == s:
            continue
        excess = med[s] - typical
        waits[(rank, step)] = int(excess)
    return {"straggler_scale": {s: scale}, "straggler_wait_ns": waits, "straggler_rank": s}


def _gain(m: StepModel, keys: list[str], ctx: dict) -> int:
    G = m.graph
    x0, base = m.base
    x = x0.copy()
    for k in keys:
        wi.BY_KEY[k].apply(G, x, ctx)
    end = replay(G, x).end
    if not (x.h_dep >= 0).any() and (x0.h_dep >= 0).any():
        end = min(end, _pipelined_end(G, x))
    return max(0, min(int(base - end), G.measured_ns))


def _pipelined_end(G: gr.StepGraph, x) -> int:
    """With no host wait on the GPU left, the host runs ahead of the GPU from step to step:
    a step then takes the longer of the host's own time and the GPU's own chain (stream order
    and event waits, every launch already issued)."""
    host = replay(G, x)
    y = x.copy()
    y.g_lat[:] = gr.NEG
    y.g_pin[:] = np.maximum(y.g_pin, gr.NEG)
    gpu = replay(G, y)
    g_len = (int(gpu.g_end.max()) - G.ws) if len(G.g_start) else 0
    h_len = host.end - G.ws if not len(G.g_start) else _host_end(G, host) - G.ws
    return int(G.ws + max(g_len, h_len))


def _host_end(G: gr.StepGraph, rp) -> int:
    if G.main_thread >= 0 and len(G.h_start):
        m = np.flatnonzero(G.h_thread == G.main_thread)
        last = m[-1]
        return int(rp.h_end[last]) + max(G.he - int(G.h_start[last] + G.h_dur[last]), 0)
    return int(G.he)


@dataclass
class _Group:
    """One rank's step models (in memory, or packed by the worker that built them) and what
    a pass over them needs: the fired what-ifs, their context, and for the second pass the
    what-ifs applied together (each prefix of the order)."""

    models: list[StepModel] | None
    packed: PackedModels | None
    fired: tuple[str, ...]
    ctx: dict[str, Any]
    top_n: int
    focus: tuple[int, int | None] | None
    combos: tuple[tuple[str, ...], ...] = ()

    def each(self) -> list[StepModel]:
        if self.models is not None:
            return self.models
        assert self.packed is not None
        return self.packed.models()


def _rows_pass(g: _Group) -> dict[str, Any]:
    """A group's rows and each fired what-if alone, per step (a worker's task when packed)."""
    from traceinsight.analysis import plain_strings

    out: dict[str, Any] = {"rows": [], "latency": {}, "alone": {k: [] for k in g.fired}}
    out.update(measured=0, within=0, bad=[], n_bad=0)
    with plain_strings():
        for m in g.each():
            G = m.graph
            out["measured"] += G.measured_ns
            err = m.error_pct
            out["within"] += abs(err) <= REPLAY_TOLERANCE_PCT
            if abs(err) > REPLAY_TOLERANCE_PCT:
                out["n_bad"] += 1
                if len(out["bad"]) < 5:
                    out["bad"].append(_bad_message(m, err))
            row: dict[str, Any] = {
                "step": G.step,
                "start_ns": int(G.origin_ns + G.ws),
                "measured_ns": G.measured_ns,
                "replayed_ns": m.replayed_ns,
                "replay_error_pct": err,
                "path_ns": dict(m.path.by_cat),
                "top": m.top(g.top_n),
                "events": G.n,
            }
            if g.focus is not None and (G.rank, G.step) == g.focus:
                row["segments"] = path_segments(m)
            out["latency"].setdefault(G.rank, G.latency_ns)
            out["rows"].append((G.rank, row))
            for k in g.fired:
                out["alone"][k].append(_gain(m, [k], g.ctx))
    return out


def _combos_pass(g: _Group) -> list[list[int]]:
    """Per combination of what-ifs (``g.combos``), the gain of each of the group's steps."""
    out: list[list[int]] = [[] for _ in g.combos]
    for m in g.each():
        for j, keys in enumerate(g.combos):
            out[j].append(_gain(m, list(keys), g.ctx))
    return out


def _run(fn: Any, groups: list[_Group]) -> list[Any]:
    """``fn`` of every group: in the current runner's workers when the models are packed
    (a rank's graphs unpacked and replayed where the task runs), else here."""
    if len(groups) > 1 and all(g.packed is not None for g in groups):
        from traceinsight.util.distributed import current

        runner = current()
        if runner.scheduler or runner.workers > 1:
            return runner.map(fn, groups)
    return [fn(g) for g in groups]


def analyse(
    an,
    rules: Iterable[str] = (),
    *,
    tensor_speedup: float | None = None,
    top_n: int = 8,
    models: list[StepModel] | None = None,
    focus: tuple[int, int | None] | None = None,
) -> dict[str, Any]:
    """The ``critical_path`` result section: per rank and step, the measured and replayed
    step, the path by category and its top items; the what-if of each fired rule that has one
    (marginal, in the order of their standalone gain, so they add up to ``whatif.all``).

    The models come rank by rank: packed by the workers that built them, unpacked and
    replayed in the current runner's workers again (once for the rows and the standalone
    gains, once more for the combined what-ifs when two or more fired), or ``models`` /
    built here, in memory."""
    packed: list[PackedModels] | None = an.cache.get("step_models") if models is None else None
    fired = tuple(w.key for w in wi.WHATIFS if any(r in w.rules for r in rules))
    if packed is None:
        models = step_models(an) if models is None else models
        if not models:
            return {}
        computes = [_compute_of(m) for m in models]
        ctx: dict[str, Any] = {"tensor_speedup": tensor_speedup, **_straggler_ctx(computes)}
        groups = [_Group(models, None, fired, ctx, top_n, focus)]
    else:
        computes = [c for p in packed for c in p.compute_ns]
        if not computes:
            return {}
        ctx = {"tensor_speedup": tensor_speedup, **_straggler_ctx(computes)}
        groups = [_Group(None, p, fired, ctx, top_n, focus) for p in packed if p.compute_ns]
    parts = _run(_rows_pass, groups)
    alone_steps = {k: [x for p in parts for x in p["alone"][k]] for k in fired}
    measured = sum(p["measured"] for p in parts)
    within = sum(p["within"] for p in parts)
    bad = [b for p in parts for b in p["bad"]][:5]
    n_bad = sum(p["n_bad"] for p in parts)
    rows = [row for p in parts for row in p["rows"]]
    latency = {r: lat for p in parts for r, lat in p["latency"].items()}
    n_steps = len(rows)
    alone = {k: sum(v) for k, v in alone_steps.items()}
    order = sorted(fired, key=lambda k: (-alone[k], k))
    # the what-ifs applied together, in that order: each prefix of the order per step
    combos = tuple(tuple(order[: i + 1]) for i in range(1, len(order)))
    combo_steps: list[list[int]] = [[] for _ in combos]
    if combos:
        for g in groups:
            g.combos = combos
        for got in _run(_combos_pass, groups):
            for j, gains in enumerate(got):
                combo_steps[j].extend(gains)
    marginal: dict[str, int] = {}
    prev = 0
    per_step_all: list[int] = []
    for i, k in enumerate(order):
        # the first what-if of the order alone is already known
        per_step_all = alone_steps[k] if i == 0 else combo_steps[i - 1]
        tot = sum(per_step_all)
        marginal[k] = max(tot - prev, 0)
        prev = max(tot, prev)
    ranks: dict[int, dict[str, Any]] = {}
    for j, (rank, row) in enumerate(rows):
        if per_step_all:
            row["whatif_all_ns"] = row["measured_ns"] - per_step_all[j]
        r = ranks.setdefault(rank, {"rank": rank, "launch_latency_ns": latency[rank], "steps": []})
        r["steps"].append(row)
    mean_step = measured / n_steps
    all_gain = sum(per_step_all) if per_step_all else 0
    out: dict[str, Any] = {
        "categories": {c: gr.CATEGORY_LABELS[c] for c in gr.CATEGORIES},
        "ranks": list(ranks.values()),
        "replay": {
            "steps": n_steps,
            "within_tolerance": int(within),
            "tolerance_pct": REPLAY_TOLERANCE_PCT,
            "within_pct": 100.0 * within / n_steps,
        },
        "whatif": {
            k: {
                "target": wi.BY_KEY[k].target,
                "rules": list(wi.BY_KEY[k].rules),
                "alone_ns": alone[k] / n_steps,
                "alone_pct": 100.0 * alone[k] / measured if measured else 0.0,
                "ns": marginal[k] / n_steps,
                "pct": 100.0 * marginal[k] / measured if measured else 0.0,
            }
            for k in order
        },
        "order": order,
    }
    out["whatif"]["all"] = {
        "step_ns": mean_step - all_gain / n_steps,
        "measured_step_ns": mean_step,
        "ns": all_gain / n_steps,
        "pct": 100.0 * all_gain / measured if measured else 0.0,
        "applied": list(order),
    }
    out["diagnostics"] = [
        {
            "code": "replay-error",
            "severity": "warning",
            "source": f"rank {msg['rank']}",
            "message": msg["message"],
            "hint": "what-if impacts of this step are less certain",
        }
        for msg in bad
    ]
    if n_bad > 5:
        out["diagnostics"][-1]["count"] = n_bad
    return out


def _bad_message(m: StepModel, err: float) -> dict[str, Any]:
    """A step whose replay is off the measured step: its rank and what may be missing."""
    G = m.graph
    return {
        "rank": G.rank,
        "message": ("the window" if G.step is None else f"step {G.step}")
        + ": the replay of its dependency graph is "
        f"{err:+.1f}% off the measured step; " + _missing_dependency(G),
    }


def impacts(findings: list, section: dict[str, Any]) -> None:
    """Set each finding's ``impact`` (``pct``, ``ns``, ``method``, ``target``): the what-if of
    its cause where there is one, else the rule's estimate, capped so that all impacts together
    never exceed the step."""
    wf = section.get("whatif", {}) if section else {}
    step = float((wf.get("all") or {}).get("measured_step_ns") or 0.0)
    used = 0.0
    told: set[str] = set()  # one what-if is one cause: told once, by its first finding
    for f in sorted(findings, key=lambda f: severity_rank(f.severity)):
        w = wi.BY_RULE.get(f.rule)
        if w is not None and w.key in wf:
            e = wf[w.key]
            pct, ns = (0.0, 0.0) if w.key in told else (e["pct"], e["ns"])
            target = w.target if w.key not in told else w.target + " (counted once, above)"
            told.add(w.key)
            prior = getattr(f, "impact", None) or {}
            f.impact = {"pct": pct, "ns": ns, "method": "what-if", "target": target}
            if prior.get("method") == "estimate":  # the engine's one-story estimate, kept
                f.impact["estimate_pct"] = prior.get("pct")
                f.impact["shared_with"] = prior.get("shared_with") or []
            used += pct
    what_if_rules = {
        f.rule for f in findings if f.impact is not None and f.impact.get("method") == "what-if"
    }
    gains = {f.rule: f.impact["pct"] for f in findings if f.rule in what_if_rules}
    for f in findings:
        prior = getattr(f, "impact", None)  # the engine's estimate (engine/impacts.py), if any
        estimated = prior is None or prior.get("method") == "estimate"
        if estimated and f.rule not in what_if_rules and f.impact_pct is not None:
            # the engine already left out what the named findings own (impact.less)
            shared = (prior or {}).get("shared_with")
            told_by = 0.0 if shared else sum(gains.get(r, 0.0) for r in wi.UMBRELLA.get(f.rule, ()))
            pct = max(0.0, min(float(f.impact_pct) - told_by, 100.0 - used))
            used += pct
            f.impact = {
                **{k: v for k, v in (prior or {}).items() if k in ("basis", "shared_with")},
                "estimate_pct": float(f.impact_pct),
                "pct": pct,
                "ns": step * pct / 100.0 if step else None,
                "method": "estimate",
                "target": "the rule's estimate (its metric times a fixed factor)"
                + (", less what the more specific findings' what-ifs explain" if told_by else ""),
            }
