"""LLM serving traces: engine steps, per-phase metrics, decode against the bandwidth roof,
serving rules and the Serving section.

Synthetic traces (tracegen.serving) have known steps, tokens, bytes and floors; on the shared
vLLM and SGLang traces the phase split, step counts and GPU-side step times are checked
against counts made here from the raw JSON events."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import KINETO, requires_corpus

from tracegen.serving import build_serving
from traceinsight.analysis.serving import parse_step_name
from traceinsight.devices.table import lookup
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.render.markdown import render_markdown
from traceinsight.render.terminal import render

H100_BW = lookup("H100").mem_bw  # type: ignore[union-attr]


def _diag(tmp_path: Path, name: str = "t.json.gz", **kw):
    p = tmp_path / name
    ans = build_serving(p, **kw)
    r = diagnose(ingest([p], quiet=True), cache=False)
    return r, ans


def _finding(r, rule):
    return next((f for f in r.findings if f.rule == rule), None)


def _expected_bytes(ans) -> float:
    act = ans.activation_bytes_decode / ans.decode_steps
    per = [ans.weight_bytes + kv + act for kv in ans.kv_bytes_per_decode_step]
    return float(np.median(per))


def test_step_names_parse() -> None:
    v = parse_step_name(
        "execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)"
        "_generation_37(sq37sk34489sqsq37sqsk34489)"
    )
    assert v is not None
    assert (v["phase"], v["prefill_requests"], v["decode_requests"]) == ("mixed", 9, 37)
    assert (v["prefill_tokens"], v["decode_tokens"], v["new_tokens"]) == (8155, 37, 8192)
    assert v["decode_context_tokens"] == 34489
    v = parse_step_name("execute_context_2(300)_generation_5(5)")
    assert v is not None and (v["phase"], v["new_tokens"]) == ("mixed", 305)
    v = parse_step_name("execute_new_0_cached_12")
    assert v is not None and (v["phase"], v["decode_requests"]) == ("decode", 12)
    v = parse_step_name("step[EXTEND bs=15 toks=15360]")
    assert v is not None and (v["phase"], v["requests"], v["new_tokens"]) == ("prefill", 15, 15360)
    v = parse_step_name("step[DECODE bs=32]")
    assert v is not None and (v["phase"], v["new_tokens"]) == ("decode", 32)
    v = parse_step_name("[Executor] _forward_step 7: 2 ctx reqs, 30 gen reqs")
    assert v is not None and (v["phase"], v["requests"]) == ("mixed", 32)
    assert parse_step_name("ProfilerStep#3") is None


def test_decode_at_the_roof(tmp_path: Path) -> None:
    r, ans = _diag(tmp_path, decode_kernel_ns=25_000)
    sv = r.serving
    assert sv is not None and sv["engine"] == "vllm"
    ph = sv["phases"]
    assert ph["prefill"]["steps"] == 1 and ph["decode"]["steps"] == ans.decode_steps
    assert "mixed" not in ph
    assert ph["decode"]["tokens"] == ans.decode_tokens
    assert ph["prefill"]["tokens"] == ans.prefill_tokens
    step = ans.decode_step_gpu_ns[0]
    assert ph["decode"]["tpot_ms"] == step / 1e6
    roof = sv["decode_roofline"]
    exp = _expected_bytes(ans)
    assert roof["bytes_per_step"] == exp
    assert roof["peak_gbps"] == H100_BW / 1e9
    assert roof["floor_ms"] == pytest.approx(exp / H100_BW * 1e3, rel=1e-12)
    assert roof["fraction_of_peak"] == pytest.approx(exp / (step / 1e9) / H100_BW, rel=1e-12)
    assert roof["fraction_of_peak"] <= 1.0
    v = r.metrics["values"]
    assert v["serving_decode_step_p50_ns"] == step
    assert v["serving_prefill_ns_per_token"] == ans.prefill_step_gpu_ns[0] / ans.prefill_tokens
    f = _finding(r, "serving-decode-bandwidth-bound")
    assert f is not None and f.severity == "medium"
    recs = " ".join(f.recommendations)
    assert (
        'quantization="fp8"' in recs and 'kv_cache_dtype="fp8"' in recs and "max_num_seqs" in recs
    )
    assert "--quantization" not in recs  # SGLang's flags only for SGLang
    assert _finding(r, "serving-decode-latency-bound") is None
    # decode is memory-bound by nature: never high, never "larger batch or sequence"
    mb = _finding(r, "memory-bound")
    if mb is not None:
        assert mb.severity != "high"
    assert not any("Raise arithmetic intensity" in x for f in r.findings for x in f.recommendations)
    assert not any(
        re.search(r"AdamW|GradScaler|gradient accumulation|FSDP", x)
        for f in r.findings
        for x in f.recommendations
    )


def test_decode_latency_bound_eager(tmp_path: Path) -> None:
    r, _ = _diag(tmp_path, decode_kernel_ns=200_000)
    roof = r.serving["decode_roofline"]
    assert roof["fraction_of_peak"] < 0.2
    f = _finding(r, "serving-decode-latency-bound")
    assert f is not None and f.severity == "medium"
    recs = " ".join(f.recommendations)
    assert "enforce_eager" in recs  # no graph replays in the steps
    assert _finding(r, "serving-decode-bandwidth-bound") is None


def test_sglang_steps_and_jitter(tmp_path: Path) -> None:
    r, ans = _diag(tmp_path, engine="sglang", decode_kernel_ns=25_000, slow_every=4, slow_factor=3)
    sv = r.serving
    assert sv["engine"] == "sglang"
    assert sv["phases"]["decode"]["steps"] == 12
    t = np.array(ans.decode_step_gpu_ns)
    d = sv["phases"]["decode"]["step_ms"]
    assert d["p50"] == float(np.percentile(t, 50)) / 1e6
    assert d["p99"] == float(np.percentile(t, 99)) / 1e6
    f = _finding(r, "serving-jitter")
    assert f is not None and f.severity == "medium"
    assert r.metrics["values"]["serving_step_p99_over_p50_ratio"] == pytest.approx(
        np.percentile(t, 99) / np.percentile(t, 50)
    )
    assert "--chunked-prefill-size" in " ".join(f.recommendations)


def test_scheduler_gaps(tmp_path: Path) -> None:
    r, ans = _diag(tmp_path, decode_kernel_ns=50_000, gap_ns=1_500_000)
    gaps = ans.gap_ns * (ans.prefill_steps + ans.decode_steps - 1)
    span = sum(ans.prefill_step_gpu_ns) + sum(ans.decode_step_gpu_ns) + gaps
    assert r.metrics["values"]["serving_step_gap_pct"] == pytest.approx(100 * gaps / span)
    f = _finding(r, "serving-scheduler-gaps")
    assert f is not None and f.severity == "high"


def test_report_sections(tmp_path: Path) -> None:
    r, _ = _diag(tmp_path, decode_kernel_ns=25_000)
    text = render(r, width=120)
    assert "Serving (engine steps)" in text and "Decode roofline:" in text
    md = render_markdown(r)
    assert "**Serving**" in md and "| decode | 12 |" in md
    from traceinsight.render.html.diagnose_page import render_html

    html = render_html(r)
    assert '<section id="serving">' in html and 'href="#serving"' in html
    d = json.loads(r.to_json())
    sv = d["serving"]
    for k in ("engine", "phases", "decode_roofline", "tp"):
        assert k in sv
    for k in ("steps", "tokens", "step_ms", "tpot_ms", "batch"):
        assert k in sv["phases"]["decode"]
    for k in ("bytes_per_step", "achieved_gbps", "peak_gbps", "fraction_of_peak", "floor_ms"):
        assert sv["decode_roofline"][k] is not None


def test_not_serving_has_no_block(tmp_path: Path) -> None:
    from tracegen.synth import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    with b.step(1, 0, 100_000):
        b.op("aten::mm", 1_000, 50_000, input_dims=[[64, 64], [64, 64]], input_types=["float"] * 2)
        b.launch("gemm", cpu_start=2_000, gpu_start=10_000, gpu_dur=40_000)
    p = tmp_path / "t.json"
    b.write(p)
    r = diagnose(ingest([p], quiet=True), cache=False)
    assert r.serving is None and "serving" not in r.to_dict()
    st = {x["rule"]: x["status"] for x in r.rules}
    assert st["serving-decode-bandwidth-bound"] == "not-applicable"


# --- the shared vLLM and SGLang traces ------------------------------------------------------

INFER = KINETO / "tracelens" / "traces" / "inference"
SERVING_TRACES = [
    "vllm_decode_full/graph_execution.json.gz",
    "vllm_prefilldecode_piecewise/graph_execution.json.gz",
    "sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    "sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
]


def _raw_steps(path: Path) -> list[dict]:
    """Step windows and phases straight from the JSON: nested step annotations are one step."""
    with gzip.open(path) as fh:
        ev = json.load(fh)["traceEvents"]
    wins = []
    for e in ev:
        if e.get("cat") != "user_annotation":
            continue
        n = e["name"]
        m = re.match(r"step\[(\w+)", n)
        if m:
            phase = {"EXTEND": "prefill", "DECODE": "decode", "MIXED": "mixed"}[m.group(1)]
        else:
            m = re.match(r"execute_\d+_context_(\d+)\(.*\)_generation_(\d+)\(", n)
            if not m:
                continue
            p, d = int(m.group(1)), int(m.group(2))
            phase = "mixed" if p and d else "prefill" if p else "decode"
        wins.append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), phase))
    wins.sort(key=lambda w: (w[0], -(w[1] - w[0])))
    steps: list[list] = []
    for w in wins:
        if steps and w[0] < steps[-1][1]:
            if w[1] - w[0] < steps[-1][1] - steps[-1][0]:
                steps[-1] = list(w)
            continue
        steps.append(list(w))
    corr_t = {
        e["args"]["correlation"]: float(e["ts"])
        for e in ev
        if e.get("cat") == "cuda_runtime" and "correlation" in (e.get("args") or {})
    }
    out = []
    for s0, s1, phase in steps:
        ks = [
            e
            for e in ev
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and s0 <= corr_t.get((e.get("args") or {}).get("correlation"), -1) < s1
        ]
        starts = [float(e["ts"]) for e in ks]
        ends = [float(e["ts"]) + float(e["dur"]) for e in ks]
        out.append({"phase": phase, "gpu_us": max(ends) - min(starts)})
    return out


@requires_corpus
@pytest.mark.parametrize("rel", SERVING_TRACES)
def test_shared_serving_traces(rel: str) -> None:
    path = INFER / rel
    raw = _raw_steps(path)
    r = diagnose(ingest([path], quiet=True), cache=False)
    sv = r.serving
    assert sv is not None
    assert sv["engine"] == ("vllm" if rel.startswith("vllm") else "sglang")
    counts = {p: sum(1 for s in raw if s["phase"] == p) for p in ("prefill", "decode", "mixed")}
    got = {p: (sv["phases"].get(p) or {}).get("steps", 0) for p in counts}
    assert got == counts
    v = r.metrics["values"]
    for p, n in counts.items():
        assert v[f"serving_{p}_steps"] == n
    for p in counts:
        ph = sv["phases"].get(p)
        if ph:
            exp = float(np.median([s["gpu_us"] for s in raw if s["phase"] == p])) / 1e3
            assert ph["step_ms"]["p50"] == pytest.approx(exp, abs=1e-6)
    # graph replays record no GEMM shapes: no decode roofline is stated, and the reason is given
    roof = sv["decode_roofline"]
    if counts["decode"]:
        assert roof["fraction_of_peak"] is None and roof["why"]
    # none of the serving rules fires on these single-step windows
    assert not [f.rule for f in r.findings if f.rule.startswith("serving-")]


def test_compare_per_token(tmp_path: Path) -> None:
    from traceinsight.compare.explain import compare
    from traceinsight.render.terminal import render_compare

    a, aa = _diag(tmp_path, "a.json.gz", decode_kernel_ns=50_000)
    b, ab = _diag(tmp_path, "b.json.gz", decode_kernel_ns=25_000)
    c = compare(a, b)
    sv = c["serving"]
    row = next(x for x in sv["per_token"] if x["metric"] == "tpot_ms")
    assert row["before"] == aa.decode_step_gpu_ns[0] / 1e6
    assert row["after"] == ab.decode_step_gpu_ns[0] / 1e6
    assert row["delta_pct"] == pytest.approx(-50.0)
    assert sv["comparable"] is True
    assert "time per output token" in render_compare(c, width=120)
    from traceinsight.render.markdown import render_compare_markdown

    assert "time per output token" in render_compare_markdown(c)
    from traceinsight.render.html.compare_page import render_compare_html

    assert 'id="serving"' in render_compare_html(c)
    # a different decode batch makes per-token times not comparable
    d, _ = _diag(tmp_path, "d.json.gz", decode_kernel_ns=25_000, batch=64)
    c2 = compare(a, d)
    assert c2["serving"]["comparable"] is False
    assert any("decode batch" in w for w in c2["serving"]["not_comparable_because"])


def test_hf_generate_loop(tmp_path: Path) -> None:
    r, ans = _diag(tmp_path, engine="hf", decode_kernel_ns=25_000, decode_steps=6)
    sv = r.serving
    assert sv["engine"] == "hf-transformers"
    assert sv["phases"]["prefill"]["steps"] == 1 and sv["phases"]["decode"]["steps"] == 6
    assert sv["phases"]["prefill"]["tokens"] == ans.prefill_tokens
    assert sv["phases"]["decode"]["tokens"] == ans.decode_tokens
    assert sv["phases"]["decode"]["step_ms"]["p50"] == ans.decode_step_gpu_ns[0] / 1e6
    steps = [s for s in sv["steps"] if s["phase"] == "decode"]
    # the context grows by one token per sequence and step
    assert [s["context_tokens"] for s in steps] == [16 * (512 + i) for i in range(6)]
    assert sv["decode_roofline"]["bytes_per_step"] == _expected_bytes(ans)


def test_trtllm_steps(tmp_path: Path) -> None:
    r, ans = _diag(tmp_path, engine="trtllm", decode_steps=4)
    sv = r.serving
    assert sv["engine"] == "tensorrt-llm"
    assert sv["phases"]["prefill"]["steps"] == 1 and sv["phases"]["decode"]["steps"] == 4
    assert sv["phases"]["decode"]["batch"] == 16
    assert sv["phases"]["decode"]["tokens"] == ans.decode_tokens  # one token per request
    assert sv["phases"]["decode"]["step_ms"]["p50"] == ans.decode_step_gpu_ns[0] / 1e6


def test_moe_routed_experts(tmp_path: Path) -> None:
    # 4 sequences x top-2 route to at most 8 of 64 experts per decode step
    r, ans = _diag(tmp_path, moe_experts=64, topk=2, batch=4, decode_kernel_ns=25_000)
    b = r.serving["decode_roofline"]["bytes"]
    assert b["moe_experts"] == ans.moe_bytes_decode // ans.decode_steps
    assert b["weights"] == ans.weight_bytes
    assert any("MoE" in a for a in r.serving["decode_roofline"]["assumptions"])


def test_graph_replays_are_decode_steps(tmp_path: Path) -> None:
    r, ans = _diag(tmp_path, graph_decode=True, decode_steps=5)
    sv = r.serving
    assert sv["phases"]["decode"]["steps"] == 5
    assert "graph replay of a graph-mode engine" in sv["recognised_by"]
    assert sv["phases"]["decode"]["step_ms"]["p50"] == ans.decode_step_gpu_ns[0] / 1e6
    assert r.metrics["values"]["serving_graph_launches"] == 5
    # graph replays record no shapes: the roofline is not stated, and says why
    roof = sv["decode_roofline"]
    assert roof["fraction_of_peak"] is None and "shapes" in roof["why"]


def test_tensor_parallel_ranks(tmp_path: Path) -> None:
    for rk in (0, 1):
        build_serving(
            tmp_path / f"rank-{rk}.json.gz", rank=rk, world_size=2, decode_kernel_ns=25_000
        )
    r = diagnose(ingest([tmp_path], quiet=True), cache=False)
    sv = r.serving
    assert sv["tp"] == 2 and sv["rank"] == 0
    dec = sv["phases"]["decode"]
    assert dec["steps"] == 12  # the engine's steps, not one set per TP rank
    assert dec["tokens_per_s_per_gpu"] == pytest.approx(
        dec["tokens"] / (dec["gpu_ns_total"] / 1e9) / 2
    )


def test_prefill_mfu(tmp_path: Path) -> None:
    r, ans = _diag(tmp_path, prefill_kernel_ns=1_000_000, decode_steps=2)
    m = r.serving["prefill_mfu"]
    # 2·tokens·params for the GEMMs + 4·Σ(sq·sk)·H·D per layer (causal: half) for attention
    params = ans.weight_bytes // 2
    gemm = 2 * ans.prefill_tokens * params
    attn = 4 * (16 * 512 * 512) * 32 * 128 * 0.5 * 4
    assert m["flops"] == gemm + attn and m["attention_flops"] == attn
    peak = lookup("H100").peak("bf16")  # type: ignore[union-attr]
    assert m["mfu_pct"] == pytest.approx(
        100 * (gemm + attn) / (ans.prefill_step_gpu_ns[0] / 1e9) / peak
    )


def test_memory_bound_is_at_most_medium_on_serving_traces() -> None:
    from traceinsight.engine.evaluate import evaluate, load_rules
    from traceinsight.metrics.registry import MetricSet

    rule = next(r for r in load_rules() if r.id == "memory-bound")

    def ms(serving: float) -> MetricSet:
        m = MetricSet()
        for k, v in dict(
            memory_bound_time_pct=80.0,
            memory_bound_recoverable_pct=15.0,
            memory_bound_efficiency_pct=40.0,
            gpu_busy_pct=95.0,
            flops_modelled_pct=90.0,
            is_serving=serving,
        ).items():
            m.set(k, v)
        return m

    train = evaluate([rule], ms(0.0)).findings[0]
    assert train.severity == "high"
    assert any("Raise arithmetic intensity" in x for x in train.recommendations)
    serve = evaluate([rule], ms(1.0)).findings[0]
    assert serve.severity == "medium"
    assert not any("larger batch or sequence" in x for x in serve.recommendations)
    assert any("memory-bound by nature" in x for x in serve.recommendations)


def test_vllm_frames_and_scopes(tmp_path: Path) -> None:
    """Only Python frames recorded: each gpu_model_runner.execute_model call is a step (phase
    unknown); a gpu_model_runner scope inside a step annotation does not split the step."""
    from tracegen.synth import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    t = 100_000
    for _ in range(3):
        b.python("vllm/v1/worker/gpu_model_runner.py(3380): execute_model", t, 200_000)
        with b.annotation("gpu_model_runner: forward", t + 10_000, 100_000):
            b.launch("gemm_a", cpu_start=t + 20_000, gpu_start=t + 30_000, gpu_dur=100_000)
        b.launch("argmax", cpu_start=t + 150_000, gpu_start=t + 160_000, gpu_dur=10_000)
        t += 400_000
    p = tmp_path / "frames.json"
    b.write(p)
    r = diagnose(ingest([p], quiet=True), cache=False)
    sv = r.serving
    assert sv["engine"] == "vllm" and sv["steps_total"] == 3 and sv["unknown_phase_steps"] == 3
    assert [s["gpu_ns"] for s in sv["steps"]] == [140_000] * 3  # forward + sampling kernels
    # a step annotation around the scope keeps its own window and facts
    b = KinetoTraceBuilder()
    with b.annotation(
        "execute_4_context_0(sq0sk0sqsq0sqsk0)_generation_4(sq4sk40sqsq4sqsk40)", 0, 300_000
    ):
        with b.annotation("gpu_model_runner: forward", 10_000, 100_000):
            b.launch("gemm_a", cpu_start=20_000, gpu_start=30_000, gpu_dur=100_000)
        b.launch("argmax", cpu_start=150_000, gpu_start=160_000, gpu_dur=10_000)
    p = tmp_path / "scoped.json"
    b.write(p)
    sv = diagnose(ingest([p], quiet=True), cache=False).serving
    assert sv["phases"]["decode"]["steps"] == 1 and sv["steps"][0]["gpu_ns"] == 140_000
    assert sv["steps"][0]["decode_context_tokens"] == 40
