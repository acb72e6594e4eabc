"""One-off work the idle split paints as start-up or compilation (:mod:`.idle`): the runtime
calls, ranges, CPU ops and Python frames of start-up, code loading, first calls, library and
NCCL set-up and teardown, and of compilation beyond torch.compile (nvFuser and Thunder,
NVRTC, Triton compile and autotuning, flashinfer JIT). Such time is not steady state: a
window mostly made of it is not representative, and inside a steady run it is left out of the
steady-state rules and named."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis.attribution import name_matches

#: ranges / ops / python frames during which the host records a CUDA/HIP graph
CAPTURE_RANGE_RE = re.compile(
    r"CUDAGraphNode\.record|cudagraph_trees\.py\(\d+\): (?:record_function|_record)\b"
    r"|_capture_cudagraphs|\bcapture_model\b|\bgraph[_ ]capture\b|^capture_\d+(?:_\w+)?$"
    r"|CUDAGraph\.capture|cuda_graph\w*\.py\(\d+\): capture\b",
    re.IGNORECASE,
)

ONE_OFF_CALL_RE = re.compile(
    r"^(?:cuda|hip|cu)(?:StreamCreate\w*|EventCreate\w*|GetDeviceProperties\w*|"
    r"DeviceGetStreamPriorityRange|GetDeviceCount|SetDevice|Init|DevicePrimaryCtx\w*|"
    r"CtxCreate\w*|ModuleLoad\w*|ModuleGetFunction|FuncGetAttributes|FuncSetAttribute|"
    r"DeviceGetAttribute|DeviceSetLimit|GetDevice|DriverGetVersion|RuntimeGetVersion|"
    r"LibraryLoad\w*|KernelGetFunction|ChooseDevice|ModuleUnload|LibraryUnload|DeviceReset|"
    r"CtxDestroy\w*)(?:_v\d+)?$|^nvrtc\w+$"
)
#: runtime calls that load GPU code: the CPU op around one is a first call (cubin loading,
#: first-call GEMM heuristics inside aten::addmm / aten::mm, lazy module loading)
CODE_LOAD_CALL_RE = re.compile(
    r"^(?:cuda|hip|cu)(?:ModuleLoad\w*|LibraryLoad\w*|ModuleGetFunction|LibraryGetKernel)"
    r"(?:_v\d+)?$|^nvrtc\w+$"
)
#: ranges / ops / python frames of one-off start-up beyond PyTorch's: library handles and
#: first-call heuristics (cuBLAS, cuBLASLt, cuDNN, hipBLASLt, rocBLAS, MIOpen), cubin loading
#: (Triton, flashinfer), NCCL communicator set-up and teardown
STARTUP_RANGE_RE = re.compile(
    r"\b(?:cublas(?:Lt)?Create\w*|cublasLtMatmulAlgoGetHeuristic|cudnnCreate\w*|cudnnFind\w*"
    r"|cudnnGet\w*Algorithm\w*|hipblasLt(?:Create|MatmulAlgoGetHeuristic)\w*"
    r"|rocblas_create_handle|miopenFind\w*|load_cubin|cuModuleLoad\w*|cuLibraryLoad\w*"
    r"|ncclCommInit\w*|ncclCommSplit|ncclCommDestroy|ncclCommAbort|ncclCommFinalize"
    r"|init_process_group|destroy_process_group)\b"
)
#: ranges / ops / python frames in which torch.compile or Triton compiles
COMPILE_RANGE_RE = re.compile(
    r"_compile\.compile_inner|\bcompile_fx(?:_inner)?\b|call_user_compiler|inductor_compile"
    r"|create_aot_dispatcher_function|fx_codegen_and_compile|TritonCompile|async_compile\.wait"
    r"|convert_frame\.py\(\d+\): _compile\b|triton/compiler/compiler\.py\(\d+\): compile\b"
    # beyond torch.compile: nvFuser and Thunder, NVRTC, Triton autotuning, flashinfer's JIT
    r"|compileFusion|FusionExecutor::compile|KernelExecutor::compile|FusionKernelRuntime::compile"
    r"|GpuLower::lower|executor_utils::NVRTC|Nvrtc::CompileProgram|\bnvrtc\w*|nvfuser\S*compile"
    r"|thunder\S*\b(?:jit|compile|get_computation_and_inputs|transform_for_execution)\b"
    r"|triton/runtime/autotuner\.py\(\d+\)|\bAutotuner\b|benchmark_all_configs|\bautotune"
    r"|triton/runtime/jit\.py\(\d+\): (?:_do_compile|compile)\b"
    r"|flashinfer\S*(?:jit|build_and_load|gen_\w+_module)",
    re.IGNORECASE,
)


def first_calls(an: Any, rt: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The CPU ops holding a runtime call that loads GPU code (a module, library or NVRTC
    call): first calls, whose whole span is start-up work (cubin loading, first-call GEMM
    heuristics)."""
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    if not len(rt) or "op_idx" not in rt.columns:
        return empty
    hit = name_matches(rt["name"].astype(str).to_numpy(), CODE_LOAD_CALL_RE)
    idx = np.unique(rt["op_idx"].to_numpy(np.int64)[hit])
    idx = idx[idx >= 0]
    if not len(idx):
        return empty
    ops = an.attribution.ops
    s = ops["start_ns"].to_numpy(np.int64)[idx]
    return s, s + ops["dur_ns"].to_numpy(np.int64)[idx]
