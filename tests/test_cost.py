"""Cost accounting (runio.cost): the meter's sources (RAPL, NVML, the labelled estimate), cost.json's arithmetic,
the config's validation, and a real clean stage writing cost.json with its children's CPU time."""
from __future__ import annotations

import json
import resource
from types import SimpleNamespace

import pytest

from runio.cost import CostConfig, Nvml, Rapl, StageMeter, record_stage, summarize
from runio.layout import RunPaths


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeRusage:
    """getrusage: own and children's times, moved by the test."""

    def __init__(self):
        self.own = [1.0, 0.5]
        self.children = [0.0, 0.0]

    def __call__(self, who):
        user, system = self.own if who == resource.RUSAGE_SELF else self.children
        return SimpleNamespace(ru_utime=user, ru_stime=system)


def powercap(root, zones: dict[str, tuple[int, int]]):
    """A /sys/class/powercap tree: zone name -> (energy_uj, max_energy_range_uj)."""
    for name, (energy, wrap) in zones.items():
        zone = root / name
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "energy_uj").write_text(f"{energy}\n")
        (zone / "max_energy_range_uj").write_text(f"{wrap}\n")


class FakeNvml:
    """pynvml's functions for two devices: one with the energy counter (mJ), one with only power (mW)."""

    def __init__(self):
        self.energy_mj = 5_000_000.0
        self.power_mw = 100_000.0

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if handle == 1:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.energy_mj

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.power_mw


def test_estimate_when_rapl_is_not_readable_counts_children(tmp_path):
    clock, usage = FakeClock(), FakeRusage()
    meter = StageMeter(CostConfig(watts_per_core=20.0), clock=clock, rusage=usage, rapl=Rapl(tmp_path / "none"),
                       nvml=Nvml(module=SimpleNamespace()))  # a module without NVML's functions: no source
    with meter:
        clock.now += 30.0
        usage.own[0] += 2.0
        usage.children = [10.0, 1.0]  # a Beam worker's (or torchrun's) CPU time, once it was waited for
    result = meter.result
    assert result["wall_s"] == 30.0
    assert result["cpu_s"] == pytest.approx(13.0)
    assert result["energy"]["cpu"]["source"] == "estimate"
    assert result["energy"]["cpu"]["joules"] == pytest.approx(13.0 * 20.0)
    assert "cost.watts_per_core" in result["energy"]["cpu"]["assumption"]
    assert result["energy"]["gpu"] == {"joules": 0.0, "source": "none"}


def test_rapl_packages_with_wraparound_and_nvml_energy_and_power(tmp_path):
    root = tmp_path / "powercap"
    powercap(root, {"intel-rapl:0": (900_000_000, 1_000_000_000), "intel-rapl:1": (5_000_000, 1_000_000_000),
                    "intel-rapl:0:0": (1, 1_000_000_000)})  # a sub-zone: already inside package 0
    fake, clock = FakeNvml(), FakeClock()
    meter = StageMeter(CostConfig(), gpus=2, clock=clock, rusage=FakeRusage(), rapl=Rapl(root), nvml=Nvml(fake))
    with meter:
        clock.now += 10.0
        powercap(root, {"intel-rapl:0": (100_000_000, 1_000_000_000),  # wrapped: +200 J
                        "intel-rapl:1": (55_000_000, 1_000_000_000)})  # +50 J
        fake.energy_mj += 3_000_000  # +3000 J on device 0
        fake.power_mw = 300_000.0  # device 1: (100 W + 300 W) / 2 × 10 s = 2000 J
    energy = meter.result["energy"]
    assert energy["cpu"] == {"joules": pytest.approx(250.0), "source": "rapl"}
    assert energy["gpu"]["joules"] == pytest.approx(5000.0)
    assert energy["gpu"]["source"] == "nvml+nvml-power"


def test_cost_json_prices_totals_rates_projection_and_accumulates(tmp_path):
    cfg = CostConfig(price_per_kwh=0.3, price_per_cpu_hour=0.05, price_per_gpu_hour=2.0, carbon_g_per_kwh=400,
                     currency="EUR", project={"tokens": 1e12})
    path = RunPaths(tmp_path).cost_json

    def measured(wall, cpu, cpu_j, gpu_j=0.0, gpus=0, source="estimate"):
        return {"wall_s": wall, "cpu_s": cpu, "gpus": gpus, "runs": 1,
                "energy": {"cpu": {"joules": cpu_j, "source": source}, "gpu": {"joules": gpu_j, "source": "nvml"
                                                                              if gpu_j else "none"}}}

    record_stage(path, "clean", measured(100.0, 180.0, 3.6e6), cfg, documents_cleaned=2000)
    record_stage(path, "train", measured(3600.0, 3600.0, 3.6e6, gpu_j=7.2e6, gpus=2, source="rapl"), cfg,
                 tokens_trained=1_000_000)
    cost = record_stage(path, "clean", measured(50.0, 90.0, 1.8e6), cfg)  # a second attempt adds up
    assert json.loads(path.read_text()) == cost
    clean, train = cost["stages"]["clean"], cost["stages"]["train"]
    assert clean["runs"] == 2 and clean["wall_s"] == 150.0 and clean["cpu_s"] == 270.0
    assert clean["kwh"] == pytest.approx(1.5) and clean["energy_estimated"] and clean["energy_source"] == "estimate"
    assert clean["money"]["energy"] == pytest.approx(0.45)
    assert clean["money"]["cpu_time"] == pytest.approx(270 / 3600 * 0.05)
    assert clean["money"]["gpu_time"] == 0.0
    assert clean["co2_g"] == pytest.approx(600.0)
    assert train["gpu_hours"] == pytest.approx(2.0) and train["money"]["gpu_time"] == pytest.approx(4.0)
    assert train["kwh"] == pytest.approx(3.0) and train["energy_source"] == "rapl (CPU) + nvml (GPU)"
    assert train["money"]["total"] == pytest.approx(3.0 * 0.3 + 0.05 + 4.0)
    assert list(cost["stages"]) == ["clean", "train"]
    total = cost["total"]
    assert total["kwh"] == pytest.approx(4.5) and total["money"]["total"] == pytest.approx(
        clean["money"]["total"] + train["money"]["total"])
    assert cost["documents_cleaned"] == 2000 and cost["tokens_trained"] == 1_000_000  # kept from earlier records
    assert cost["per_million_tokens_trained"]["kwh"] == pytest.approx(3.0)
    assert cost["per_million_documents_cleaned"]["kwh"] == pytest.approx(1.5 * 500)
    projection = cost["projection"]
    assert projection["tokens"] == 1e12 and projection["kwh"] == pytest.approx(3.0e6)
    assert projection["money"]["total"] == pytest.approx(train["money"]["total"] * 1e6)


