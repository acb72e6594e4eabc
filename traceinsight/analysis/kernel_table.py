"""Kernel-name tables: the class of a GPU kernel, the dtype of a matrix kernel, and the CPU ops
whose kernels are communication. Data only; :mod:`traceinsight.analysis.categories` applies it.

Every table is an ordered tuple of ``(value, regex)``; the first regex that matches anywhere in
the (demangled or mangled) kernel name, case-insensitively, wins. Exceptions come first: names
that contain another class's keyword (``_typeConvert`` is not a convolution, ``fused_add_rms_norm``
is a normalisation, an MoE ``finalize`` kernel that mentions ``matmul`` is a reduction, Triton
kernels name every op they fused). ``tests/test_kernel_names.py`` pins real names from the shared
corpus and from the libraries named below to their class and dtype.

Sources of the names: PyTorch ATen/cuDNN/cuBLAS/cuBLASLt (``volta_sgemm_*``, ``sm80_xmma_*``,
``nvjet_*``, ``cutlass_80_tensorop_*``), ROCm Tensile/hipBLASLt (``Cijk_*``), MIOpen
(``igemm_*``, ``MIOpenBatchNorm*``), composable_kernel / ck_tile, AITER, Triton / Inductor,
flash-attention, xFormers, vLLM / SGLang (paged attention, ``cross_device_reduce``), NCCL / RCCL,
MSCCL / MSCCL++, NVSHMEM, DeepEP (``deep_ep::intranode::dispatch``), TensorRT-LLM all-reduce.
"""

from __future__ import annotations

