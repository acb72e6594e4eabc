"""The expert's run facts (``traces/expected/run_facts.yaml``) against the computed ``run``.

The labels are short texts ("SGD (foreach)", "tf32 ~95%, fp32 ~5%", "num_workers 0, pageable
H2D"); :func:`agree` reads each the way the expert wrote it and says whether the computed fact
says the same, or why not. Shared by the corpus test and by the agreement count it reports.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from conftest import TRACES

LABELS = TRACES / "expected" / "run_facts.yaml"
SHARE_TOLERANCE = 15.0  #: points: labels are rounded to 5%, and unknown-dtype time differs


def load(path: Path = LABELS) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    import yaml

    return yaml.safe_load(path.read_text()) or {}


def _mode(want: str, got: dict[str, Any]) -> str | None:
    return None if got["value"] == want else f"mode {got['value']} != {want}"


def _same(name: str) -> Any:
    def check(want: str, got: dict[str, Any]) -> str | None:
        return None if str(got["value"]) == want else f"{name} {got['value']} != {want}"

    return check


def _optimizer(want: str, got: dict[str, Any]) -> str | None:
    v = got["value"]
    if not isinstance(v, dict):
        return f"optimizer {v} != {want}"
    classes = set(str(v.get("class", "")).split("+"))
    named = set(re.findall(r"\b([A-Z]\w+?)(?:Optimizer)?\b", want.split(";")[0]))
    named = {w for w in re.findall(r"\b(SGD|Adam\w*|Shampoo|EMAOptimizer|Adagrad|LAMB)\b", want)}
    dense = {w for w in named if w != "Adagrad"}
    if not dense <= classes:
        return f"optimizer class {v.get('class')} lacks {sorted(dense - classes)}"
    if "(foreach)" in want and v.get("impl") != "foreach":
        return f"optimizer impl {v.get('impl')} != foreach"
    if "fused" in want.lower() and "sparse" in want.lower() + "embedding" and not v.get("sparse"):
        return "the sparse optimizer fused into the embedding backward is not named"
    return None


_DTYPE = re.compile(
    r"(fp32|tf32|bf16|fp16|fp8|mxfp4|nvfp4|mxfp8)(?:\s*x\s*(mxfp4|nvfp4|mxfp8))?"
    r"(?:\s*~?(\d+)(?:-(\d+))?%)?"
)


def _matrix(want: str, got: dict[str, Any]) -> str | None:
    v = got["value"] if isinstance(got["value"], dict) else {}
    shares = v.get("shares") or {}
    if want.startswith("none"):
        return None if v.get("dominant") == "none" else f"matrix dtypes {shares} != none"
    parsed = [(m.group(2) or m.group(1), m.group(4) or m.group(3)) for m in _DTYPE.finditer(want)]
    if not parsed:
        return f"label {want!r} not read"
    if v.get("dominant") != parsed[0][0]:
        return f"dominant matrix dtype {v.get('dominant')} != {parsed[0][0]} ({shares})"
    known = sum(x for k, x in shares.items() if k != "unknown") or 1.0
    for d, pct in parsed:
        if pct is None:
            continue
        mine = 100.0 * float(shares.get(d, 0.0)) / known
        if abs(mine - float(pct)) > SHARE_TOLERANCE:
            return f"{d} share {mine:.0f}% of known matrix time != ~{pct}%"
    return None


def _parallelism(want: str, got: dict[str, Any]) -> str | None:
    v = got["value"]
    if want == "unknown":
        return None if v == "unknown" else f"parallelism {v} != unknown"
    vals = v if isinstance(v, list) else [v]
    need = {"none"} if want == "none" else set()
    if want.startswith("ddp"):
        need.add("ddp")
    if "all_to_all" in want:
        need.add("all_to_all")
    return None if need <= set(vals) else f"parallelism {vals} lacks {sorted(need - set(vals))}"


def _compiled(want: list[str], got: dict[str, Any]) -> str | None:
    v = got["value"]
    mine = {x for x in (v if isinstance(v, list) else [v]) if x != "engine_managed"}
    return None if mine == set(want) else f"compiled {sorted(mine)} != {sorted(want)}"


def _attention(want: str, got: dict[str, Any]) -> str | None:
    first = "triton-unified" if "unified" in want else want.split()[0]
    return None if got["value"] == first else f"attention {got['value']} != {first} ({want})"


def _comm(want: str, got: dict[str, Any]) -> str | None:
    v = got["value"]
    return None if isinstance(v, list) and want in v else f"comm dtype {v} != {want}"


def _dataloader(want: str, got: dict[str, Any]) -> str | None:
    v = got["value"] if isinstance(got["value"], dict) else {}
    h2d = "both" if "both" in want else "pageable" if "pageable" in want else "pinned"
    if v.get("h2d") != h2d:
        return f"host copies {v.get('h2d')} != {h2d}"
    workers = "0" if "num_workers 0" in want else "multi" if "num_workers >" in want else None
    if workers and v.get("workers") != workers:
        return f"DataLoader workers {v.get('workers')} != {workers}"
    return None


CHECKS = {
    "mode": _mode,
    "engine": _same("engine"),
    "optimizer": _optimizer,
    "matrix_dtypes": _matrix,
    "parallelism": _parallelism,
    "comm_dtype": _comm,
    "compiled": _compiled,
    "attention": _attention,
    "dataloader": _dataloader,
    "vendor": _same("vendor"),
}


def agree(label: dict[str, Any], run: dict[str, dict[str, Any]]) -> dict[str, str | None]:
    """Per labelled fact: None when the computed fact agrees, else what differs."""
    out: dict[str, str | None] = {}
    for fact, lab in label.items():
        got = run.get(fact)
        if got is None:
            out[fact] = "not computed"
            continue
        out[fact] = CHECKS[fact](lab["value"], got)
    return out
