import dataclasses
import json

import pytest

from aka import hardware as hw
from aka.hardware import SPECS, GPUSpec, ceilings_for, match_spec


def test_every_spec_has_every_field():
    assert len(SPECS) >= 8
    for key, spec in SPECS.items():
        assert key == spec.name
        for f in dataclasses.fields(GPUSpec):
            value = getattr(spec, f.name)
            assert value not in (None, "", 0), (key, f.name)
        assert spec.arch.startswith("sm_")
        expected = set(hw.DTYPE_KEYS) - ({"fp8"} if spec.name.startswith("A100") else set())
        assert set(spec.peak_tflops) == expected, key
        assert all(v > 0 for v in spec.peak_tflops.values())
        # dense tensor-core bf16 is always well above plain fp32
        assert spec.peak_tflops["bf16"] > spec.peak_tflops["fp32"]
        assert spec.max_smem_per_block_kib < spec.smem_per_sm_kib


def test_spec_relations_from_datasheets():
    h100, h200 = SPECS["H100 SXM5 80GB"], SPECS["H200 SXM 141GB"]
    assert h200.mem_tbps > h100.mem_tbps
    assert h200.peak_tflops == h100.peak_tflops  # same GH100 compute
    assert h200.sm_count == 132 and h200.l2_mib == 60
    assert SPECS["H100 PCIe 80GB"].mem_tbps < h100.mem_tbps
    for spec in SPECS.values():
        if "fp8" in spec.peak_tflops:
            assert spec.peak_tflops["fp8"] / spec.peak_tflops["bf16"] == pytest.approx(2.0, rel=0.03)
        assert spec.peak_tflops["fp16"] == spec.peak_tflops["bf16"]


@pytest.mark.parametrize("reported, key", [
    ("NVIDIA H200", "H200 SXM 141GB"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"),
    ("NVIDIA H100 PCIe", "H100 PCIe 80GB"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
    ("NVIDIA B200", "B200"),
    ("H200 SXM 141GB", "H200 SXM 141GB"),
    ("nvidia h200", "H200 SXM 141GB"),
])
def test_match_spec_known(reported, key):
    spec = match_spec(reported)
    assert spec is not None and spec.name == key


@pytest.mark.parametrize("reported", [
    "NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-16GB", "NVIDIA H100 NVL", "NVIDIA H200 NVL",
    "NVIDIA L40", "NVIDIA GeForce RTX 4090 D", "AMD Instinct MI300X", "",
])
def test_match_spec_unknown(reported):
    assert match_spec(reported) is None


def test_read_device_state_is_none_without_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert hw.read_device_state() is None
    assert hw.read_device_state(3, uuid="GPU-0000") is None


def test_calibration_cache_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv("AKA_CACHE_DIR", str(tmp_path / "c"))
    assert hw.cache_dir() == tmp_path / "c"
    path = hw.calibration_path("NVIDIA H200")
    assert path.parent == tmp_path / "c" / "calibration" and path.name == "NVIDIA_H200.json"
    assert hw.load_calibration("NVIDIA H200") is None
    data = {"copy_tbps": 4.25, "bf16_tflops": 786.0, "provenance": {"date": "2026-11-30"}}
    assert hw.save_calibration("NVIDIA H200", data) == path
    assert hw.load_calibration("NVIDIA H200") == data
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp file left
    path.write_text("{not json")
    assert hw.load_calibration("NVIDIA H200") is None


def test_cache_dir_default(monkeypatch, tmp_path):
    monkeypatch.delenv("AKA_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hw.cache_dir() == tmp_path / ".cache" / "aka"


def test_ceilings_datasheet_only(tmp_path, monkeypatch):
    monkeypatch.setenv("AKA_CACHE_DIR", str(tmp_path))
    sheet, measured = ceilings_for("NVIDIA H200")
    assert measured is None
    assert sheet.mem_tbps == 4.8 and sheet.peak_tflops["bf16"] == 989.5
    assert sheet.source.startswith("datasheet")
    with pytest.raises(ValueError):
        ceilings_for("Tesla K80")


def test_ceilings_measured_scaling(tmp_path, monkeypatch):
    monkeypatch.setenv("AKA_CACHE_DIR", str(tmp_path))
    cal = {"copy_tbps": 4.25, "bf16_tflops": 791.6, "fp8_tflops": 1400.0,
           "provenance": {"date": "2026-11-30T10:00:00+00:00"}}
    hw.save_calibration("NVIDIA H200", cal)
    sheet, measured = ceilings_for("NVIDIA H200")
    ratio = 791.6 / 989.5
    assert measured.source.startswith("measured")
    assert measured.mem_tbps == 4.25
    assert measured.peak_tflops["bf16"] == 791.6
    assert measured.peak_tflops["fp8"] == 1400.0
    assert measured.peak_tflops["fp16"] == pytest.approx(989.5 * ratio)
    assert measured.peak_tflops["fp32"] == pytest.approx(67.0 * ratio)
    assert "fp32" in measured.source and "0.800" in measured.source
    assert sheet.peak_tflops["bf16"] == 989.5  # the datasheet side is untouched
    # an explicit calibration overrides the cache; without bf16 nothing is scaled
    _, m2 = ceilings_for("NVIDIA H200", calibration={"copy_tbps": 4.0})
    assert m2.peak_tflops == SPECS["H200 SXM 141GB"].peak_tflops


@pytest.mark.gpu
def test_calibrate_on_gpu(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    monkeypatch.setenv("AKA_CACHE_DIR", str(tmp_path))
    result = hw.calibrate(copy_gib=1.0, warmup=3, reps=10)
    spec = match_spec(result["gpu"])
    assert result["copy_tbps"] > 0 and result["bf16_tflops"] > 0
    if spec is not None:
        assert 0.3 * spec.mem_tbps < result["copy_tbps"] < 1.02 * spec.mem_tbps
        assert 0.3 * spec.peak_tflops["bf16"] < result["bf16_tflops"] < 1.02 * spec.peak_tflops["bf16"]
    assert result["provenance"]["torch"] == torch.__version__
    assert json.loads(hw.calibration_path(result["gpu"]).read_text())["copy_tbps"] == result["copy_tbps"]
    _, measured = ceilings_for(result["gpu"]) if spec else (None, None)
    if spec is not None:
        assert measured is not None and measured.mem_tbps == result["copy_tbps"]