#: kernel class by name, first match wins (classes: vocab.CLASSES)
KERNEL_CLASSES: tuple[tuple[str, str], ...] = (
    # --- communication: collective / point-to-point / expert-parallel all-to-all libraries ---
    (
        "communication",
        (
            r"nccl|rccl|hccl|msccl|nvshmem|deep_?ep|(?:^|\W)ep::|::ep::|uccl|"
            r"cross_device_reduce|custom_?all_?reduce|(?:one|two)_?shot_?all_?reduce|"
            r"(?:one|two)ShotAllReduce|lamport|quick_?all_?reduce|all_?reduce|all_?gather|"
            r"reduce_?scatter|all_?to_?all|all2all|(?:intra|inter)node::\w*(?:dispatch|combine|notify)|"
            r"notify_dispatch|sendrecv|ncclDevKernel"
        ),
    ),
    # --- Triton / Inductor: the prefix says what the kernel is; the rest lists fused ops -----
    ("elementwise", r"^triton_poi_"),
    ("reduction", r"^triton_(?:red|per)_"),
    ("gemm", r"^triton_tem_"),
    # --- exceptions: names that contain another class's keyword ------------------------------
    (
        "elementwise",
        (
            r"_?type_?convert|scalePackedTensor|nchwToNhwc|nhwcToNchw|"
            r"transpose_readWrite|batched_transpose|\bscal_kernel|"
            r"reshape_and_cache|concat_and_cache|store_kvcache|kv_indices|"
            r"fbgemm_gpu::(?!.*(?:gemm|f8f8|i8i8|cutlass))|split_embedding|"
            r"embedding_(?:forward|backward|bag|dense)|bounds_check_indices|"
            r"linearize_index|permute_\w*_kernel|_offsets_range|"
            r"distribution_elementwise|normal_and_transform|routing_memset"
        ),
    ),
    (
        "reduction",
        (
            r"rms_?norm|layer_?norm|group_?norm|batch_?norm|instance_?norm|"
            r"LayerNorm|GroupNorm|BatchNorm|Rmsnorm|bn_(?:fw|bw)_|RowwiseMoments|"
            r"GammaBeta|cuComputePartGrad|cuComputeGradGamma|ComputeFusedParams|"
            r"ComputeInternalGradients|ComputeBackwardFusedParams|"
            r"softmax|cross_entropy|nll_?loss|ClassNLLCriterion|"
            r"finali[sz]e|moe_sum|topk|routing_compute"
        ),
    ),
    # --- attention ---------------------------------------------------------------------------
    (
        "attention",
        (
            r"flash|fmha|attention|attn|sdpa|paged_?att|mha_|_mha\b|xformers|"
            r"sage_?(?:fwd|bwd|att)|BatchPrefill|decode_?att|mla_?(?:fwd|decode)"
        ),
    ),
    # --- convolution (and cuDNN/MIOpen helpers that only convolutions launch) ---------------
    (
        "convolution",
        (
            r"conv(?!ert)|implicit_?gemm|winograd|scudnn|hcudnn|\bcudnn::cnn::|"
            r"cudnn.*(?:fprop|dgrad|wgrad)|dgrad|wgrad|fprop|igemm_(?:fwd|bwd|wrw)|"
            r"im2col|Im2d2Col|col2im|fft[12]d_|flip_filter|"
            r"pointwise_mult_and_sum_complex|computeOffsetsKernel|computeBOffsets|"
            r"computeWgrad|cutlass_cudnn|cask_cudnn"
        ),
    ),
    # --- GEMM / GEMV (cuBLAS, cuBLASLt, CUTLASS, Tensile/hipBLASLt, CK, MoE grouped GEMMs) ---
    (
        "gemm",
        (
            r"gemm|gemv|nvjet|cublas|cutlass|xmma|wgmma|hgmma|Cijk_|matmul|_mm_|\bbmm|"
            r"splitk|tensorop_|dot_product|hipblaslt|rocblas|fp8_?mm|scaled_mm|grouped_mm|"
            r"marlin|fused_moe|moe_\w*mm"
        ),
    ),
    # --- reductions, scans, sorts ------------------------------------------------------------
    (
        "reduction",
        (
            r"reduce|reduction|argmax|argmin|sort|scan|cumsum|cub::|welford|_sum_|"
            r"sum_kernel|mean_kernel|max_kernel|min_kernel|logsumexp|histogram|"
            r"norm(?!al)|_sum\b"
        ),
    ),
    # --- elementwise, copies, layout, optimizer, pooling --------------------------------------
    (
        "elementwise",
        (
            r"elementwise|vectorized|unrolled|pointwise|copy|fill|cat|index|gather|"
            r"scatter|embedding|gelu|relu|silu|swiglu|sigmoid|tanh|dropout|add|mul|"
            r"div|sub|cast|transpose|permute|rotary|rope|clamp|where|"
            r"multi_tensor_apply|adam|sgd|lamb|memcpy|memset|pad|upsample|pool|"
            r"masked|arange|random|bernoulli|exp|log|pow|sqrt|rsqrt|abs|neg|"
            r"compare|eq_|ne_|lt_|gt_|bitwise|quant|act_and_mul|position"
        ),
    ),
)

#: class of the launching CPU op, for kernels whose name says nothing (first match wins)
OP_CLASSES: tuple[tuple[str, str], ...] = (
    (
        "attention",
        (
            r"scaled_dot_product|flash_attention|efficient_attention|_attention|"
            r"attention|paged_attention|\bsdpa"
        ),
    ),
    ("convolution", r"conv(?!ert)|cudnn_convolution|miopen_convolution"),
    ("elementwise", r"embedding|^fbgemm::(?!.*(?:_gemm|gemm_|matmul))"),
    (
        "gemm",
        (
            r"^aten::(?:mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|dot|vdot|einsum|"
            r"_scaled_mm|_grouped_mm|_int_mm|addbmm|_addmm_activation)$|"
            r"(?:Mm|Addmm|Bmm|Baddbmm|Mv|Linear)Backward|(?<!fb)gemm|_mm$|::mm$"
        ),
    ),
    (
        "reduction",
        (
            r"^aten::(?:sum|mean|amax|amin|max|min|prod|norm|linalg_vector_norm|var|std|"
            r"var_mean|_softmax|softmax|log_softmax|_log_softmax|layer_norm|"
            r"native_layer_norm|batch_norm|native_batch_norm|cudnn_batch_norm|"
            r"group_norm|native_group_norm|rms_norm|_fused_rms_norm|topk|sort|argsort|"
            r"cumsum|argmax|argmin|nll_loss\w*|cross_entropy_loss|logsumexp|"
            r"_softmax_backward_data|native_layer_norm_backward|"
            r"native_batch_norm_backward)$|norm|softmax"
        ),
    ),
    ("elementwise", r"^aten::"),
)

