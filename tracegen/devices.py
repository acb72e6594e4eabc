"""The devices the simulator models: what a trace says about them, and how fast they run.

Each :class:`SimDevice` holds the ``deviceProperties`` entry a profiler writes for that GPU (name,
memory, compute capability, SM count: real values, so traceinsight's device matcher resolves the
trace as it would a real one) and takes its **peaks from traceinsight's device table**
(``traceinsight/devices/devices.yaml`` through :mod:`traceinsight.devices.table`, the built-in table
only,
so a ``TRACEINSIGHT_DEVICES`` file never changes a generated trace). The simulated kernels run
at a fraction of these peaks, and the analysis measures them against the same table.

A dtype the part has no unit for (BF16 on a V100) runs at the part's FP32 rate (emulated).

**Overrides.** Where the table's number differs from the one the bundled samples were generated
with, the preset names the old number explicitly (``peak_override`` / ``mem_bw_override``), so
``sample_traces/`` stay byte-identical. To adopt the table's number, delete the override and
regenerate the samples (``python sample_traces/make_samples.py``), in one commit.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from traceinsight.devices import table as _table


@functools.cache
def _spec(key: str) -> _table.DeviceSpec:
    spec = _table.lookup(key, _table.builtin_table())
    if spec is None:
        raise KeyError(f"device key {key!r} is not in traceinsight/devices/devices.yaml")
    return spec


@dataclass(frozen=True)
class SimDevice:
    """One modelled GPU: its trace properties and its peaks (FLOP/s and bytes/s)."""

    table_key: str  #: the entry of traceinsight/devices/devices.yaml that holds its peaks
    props: Mapping[str, Any]  #: the ``deviceProperties`` entry (without ``id``)
    vendor: str = "nvidia"
    #: dtype -> FLOP/s used instead of the table's (documented per preset)
    peak_override: Mapping[str, float] = field(default_factory=dict)
    mem_bw_override: float | None = None  #: bytes/s used instead of the table's

    @property
    def spec(self) -> _table.DeviceSpec:
        """The table entry (traceinsight's view of this device)."""
        return _spec(self.table_key)

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s the simulator runs ``dtype`` GEMMs against."""
        if dtype in self.peak_override:
            return self.peak_override[dtype]
        spec = self.spec
        value = spec.peak(dtype) or spec.peak("fp32")
        if value is None:
            raise ValueError(f"{self.table_key} has no {dtype} or fp32 peak in the device table")
        return value

    @property
    def mem_bw(self) -> float:
        """Peak DRAM bandwidth, bytes/s."""
        if self.mem_bw_override is not None:
            return self.mem_bw_override
        if self.spec.mem_bw is None:
            raise ValueError(f"{self.table_key} has no memory bandwidth in the device table")
        return self.spec.mem_bw

    @property
    def total_mem(self) -> int:
        """Memory the device reports (``totalGlobalMem``), bytes."""
        return int(self.props["totalGlobalMem"])


DEVICES: dict[str, SimDevice] = {
    "H100": SimDevice(
        "h100-sxm",
        {
            "name": "NVIDIA H100 80GB HBM3",
            "totalGlobalMem": 85_029_158_912,
            "computeMajor": 9,
            "computeMinor": 0,
            "numSms": 132,
        },
        # the samples were made with the rounded 989 TFLOP/s (table: 989.4)
        peak_override={"bf16": 989e12, "fp16": 989e12},
    ),
    "A100": SimDevice(
        "a100-sxm4-80gb",
        {
            "name": "NVIDIA A100-SXM4-80GB",
            "totalGlobalMem": 85_097_971_712,
            "computeMajor": 8,
            "computeMinor": 0,
            "numSms": 108,
        },
        # generated with a rounded 2.0 TB/s (table: 2039 GB/s); tests pin its traces' timing
        mem_bw_override=2.0e12,
    ),
    "V100": SimDevice(
        "v100-sxm2-32gb",
        {
            "name": "Tesla V100-SXM2-32GB",
            "totalGlobalMem": 34_089_730_048,
            "computeMajor": 7,
            "computeMinor": 0,
            "numSms": 80,
        },
    ),
    "MI300X": SimDevice(
        "mi300x",
        {
            "name": "AMD Instinct MI300X",
            "totalGlobalMem": 206_141_652_992,
            "computeMajor": 9,
            "computeMinor": 4,
            "numSms": 304,
            "warpSize": 64,
        },
        vendor="amd",
        # the samples were made with rounded 1307 / 163 TFLOP/s (table: 1307.4 / 163.4)
        peak_override={"bf16": 1307e12, "fp16": 1307e12, "fp32": 163e12},
    ),
}

#: ``deviceProperties`` by device name, for :class:`~tracegen.synth.KinetoTraceBuilder`
DEVICE_PROPS: dict[str, Mapping[str, Any]] = {k: d.props for k, d in DEVICES.items()}
