"""Kernel classes and matrix dtypes: by kernel name, then by the launching op, then by stream.

The name tables live in :mod:`traceinsight.analysis.kernel_table` (data, one line per library).
:func:`classify` decides the class of every attributed GPU activity, in this order:

1. the kernel name (``kernel_class``), where the table knows it;
2. communication by the launching CPU op: a kernel launched under ``c10d::*``,
   ``record_param_comms``, ``nccl:*``, ``ProcessGroup*``, ``all_to_all*``, ``dist.*`` (or any
   op of :data:`~traceinsight.analysis.kernel_table.COMM_OPS`) is communication unless its name
   says it is matrix math (a fused all-gather + GEMM launches real GEMMs);
3. an unknown name takes the class of its launching op (``aten::mm`` -> gemm) or, failing that,
   of the op's outermost ancestor;
4. an unknown kernel on a stream whose other kernels are all communication is communication
   (NCCL, DeepEP and custom all-reduce kernels run on their own streams).

Copies and memsets are class ``memory``. :func:`kernel_dtype` reads the input dtype of a matrix
kernel from its name (``volta_sgemm`` fp32, ``s1688gemm`` TF32, ``Cijk_..._BBS_BH`` bf16).
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

from traceinsight.analysis import by_rank
from traceinsight.analysis.intervals import any_ancestor
from traceinsight.analysis.kernel_table import (
    COMM_OPS,
    KERNEL_CLASSES,
    KERNEL_DTYPES,
    MATRIX_HELPERS,
    OP_CLASSES,
)
from traceinsight.util import capture_hints
from traceinsight.util.vocab import CLASSES

__all__ = [
    "CLASSES",
    "COMM_OP_RE",
    "MATRIX_CLASSES",
    "classify",
    "classify_names",
    "is_matrix_helper",
    "kernel_class",
    "kernel_dtype",
    "op_class",
]

_KERNEL = tuple((c, re.compile(p, re.IGNORECASE)) for c, p in KERNEL_CLASSES)
_OPS = tuple((c, re.compile(p, re.IGNORECASE)) for c, p in OP_CLASSES)
_DTYPES = tuple((d, re.compile(p, re.IGNORECASE)) for d, p in KERNEL_DTYPES)
_HELPER = re.compile(MATRIX_HELPERS, re.IGNORECASE)
_KV_AUTO = re.compile(r"Fp8KVCacheDataType\)0", re.IGNORECASE)

#: launching CPU ops that mark their kernels (and their descendants' kernels) as communication
COMM_OP_RE = re.compile(COMM_OPS, re.IGNORECASE)
#: classes that do matrix math (tensor cores / MFMA): their dtype decides precision findings
MATRIX_CLASSES = ("gemm", "attention", "convolution")

#: tensor-core kernels (used by the roofline's fp32 roofs): names that say the MMA units are used
TENSOR_CORE_RE = re.compile(
    r"nvjet|xmma|wgmma|hgmma|hmma|tensorop|s1688|s16816|h884|h1688|h16816|i8816|bf16|f16|"
    r"fp16|half|tf32|fp8|e4m3|e5m2|_16x16x|_32x32x|MI16x16|MI32x32|MFMA|sm80_|sm90_|sm100_|"
    r"flash|fmha|Cijk_.*(BBS|HHS|HSS|BSS|F8)",
    re.IGNORECASE,
)
#: fp32 GEMM kernels that do not use tensor cores
FP32_GEMM_RE = re.compile(r"sgemm|gemm.*f32f32_f32f32|Cijk_.*_SB_|Cijk_.*SSS", re.IGNORECASE)


@lru_cache(maxsize=65536)
def kernel_class(name: str) -> str:
    """Class of one kernel by name (``other`` when the table does not know it)."""
    for cls, rx in _KERNEL:
        if rx.search(name):
            return cls
    return "other"


def classify_names(names: list[str]) -> list[str]:
    return [kernel_class(n) if isinstance(n, str) else "other" for n in names]


@lru_cache(maxsize=65536)
def op_class(name: str) -> str | None:
    """Class of the kernels a CPU op launches, by the op's name (None when it says nothing)."""
    if COMM_OP_RE.search(name):
        return "communication"
    for cls, rx in _OPS:
        if rx.search(name):
            return cls
    return None


@lru_cache(maxsize=65536)
def kernel_dtype(name: str) -> str | None:
    """Input dtype of a matrix kernel by name: fp4, fp8, int8, bf16, fp16, tf32, fp64,
    fp32_matrix (AMD MFMA fp32), fp32 (CUDA cores / vector ALUs), ``tensor`` (tensor cores,
    dtype not in the name) or None (the name does not tell)."""
    text = _KV_AUTO.sub("", name)
    for dtype, rx in _DTYPES:
        if rx.search(text):
            return dtype
    return None


@lru_cache(maxsize=65536)
def is_matrix_helper(name: str) -> bool:
    """A kernel of a matrix op that does no matrix math (split-K reduce, epilogue, offsets)."""
    return bool(_HELPER.search(name))


