"""Device table: datasheet peaks, name matching, gfx guesses, overrides and user files."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceinsight.devices import table as devices
from traceinsight.devices.table import DTYPES, DeviceSpec, load_table, lookup, resolve
from traceinsight.errors import ConfigError

GIB = 1 << 30


@pytest.fixture(autouse=True)
def _no_env_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(devices.ENV_VAR, raising=False)


def _props(
    name: str, major: int | None = None, minor: int | None = None, mem: int | None = None, **kw
) -> dict:
    p = {"id": 0, "name": name, **kw}
    if major is not None:
        p.update(computeMajor=major, computeMinor=minor)
    if mem is not None:
        p["totalGlobalMem"] = mem
    return p


# ------------------------------------------------------------------------- the corpus names


@pytest.mark.parametrize(
    "props, key",
    [
        # every deviceProperties name in the shared corpus (with its real gfx / memory values)
        (_props("NVIDIA H100 80GB HBM3", 9, 0, 85018279936), "h100-sxm"),
        (_props("NVIDIA A100-SXM4-80GB", 8, 0, 85198045184), "a100-sxm4-80gb"),
        (_props("NVIDIA A100-PG509-200", 8, 0, 42297524224), "a100-sxm4-40gb"),
        (_props("Tesla V100-SXM2-32GB", 7, 0, 34089730048), "v100-sxm2-32gb"),
        (_props("Tesla V100-DGXS-32GB", 7, 0, 34084028416), "v100-dgxs-32gb"),
        (_props("Quadro GP100", 6, 0, 17069309952), "quadro-gp100"),
        (_props("AMD Instinct MI300X", 9, 4, 206141652992), "mi300x"),
        (_props("AMD Instinct MI300X VF", 9, 4, 205571227648), "mi300x"),
        (_props("AMD Instinct MI210", 9, 0, 68702699520), "mi210"),
    ],
)
def test_corpus_device_names_match(props: dict, key: str) -> None:
    r = resolve(props)
    assert (r.how, r.spec.key, r.message) == ("matched", key, None)


@pytest.mark.parametrize(
    "name, tflops, bw, gib",
    [
        # H100 SXM datasheet: BF16 1,979 TFLOPS with sparsity -> 989.4 dense; 3.35 TB/s; 80 GB
        (
            "NVIDIA H100 80GB HBM3",
            {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "tf32": 494.7, "fp32": 67},
            3.35e12,
            80,
        ),
        # MI300X datasheet: FP16/BF16 1307.4, FP8 2614.9, TF32 653.7, FP32 vector 163.4; 5.3 TB/s
        (
            "AMD Instinct MI300X VF",
            {"bf16": 1307.4, "fp8": 2614.9, "tf32": 653.7, "fp32_matrix": 163.4},
            5.3e12,
            192,
        ),
    ],
)
def test_dense_datasheet_numbers(name: str, tflops: dict[str, float], bw: float, gib: int) -> None:
    spec = resolve(_props(name)).spec
    assert {d: spec.peak(d) for d in tflops} == pytest.approx(
        {d: v * 1e12 for d, v in tflops.items()}
    )
    assert spec.mem_bw == pytest.approx(bw)
    assert spec.mem_bytes == gib * GIB
    assert "datasheet" in spec.source


def test_generic_amd_name_gfx942_guesses_mi300x() -> None:
    r = resolve(_props("AMD Radeon Graphics", 9, 4, 206141652992))
    assert (r.how, r.spec.key) == ("gfx-guess", "mi300x")
    assert "AMD Radeon Graphics" in r.message and "--device" in r.message


def test_generic_amd_name_gfx90a_64gib_guesses_mi250x_gcd() -> None:
    # the corpus's MI250 trace (hta/amd_trace) reports exactly this
    r = resolve(_props("AMD Radeon Graphics", 9, 0, 68702699520))
    assert (r.how, r.spec.key) == ("gfx-guess", "mi250x-gcd")
    assert r.spec.per_gcd
    assert r.spec.peak("bf16") == pytest.approx(191.5e12)  # 383 per OAM / 2 GCDs
    assert "--device" in r.message


def test_unnamed_device_with_gfx942_guesses_mi300x() -> None:
    # some ROCm builds (vLLM graph traces in the corpus) leave the name empty
    r = resolve(_props("", 9, 4, 206141652992))
    assert (r.how, r.spec.key) == ("gfx-guess", "mi300x")


def test_generic_amd_name_with_unknown_gfx_stays_unknown() -> None:
    r = resolve(_props("AMD Radeon Graphics", 11, 0, 24 * GIB))
    assert r.spec is None and r.how == "unknown"
    assert "--peak-tflops" in r.message


def test_mtia_artemis_is_unknown_with_a_hint() -> None:
    r = resolve({"name": "ARTEMIS"})
    assert r.spec is None and r.how == "unknown"
    assert "ARTEMIS" in r.message and "MTIA" in r.message
    for opt in ("--device NAME", "--peak-tflops", "--peak-bw"):
        assert opt in r.message


def test_no_device_properties() -> None:
    r = resolve(None)
    assert r.spec is None and r.how == "unknown" and "--device" in r.message


@pytest.mark.parametrize(
    "name, key",
    [
        ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
        ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
        ("Tesla V100S-PCIE-32GB", "v100s-pcie-32gb"),
        ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
        ("Tesla T4", "t4"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA A40", "a40"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA L40", "l40"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA H800", "h800-sxm"),
        ("NVIDIA H800 PCIe", "h800-pcie"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200"),
        ("AMD Instinct MI100", "mi100"),
        ("AMD Instinct MI250X", "mi250x-gcd"),
        ("AMD Instinct MI250X / MI250", "mi250x-gcd"),
        ("AMD Instinct MI250", "mi250-gcd"),
        ("AMD Instinct MI300A", "mi300a"),
        ("AMD Instinct MI325X", "mi325x"),
        ("AMD Instinct MI350X", "mi350x"),
        ("AMD Instinct MI355X", "mi355x"),
    ],
)
def test_other_names_match_the_right_entry(name: str, key: str) -> None:
    assert resolve({"name": name}).spec.key == key


def test_unknown_nvidia_name_is_unknown() -> None:
    r = resolve(_props("NVIDIA RTX PRO 9999 Blackwell", 12, 0, 96 * GIB, warpSize=32))
    assert r.spec is None and r.how == "unknown" and "NVIDIA RTX PRO 9999" in r.message


# --------------------------------------------------------------------------- table invariants


def test_table_invariants() -> None:
    table = load_table()
    assert len(table) >= 35
    keys = [s.key for s in table]
    assert len(keys) == len(set(keys))
    for s in table:
        assert s.vendor in ("nvidia", "amd") and s.source and s.match
        assert set(s.peak_flops) == set(DTYPES)
        assert s.mem_bw and s.mem_bw > 1e11 and s.mem_bytes and s.mem_bytes >= 16 * GIB
        p = s.peak_flops
        assert p["fp32"], s.key
        # dense tensor rates: tf32 <= bf16 <= fp8, and nothing below the fp32 vector rate
        if p["tf32"] and p["bf16"]:
            assert p["tf32"] <= p["bf16"], s.key
        if p["bf16"] and p["fp8"]:
            assert p["bf16"] < p["fp8"], s.key
        for d in ("tf32", "bf16", "fp16", "fp8"):
            if p[d]:
                assert p[d] >= p["fp32"], (s.key, d)
        # no sparse numbers slipped in: nothing beyond 5.1 PFLOP/s dense fp8, 10.1 dense fp4
        assert max(v for d, v in p.items() if v and d != "fp4") <= 5.1e15, s.key
        if p["fp4"]:
            assert p["fp8"] and p["fp8"] < p["fp4"] <= 10.1e15, s.key
    per_gcd = {s.key for s in table if s.per_gcd}
    assert per_gcd == {"mi250x-gcd", "mi250-gcd"}


def test_peak_fallbacks() -> None:
    v100 = lookup("v100-sxm2-32gb")
    assert v100.peak("fp16") == pytest.approx(125e12)
    assert v100.peak("bf16") is None  # no BF16 units (emulated at the FP32 rate)
    assert (v100.peak("bf16") or v100.peak("fp16")) == pytest.approx(125e12)  # consumers' idiom
    assert v100.peak("tf32") == pytest.approx(15.7e12)  # no TF32: FP32
    assert v100.peak("fp8") is None and v100.peak("int8") is None
    assert not v100.supports("bf16") and v100.supports("fp16")
    a100 = lookup("a100-sxm4-40gb")
    assert a100.peak("fp8") is None and not a100.supports("fp8")
    assert a100.peak("float32") == a100.peak("fp32") == pytest.approx(19.5e12)  # aliases
    assert a100.peak("bfloat16") == pytest.approx(312e12)
    assert a100.peak("fp32_matrix") == pytest.approx(19.5e12)  # NVIDIA: none -> fp32
    assert a100.peak("other") is None
    # ridge point: 312e12 / 1555e9 ~ 200.6 FLOP/byte
    assert a100.ridge("bf16") == pytest.approx(312e12 / 1555e9)


def test_lookup_by_key_name_or_regex() -> None:
    assert lookup("H100-SXM").key == "h100-sxm"
    assert lookup("NVIDIA H100 80GB HBM3").key == "h100-sxm"
    assert lookup("mi300x").key == "mi300x"
    assert lookup("no such device") is None


def test_list_devices_is_the_table() -> None:
    assert [s.key for s in devices.list_devices()] == [s.key for s in load_table()]


def test_table_is_package_data() -> None:
    path = devices.builtin_table_path()
    assert path.is_file()
    assert path.parent == Path(devices.__file__).resolve().parent


# --------------------------------------------------------------------------------- overrides


def test_override_key() -> None:
    r = resolve(_props("AMD Radeon Graphics", 9, 4, 192 * GIB), override_key="mi325x")
    assert (r.how, r.spec.key) == ("override", "mi325x")
    assert "--device" in r.message


def test_override_unknown_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown device"):
        resolve({"name": "NVIDIA H100 80GB HBM3"}, override_key="h1000")


def test_peak_tflops_and_bw_for_an_unknown_device() -> None:
    r = resolve({"name": "ARTEMIS", "totalGlobalMem": 64 * GIB}, peak_tflops=400, peak_bw_gbs=1500)
    s = r.spec
    assert r.how == "override" and s.key == "custom"
    # --peak-tflops 400 -> bf16 = fp16 = 400e12, fp8 = 2x, tf32 = 0.5x; fp32 unknown
    assert s.peak("bf16") == s.peak("fp16") == pytest.approx(400e12)
    assert s.peak("fp8") == pytest.approx(800e12)
    assert s.peak("tf32") == pytest.approx(200e12)
    assert s.peak("fp32") is None
    assert s.mem_bw == pytest.approx(1.5e12)
    assert s.mem_bytes == 64 * GIB


def test_peak_tflops_alone_says_bandwidth_is_missing() -> None:
    r = resolve(None, peak_tflops=100)
    assert r.spec.mem_bw is None and "--peak-bw" in r.message


def test_peak_overrides_on_a_known_device_keep_its_other_dtypes() -> None:
    r = resolve({"name": "NVIDIA A100-SXM4-80GB"}, peak_tflops=280, peak_bw_gbs=1800)
    s = r.spec
    assert r.how == "override"
    assert s.peak("bf16") == pytest.approx(280e12)
    assert s.peak("fp8") is None  # an FP8-less part stays FP8-less
    assert s.peak("tf32") == pytest.approx(156e12)
    assert s.mem_bw == pytest.approx(1.8e12)
    assert s.mem_bytes == 80 * GIB


@pytest.mark.parametrize(
    "kw", [{"peak_tflops": 0}, {"peak_bw_gbs": -5}, {"peak_tflops": float("nan")}]
)
def test_bad_peak_values_are_config_errors(kw: dict) -> None:
    with pytest.raises(ConfigError):
        resolve(None, **kw)


# ------------------------------------------------------------------------------- user files


def test_user_file_overrides_and_extends(tmp_path: Path) -> None:
    f = tmp_path / "my.yaml"
    f.write_text("""