#: CPU ops (and their descendants) whose kernels are communication
COMM_OPS = (
    r"^(?:nccl|rccl|hccl|gloo|mpi|ucc|xccl):|^c10d::|^c10d_functional::|"
    r"^_c10d_functional(?:_autograd)?::|record_param_comms|ProcessGroup|^all_to_all|"
    r"^dist\.|deep_?ep|custom_ar::|::all_reduce|::all_gather|::reduce_scatter|"
    r"::all_to_all"
)

#: parts of matrix-op kernels that do no matrix math (split-K reductions, epilogues, offset
#: tables): excluded from the dtype split of matrix time
MATRIX_HELPERS = (
    r"splitKreduce|ReduceSplitK|reduce_wgrad|epilogue::impl|computeOffsets|"
    r"computeBOffsets|computeWgrad|generateWinogradTiles|flip_filter|im2col|"
    r"Im2d2Col|fft[12]d_|pointwise_mult_and_sum_complex|"
    r"winogradForward(?:Data|Filter|Output)|winogradWgrad(?:Data|Delta|Output)"
)

#: Tensile / hipBLASLt names: ``Cijk_<A layout>_<B layout>_<data type>...``; the data type's
#: first letter is the input type (S fp32, X xf32, H fp16, B bf16, D fp64, F8/B8 fp8, I8 int8)
_TENSILE = r"Cijk_A[a-z]+_B[a-z]+_"

#: dtype of a matrix kernel (GEMM / convolution / attention) by name, first match wins.
#: "fp32" = fp32 on the CUDA cores / vector ALUs (SIMT); "fp32_matrix" = AMD MFMA FP32;
#: "tensor" = a tensor-core kernel whose input dtype the name does not tell.
#: Names are matched after removing ``Fp8KVCacheDataType)0`` (vLLM's "auto" KV-cache tag).
KERNEL_DTYPES: tuple[tuple[str, str], ...] = (
    ("fp4", r"mxfp4|nvfp4|fp4|e2m1"),
    ("fp8", r"e4m3|e5m2|fp8|float8|f8f8|" + _TENSILE + r"(?:F8|B8)"),
    ("int8", r"i8816|int8|i8i8|s8s8|imma|" + _TENSILE + r"I8"),
    ("bf16", r"bf16|bfloat16|BFloat16|__nv_bfloat16|hip_bfloat16|DF16b|bhalf|" + _TENSILE + "B"),
    (
        "fp16",
        (
            r"fp16|f16|__half|\bhalf\b|half_t|c10::Half|DF16_|hgemm|h884|h1688|h16816|s884|"
            r"s16816|hcudnn|" + _TENSILE + "H"
        ),
    ),
    ("tf32", r"tf32|xf32|s1688|" + _TENSILE + "X"),
    ("fp64", r"dgemm|fp64|" + _TENSILE + "D"),
    ("fp32_matrix", _TENSILE + r"S\w*_MI\d+x\d+"),
    (
        "fp32",
        (
            r"sgemm|scudnn|cgemm|f32f32_f32f32|simt|cutlass[FB]_f32|" + _TENSILE + "S|"
            r"<float\b|\(float\b"
        ),
    ),
    (
        "tensor",
        (
            r"nvjet|xmma|wgmma|hgmma|hmma|wmma|tensorop|xdl|_MI\d+x\d+|mfma|"
            r"sm(?:80|90|100|120)_"
        ),
    ),
)
