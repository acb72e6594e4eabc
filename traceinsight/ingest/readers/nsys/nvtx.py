"""NVTX ranges -> operators, annotations, steps and layers.

Every range is named ``COALESCE(text, StringIds[textId])``, prefixed ``domain:`` outside the
default domain (the domain's name is the text of its ``NvtxDomainCreate`` row in the same
process). Push/pop ranges on a thread nest; they are sorted into:

- PyTorch ``emit_nvtx`` ranges (``aten::mm, seq = 12, op_id = 345, sizes = [[2, 3], [3]]``):
  the name is the part before the first ``, key = ``; operators (``aten::``, ``c10d::``, any
  lower-case ``ns::`` name, backward nodes ``XBackward0``, ``autograd::engine::...``) become
  ``cpu_ops`` with ``seq`` as the sequence number and ``sizes`` as the input shapes; other
  RecordFunction scopes (``FSDP::pre_forward (...)``, ``Optimizer.step#...``) annotations;
  ``ProfilerStep#N`` steps;
- communication ranges (NCCL, MPI, NVSHMEM, UCX domains, or ``nccl*`` names when the domain row
  was lost) become ``cpu_ops`` named ``DOMAIN:range`` (what the analysis reads as a collective);
- user ranges: ``step N`` / ``iteration N`` become steps; the others name layers or phases: an
  annotation each, and a frame of the layer path (``python_frames``, kind ``module``).

Start/end ranges may overlap and cross threads: kept as ``nvtx`` ranges, not used for
attribution (NVIDIA's projection ignores them too). Marks become instants of ``other_events``.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from traceinsight.ingest.readers.nsys.db import NsysDb, pid_of, tid_of
from traceinsight.ingest.readers.nsys.families import Family, constant, family, id_texts, texts

TABLE = "NVTX_EVENTS"
_TORCH_ARG = re.compile(r", (?:stashed seq|seq|op_id|sizes|input_op_ids) = ")
_SEQ = re.compile(r"(?:^|, )(?:stashed )?seq = (-?\d+)")
_SIZES = re.compile(r", sizes = (\[.*?\])(?:, input_op_ids = |$)")
_OP = re.compile(
    r"^[a-z_][a-z0-9_]*::|^autograd::engine::evaluate_function: |Backward\d*$|"
    r"AccumulateGrad|^(?:nccl|gloo|mpi|rccl):|^record_param_comms$"
)
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_USER_STEP = re.compile(r"^(?:train[_ ])?(?:step|iter|iteration)[ _#:-]*(\d+)$", re.IGNORECASE)
_COMM_DOMAIN = re.compile(r"^(nccl|rccl|mpi|nvshmem|ucx|gloo)", re.IGNORECASE)
_NCCL_NAME = re.compile(r"^nccl[A-Z]")
EVALUATE = "autograd::engine::evaluate_function: "


@dataclass
class Parsed:
    """What one range text means."""

    target: str  #: op | annotation | step | layer | nvtx
    name: str
    step: int | None = None
    seq: int | None = None
    sizes: str | None = None
    collective: str | None = None
    torch: bool = False


def parse(text: str, domain: str | None, pushpop: bool) -> Parsed:
    """Sort one range (docs/NSYS.md)."""
    full = f"{domain}:{text}" if domain else text
    if not pushpop:
        return Parsed("nvtx", full)
    if (domain and _COMM_DOMAIN.match(domain)) or (not domain and _NCCL_NAME.match(text)):
        coll = text[4:].lower() if text.lower().startswith("nccl") else text.lower()
        return Parsed("op", full if domain else f"nccl:{text}", collective=coll or None)
    m = _TORCH_ARG.search(text)
    if m and not domain:
        name, args = text[: m.start()], text[m.start() :]
        seq = _SEQ.search(args)
        sizes = _SIZES.search(args)
        step = _PROFILER_STEP.match(name)
        if step:
            return Parsed("step", name, step=int(step.group(1)), torch=True)
        target = "op" if _OP.search(name) else "annotation"
        return Parsed(
            target,
            name,
            seq=int(seq.group(1)) if seq else None,
            sizes=_json(sizes.group(1)) if sizes else None,
            torch=True,
        )
    step = _PROFILER_STEP.match(text) or _USER_STEP.match(text)
    if step:
        return Parsed("step", full, step=int(step.group(1)))
    return Parsed("layer", full)


def _json(text: str) -> str | None:
    try:
        return json.dumps(json.loads(text))
    except ValueError:
        return None


@dataclass
class NvtxRead:
    families: list[Family] = field(default_factory=list)
    torch_ranges: int = 0
    with_sizes: int = 0
    unclosed: int = 0
    thread_labels: dict[int, str] = field(default_factory=dict)  #: globalTid -> NvtxThread text
    domains: set[str] = field(default_factory=set)


def read_nvtx(db: NsysDb, base: int, bad: Counter) -> NvtxRead:
    out = NvtxRead()
    if not db.count(TABLE):
        return out
    ids = db.nvtx_type_ids()
    r = db.select(
        TABLE,
        ["start", "end", "eventType", "text", "textId", "domainId", "globalTid"],
        order="start",
    )
    s = db.strings
    text = [
        t if t is not None else (s.get(int(i)) if i is not None else None)
        for t, i in zip(r["text"], r["textId"])
    ]
    etype = r["eventType"]
    gtid = r["globalTid"]
    domains: dict[tuple[int | None, int], str] = {}
    for t, e, g, d in zip(text, etype, gtid, r["domainId"]):
        if e == ids["NvtxDomainCreate"] and d is not None and t:
            domains[(pid_of(g), int(d))] = t
        elif e == ids["NvtxThread"] and g is not None and t:
            out.thread_labels[int(g)] = t
    out.domains = set(domains.values())
    pushpop = {ids["NvtxPushPopRange"], ids["NvtxtPushPopRange"]}
    ranges = pushpop | {ids["NvtxStartEndRange"], ids["NvtxtStartEndRange"]}
    end_of_capture = db.capture_end_ns
    if end_of_capture is None:
        ends = [e for e in r["end"] if e is not None] + [x for x in r["start"] if x is not None]
        end_of_capture = max(ends) if ends else 0
    rows: dict[str, list[list[Any]]] = {
        k: [] for k in ("op", "annotation", "step", "layer", "nvtx", "mark")
    }
    for st, en, e, t, d, g in zip(r["start"], r["end"], etype, text, r["domainId"], gtid):
        if st is None:
            continue
        dom = domains.get((pid_of(g), int(d))) if d else None
        if e == ids["NvtxMark"]:
            rows["mark"].append([st, None, t or "", dom, g, None])
            continue
        if e not in ranges:
            continue
        if en is None:
            out.unclosed += 1
            en = max(end_of_capture, st)
        p = parse(t or "", dom, e in pushpop)
        out.torch_ranges += p.torch
        out.with_sizes += p.sizes is not None
        rows[p.target].append([st, en, p.name, dom, g, p])
    _copy_backward_seq(rows["op"])
    out.families = _families(rows, base)
    return out


def _copy_backward_seq(ops: list[list[Any]]) -> None:
    """``autograd::engine::evaluate_function: X`` carries no ``seq``; the backward node ``X``
    it runs does (the next range on its thread). Copy it, as Kineto does."""
    order = sorted(range(len(ops)), key=lambda i: (ops[i][4] or 0, ops[i][0]))
    for a, b in itertools.pairwise(order):
        pa_, pb = ops[a][5], ops[b][5]
        if (
            pa_.name.startswith(EVALUATE)
            and pa_.seq is None
            and pb.seq is not None
            and ops[a][4] == ops[b][4]
            and ops[a][0] <= ops[b][0] <= ops[a][1]
        ):
            pa_.seq = pb.seq


def _families(rows: dict[str, list[list[Any]]], base: int) -> list[Family]:
    out = []

    def host(rs: list[list[Any]]) -> dict[str, Any]:
        st = np.array([x[0] for x in rs], dtype=np.int64)
        en = np.array([x[1] if x[1] is not None else x[0] for x in rs], dtype=np.int64)
        return {
            "name": texts([x[2] for x in rs]),
            "process": id_texts([pid_of(x[4]) for x in rs]),
            "thread": id_texts([tid_of(x[4]) for x in rs]),
            "start_ns": pa.array(st + base),
            "dur_ns": pa.array(np.maximum(en - st, 0)),
            "cat_raw": constant(len(rs), TABLE),
        }

    def pids(rs: list[list[Any]]) -> list[int | None]:
        return [pid_of(x[4]) for x in rs]

    if rows["op"]:
        ops = rows["op"]
        out.append(
            family(
                "cpu_ops",
                TABLE,
                {
                    **host(ops),
                    "sequence_nr": pa.array([x[5].seq for x in ops], pa.int64()),
                    "input_dims": pa.array([x[5].sizes for x in ops], pa.string()),
                    "collective_name": texts([x[5].collective for x in ops]),
                },
                pids(ops),
            )
        )
    spans = [(k, x) for k in ("step", "annotation", "layer", "nvtx") for x in rows[k]]
    if spans:
        rs = [x for _, x in spans]
        kinds = ["annotation" if k == "layer" else k for k, _ in spans]
        out.append(
            family(
                "ranges",
                TABLE,
                {
                    **host(rs),
                    "kind": texts(kinds),
                    "step": pa.array([x[5].step for x in rs], pa.int64()),
                    "domain": texts([x[3] for x in rs]),
                },
                pids(rs),
            )
        )
    if rows["layer"]:
        rs = rows["layer"]
        out.append(
            family(
                "python_frames",
                TABLE,
                {**host(rs), "frame_kind": constant(len(rs), "module")},
                pids(rs),
            )
        )
    if rows["mark"]:
        rs = rows["mark"]
        cols = host(rs)
        cols["dur_ns"] = pa.nulls(len(rs), pa.int64())
        out.append(
            family(
                "other_events",
                TABLE,
                {**cols, "event_shape": constant(len(rs), "instant")},
                pids(rs),
            )
        )
    return out