devices:
  - key: h100-sxm          # partial override of a built-in entry
    mem_bw_gbs: 3000
    tflops: {bf16: 900}
  - key: my-gpu            # a new device, matched before the built-ins
    name: My GPU 9000
    vendor: other
    match: ['MyGPU 9000', 'H100 80GB HBM3 custom']
    tflops: {bf16: 100, fp32: 10}
    mem_bw_gbs: 500
    mem_gib: 32
""")
    table = load_table(f)
    h100 = lookup("h100-sxm", table)
    assert h100.mem_bw == pytest.approx(3.0e12)
    assert h100.peak("bf16") == pytest.approx(900e12)
    assert h100.peak("fp8") == pytest.approx(1978.9e12)  # untouched dtypes stay
    assert "overridden" in h100.source
    r = resolve({"name": "NVIDIA MyGPU 9000"}, table=table)
    assert (r.how, r.spec.key) == ("matched", "my-gpu")
    assert r.spec.peak("fp8") is None and r.spec.mem_bytes == 32 * GIB
    assert "my.yaml" in r.spec.source
    # new user entries are tried first ...
    assert resolve({"name": "NVIDIA H100 80GB HBM3 custom"}, table=table).spec.key == "my-gpu"
    # ... but a numbers-only override keeps its place: its broad "\bH100\b" regex must not
    # start catching the PCIe part
    assert resolve({"name": "NVIDIA H100 PCIe"}, table=table).spec.key == "h100-pcie"
    # the built-in table is not modified
    assert lookup("h100-sxm").mem_bw == pytest.approx(3.35e12)


def test_user_file_changing_match_moves_the_entry_first(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("devices:\n  - key: h100-sxm\n    match: ['H100']\n")
    table = load_table(f)
    assert table[0].key == "h100-sxm"
    assert resolve({"name": "NVIDIA H100 PCIe"}, table=table).spec.key == "h100-sxm"


def test_env_var_names_a_user_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "env.yaml"
    f.write_text("devices:\n  - key: mi300x\n    mem_bw_gbs: 4000\n")
    monkeypatch.setenv(devices.ENV_VAR, str(f))
    assert resolve({"name": "AMD Instinct MI300X"}).spec.mem_bw == pytest.approx(4.0e12)
    # the built-in table alone (what the trace simulator reads) ignores the user file
    builtin = devices.lookup("mi300x", devices.builtin_table())
    assert builtin is not None and builtin.mem_bw == pytest.approx(5.3e12)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("devices:\n  - key: h100-sxm\n    memory_bw: 3000\n", "unknown key"),
        (
            "devices:\n  - key: new-gpu\n    name: X\n    vendor: nvidia\n    match: ['X']\n"
            "    tflops: {bf16: 10}\n    mem_gib: 8\n",
            "missing mem_bw_gbs",
        ),
        ("devices:\n  - key: h100-sxm\n    tflops: {bf16: fast}\n", "tflops.bf16"),
        ("devices:\n  - key: h100-sxm\n    tflops: {fp2: 10}\n", "unknown dtype"),
        ("devices:\n  - key: h100-sxm\n    mem_bw_gbs: 0\n", "mem_bw_gbs"),
        ("devices:\n  - key: h100-sxm\n    match: ['H100(']\n", "bad match regex"),
        ("devices:\n  - key: x\n    name: X\n    vendor: acme\n", "vendor"),
        ("devices:\n  - name: no key\n", "missing key"),
        ("devices:\n  - key: a\n    mem_bw_gbs: [\n", "not valid YAML"),
        ("gpus: []\n", "unknown top-level"),
        ("devices: 3\n", "must be a list"),
    ],
)
def test_invalid_user_file_is_a_config_error_naming_file_and_entry(
    tmp_path: Path, text: str, needle: str
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_table(f)
    err = ei.value
    assert needle in err.message
    assert err.path == str(f)
    if "key:" in text and "not valid YAML" not in needle:
        assert "entry #1" in err.message


def test_missing_user_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_table(tmp_path / "absent.yaml")


def test_device_spec_is_hashable_and_frozen() -> None:
    s = lookup("h100-sxm")
    assert isinstance(s, DeviceSpec) and hash(s) == hash(lookup("h100-sxm"))
    with pytest.raises(AttributeError):
        s.key = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "key, fast, not_fast",
    [
        ("v100-sxm2-32gb", {"fp16"}, {"bf16", "tf32", "fp8", "fp4", "int8", "fp32_matrix"}),
        ("t4", {"fp16", "int8"}, {"bf16", "tf32", "fp8"}),
        ("a100-sxm4-80gb", {"tf32", "bf16", "fp16", "int8"}, {"fp8", "fp4", "fp32_matrix"}),
        ("h100-sxm", {"tf32", "bf16", "fp16", "fp8", "int8"}, {"fp4"}),
        ("h200-sxm", {"tf32", "bf16", "fp16", "fp8"}, {"fp4"}),
        ("h800-sxm", {"tf32", "bf16", "fp16", "fp8"}, {"fp4"}),
        ("b200", {"tf32", "bf16", "fp16", "fp8", "fp4"}, set()),
        ("gb200", {"tf32", "bf16", "fp16", "fp8", "fp4"}, set()),
        ("mi100", {"fp32_matrix", "bf16", "fp16"}, {"tf32", "fp8", "fp4"}),
        ("mi250x-gcd", {"fp32_matrix", "bf16", "fp16"}, {"tf32", "fp8", "fp4"}),
        ("mi300x", {"tf32", "bf16", "fp16", "fp8"}, {"fp4", "fp32_matrix"}),
        ("mi355x", {"bf16", "fp16", "fp8", "fp4"}, {"tf32"}),
    ],
)
def test_accelerated_dtypes_per_part(key: str, fast: set, not_fast: set) -> None:
    """The table records which matrix dtypes each part runs faster than fp32: precision advice
    (bf16 / fp16 + GradScaler / TF32 / fp8) is drawn from it."""
    from traceinsight.devices.table import MATRIX_DTYPES

    spec = lookup(key)
    got = {d for d in MATRIX_DTYPES if spec.accelerates(d)}
    assert fast <= got, (key, got)
    assert not (not_fast & got), (key, got)
    assert spec.speedup("fp32") == pytest.approx(1.0)
    if "bf16" not in got:
        assert spec.speedup("bf16") is None
    v100 = lookup("v100-sxm2-32gb")
    assert v100.speedup("fp16") == pytest.approx(125 / 15.7)
    assert lookup("mi250x-gcd").speedup("bf16", over="fp32_matrix") == pytest.approx(4.0, rel=1e-3)
    assert lookup("b200").peak("nvfp4") == pytest.approx(9000e12)