def test_no_prices_no_money(tmp_path):
    cost = summarize({"report": {"wall_s": 1.0, "cpu_s": 1.0, "gpus": 0, "runs": 1, "gpu_hours": 0.0,
                                 "energy": {"cpu": {"joules": 10.0, "source": "estimate"},
                                            "gpu": {"joules": 0.0, "source": "none"}}}}, CostConfig())
    assert cost["stages"]["report"]["money"] is None and cost["stages"]["report"]["co2_g"] is None
    assert cost["projection"] is None and cost["per_million_tokens_trained"] is None


def test_cost_config_errors_name_the_field(tmp_path):
    from pipelines.config import ConfigError, validate_config

    base = {"name": "t", "input": {"paths": [str(tmp_path)]}}
    with pytest.raises(ConfigError, match=r"cost\.price_per_kwh"):
        validate_config({**base, "cost": {"price_per_kwh": -1}})
    with pytest.raises(ConfigError, match=r"cost\.project\.tokenz"):
        validate_config({**base, "cost": {"project": {"tokenz": 1e12}}})


def test_a_clean_stage_writes_cost_json(tmp_path, demo_corpus):
    """The real stage runner: cost.json holds the clean stage's wall and CPU seconds (the Beam workers' too),
    the estimate (no RAPL here, or RAPL where readable), money and CO₂ from the configured prices."""
    from pipelines.config import validate_config
    from pipelines.run import run_stages

    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in demo_corpus[:20]))
    cfg = validate_config({"name": "c", "input": {"paths": [str(source)]}, "output": {"runs_dir": str(tmp_path)},
                           "runner": {"name": "direct", "workers": 1}, "pii": {"enabled": False},
                           "quality": {"enabled": False},
                           "cost": {"price_per_kwh": 0.25, "price_per_cpu_hour": 0.04, "carbon_g_per_kwh": 300}})
    run_stages(cfg, ("clean",), log=lambda _: None)
    cost = json.loads(RunPaths.of(cfg).cost_json.read_text())
    clean = cost["stages"]["clean"]
    assert clean["wall_s"] > 0 and clean["cpu_s"] > 0
    assert clean["energy"]["cpu"]["source"] in ("rapl", "estimate")
    if clean["energy"]["cpu"]["source"] == "estimate":
        assert clean["energy"]["cpu"]["joules"] == pytest.approx(clean["cpu_s"] * 10.0)
    assert clean["money"]["energy"] == pytest.approx(clean["kwh"] * 0.25)
    assert clean["co2_g"] == pytest.approx(clean["kwh"] * 300)
    assert cost["documents_cleaned"] == json.loads(RunPaths.of(cfg).stats.read_text())["documents_read"]


def test_cost_gauges_carry_cost_json(tmp_path):
    from runio.pushgateway import cost_registry, push_cost

    measured = {"wall_s": 5.0, "cpu_s": 8.0, "gpus": 0, "runs": 1,
                "energy": {"cpu": {"joules": 80.0, "source": "estimate"}, "gpu": {"joules": 0.0, "source": "none"}}}
    cost = record_stage(RunPaths(tmp_path).cost_json, "shards", measured, CostConfig(price_per_kwh=1.0))
    registry = cost_registry(cost)
    assert registry.get_sample_value("corpusmill_cost_cpu_seconds", {"stage": "shards"}) == 8.0
    assert registry.get_sample_value("corpusmill_cost_energy_kwh", {"stage": "shards", "source": "estimate"}) == \
        pytest.approx(80.0 / 3.6e6)
    assert registry.get_sample_value("corpusmill_cost_money", {"stage": "shards", "currency": "USD"}) == \
        pytest.approx(80.0 / 3.6e6)
    assert not push_cost(cost, None)


def test_nvml_says_what_it_cannot_read(caplog):
    """Nothing silent: no NVML at all, and a device without an energy counter, each give one log line with the error."""
    caplog.set_level("INFO", logger="runio.cost")
    assert not Nvml(module=SimpleNamespace()).available
    assert "NVML not usable (AttributeError" in caplog.text
    caplog.clear()
    nvml = Nvml(FakeNvml())
    nvml.read(), nvml.read()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["NVML: no energy counter (RuntimeError: NVML_ERROR_NOT_SUPPORTED)"]
