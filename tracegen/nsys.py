"""Synthetic Nsight Systems SQLite exports with known answers, for the nsys reader's tests.

The tables and columns are those of real exports (``CUPTI_ACTIVITY_KIND_*``, ``NVTX_EVENTS``,
``StringIds``, ``TARGET_INFO_*``, ``META_DATA_EXPORT``); ``legacy=True`` writes the 2.x shape
(``EXPORT_META_DATA``, no ``ENUM_*`` tables). Times are integer ns on the capture clock; ids
are packed the nsys way (``globalTid = pid << 24 | tid``, ``globalPid = pid << 24``).

    b = NsysExportBuilder()
    b.process(100, "python3")
    with b.nvtx(100, 100, "aten::mm, seq = 3, op_id = 7", 0, 50_000):
        b.launch(100, 100, "gemm_kernel", cpu_start=1_000, gpu_start=20_000, gpu_dur=10_000)
    b.write("run.sqlite")
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

EPOCH_NS = 1_790_000_000_000_000_000
ENUMS = {
    "ENUM_CUDA_MEMCPY_OPER": [
        (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
        (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"),
    ],
    "ENUM_CUDA_MEM_KIND": [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
        (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
    ],
    "ENUM_CUPTI_SYNC_TYPE": [
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
    ],
}
_GPU_COLS = ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid")


class NsysExportBuilder:
    """Collects rows, then writes one export."""

    def __init__(
        self,
        *,
        legacy: bool = False,
        epoch_ns: int | None = EPOCH_NS,
        version: str = "2024.6.2.25",
        schema: str = "3.16.1",
    ) -> None:
        self.legacy = legacy
        self.epoch_ns = epoch_ns
        self.version, self.schema = ("2022.2.1.31", "2.9.1") if legacy else (version, schema)
        self.strings: dict[str, int] = {}
        self.rows: dict[str, list[tuple[Any, ...]]] = {}
        self.cols: dict[str, tuple[str, ...]] = {}
        self._corr = 1000
        self.extra_meta: dict[str, str] = {}

    # --- primitives ------------------------------------------------------------------------

    def sid(self, text: str) -> int:
        """The StringIds id of ``text``."""
        return self.strings.setdefault(text, len(self.strings) + 1)

    def add(self, table: str, cols: tuple[str, ...], row: tuple[Any, ...]) -> None:
        self.cols.setdefault(table, cols)
        self.rows.setdefault(table, []).append(row)

    def corr(self) -> int:
        self._corr += 1
        return self._corr

    @staticmethod
    def gtid(pid: int, tid: int) -> int:
        return (pid << 24) | tid

    # --- targets ---------------------------------------------------------------------------

    def gpu(
        self,
        gid: int = 0,
        name: str = "NVIDIA H100 80GB HBM3",
        sms: int = 132,
        memory: int = 85_520_809_984,
    ) -> None:
        self.add(
            "TARGET_INFO_GPU",
            (
                "id",
                "name",
                "totalMemory",
                "smCount",
                "clockRate",
                "memoryBandwidth",
                "computeMajor",
                "computeMinor",
                "threadsPerWarp",
                "maxWarpsPerSm",
                "maxBlocksPerSm",
                "maxRegistersPerSm",
                "maxShmemPerSm",
                "maxThreadsPerBlock",
            ),
            (
                gid,
                name,
                memory,
                sms,
                1_980_000_000,
                3_352_320_000_000,
                9,
                0,
                32,
                64,
                32,
                65536,
                233_472,
                1024,
            ),
        )

    def process(self, pid: int, name: str = "python3") -> None:
        self.add("PROCESSES", ("globalPid", "pid", "name"), (pid << 24, pid, name))

    def thread(self, pid: int, tid: int, name: str) -> None:
        self.add(
            "ThreadNames",
            ("nameId", "priority", "globalTid"),
            (self.sid(name), 10, self.gtid(pid, tid)),
        )

    # --- CUDA ------------------------------------------------------------------------------

    def runtime(
        self,
        pid: int,
        tid: int,
        name: str,
        start: int,
        dur: int,
        corr: int | None = None,
        event_class: int = 0,
    ) -> int:
        corr = self.corr() if corr is None else corr
        self.add(
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            ("start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue"),
            (start, start + dur, event_class, self.gtid(pid, tid), corr, self.sid(name), 0),
        )
        return corr

    def kernel(
        self,
        pid: int | None,
        name: str,
        start: int,
        dur: int,
        *,
        corr: int,
        device: int = 0,
        stream: int = 7,
        grid: tuple[int, int, int] = (128, 1, 1),
        block: tuple[int, int, int] = (256, 1, 1),
        regs: int = 32,
        graph_id: int | None = None,
        graph_node: int | None = None,
    ) -> None:
        self.add(
            "CUPTI_ACTIVITY_KIND_KERNEL",
            (
                *_GPU_COLS,
                "demangledName",
                "shortName",
                "mangledName",
                "gridX",
                "gridY",
                "gridZ",
                "blockX",
                "blockY",
                "blockZ",
                "registersPerThread",
                "staticSharedMemory",
                "dynamicSharedMemory",
                "graphId",
                "graphNodeId",
            ),
            (
                start,
                start + dur,
                device,
                1,
                stream,
                corr,
                None if pid is None else pid << 24,
                self.sid(name),
                self.sid(name[:20]),
                self.sid("_Z" + name),
                *grid,
                *block,
                regs,
                0,
                1024,
                graph_id,
                graph_node,
            ),
        )

    def launch(
        self,
        pid: int,
        tid: int,
        kernel: str,
        *,
        cpu_start: int,
        gpu_start: int,
        gpu_dur: int,
        api: str = "cudaLaunchKernel_v7000",
        cpu_dur: int = 4_000,
        **kw: Any,
    ) -> int:
        corr = self.runtime(pid, tid, api, cpu_start, cpu_dur)
        self.kernel(pid, kernel, gpu_start, gpu_dur, corr=corr, **kw)
        return corr

    def memcpy(
        self,
        pid: int,
        start: int,
        dur: int,
        size: int,
        *,
        kind: int = 1,
        src: int = 0,
        dst: int = 2,
        corr: int | None = None,
        device: int = 0,
        stream: int = 7,
    ) -> None:
        self.add(
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            (*_GPU_COLS, "bytes", "copyKind", "srcKind", "dstKind"),
            (
                start,
                start + dur,
                device,
                1,
                stream,
                corr or self.corr(),
                pid << 24,
                size,
                kind,
                src,
                dst,
            ),
        )

    def memset(
        self,
        pid: int,
        start: int,
        dur: int,
        size: int,
        *,
        corr: int | None = None,
        device: int = 0,
        stream: int = 7,
    ) -> None:
        self.add(
            "CUPTI_ACTIVITY_KIND_MEMSET",
            (*_GPU_COLS, "bytes", "memKind", "value"),
            (start, start + dur, device, 1, stream, corr or self.corr(), pid << 24, size, 2, 0),
        )

    def sync(
        self,
        pid: int,
        start: int,
        dur: int,
        sync_type: int = 3,
        *,
        corr: int | None = None,
        device: int = 0,
        stream: int = 7,
    ) -> None:
        self.add(
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            (*_GPU_COLS, "syncType", "eventId"),
            (start, start + dur, device, 1, stream, corr or self.corr(), pid << 24, sync_type, 0),
        )

    def memory(
        self,
        pid: int,
        start: int,
        size: int,
        *,
        free: bool = False,
        device: int = 0,
        address: int = 0x7F0000000000,
    ) -> None:
        self.add(
            "CUDA_GPU_MEMORY_USAGE_EVENTS",
            (
                "start",
                "globalPid",
                "deviceId",
                "contextId",
                "address",
                "bytes",
                "memKind",
                "memoryOperationType",
                "correlationId",
            ),
            (start, pid << 24, device, 1, address, size, 2, 1 if free else 0, self.corr()),
        )

    # --- host ------------------------------------------------------------------------------

    def domain(self, pid: int, tid: int, domain_id: int, name: str) -> None:
        self._nvtx(75, pid, tid, name, 0, None, domain_id, False)

    def nvtx(
        self,
        pid: int,
        tid: int,
        text: str,
        start: int,
        end: int | None,
        *,
        domain_id: int = 0,
        registered: bool = False,
        event_type: int = 59,
    ) -> AbstractContextManager[None]:
        """A range, recorded at once (use it in ``with`` to show nesting)."""
        self._nvtx(event_type, pid, tid, text, start, end, domain_id, registered)
        return nullcontext()

    def mark(self, pid: int, tid: int, text: str, at: int) -> None:
        self._nvtx(34, pid, tid, text, at, None, 0, False)

    def _nvtx(
        self,
        etype: int,
        pid: int,
        tid: int,
        text: str,
        start: int,
        end: int | None,
        domain_id: int,
        registered: bool,
    ) -> None:
        self.add(
            "NVTX_EVENTS",
            (
                "start",
                "end",
                "eventType",
                "rangeId",
                "category",
                "color",
                "text",
                "globalTid",
                "endGlobalTid",
                "textId",
                "domainId",
            ),
            (
                start,
                end,
                etype,
                None,
                None,
                None,
                None if registered else text,
                self.gtid(pid, tid),
                None,
                self.sid(text) if registered else None,
                domain_id or None,
            ),
        )

    def osrt(self, pid: int, tid: int, name: str, start: int, dur: int) -> None:
        self.add(
            "OSRT_API",
            (
                "start",
                "end",
                "eventClass",
                "globalTid",
                "nameId",
                "returnValue",
                "nestingLevel",
                "callchainId",
            ),
            (start, start + dur, 27, self.gtid(pid, tid), self.sid(name), 0, 0, None),
        )

    # --- output ----------------------------------------------------------------------------

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.unlink(missing_ok=True)
        con = sqlite3.connect(path)
        meta = "EXPORT_META_DATA" if self.legacy else "META_DATA_EXPORT"
        tables = dict(self.rows)
        tables[meta] = [
            ("EXPORT_PRODUCT_VERSION", self.version),
            ("EXPORT_SCHEMA_VERSION", self.schema),
            *self.extra_meta.items(),
        ]
        self.cols[meta] = ("name", "value")
        tables["StringIds"] = [(i, s) for s, i in self.strings.items()]
        self.cols["StringIds"] = ("id", "value")
        if self.epoch_ns is not None:
            tables["TARGET_INFO_SESSION_START_TIME"] = [(self.epoch_ns, "2026-09-21T00:00:00")]
            self.cols["TARGET_INFO_SESSION_START_TIME"] = ("utcEpochNs", "utcTime")
        if not self.legacy:
            for name, rows in ENUMS.items():
                tables[name] = rows
                self.cols[name] = ("id", "name", "label")
        for name, rows in tables.items():
            cols = self.cols[name]
            con.execute(f'CREATE TABLE "{name}" ({", ".join(f"[{c}]" for c in cols)})')
            con.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(cols))})', rows)
        con.commit()
        con.close()
        return path