def _per_unique(values: np.ndarray, fn, default):
    """``fn`` over each distinct value (strings only), broadcast back."""
    out = np.full(len(values), default, dtype=object)
    if not len(values):
        return out
    codes, uniq = pd.factorize(pd.Series(values, dtype=object))
    mapped = np.array(
        [fn(u) if isinstance(u, str) else default for u in uniq] + [default], dtype=object
    )
    return mapped[np.where(codes >= 0, codes, len(uniq))]


def _top(idx: np.ndarray, parent: np.ndarray) -> np.ndarray:
    top = idx.copy()
    for _ in range(512):
        p = np.where(top >= 0, parent[np.clip(top, 0, None)], -1) if len(parent) else top * 0 - 1
        move = p >= 0
        if not move.any():
            break
        top = np.where(move, p, top)
    return top


def classify(gpu: pd.DataFrame, ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(class, how it was decided) of every row of ``gpu`` (attributed activities).

    ``gpu`` needs ``kind``, ``name``, ``rank``, ``stream`` and ``op_idx`` (row of ``ops``, -1 when
    no op launched it); ``ops`` needs ``name`` and ``parent``. ``how`` is one of ``name``,
    ``op`` (communication or class of the launching op), ``stream`` or ``none``.
    """
    n = len(gpu)
    if not n:
        return np.empty(0, dtype=object), np.empty(0, dtype=object)
    kind = gpu["kind"].astype(object).to_numpy()
    is_kernel = kind == "kernel"
    cls = _per_unique(gpu["name"].to_numpy(), kernel_class, "other")
    how = np.where(cls != "other", "name", "none").astype(object)
    op_idx = gpu["op_idx"].to_numpy(np.int64) if "op_idx" in gpu else np.full(n, -1, np.int64)
    if len(ops):
        names = ops["name"].to_numpy()
        parent = ops["parent"].to_numpy(np.int64)
        comm_op = _per_unique(names, lambda s: bool(COMM_OP_RE.search(s)), False).astype(bool)
        under_comm = any_ancestor(op_idx, parent, comm_op)
        up = under_comm & ~np.isin(cls, MATRIX_CLASSES) & (cls != "communication")
        cls[up] = "communication"
        how[up] = "op"
        unknown = (cls == "other") & (op_idx >= 0)
        if unknown.any():
            oc = _per_unique(names, op_class, None)
            leaf = oc[op_idx[unknown]]
            top = oc[_top(op_idx[unknown], parent)]
            got = np.where(pd.isna(leaf), top, leaf)
            sel = np.flatnonzero(unknown)[~pd.isna(got)]
            cls[sel] = got[~pd.isna(got)]
            how[sel] = "op"
    # unknown kernels on a stream that runs only communication otherwise
    unknown = (cls == "other") & is_kernel
    if unknown.any():
        key = pd.MultiIndex.from_arrays([gpu["rank"].to_numpy(), gpu["stream"].to_numpy()])
        known = is_kernel & (cls != "other")
        frame = pd.DataFrame({"comm": cls == "communication", "known": known}, index=key)
        per = frame[frame["known"]].groupby(level=[0, 1])["comm"].all()
        comm_streams = per[per].index
        if len(comm_streams):
            on = key.isin(comm_streams) & unknown
            cls[on] = "communication"
            how[on] = "stream"
    cls[~is_kernel] = "memory"
    how[~is_kernel] = "kind"
    return cls, how


def check_communication(store, gpu: pd.DataFrame, ops: pd.DataFrame, diags) -> None:
    """Data-quality warning ``no-communication-found``: a rank whose ``distributedInfo`` says
    the job has more than one rank, that recorded GPU kernels, but none of them communication
    (comm kernels were not recorded, or their library is not in the name table)."""
    kern = gpu[gpu["kind"].astype(object) == "kernel"] if len(gpu) else gpu
    for r in store.ranks:
        ws = (r.get("distributed") or {}).get("world_size") or 0
        rank = r.get("rank")
        if ws <= 1 or rank is None:
            continue
        k = by_rank.rows(kern, rank)
        if not len(k) or (k["cls"].astype(object) == "communication").any():
            continue
        comm_ops = 0
        if len(ops):
            o = by_rank.rows(ops, rank)["name"].dropna().astype(str)
            comm_ops = int(o.map(lambda s: bool(COMM_OP_RE.search(s))).sum())
        seen = (
            (
                f"; {comm_ops:,} collective CPU ops were recorded, so their kernels were lost or "
                "have names the kernel table does not know"
            )
            if comm_ops
            else ""
        )
        cap = capture_hints.Capture(capture_hints.tool_of(str(r.get("format") or "")))
        diags.add(
            "no-communication-found",
            f"{capture_hints.world_size_text(int(ws), cap)}, but none of the rank's "
            f"{len(k):,} kernels is communication{seen}: communication time, overlap and "
            "comm-bound cannot be judged",
            severity="warning",
            source=f"rank {rank}",
            hint=f"record the NCCL/RCCL kernels on every rank ({capture_hints.hint('gpu', cap)}); "
            "a custom collective library needs its kernel names in "
            "traceinsight/analysis/kernel_table.py",
        )
