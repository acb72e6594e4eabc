"""What the simulator simulates: a :class:`Workload` (one training run) and its constants."""

from __future__ import annotations

from dataclasses import dataclass

from tracegen.devices import DEVICES

MiB = 1 << 20
GiB = 1 << 30

VOCAB = 32_000  #: embedding rows (the embedding's parameters count in the optimizer)
HEAD_DIM = 128
LAUNCH_LATENCY_NS = 2_000  #: launch end -> earliest kernel start
KERNEL_GAP_NS = 1_000  #: back-to-back kernels on one stream
MIN_KERNEL_NS = 2_000
OP_TAIL_NS = 1_500  #: op end after its last launch
OP_GAP_NS = 1_000  #: between sibling ops
CPU_ONLY_OP_NS = 2_500  #: an op that launches nothing (views, aten::t, AddBackward0)
WRAP_PRE_NS, WRAP_POST_NS = 2_000, 1_000  #: composite op (aten::linear) around its children
MODULE_PRE_NS, MODULE_POST_NS = 3_000, 1_500  #: nn.Module frame around its ops
ANN_PRE_NS, ANN_POST_NS = 1_000, 500  #: record_function annotation
POST_SYNC_HOST_NS = 25_000  #: Python work after a host sync before the next launch
LAUNCH_QUEUE_DEPTH = 1024  #: launches block once this many GPU activities are pending
COMM_LATENCY_NS = 10_000
ADAM_CHUNK_ELEMS = 320 * 65_536  #: elements per multi_tensor_apply launch

DTYPES = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Workload:
    """One training run to simulate. Times in ns, sizes in bytes."""

    device: str = "H100"  #: key of tracegen.devices.DEVICES
    steps: int = 4  #: ProfilerStep windows
    first_step: int = 10  #: number of the first ProfilerStep#N
    layers: int = 4  #: transformer blocks
    hidden: int = 4096
    seq: int = 2048
    batch: int = 4
    dtype: str = "bf16"  #: bf16 | fp16 | fp32
    world_size: int = 1
    rank: int = 0
    # host side
    cpu_op_overhead_ns: int = 6_000  #: CPU time per launching op before its launch
    launch_ns: int = 4_000  #: duration of each cudaLaunchKernel
    dataloader_ns: int = 200_000  #: DataLoader __next__ at step start
    syncs_per_step: int = 0  #: aten::item host syncs: one at step end, the rest inside forward
    tiny_kernels_per_layer: int = 0  #: extra 1-3 µs elementwise kernels per layer
    # GPU efficiency
    gemm_efficiency: float = 0.6  #: fraction of peak FLOP/s GEMMs reach
    memory_efficiency: float = 0.7  #: fraction of peak bandwidth memory-bound kernels reach
    elementwise_scale: float = 1.0  #: >1 adds memory-bound elementwise work per layer
    # communication
    comm_bytes: int = 0  #: bytes all-reduced per step (0 = none)
    comm_bandwidth: float = 100e9  #: bus bandwidth, bytes/s
    comm_overlap: float = 1.0  #: fraction of the all-reduce issued during backward
    straggler_rank: int | None = None
    straggler_slowdown: float = 1.0  #: GPU time multiplier on straggler_rank
    # variability
    jitter: float = 0.0  #: per-step relative variation of GPU and host time (seeded)
    slow_step_every: int = 0  #: every k-th step gets a host stall ...
    slow_step_extra_ns: int = 0  #: ... of this length
    cold_start_ns: int = 0  #: the first kernel launch blocks this long (lazy module loading)
    # memory
    memory: bool = True  #: [memory] events (profile_memory)
    reserved_overhead: float = 1.1  #: Total Reserved / Total Allocated at the peak
    peak_memory_fraction: float = 0.5  #: peak Total Reserved / totalGlobalMem
    leak_bytes_per_step: int = 0  #: stays allocated at every step end
    oom: bool = False  #: an [OutOfMemory] event at the end
    backward_thread: bool = True  #: autograd ops on their own thread
    with_stack: bool = True  #: nn.Module Python frames
    #: with_stack: also the Python call frames inside each nn.Module frame (``_wrapped_call_impl``
    #: > ``_call_impl`` > ``forward``), as deep as a real stack records
    python_frames: bool = False
    record_shapes: bool = True  #: Input Dims / Input type
    seed: int = 0

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"device {self.device!r} is not one of {sorted(DEVICES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {DTYPES}")
        for name in ("steps", "layers", "hidden", "seq", "batch", "world_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world_size {self.world_size}")
        if self.straggler_rank is not None and not 0 <= self.straggler_rank < self.world_size:
            raise ValueError(f"straggler_rank {self.straggler_rank} outside world_size")
        if not 0.0 <= self.comm_overlap <= 1.0:
            raise ValueError("comm_overlap must be within [0, 1]")
        if (
            min(
                self.gemm_efficiency,
                self.memory_efficiency,
                self.comm_bandwidth,
                self.straggler_slowdown,
                self.elementwise_scale,
                self.reserved_overhead,
                self.peak_memory_fraction,
            )
            <= 0
        ):
            raise ValueError("efficiencies, bandwidths, scales and fractions must be > 0")
        if (
            min(
                self.cpu_op_overhead_ns,
                self.launch_ns,
                self.dataloader_ns,
                self.syncs_per_step,
                self.tiny_kernels_per_layer,
                self.comm_bytes,
                self.slow_step_every,
                self.slow_step_extra_ns,
                self.leak_bytes_per_step,
                self.cold_start_ns,
            )
            < 0
            or self.jitter < 0
        ):
            raise ValueError("counts, times and byte sizes must be >= 0")

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def params(self) -> int:
        """Trainable parameters: per block 12·H² + 13·H, plus the embedding and final norm."""
        h = self.hidden
        return self.layers * (12 * h * h + 13 * h) + VOCAB * h + 2 * h
