"""Device peak table: which GPU a trace ran on and what its roofs are.

The table lives in ``traceinsight/devices/devices.yaml`` (dense datasheet peaks per dtype, memory
bandwidth and capacity, name regexes, the source document per entry). A user file with the same
schema (``load_table(extra=...)`` or the ``TRACEINSIGHT_DEVICES`` environment variable) overrides
entries field by field or adds new ones, by ``key``; user entries are tried first when matching.

:func:`resolve` turns a trace's ``deviceProperties`` entry (plus the ``--device``,
``--peak-tflops`` and ``--peak-bw`` options) into a :class:`Resolution`: the spec, how it was
found (``matched`` / ``override`` / ``gfx-guess`` / ``unknown``) and a message for a diagnostic
when the device was guessed or is unknown.

Units inside :class:`DeviceSpec` are SI: FLOP/s, bytes/s, bytes. The YAML uses TFLOP/s, GB/s
and GiB for readability.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from traceinsight import settings
from traceinsight.errors import ConfigError

__all__ = [
    "DTYPES",
    "ENV_VAR",
    "MATRIX_DTYPES",
    "DeviceSpec",
    "Resolution",
    "builtin_table",
    "builtin_table_path",
    "list_devices",
    "load_table",
    "lookup",
    "resolve",
]

#: environment variable naming a user device file (same schema as the built-in table)
ENV_VAR = "TRACEINSIGHT_DEVICES"

#: peak dtypes a table entry may give. ``fp32`` is the CUDA-core / vector rate; ``fp32_matrix``
#: is AMD's MFMA FP32 rate (FP32 GEMMs on MI100..MI355X), null on NVIDIA; ``fp4`` is the
#: block-scaled 4-bit rate (NVFP4 / MXFP4 on Blackwell and MI350-series).
DTYPES = ("fp64", "fp32", "fp32_matrix", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")
#: matrix dtypes a recommendation can move fp32 work to, fastest first (see
#: :meth:`DeviceSpec.accelerates`)
MATRIX_DTYPES = ("fp4", "fp8", "int8", "bf16", "fp16", "tf32", "fp32_matrix")

#: when a dtype has no unit of its own, where its work runs instead: FP32 GEMMs without TF32 /
#: matrix FP32 run on the FP32 ALUs. Low-precision dtypes have no fallback: a part without BF16
#: (V100) or FP8 (A100) units has no such roof, so ``peak("bf16") or peak("fp16")`` picks the
#: part's real low-precision peak and the low-precision rule never suggests a missing unit.
_FALLBACK = {"tf32": "fp32", "fp32_matrix": "fp32"}

_ALIASES = {
    "float": "fp32",
    "float32": "fp32",
    "f32": "fp32",
    "single": "fp32",
    "double": "fp64",
    "float64": "fp64",
    "f64": "fp64",
    "half": "fp16",
    "float16": "fp16",
    "f16": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "f8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "mxfp4": "fp4",
    "nvfp4": "fp4",
    "e2m1": "fp4",
    "xf32": "tf32",
    "tensorfloat32": "tf32",
}

_VENDORS = ("nvidia", "amd", "intel", "other")
_ENTRY_KEYS = {
    "key",
    "name",
    "vendor",
    "match",
    "tflops",
    "mem_bw_gbs",
    "mem_gib",
    "fabric_gbs",
    "fabric",
    "per_gcd",
    "source",
}
_REQUIRED = ("key", "name", "vendor", "match", "tflops", "mem_bw_gbs", "mem_gib")
_GIB = 1 << 30

#: device names that are not GPUs in the table on purpose, for a better "unknown" message
_KNOWN_OTHERS = {"ARTEMIS": "Meta MTIA accelerator"}


def _canon_dtype(dtype: str) -> str:
    d = str(dtype).strip().lower()
    return _ALIASES.get(d, d)


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator (or one GCD of it, when ``per_gcd``).

    ``peak_flops`` maps each of :data:`DTYPES` to dense peak FLOP/s (None = no such unit).
    ``mem_bw`` is bytes/s and ``mem_bytes`` bytes; either is None only for a spec built purely
    from ``--peak-tflops`` / ``--peak-bw`` without a known device.
    """

    name: str
    key: str
    vendor: str
    peak_flops: dict[str, float | None]
    mem_bw: float | None
    mem_bytes: int | None
    source: str
    per_gcd: bool = False
    match: tuple[str, ...] = field(default=(), repr=False)
    #: GPU-to-GPU fabric (NVLink, xGMI) bandwidth per GPU in one direction, bytes/s, and its
    #: name; None where the table does not state it (PCIe parts, user entries without it)
    fabric_bw: float | None = None
    fabric: str | None = None

    def __hash__(self) -> int:  # peak_flops is a dict; identity is the key
        return hash((self.key, self.name))

    def peak(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for ``dtype`` with fallback.

        ``tf32`` and ``fp32_matrix`` fall back to ``fp32`` (FP32 GEMMs then run on the CUDA
        cores / vector ALUs). ``bf16``, ``fp16``, ``fp8``, ``int8`` and ``fp64`` without a table
        value (BF16 on V100, FP8 on A100), and unknown dtypes such as ``"other"``, give None:
        the part has no such unit. (BF16 work on a V100 is emulated at about the FP32 rate;
        use ``peak("fp32")`` for its roof.)
        """
        d = _canon_dtype(dtype)
        if d not in DTYPES:
            return None
        v = self.peak_flops.get(d)
        if v is None and d in _FALLBACK:
            v = self.peak_flops.get(_FALLBACK[d])
        return v

    def supports(self, dtype: str) -> bool:
        """True when the part has a native unit for ``dtype`` (a table value, no fallback)."""
        return self.peak_flops.get(_canon_dtype(dtype)) is not None

    def accelerates(self, dtype: str) -> bool:
        """True when the part runs ``dtype`` matrix math faster than fp32 on its vector units
        (tensor cores / MFMA; V100: fp16 only; A100: tf32, bf16, fp16, int8; H100: + fp8;
        B200: + fp4; MI250: fp32_matrix, bf16, fp16, int8; MI300X: + tf32 (xf32), fp8).
        Every dtype recommendation is drawn from this."""
        v, base = self.peak_flops.get(_canon_dtype(dtype)), self.peak_flops.get("fp32")
        return v is not None and (base is None or v > base)

    def speedup(self, dtype: str, over: str = "fp32") -> float | None:
        """Peak of ``dtype`` over the peak of ``over`` (None when the part lacks either)."""
        if not self.accelerates(dtype) and dtype != over:
            return None
        a, b = self.peak(dtype), self.peak(over)
        return a / b if a and b else None

    def ridge(self, dtype: str) -> float | None:
        """Arithmetic intensity (FLOP/byte) where ``dtype`` compute and memory roofs meet."""
        p = self.peak(dtype)
        if p is None or not self.mem_bw:
            return None
        return p / self.mem_bw


@dataclass(frozen=True)
class Resolution:
    """What :func:`resolve` found.

    ``how``: ``matched`` (name found in the table), ``override`` (``--device`` or
    ``--peak-tflops``/``--peak-bw`` applied), ``gfx-guess`` (a generic AMD name resolved from
    the gfx version and memory size) or ``unknown`` (``spec`` is None). ``message`` is a
    sentence for a diagnostic whenever the result is not a plain match, else None.
    """

    spec: DeviceSpec | None
    how: str
    message: str | None = None


# ---------------------------------------------------------------------------------------- loading


def builtin_table_path() -> Path:
    """``traceinsight/devices/devices.yaml`` (package data, shipped in the wheel)."""
    return Path(__file__).resolve().parent / "devices.yaml"


def _read_yaml(path: Path) -> Any:
    from traceinsight.util.safeyaml import non_finite, read_small, refuse_aliases

    if not path.exists():
        raise ConfigError(
            "device file not found",
            path=path,
            hint=f"check the path given to --devices or ${ENV_VAR}",
        )
    try:
        text = read_small(path, what="device file").decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"cannot read device file: {e}", path=path) from None

    refuse_aliases(text, path, "device file")  # a "billion laughs" would expand to GBs
    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ConfigError(f"device file is not valid YAML{where}: {problem}", path=path) from None
    bad = non_finite(doc)
    if bad:
        raise ConfigError(
            f"{bad} is not a finite number",
            path=path,
            hint="peaks, bandwidths and memory sizes are finite numbers (not .nan or .inf)",
        )
    return doc


def _entries(doc: Any, path: Path) -> list[Mapping[str, Any]]:
    if doc is None:
        return []
    if isinstance(doc, Mapping):
        extra = set(doc) - {"devices"}
        if extra:
            raise ConfigError(
                f"unknown top-level key(s) {sorted(map(str, extra))}",
                path=path,
                hint="a device file has one top-level key, 'devices:', holding a list",
            )
        doc = doc.get("devices") or []
    if not isinstance(doc, list):
        raise ConfigError("'devices' must be a list of entries", path=path)
    for i, e in enumerate(doc):
        if not isinstance(e, Mapping):
            raise ConfigError(f"device entry #{i + 1} is not a mapping", path=path)
    return doc


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _check_entry(e: Mapping[str, Any], label: str, path: Path, *, partial: bool) -> None:
    """Validate the fields present; with ``partial=False`` also require all of them."""
    unknown = set(e) - _ENTRY_KEYS - {"_given"}
    if unknown:
        raise ConfigError(
            f"{label}: unknown key(s) {sorted(map(str, unknown))}",
            path=path,
            hint=f"allowed keys: {', '.join(sorted(_ENTRY_KEYS))}",
        )
    for k in ("key", "name", "source"):
        if k in e and e[k] is not None and not isinstance(e[k], str):
            raise ConfigError(f"{label}: {k} must be a string", path=path)
    if "vendor" in e and e["vendor"] not in _VENDORS:
        raise ConfigError(f"{label}: vendor must be one of {', '.join(_VENDORS)}", path=path)
    if "per_gcd" in e and not isinstance(e["per_gcd"], bool):
        raise ConfigError(f"{label}: per_gcd must be true or false", path=path)
    if e.get("fabric_gbs") is not None and not _num(e["fabric_gbs"]):
        raise ConfigError(
            f"{label}: fabric_gbs must be a positive number, got {e['fabric_gbs']!r}", path=path
        )
    for k in ("mem_bw_gbs", "mem_gib"):
        if k in e and not _num(e[k]):
            raise ConfigError(f"{label}: {k} must be a positive number, got {e[k]!r}", path=path)
    if "match" in e:
        pats = e["match"]
        if isinstance(pats, str):
            pats = [pats]
        if not isinstance(pats, list) or not pats or not all(isinstance(p, str) for p in pats):
            raise ConfigError(
                f"{label}: match must be a regex or a non-empty list of regexes", path=path
            )
        for p in pats:
            try:
                re.compile(p, re.I)
            except re.error as err:
                raise ConfigError(f"{label}: bad match regex {p!r}: {err}", path=path) from None
    if "tflops" in e:
        t = e["tflops"]
        if not isinstance(t, Mapping):
            raise ConfigError(f"{label}: tflops must be a mapping dtype -> TFLOP/s", path=path)
        bad = set(t) - set(DTYPES)
        if bad:
            raise ConfigError(
                f"{label}: unknown dtype(s) in tflops: {sorted(map(str, bad))}",
                path=path,
                hint=f"dtypes: {', '.join(DTYPES)}",
            )
        for d, v in t.items():
            if v is not None and not _num(v):
                raise ConfigError(
                    f"{label}: tflops.{d} must be a positive number or null, got {v!r}", path=path
                )
    if not partial:
        missing = [k for k in _REQUIRED if e.get(k) is None]
        if missing:
            raise ConfigError(
                f"{label}: missing {', '.join(missing)}",
                path=path,
                hint="a new device needs key, name, vendor, match, tflops, mem_bw_gbs and mem_gib",
            )
        t = e["tflops"]
        if not any(_num(t.get(d)) for d in ("bf16", "fp16", "fp32")):
            raise ConfigError(
                f"{label}: tflops needs a number for at least one of bf16, fp16, fp32", path=path
            )


def _build(e: Mapping[str, Any], path: Path) -> DeviceSpec:
    pats = e["match"]
    if isinstance(pats, str):
        pats = [pats]
    t = e["tflops"]
    return DeviceSpec(
        name=e["name"],
        key=e["key"],
        vendor=e["vendor"],
        peak_flops={d: (float(t[d]) * 1e12 if t.get(d) is not None else None) for d in DTYPES},
        mem_bw=float(e["mem_bw_gbs"]) * 1e9,
        mem_bytes=round(float(e["mem_gib"]) * _GIB),
        source=e.get("source") or f"user device file {path}",
        per_gcd=bool(e.get("per_gcd", False)),
        match=tuple(pats),
        fabric_bw=float(e["fabric_gbs"]) * 1e9 if e.get("fabric_gbs") is not None else None,
        fabric=str(e["fabric"]) if e.get("fabric") is not None else None,
    )


def _parse(path: Path, base: dict[str, dict[str, Any]] | None) -> list[tuple[str, dict[str, Any]]]:
    """Entries of ``path`` as (key, merged raw dict); ``base`` (key -> raw) enables partial ones."""
    out: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    for i, e in enumerate(_entries(_read_yaml(path), path)):
        key = e.get("key")
        label = f"device entry #{i + 1}" + (f" ({key})" if isinstance(key, str) else "")
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(
                f"{label}: missing key",
                path=path,
                hint="every entry needs a 'key:' (e.g. h100-sxm)",
            )
        key = key.strip()
        if key in seen:
            raise ConfigError(f"{label}: duplicate key {key!r}", path=path)
        seen.add(key)
        prior = (base or {}).get(key)
        _check_entry(e, label, path, partial=prior is not None)
        merged = dict(prior) if prior else {}
        for k, v in e.items():
            if k == "tflops" and prior is not None:
                merged["tflops"] = {**prior.get("tflops", {}), **v}
            else:
                merged[k] = v
        merged["key"] = key
        merged["_given"] = tuple(e)
        if prior is not None and "source" not in e:
            merged["source"] = f"{prior.get('source', '')} (overridden by {path})"
        _check_entry(merged, label, path, partial=False)
        out.append((key, merged))
    return out


@functools.lru_cache(maxsize=1)
def _builtin_raw() -> tuple[tuple[str, dict[str, Any]], ...]:
    return tuple(_parse(builtin_table_path(), None))


@functools.lru_cache(maxsize=32)
def _load_cached(extras: tuple[tuple[str, float], ...]) -> tuple[DeviceSpec, ...]:
    raw = {k: v for k, v in _builtin_raw()}
    order = [k for k, _ in _builtin_raw()]
    paths = {k: builtin_table_path() for k in order}
    for p, _mtime in extras:
        path = Path(p)
        user = _parse(path, raw)
        # new entries, and entries whose regexes the user changed, are tried first; a partial
        # override of numbers keeps the entry's place (so "H100" stays behind "H100 PCIe")
        first = [k for k, v in user if k not in raw or "match" in v.get("_given", ())]
        for k, v in user:
            raw[k] = v
            paths[k] = path
        order = first + [k for k in order if k not in set(first)]
        order += [k for k, _ in user if k not in set(order)]
    return tuple(_build(raw[k], paths[k]) for k in order)


#: the hint of a device-file error that has none of its own
DEVICE_FILE_HINT = (
    "a device file is YAML with one key, devices:, listing entries like those of the built-in "
    "table (traceinsight devices --json shows them; traceinsight/devices/devices.yaml is the "
    "built-in file)"
)


def load_table(extra: str | Path | None = None) -> list[DeviceSpec]:
    """The device table in match order: built-in entries, with user files merged in.

    User files come from ``$TRACEINSIGHT_DEVICES`` (if set) and then ``extra``; their entries
    override built-in ones with the same ``key`` (field by field; ``tflops`` dtype by dtype) or
    add new devices, and are tried first when matching names. Raises :class:`ConfigError`
    naming the file and the entry for unknown keys, missing or non-positive numbers, bad
    regexes or invalid YAML.
    """
    files: list[Path] = []
    env = settings.get(ENV_VAR)
    if env:
        files.append(Path(env).expanduser())
    if extra is not None:
        files.append(Path(extra).expanduser())
    keyed = []
    for f in files:
        try:
            mtime = f.stat().st_mtime
        except OSError:
            mtime = -1.0
        keyed.append((str(f.resolve() if f.exists() else f), mtime))
    try:
        return list(_load_cached(tuple(keyed)))
    except ConfigError as e:
        if e.hint is None:  # every device-file error says where the format is described
            e.hint = DEVICE_FILE_HINT
        raise


def builtin_table() -> list[DeviceSpec]:
    """The built-in table alone, in match order (no user file, whatever the environment says)."""
    return list(_load_cached(()))


def list_devices(extra: str | Path | None = None) -> list[DeviceSpec]:
    """All known devices in match order (for ``traceinsight devices``)."""
    return load_table(extra)


# -------------------------------------------------------------------------------------- matching


def _match_name(name: str, table: Iterable[DeviceSpec]) -> DeviceSpec | None:
    for spec in table:
        for pat in spec.match:
            if re.search(pat, name, re.I):
                return spec
    return None


def lookup(name_or_key: str, table: Iterable[DeviceSpec] | None = None) -> DeviceSpec | None:
    """A spec by key (case-insensitive), by exact name, or by the name regexes."""
    specs = list(table) if table is not None else load_table()
    q = name_or_key.strip()
    for s in specs:
        if s.key.lower() == q.lower() or s.name.lower() == q.lower():
            return s
    return _match_name(q, specs) if q else None


def _gfx_guess(props: Mapping[str, Any], table: list[DeviceSpec]) -> tuple[DeviceSpec, str] | None:
    """Generic ROCm names ("AMD Radeon Graphics", ""): guess from gfx version and memory."""
    maj, mnr = props.get("computeMajor"), props.get("computeMinor")
    if not isinstance(maj, int) or not isinstance(mnr, int) or isinstance(maj, bool):
        return None
    mem = props.get("totalGlobalMem")
    gib = mem / _GIB if isinstance(mem, (int, float)) and mem > 0 else None
    key = None
    why = ""
    if maj == 9 and mnr == 4:  # gfx942
        key = "mi325x" if gib is not None and gib > 224 else "mi300x"
        why = "gfx942 (MI300 class)"
    elif maj == 9 and mnr == 5:  # gfx950
        key, why = "mi355x", "gfx950 (MI350 class)"
    elif maj == 9 and mnr == 0 and gib is not None:  # gfx90a or gfx908 report 9.0
        if 56 <= gib <= 68:
            key = "mi250x-gcd"
            why = "gfx90a (MI200 class) with 64 GiB, i.e. one MI250X GCD (an MI210 looks the same)"
        elif 28 <= gib <= 34:
            key, why = "mi100", "gfx908 (MI100) with 32 GiB"
    if key is None:
        return None
    spec = next((s for s in table if s.key == key), None)
    if spec is None:
        return None
    return spec, why


def _looks_amd(name: str, props: Mapping[str, Any]) -> bool:
    n = name.lower()
    if "amd" in n or "radeon" in n or "instinct" in n:
        return True
    if props.get("warpSize") == 64:
        return True
    # no name at all: only the gfx versions NVIDIA never reports
    return not n and props.get("computeMajor") == 9 and props.get("computeMinor") in (4, 5)


def _hint() -> str:
    return (
        "pass --device NAME (see `traceinsight devices` for the names) or "
        "--peak-tflops and --peak-bw"
    )


def resolve(
    props: Mapping[str, Any] | None,
    *,
    override_key: str | None = None,
    peak_tflops: float | None = None,
    peak_bw_gbs: float | None = None,
    table: Iterable[DeviceSpec] | None = None,
) -> Resolution:
    """Find the spec for one ``deviceProperties`` entry, applying the user's overrides.

    * ``override_key`` (``--device``): a key or name from the table; unknown -> ConfigError.
    * ``peak_tflops`` (``--peak-tflops``, TFLOP/s): replaces the bf16 and fp16 peaks. Without
      a known device it also sets fp8 = 2x and tf32 = 0.5x of it (fp32 stays unknown); with a
      known device the other dtypes keep their table values (an fp8-less part stays fp8-less).
    * ``peak_bw_gbs`` (``--peak-bw``, GB/s): replaces the memory bandwidth.
    """
    specs = list(table) if table is not None else load_table()
    props = props or {}
    raw_name = props.get("name")
    name = raw_name.strip() if isinstance(raw_name, str) else ""
    for v, opt in ((peak_tflops, "--peak-tflops"), (peak_bw_gbs, "--peak-bw")):
        if v is not None and not _num(v):
            raise ConfigError(f"{opt} must be a positive number, got {v!r}")

    spec: DeviceSpec | None
    how: str
    message: str | None = None
    if override_key:
        spec = lookup(override_key, specs)
        if spec is None:
            raise ConfigError(
                f"unknown device {override_key!r} for --device",
                hint="`traceinsight devices` lists the known keys; "
                "or give --peak-tflops and --peak-bw",
            )
        how = "override"
        message = f"using {spec.name} from --device {override_key}"
        if name and _match_name(name, specs) not in (None, spec):
            message += f" (the trace says {name!r})"
    else:
        spec = _match_name(name, specs) if name else None
        how = "matched" if spec else "unknown"
        if spec is None and _looks_amd(name, props):
            guess = _gfx_guess(props, specs)
            if guess is not None:
                spec, why = guess
                how = "gfx-guess"
                named = (
                    f"the trace names it only {name!r}"
                    if name
                    else "the trace gives no device name"
                )
                message = (
                    f"identified as {spec.name} from its architecture, {why} "
                    f"({named}); if that is wrong, {_hint()}"
                )
        if spec is None:
            if name:
                what = _KNOWN_OTHERS.get(name.upper())
                desc = f"device {name!r}" + (f" ({what})" if what else "")
                message = (
                    f"{desc} is not in the device table, so roofline and MFU have no "
                    f"peaks; {_hint()}"
                )
            elif props:
                message = (
                    "the trace's device has no name and could not be identified, so "
                    f"roofline and MFU have no peaks; {_hint()}"
                )
            else:
                message = (
                    "the trace names no GPU (no device properties), so roofline and MFU have no "
                    f"peaks; {_hint()}"
                )

    if peak_tflops is not None or peak_bw_gbs is not None:
        spec, note = _apply_peaks(spec, props, peak_tflops, peak_bw_gbs)
        how = "override"
        message = (
            note
            if message is None or message.startswith("using ")
            else f"{note} (trace device: {name or 'unnamed'})"
        )
    return Resolution(spec=spec, how=how, message=message)


def _apply_peaks(
    spec: DeviceSpec | None, props: Mapping[str, Any], tflops: float | None, bw_gbs: float | None
) -> tuple[DeviceSpec, str]:
    parts = []
    if tflops is not None:
        parts.append(f"--peak-tflops {tflops:g}")
    if bw_gbs is not None:
        parts.append(f"--peak-bw {bw_gbs:g}")
    opts = " and ".join(parts)
    if spec is None:
        peaks: dict[str, float | None] = {d: None for d in DTYPES}
        if tflops is not None:
            p = tflops * 1e12
            peaks.update(bf16=p, fp16=p, fp8=2 * p, tf32=0.5 * p)
        mem = props.get("totalGlobalMem")
        new = DeviceSpec(
            name=f"{props.get('name') or 'unknown device'} (peaks from {opts})",
            key="custom",
            vendor="other",
            peak_flops=peaks,
            mem_bw=bw_gbs * 1e9 if bw_gbs is not None else None,
            mem_bytes=int(mem) if isinstance(mem, (int, float)) and mem > 0 else None,
            source=f"command line: {opts}",
        )
        missing = []
        if tflops is None:
            missing.append("no compute peak (pass --peak-tflops)")
        if bw_gbs is None:
            missing.append("no memory bandwidth (pass --peak-bw)")
        note = f"using peaks from {opts}" + (f"; {', '.join(missing)}" if missing else "")
        return new, note
    peaks = dict(spec.peak_flops)
    if tflops is not None:
        peaks.update(bf16=tflops * 1e12, fp16=tflops * 1e12)
    new = replace(
        spec,
        name=f"{spec.name} (peaks from {opts})",
        peak_flops=peaks,
        mem_bw=bw_gbs * 1e9 if bw_gbs is not None else spec.mem_bw,
        source=f"command line ({opts}) over {spec.source}",
    )
    return new, f"using {spec.name} with {opts}"
