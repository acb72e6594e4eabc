"""Kernel classes by name: a table of patterns, first match wins.

Kept as data so new library names are one line each. Covers current names: cuBLASLt
``nvjet_*`` and ``sm90_xmma_gemm_*``, CUTLASS 2/3 (``cutlass_80_tensorop_*``,
``sm90_gemm_*``), flash-attention / FMHA / cuDNN SDPA, Triton (``triton_poi_/red_/per_/tem_``),
ROCm Tensile ``Cijk_*``, ``ck_tile`` and AITER kernels, NCCL >= 2.19 ``ncclDevKernel_*`` and
RCCL. Names are matched case-insensitively anywhere in the (demangled) name.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..vocab import CLASSES


#: (class, pattern) pairs; order matters (first match wins)
KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    ("communication", r"nccl|rccl|hccl|msccl|cross_device_reduce|all_?reduce|all_?gather|"
                      r"reduce_?scatter|all_?to_?all|nvshmem|deepep"),
    ("attention", r"flash|fmha|attention|attn|sdpa|paged_?att|mha_|_mha|xformers|sage_?att|"
                  r"ck_tile.*fmha|unified_attention|decode_attention|prefill"),
    ("convolution", r"conv|implicit_?gemm|winograd|cudnn::.*(fprop|dgrad|wgrad)|dgrad|wgrad|"
                    r"fprop|igemm|miopen.*conv|naive_conv"),
    ("gemm", r"gemm|nvjet|cublas|cutlass|xmma|wgmma|hgmma|Cijk_|gemv|matmul|s1688|s16816|h884|"
             r"h1688|i8816|triton_tem|_mm_|bmm|splitk|tensorop|dot_product|hipblaslt|rocblas|"
             r"ck::.*gemm|ck_tile.*gemm|fp8_?mm|scaled_mm|grouped_mm|moe_.*gemm|marlin"),
    ("reduction", r"norm|softmax|reduce|reduction|cross_entropy|nll_loss|argmax|argmin|topk|"
                  r"sort|scan|cumsum|cub::|triton_red|triton_per|welford|_sum_|sum_kernel|"
                  r"mean_kernel|max_kernel|min_kernel|logsumexp|histogram"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|triton_poi|copy|fill|cat|"
                    r"index|gather|scatter|embedding|gelu|relu|silu|swiglu|sigmoid|tanh|"
                    r"dropout|add|mul|div|sub|cast|transpose|permute|rotary|rope|clamp|where|"
                    r"multi_tensor_apply|adam|sgd|lamb|memcpy|memset|nchwtonhwc|nhwctonchw|"
                    r"pad|upsample|pool|masked|arange|random|distribution|bernoulli|exp|log|"
                    r"pow|sqrt|rsqrt|abs|neg|compare|eq_|ne_|lt_|gt_|bitwise|quant|act_and_mul"),
)

_COMPILED = tuple((c, re.compile(p, re.IGNORECASE)) for c, p in KERNEL_PATTERNS)

#: launching CPU ops that mark their kernels as communication
COMM_OP_RE = re.compile(r"^(nccl|rccl|hccl|gloo|mpi):|^c10d::|^c10d_functional::|"
                        r"^_c10d_functional::|record_param_comms|ProcessGroup", re.IGNORECASE)

#: tensor-core kernels (used by the fp32-GEMM rule): names that say the MMA units are used
TENSOR_CORE_RE = re.compile(
    r"nvjet|xmma|wgmma|hgmma|hmma|tensorop|s1688|s16816|h884|h1688|h16816|i8816|bf16|f16|"
    r"fp16|half|tf32|fp8|e4m3|e5m2|_16x16x|_32x32x|MI16x16|MI32x32|MFMA|sm80_|sm90_|sm100_|"
    r"flash|fmha|Cijk_.*(BBS|HHS|HSS|BSS|F8)", re.IGNORECASE)
#: fp32 GEMM kernels that do not use tensor cores
FP32_GEMM_RE = re.compile(r"sgemm|gemm.*f32f32_f32f32|Cijk_.*_SB_|Cijk_.*SSS", re.IGNORECASE)


@lru_cache(maxsize=65536)
def kernel_class(name: str) -> str:
    """Class of one kernel by name (``other`` when nothing matches)."""
    for cls, rx in _COMPILED:
        if rx.search(name):
            return cls
    return "other"


def classify_names(names: list[str]) -> list[str]:
    return [kernel_class(n) if isinstance(n, str) else "other" for n in names]
