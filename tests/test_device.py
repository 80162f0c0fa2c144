"""The device layer (issue 12): selection through torch.accelerator with the CPU fallback, the backend from
dist.get_default_backend_for_device, the peak-FLOPs table by device name and the metrics.peak_flops override."""
from __future__ import annotations

import pytest
import torch

from trainer_bridge.parallel import device as devices
from trainer_bridge.config import TrainConfig


def test_cpu_fallback_through_torch_accelerator():
    assert torch.accelerator.current_accelerator(check_available=True) is None  # this machine: CPU only
    assert devices.current_accelerator() is None
    assert devices.resolve_device_type("auto") == "cpu"
    assert devices.resolve_device_type("cpu") == "cpu"
    runtime = devices.init_runtime("auto")
    assert runtime.device == torch.device("cpu") and runtime.backend is None and not runtime.is_accelerator


@pytest.mark.parametrize("requested", ["cuda", "xpu", "npu"])
def test_unavailable_accelerator_is_refused(requested):
    with pytest.raises(RuntimeError, match=rf"device: '{requested}' was configured.*none \(CPU only\)"):
        devices.resolve_device_type(requested)


def test_auto_picks_the_available_accelerator(monkeypatch):
    monkeypatch.setattr(devices, "current_accelerator", lambda: torch.device("xpu"))
    assert devices.resolve_device_type("auto") == "xpu"
    assert devices.resolve_device_type("xpu") == "xpu"
    with pytest.raises(RuntimeError, match="allowed here: auto, cpu, xpu"):
        devices.resolve_device_type("cuda")


def test_backend_per_device_type():
    assert devices.backend_for("cpu") == "gloo"
    assert devices.backend_for("cuda") == "nccl"


@pytest.mark.parametrize("name,dtype,expected", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989e12),
    ("NVIDIA H100 PCIe", "bf16", 756e12),
    ("NVIDIA H100 NVL", "fp16", 835e12),
    ("NVIDIA H200", "bf16", 989e12),
    ("NVIDIA B200", "bf16", 2250e12),
    ("NVIDIA A100-SXM4-80GB", "fp32", 156e12),
    ("AMD Instinct MI300X", "bf16", 1307.4e12),
    ("Ascend910B3", "fp16", 313e12),
    ("Some Future Chip", "bf16", None),
    ("Ascend910B3", "fp32", None),  # no published figure in the table: measured instead
])
def test_peak_flops_table_by_device_name(name, dtype, expected):
    assert devices.table_peak_flops(name, dtype) == expected


def test_peak_flops_sources(monkeypatch):
    cpu = torch.device("cpu")
    assert devices.peak_flops(cpu, "fp32", 123e12) == (123e12, "configured")
    measured, source = devices.peak_flops(cpu, "fp32", None)
    assert source == "measured" and measured > 1e6
    monkeypatch.setattr(devices, "device_name", lambda device: "NVIDIA H200")
    assert devices.peak_flops(torch.device("cuda", 0), "bf16", None) == (989e12, "table")
    assert devices.peak_flops(torch.device("cuda", 0), "bf16", 5e14) == (5e14, "configured")


def test_config_device_field():
    for value in ("auto", "cpu", "cuda", "xpu", "npu", "mps"):
        assert TrainConfig.model_validate({"device": value}).device == value
    with pytest.raises(ValueError):
        TrainConfig.model_validate({"device": "CUDA:0"})
