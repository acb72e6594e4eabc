"""Engine steps of LLM serving traces: which host window is one step of the engine, its phase
(prefill, decode, mixed), the requests and tokens in it, and the GPU work it launched.

Recognised, in this order (a window found by an earlier way is not found again):

* **vLLM V1 step annotations** ``execute_{n}_context_{p}(sq…sk…sqsq…sqsk…)_generation_{d}(…)``
  (``sq``: new (query) tokens, ``sk``: context (KV) tokens, of the ``p`` prefill and ``d``
  decode requests) and the plain ``execute_context_{p}({tokens})_generation_{d}({tokens})``;
  the older ``execute_new_{p}_cached_{d}``. SGLang writes the same annotation around its
  forward.
* **SGLang** ``step[EXTEND|DECODE|MIXED bs=… toks=…]``; a per-stage file (``…-TP-N-EXTEND`` /
  ``…-DECODE`` in the file name) states the phase of the steps in it.
* **TensorRT-LLM** executor ranges ``_forward_step N: P ctx reqs, D gen reqs``.
* **vLLM ``gpu_model_runner`` scopes and frames**: where only Python frames are recorded, each
  ``gpu_model_runner.py(…): execute_model`` call is a step of unknown phase (a
  ``gpu_model_runner: forward`` annotation likewise).
* **Hugging Face ``generate`` loops**: inside ``generation/utils.py(…): generate``, each call of
  the top model (``nn.Module: …ForCausalLM_k``) is a step; the first (or one with more than one
  new token per sequence, from ``aten::embedding``'s ``[batch, tokens]``) is the prefill, later
  ones with one new token per sequence are decode.
* **CUDA/HIP graph replays** of a serving engine (vLLM, SGLang, TensorRT-LLM frames) outside any
  step found above: each replay is one decode step of a graph-mode engine.

Two step annotations that overlap on one rank are one step (SGLang nests ``step[…]`` in the
``execute_…`` annotation): the inner window is kept, the facts of both merged.

Each step's GPU work is what the host launched inside its window (runtime calls' correlation
ids, one per graph replay): ``gpu_ns`` is first start to last end of that work, ``busy_ns``
the union of its kernel intervals. Times are exact int64 ns from the store.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.store.core import TraceStore

PHASES = ("prefill", "decode", "mixed")

_TOK = r"sq(\d+)sk(\d+)(?:sqsq(\d+))?(?:sqsk(\d+))?"
VLLM_STEP_RE = re.compile(
    rf"^execute_(?:(\d+)_)?context_(\d+)\((?:{_TOK}|(\d+))\)_generation_(\d+)\((?:{_TOK}|(\d+))\)$"
)
VLLM_OLD_RE = re.compile(r"^execute_new_(\d+)_cached_(\d+)$")
SGLANG_STEP_RE = re.compile(r"^step\[(EXTEND|DECODE|MIXED|PREFILL|IDLE)((?:\s+\w+=\d+)*)\s*\]$")
TRTLLM_RE = re.compile(r"_forward_step\s*(\d+)?:\s*(\d+)\s+ctx reqs?,\s*(\d+)\s+gen reqs?")
MODEL_RUNNER_ANN_RE = re.compile(r"^gpu_model_runner: (?:forward|execute_model)$")
MODEL_RUNNER_FRAME_RE = re.compile(r"gpu_model_runner\.py\(\d+\): execute_model$")
HF_GENERATE_RE = re.compile(r"generation/utils\.py\(\d+\): generate$")
HF_TOP_MODULE_RE = re.compile(
    r"^nn\.Module: \w+(?:ForCausalLM|LMHeadModel|ForConditionalGeneration)_\d+$"
)
SAMPLING_RE = re.compile(
    r"(?i)(?:^|[\s:/(])(?:sample|sampler|sampling)\b|sampler\.py|compute_logits|logits_processor"
)
GRAPH_LAUNCH_RE = re.compile(r"^(?:cuda|hip)GraphLaunch")
STAGE_FILE_RE = re.compile(r"-TP-\d+-(EXTEND|DECODE|PREFILL|MIXED)\b", re.I)
ENGINE_FRAME_RE = {
    "vllm": re.compile(r"(?:^|/)vllm/|^vllm::"),
    "sglang": re.compile(r"(?:^|/)sglang/|^sglang_profiler::"),
    "tensorrt-llm": re.compile(r"tensorrt_llm"),
    "hf-transformers": re.compile(r"transformers/generation/"),
}
SCOPE_HOW = "vLLM gpu_model_runner scope"
_SGL_PHASE = {"EXTEND": "prefill", "PREFILL": "prefill", "DECODE": "decode", "MIXED": "mixed"}


@dataclass
class EngineStep:
    rank: int
    start_ns: int  #: host window
    end_ns: int
    phase: str  #: prefill | decode | mixed | unknown
    how: str  #: which recognition found it
    thread: str | None = None
    requests: int | None = None  #: requests in the batch
    prefill_requests: int | None = None
    decode_requests: int | None = None
    new_tokens: int | None = None  #: tokens computed in this step (prompt + one per decode)
    prefill_tokens: int | None = None
    decode_tokens: int | None = None
    context_tokens: int | None = None  #: KV tokens the step attends to, where stated
    decode_context_tokens: int | None = None
    attn_pairs: int | None = None  #: Σ new × context tokens per request (vLLM ``sqsk``)
    gpu_start_ns: int | None = None
    gpu_end_ns: int | None = None
    busy_ns: int = 0  #: union of the step's kernel intervals
    kernels: int = 0
    sampling_ns: int = 0  #: kernel time launched from sampling / logits code
    graph_launches: int = 0
    correlations: list[int] = field(default_factory=list, repr=False)

    @property
    def gpu_ns(self) -> int | None:
        if self.gpu_start_ns is None or self.gpu_end_ns is None:
            return None
        return self.gpu_end_ns - self.gpu_start_ns

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("correlations")
        d["gpu_ns"] = self.gpu_ns
        return d


@dataclass
class ServingSteps:
    engine: str | None  #: vllm | sglang | tensorrt-llm | hf-transformers | None
    engine_evidence: str
    steps: list[EngineStep]
    tp: int | None  #: tensor-parallel degree where the trace states it (world size of TP group)
    tp_evidence: str

    @property
    def is_serving(self) -> bool:
        return bool(self.steps)


def _int(s: str | None) -> int | None:
    return None if s is None or s == "" else int(s)


def parse_step_name(name: str) -> dict[str, Any] | None:
    """The facts a step annotation states, or None when ``name`` is not one."""
    m = VLLM_STEP_RE.match(name)
    if m:
        g = m.groups()
        p, d = int(g[1]), int(g[7])
        # prefill: (sq, sk, sqsq, sqsk) or a bare token count
        psq, psk, _, psqsk = (_int(x) for x in g[2:6])
        if psq is None:
            psq = _int(g[6])
        dsq, dsk, _, dsqsk = (_int(x) for x in g[8:12])
        if dsq is None:
            dsq = _int(g[12])
        phase = "mixed" if p and d else "prefill" if p else "decode" if d else "unknown"
        ctx = None if psk is None and dsk is None else (psk or 0) + (dsk or 0)
        pairs = None if psqsk is None and dsqsk is None else (psqsk or 0) + (dsqsk or 0)
        return {
            "how": "vLLM step annotation",
            "phase": phase,
            "requests": p + d,
            "prefill_requests": p,
            "decode_requests": d,
            "prefill_tokens": psq,
            "decode_tokens": dsq,
            "new_tokens": None if psq is None or dsq is None else psq + dsq,
            "context_tokens": ctx,
            "decode_context_tokens": dsk,
            "attn_pairs": pairs,
        }
    m = VLLM_OLD_RE.match(name)
    if m:
        p, d = int(m.group(1)), int(m.group(2))
        phase = "mixed" if p and d else "prefill" if p else "decode" if d else "unknown"
        return {
            "how": "vLLM step annotation (execute_new_cached)",
            "phase": phase,
            "requests": p + d,
            "prefill_requests": p,
            "decode_requests": d,
            "decode_tokens": d,
            "new_tokens": d if not p else None,  # prompt lengths are not in the name
        }
    m = SGLANG_STEP_RE.match(name)
    if m:
        kind = m.group(1)
        kv = dict(re.findall(r"(\w+)=(\d+)", m.group(2)))
        bs, toks = _int(kv.get("bs")), _int(kv.get("toks"))
        phase = _SGL_PHASE.get(kind, "unknown")
        if phase == "decode" and toks is None:
            toks = bs  # one new token per sequence
        out = {"how": "SGLang step annotation", "phase": phase, "requests": bs, "new_tokens": toks}
        if phase == "prefill":
            out.update(prefill_requests=bs, decode_requests=0, prefill_tokens=toks)
        elif phase == "decode":
            out.update(decode_requests=bs, prefill_requests=0, decode_tokens=toks)
        return out
    m = TRTLLM_RE.search(name)
    if m:
        p, d = int(m.group(2)), int(m.group(3))
        phase = "mixed" if p and d else "prefill" if p else "decode" if d else "unknown"
        return {
            "how": "TensorRT-LLM executor range",
            "phase": phase,
            "requests": p + d,
            "prefill_requests": p,
            "decode_requests": d,
            "decode_tokens": d,
            "new_tokens": d if not p else None,  # prompt lengths are not in the name
        }
    if MODEL_RUNNER_ANN_RE.match(name):
        return {"how": SCOPE_HOW, "phase": "unknown"}
    return None


_MERGE_KEYS = (
    "requests",
    "prefill_requests",
    "decode_requests",
    "new_tokens",
    "prefill_tokens",
    "decode_tokens",
    "context_tokens",
    "decode_context_tokens",
    "attn_pairs",
)


def _merge(inner: EngineStep, outer: EngineStep) -> EngineStep:
    for k in _MERGE_KEYS:
        if getattr(inner, k) is None and getattr(outer, k) is not None:
            setattr(inner, k, getattr(outer, k))
    if inner.phase == "unknown":
        inner.phase = outer.phase
    if outer.how not in inner.how:
        inner.how = f"{inner.how} + {outer.how}"
    return inner


def _dedupe(steps: list[EngineStep]) -> list[EngineStep]:
    """Overlapping windows on one rank are one step: of two step annotations the innermost is
    kept with the facts of both; a ``gpu_model_runner`` scope never splits the step around it."""
    out: list[EngineStep] = []
    for s in sorted(steps, key=lambda s: (s.rank, s.start_ns, -(s.end_ns - s.start_ns))):
        prev = out[-1] if out else None
        if prev is not None and prev.rank == s.rank and s.start_ns < prev.end_ns:
            if SCOPE_HOW in s.how or SCOPE_HOW in prev.how:
                # a gpu_model_runner scope inside a step annotation: the step keeps its window
                keep = prev if SCOPE_HOW in s.how else s
                out[-1] = keep
                continue
            inner, outer = (
                (s, prev) if s.end_ns - s.start_ns <= prev.end_ns - prev.start_ns else (prev, s)
            )
            out[-1] = _merge(inner, outer)
            continue
        out.append(s)
    return out


def _engine(
    frames: pd.DataFrame, ops: pd.DataFrame, steps: list[EngineStep]
) -> tuple[str | None, str]:
    """The engine: from step names only one engine writes (SGLang ``step[…]``, TensorRT-LLM
    executor ranges), else from its frames or ops, else from the vLLM step names."""
    hows = " ".join(s.how for s in steps)
    for h, eng in (
        ("SGLang", "sglang"),
        ("TensorRT", "tensorrt-llm"),
        ("HF generate", "hf-transformers"),
    ):
        if h in hows:
            return eng, f"{h} step names"
    names = (
        pd.concat([frames["name"], ops["name"]]).astype(str).unique()
        if len(frames) or len(ops)
        else []
    )
    for eng, rx in ENGINE_FRAME_RE.items():
        hit = next((n for n in names if rx.search(n)), None)
        if hit is not None:
            return eng, f"{eng} frames or ops"
    if "vLLM" in hows:
        return "vllm", "vLLM step names"
    return None, "no engine frames, ops or step names"


def _tp(store: TraceStore) -> tuple[int | None, str]:
    """The tensor-parallel degree: the world size of a single-node engine run (engines run one
    process per TP rank); stated only from distributedInfo."""
    for r in store.ranks:
        ws = (r.get("distributed") or {}).get("world_size")
        if isinstance(ws, int) and ws > 0:
            return ws, f"distributedInfo world_size {ws}"
    n = len(store.ranks)
    if n > 1:
        return n, f"{n} ranks in the trace"
    return None, "no distributedInfo"


def _stage_phase(store: TraceStore, rank: int) -> str | None:
    for r in store.ranks:
        if int(r.get("rank", -1)) != rank:
            continue
        m = STAGE_FILE_RE.search(str(r.get("source") or r.get("label") or ""))
        if m:
            return _SGL_PHASE.get(m.group(1).upper())
    return None


def _hf_steps(frames: pd.DataFrame, ops: pd.DataFrame) -> list[EngineStep]:
    out: list[EngineStep] = []
    gens = frames[frames["name"].astype(str).str.contains(HF_GENERATE_RE)]
    if not len(gens):
        return out
    tops = frames[frames["name"].astype(str).str.match(HF_TOP_MODULE_RE)]
    emb = ops[ops["name"].astype(str) == "aten::embedding"]
    for g in gens.itertuples(index=False):
        inside = tops[
            (tops["rank"] == g.rank)
            & (tops["start_ns"] >= g.start_ns)
            & (tops["start_ns"] + tops["dur_ns"] <= g.start_ns + g.dur_ns)
        ].sort_values("start_ns")
        prompt = None
        for i, f in enumerate(inside.itertuples(index=False)):
            e = emb[
                (emb["rank"] == f.rank)
                & (emb["start_ns"] >= f.start_ns)
                & (emb["start_ns"] < f.start_ns + f.dur_ns)
            ]
            bs = seq = None
            if len(e):
                dims = _dims(e.iloc[0]["input_dims"])
                if dims and len(dims) > 1 and len(dims[1]) == 2:
                    bs, seq = int(dims[1][0]), int(dims[1][1])
            if i == 0 or (seq is not None and seq > 1):
                phase = "prefill"
                prompt = seq
            else:
                phase = "decode"
            s = EngineStep(
                rank=int(f.rank),
                start_ns=int(f.start_ns),
                end_ns=int(f.start_ns + f.dur_ns),
                phase=phase,
                how="HF generate loop (forward in generate)",
                thread=str(f.thread),
                requests=bs,
            )
            if bs is not None and seq is not None:
                s.new_tokens = bs * seq
                if phase == "prefill":
                    s.prefill_requests, s.decode_requests, s.prefill_tokens = bs, 0, bs * seq
                else:
                    s.prefill_requests, s.decode_requests, s.decode_tokens = 0, bs, bs
                    if prompt is not None:
                        s.decode_context_tokens = s.context_tokens = bs * (prompt + i - 1)
            out.append(s)
    return out


def _dims(text: Any) -> list | None:
    import json

    if not isinstance(text, str) or not text:
        return None
    try:
        v = json.loads(text)
    except ValueError:
        return None
    return v if isinstance(v, list) else None


def recognise(store: TraceStore) -> ServingSteps:
    """The engine steps of every rank of ``store`` with their GPU work."""
    rng = store.df("ranges", ["rank", "kind", "name", "thread", "start_ns", "dur_ns"])
    frames = store.df("python_frames", ["rank", "name", "thread", "start_ns", "dur_ns"])
    ops = store.df("cpu_ops", ["rank", "name", "thread", "start_ns", "dur_ns", "input_dims"])
    rt = store.df("runtime_calls", ["rank", "name", "thread", "start_ns", "dur_ns", "correlation"])
    steps: list[EngineStep] = []
    ann = rng[rng["kind"].astype(str).isin(["annotation", "nvtx"])]
    for r in ann.itertuples(index=False):
        facts = parse_step_name(str(r.name))
        if facts is None:
            continue
        s = EngineStep(
            rank=int(r.rank),
            start_ns=int(r.start_ns),
            end_ns=int(r.start_ns + r.dur_ns),
            thread=None if r.thread is None else str(r.thread),
            **facts,
        )
        steps.append(s)
    if not any(s.phase != "unknown" for s in steps):
        runner = frames[frames["name"].astype(str).str.contains(MODEL_RUNNER_FRAME_RE)]
        for f in runner.itertuples(index=False):
            steps.append(
                EngineStep(
                    rank=int(f.rank),
                    start_ns=int(f.start_ns),
                    end_ns=int(f.start_ns + f.dur_ns),
                    phase="unknown",
                    how="vLLM gpu_model_runner.execute_model frame",
                    thread=str(f.thread),
                )
            )
    if not steps:
        steps = _hf_steps(frames, ops)
    steps = _dedupe(steps)
    engine, ev = _engine(frames, ops, steps)
    # graph replays of an engine outside any step: decode steps of a graph-mode engine
    if engine in ("vllm", "sglang", "tensorrt-llm"):
        gl = rt[rt["name"].astype(str).str.match(GRAPH_LAUNCH_RE)]
        for g in gl.itertuples(index=False):
            t = int(g.start_ns)
            if any(s.rank == g.rank and s.start_ns <= t < s.end_ns for s in steps):
                continue
            steps.append(
                EngineStep(
                    rank=int(g.rank),
                    start_ns=t,
                    end_ns=t + int(g.dur_ns),
                    phase="decode",
                    how="graph replay of a graph-mode engine",
                    thread=str(g.thread),
                )
            )
        steps.sort(key=lambda s: (s.rank, s.start_ns))
    for s in steps:
        if s.phase == "unknown":
            staged = _stage_phase(store, s.rank)
            if staged:
                s.phase, s.how = staged, s.how + " + per-stage file name"
    if steps:
        samp = pd.concat(
            [
                rng.loc[
                    rng["name"].astype(str).str.contains(SAMPLING_RE),
                    ["rank", "start_ns", "dur_ns"],
                ],
                frames.loc[
                    frames["name"].astype(str).str.contains(SAMPLING_RE),
                    ["rank", "start_ns", "dur_ns"],
                ],
            ]
        )
        _attach_gpu(store, rt, steps, samp)
    tp, tp_ev = _tp(store)
    return ServingSteps(engine, ev, steps, tp if steps else None, tp_ev)


def _in_windows(t: np.ndarray, w: pd.DataFrame) -> np.ndarray:
    """Which of the times ``t`` fall in one of the windows ``w`` (start_ns, dur_ns)."""
    if not len(w) or not len(t):
        return np.zeros(len(t), bool)
    st = w["start_ns"].to_numpy(np.int64)
    en = st + w["dur_ns"].to_numpy(np.int64)
    o = np.argsort(st, kind="stable")
    st, en = st[o], np.maximum.accumulate(en[o])
    i = np.searchsorted(st, t, "right") - 1
    return (i >= 0) & (t < en[np.clip(i, 0, None)])


def _attach_gpu(
    store: TraceStore, rt: pd.DataFrame, steps: list[EngineStep], sampling: pd.DataFrame
) -> None:
    g = store.df("gpu_activities", ["rank", "kind", "start_ns", "dur_ns", "correlation"])
    g = g[g["kind"].astype(str).isin(["kernel", "memcpy", "memset"]) & g["correlation"].notna()]
    rt = rt[rt["correlation"].notna()]
    for rank in sorted({s.rank for s in steps}):
        rrt = rt[rt["rank"] == rank]
        rg = g[g["rank"] == rank]
        t = rrt["start_ns"].to_numpy(np.int64)
        order = np.argsort(t, kind="stable")
        t, corr = t[order], rrt["correlation"].to_numpy(np.int64)[order]
        names = rrt["name"].astype(str).to_numpy()[order]
        in_samp = _in_windows(t, sampling[sampling["rank"] == rank])
        by_corr = {c: grp for c, grp in rg.groupby("correlation", sort=False)}
        for s in (x for x in steps if x.rank == rank):
            lo, hi = np.searchsorted(t, s.start_ns, "left"), np.searchsorted(t, s.end_ns, "left")
            cs = [int(c) for c in corr[lo:hi]]
            s.graph_launches = int(sum(1 for n in names[lo:hi] if GRAPH_LAUNCH_RE.match(n)))
            parts = [by_corr[c] for c in cs if c in by_corr]
            s.correlations = [c for c in cs if c in by_corr]
            if not parts:
                continue
            k = pd.concat(parts)
            st = k["start_ns"].to_numpy(np.int64)
            en = st + k["dur_ns"].to_numpy(np.int64)
            s.gpu_start_ns, s.gpu_end_ns = int(st.min()), int(en.max())
            kmask = (k["kind"].astype(str) == "kernel").to_numpy()
            s.kernels = int(kmask.sum())
            s.busy_ns = union_ns(st, en)
            samp = [
                by_corr[c]
                for c, f in zip(corr[lo:hi].tolist(), in_samp[lo:hi])
                if f and c in by_corr
            ]
            if samp:
                ks = pd.concat(samp)
                ks = ks[ks["kind"].astype(str) == "kernel"]
                a = ks["start_ns"].to_numpy(np.int64)
                s.sampling_ns = union_ns(a, a + ks["dur_ns"].to_numpy(np.int64))


def union_ns(st: np.ndarray, en: np.ndarray) -> int:
    """Length of the union of the intervals [st, en), exact int64."""
    if not len(st):
        return 0
    o = np.argsort(st, kind="stable")
    st, en = st[o], en[o]
    run_end = np.maximum.accumulate(en)
    total, cur_s, cur_e = 0, int(st[0]), int(en[0])
    for a, b in zip(st[1:].tolist(), run_end[1:].tolist()):
        if a > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return total + cur_e - cur_s
