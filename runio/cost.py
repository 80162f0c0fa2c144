"""What each stage of a run costs: wall and CPU time, energy (with where the number came from), money and CO₂.

On the ground floor (like ``runio.pushgateway``) so that the pipelines, the trainer and the report can all use
it. ``StageMeter`` measures one stage; ``record_stage`` folds the measurement into the run's ``cost.json``
(``RunPaths.cost_json``) and recomputes the totals, the rates per million tokens trained and per million
documents cleaned, and the projection for ``cost.project``.

Where the numbers come from:
- wall seconds: a monotonic clock (injectable);
- CPU seconds: ``getrusage`` of this process *and* of its waited-for children (Beam's worker processes,
  torchrun and its ranks), user + system, as a difference over the stage;
- CPU energy: RAPL's package counters (``/sys/class/powercap/intel-rapl:N/energy_uj``, wrap-around handled)
  when they are readable (source ``rapl``), else CPU seconds × ``cost.watts_per_core`` (source ``estimate``:
  a configured guess, labelled as such everywhere it is shown);
- GPU energy: NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the
  driver loaded) summed over the devices, when pynvml is installed and a device answers (source ``nvml``); a
  device without the counter contributes its power draw × wall time, averaged over the stage's start and end
  (source ``nvml-power``). No NVML: no GPU energy (source ``none``).

A stage that runs more than once in the same run directory (a resume after a crash, a re-run after a config
change) adds to its entry: money spent on an interrupted attempt was spent all the same (``runs`` counts them).
"""
from __future__ import annotations

import logging
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from runio.files import read_json, write_json

log = logging.getLogger(__name__)

POWERCAP_ROOT = Path("/sys/class/powercap")
JOULES_PER_KWH = 3.6e6
STAGE_ORDER = ("clean", "shards", "train", "report")


class CostProjectConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: float | None = Field(None, gt=0, description="a training target in tokens (e.g. 1e12): its cost "
                                                         "projected from the measured train-stage rate")


class CostConfig(BaseModel):
    """``cost:`` in the run config; every price is optional (without one, that money is not computed)."""

    model_config = ConfigDict(extra="forbid")

    price_per_kwh: float | None = Field(None, ge=0, description="electricity, per kWh")
    price_per_gpu_hour: float | None = Field(None, ge=0, description="per GPU and hour of a stage that uses GPUs")
    price_per_cpu_hour: float | None = Field(None, ge=0, description="per CPU-core hour (CPU seconds / 3600)")
    carbon_g_per_kwh: float | None = Field(None, ge=0, description="grid carbon intensity, g CO₂ per kWh")
    currency: str = Field("USD", min_length=1, max_length=8, description="currency name of the prices (text, at most "
                                                                         "8 characters)")
    watts_per_core: float = Field(10.0, gt=0, description="CPU energy estimate when RAPL is not readable: W per "
                                                          "busy core (the result is labelled 'estimate')")
    project: CostProjectConfig = Field(CostProjectConfig(), description="a training target whose cost is projected")


# ------------------------------------------------------------------------------------------ energy sources

class Rapl:
    """The package-level RAPL counters under ``root``; ``read()`` is None when none is readable."""

    def __init__(self, root: Path = POWERCAP_ROOT):
        self.zones: list[tuple[Path, int]] = []
        try:
            candidates = sorted(root.glob("intel-rapl:*"))
        except OSError:
            candidates = []
        for zone in candidates:
            if zone.name.count(":") != 1:  # intel-rapl:0:0 is a sub-zone (core, dram) of package 0
                continue
            try:
                int((zone / "energy_uj").read_text())
                wrap = int((zone / "max_energy_range_uj").read_text())
            except (OSError, ValueError):
                continue
            self.zones.append((zone / "energy_uj", wrap))

    def read(self) -> list[int] | None:
        if not self.zones:
            return None
        try:
            return [int(path.read_text()) for path, _ in self.zones]
        except (OSError, ValueError):
            return None

    def joules(self, start: list[int], end: list[int]) -> float:
        total = 0
        for (_, wrap), a, b in zip(self.zones, start, end):
            total += b - a if b >= a else b + wrap - a  # the counter wrapped once
        return total / 1e6


class Nvml:
    """NVML's energy counters, or power draw where a device has none; ``available`` False without pynvml or a
    device. ``module``: pynvml itself, or a stand-in with the same functions (tests)."""

    def __init__(self, module: Any = None):
        self.nvml, self.handles = None, []
        self._said: set[str] = set()  # which missing readings were logged (once each)
        if module is None:
            try:
                import pynvml as module  # optional: not a dependency
            except ImportError:
                return
        try:
            module.nvmlInit()
            self.handles = [module.nvmlDeviceGetHandleByIndex(i) for i in range(module.nvmlDeviceGetCount())]
            self.nvml = module
        except Exception as error:  # noqa: BLE001 - NVML raises its own error classes: no driver, no device
            self.handles = []
            log.info("NVML not usable (%s: %s): GPU energy is not measured", type(error).__name__, error)

    @property
    def available(self) -> bool:
        return bool(self.handles)

    def _say_once(self, what: str, error: Exception) -> None:
        if what not in self._said:
            self._said.add(what)
            log.info("NVML: no %s (%s: %s)", what, type(error).__name__, error)

    def read(self) -> list[tuple[str, float]]:
        """Per device ("energy", millijoules so far) or ("power", milliwatts now)."""
        out = []
        for handle in self.handles:
            try:
                out.append(("energy", float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle))))
            except Exception as error:  # noqa: BLE001 - older GPUs have no energy counter (NVML's own error class)
                self._say_once("energy counter", error)
                try:
                    out.append(("power", float(self.nvml.nvmlDeviceGetPowerUsage(handle))))
                except Exception as error:  # noqa: BLE001 - nor a power reading: this device is not counted
                    self._say_once("power reading", error)
                    out.append(("none", 0.0))
        return out

    @staticmethod
    def joules(start: list[tuple[str, float]], end: list[tuple[str, float]], seconds: float) -> tuple[float, str]:
        total, sources = 0.0, set()
        for (kind_a, a), (kind_b, b) in zip(start, end):
            if kind_a == kind_b == "energy":
                total += (b - a) / 1e3
                sources.add("nvml")
            elif "none" not in (kind_a, kind_b):
                total += (a + b) / 2 / 1e3 * seconds  # mean of the two power readings (mW) × time
                sources.add("nvml-power")
        return total, "+".join(sorted(sources)) or "none"


def _cpu_seconds(rusage: Callable[[int], Any]) -> float:
    own, children = rusage(resource.RUSAGE_SELF), rusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# ------------------------------------------------------------------------------------------ one stage

@dataclass
class StageMeter:
    """Measures one stage: ``with StageMeter(cfg) as meter: ...``, then ``meter.result`` (a ``cost.json``
    stage entry, prices not yet applied). ``gpus``: devices the stage occupies (for ``price_per_gpu_hour``)."""

    cfg: CostConfig = field(default_factory=CostConfig)
    gpus: int = 0
    clock: Callable[[], float] = time.monotonic
    rusage: Callable[[int], Any] = resource.getrusage
    rapl: Rapl | None = None
    nvml: Nvml | None = None
    result: dict | None = None

    def __post_init__(self):
        self.rapl = self.rapl if self.rapl is not None else Rapl()
        self.nvml = self.nvml if self.nvml is not None else Nvml()

    def __enter__(self) -> "StageMeter":
        self._start = (self.clock(), _cpu_seconds(self.rusage), self.rapl.read(),
                       self.nvml.read() if self.nvml.available else [])
        return self

    def __exit__(self, *exc) -> None:
        self.result = self.measure()

    def measure(self) -> dict:
        t0, cpu0, rapl0, nvml0 = self._start
        wall = max(0.0, self.clock() - t0)
        cpu = max(0.0, _cpu_seconds(self.rusage) - cpu0)
        rapl1 = self.rapl.read() if rapl0 is not None else None
        if rapl0 is not None and rapl1 is not None:
            cpu_energy = {"joules": self.rapl.joules(rapl0, rapl1), "source": "rapl"}
        else:
            cpu_energy = {"joules": cpu * self.cfg.watts_per_core, "source": "estimate",
                          "assumption": f"{self.cfg.watts_per_core:g} W per busy core (cost.watts_per_core)"}
        gpu_joules, gpu_source = (Nvml.joules(nvml0, self.nvml.read(), wall) if nvml0 else (0.0, "none"))
        return {"wall_s": wall, "cpu_s": cpu, "gpus": self.gpus, "runs": 1,
                "energy": {"cpu": cpu_energy, "gpu": {"joules": gpu_joules, "source": gpu_source}}}


# ------------------------------------------------------------------------------------------ cost.json

def _add(old: dict | None, new: dict) -> dict:
    """Another attempt of the same stage: times and energy add up, a source seen in either is kept."""
    if not old:
        return new
    out = {"wall_s": old.get("wall_s", 0.0) + new["wall_s"], "cpu_s": old.get("cpu_s", 0.0) + new["cpu_s"],
           "gpus": max(old.get("gpus", 0), new["gpus"]), "runs": old.get("runs", 1) + new["runs"],
           "gpu_hours": old.get("gpu_hours", 0.0) + new.get("gpu_hours", 0.0), "energy": {}}
    for part in ("cpu", "gpu"):
        a, b = (old.get("energy") or {}).get(part) or {}, new["energy"][part]
        sources = sorted({s for s in (a.get("source"), b["source"]) if s and s != "none"} or {"none"})
        entry = {"joules": a.get("joules", 0.0) + b["joules"], "source": "+".join(sources)}
        if "assumption" in b:
            entry["assumption"] = b["assumption"]
        out["energy"][part] = entry
    return out


def priced(entry: dict, cfg: CostConfig) -> dict:
    """``entry`` with kWh, money (per kind and total, only for configured prices) and CO₂ (when configured)."""
    energy = entry["energy"]
    kwh = (energy["cpu"]["joules"] + energy["gpu"]["joules"]) / JOULES_PER_KWH
    estimated = "estimate" in energy["cpu"]["source"] or "estimate" in energy["gpu"]["source"]
    out = {**entry, "kwh": kwh, "energy_source": _energy_source(energy), "energy_estimated": estimated}
    money = {}
    if cfg.price_per_kwh is not None:
        money["energy"] = kwh * cfg.price_per_kwh
    if cfg.price_per_cpu_hour is not None:
        money["cpu_time"] = entry["cpu_s"] / 3600 * cfg.price_per_cpu_hour
    if cfg.price_per_gpu_hour is not None:
        money["gpu_time"] = entry.get("gpu_hours", 0.0) * cfg.price_per_gpu_hour
    out["money"] = {**money, "total": sum(money.values())} if money else None
    out["co2_g"] = kwh * cfg.carbon_g_per_kwh if cfg.carbon_g_per_kwh is not None else None
    return out


def _energy_source(energy: dict) -> str:
    """One label for a stage's energy: the CPU's source, plus the GPU's when there was one."""
    cpu, gpu = energy["cpu"]["source"], energy["gpu"]["source"]
    return cpu if gpu == "none" else f"{cpu} (CPU) + {gpu} (GPU)"


def _sum(entries: list[dict]) -> dict:
    total: dict = {}
    for entry in entries:
        total = _add(total or None, entry)
    return total


def _scaled(entry: dict, factor: float) -> dict:
    money = entry.get("money")
    return {"wall_s": entry["wall_s"] * factor, "cpu_s": entry["cpu_s"] * factor, "kwh": entry["kwh"] * factor,
            "money": None if money is None else {k: v * factor for k, v in money.items()},
            "co2_g": None if entry.get("co2_g") is None else entry["co2_g"] * factor}


def summarize(stages: dict[str, dict], cfg: CostConfig, *, tokens_trained: int | None = None,
              documents_cleaned: int | None = None) -> dict:
    """The whole ``cost.json`` from the raw stage entries: priced stages, total, rates and projection."""
    order = [s for s in STAGE_ORDER if s in stages] + sorted(s for s in stages if s not in STAGE_ORDER)
    raw = {s: {k: v for k, v in stages[s].items() if k in ("wall_s", "cpu_s", "gpus", "runs", "gpu_hours",
                                                            "energy")} for s in order}
    out = {"currency": cfg.currency,
           "prices": cfg.model_dump(mode="json", exclude={"project", "watts_per_core", "currency"}),
           "watts_per_core": cfg.watts_per_core,
           "stages": {s: priced(raw[s], cfg) for s in order},
           "total": priced(_sum(list(raw.values())), cfg) if raw else None,
           "tokens_trained": tokens_trained, "documents_cleaned": documents_cleaned,
           "per_million_tokens_trained": None, "per_million_documents_cleaned": None, "projection": None}
    train = out["stages"].get("train")
    if train is not None and tokens_trained:
        out["per_million_tokens_trained"] = _scaled(train, 1e6 / tokens_trained)
        if cfg.project.tokens:
            out["projection"] = {"tokens": cfg.project.tokens,
                                 **_scaled(train, cfg.project.tokens / tokens_trained),
                                 "basis": f"the train stage's measured rate over {tokens_trained} tokens"}
    clean = out["stages"].get("clean")
    if clean is not None and documents_cleaned:
        out["per_million_documents_cleaned"] = _scaled(clean, 1e6 / documents_cleaned)
    return out


def record_stage(path: str | os.PathLike, stage: str, measured: dict, cfg: CostConfig, *,
                 tokens_trained: int | None = None, documents_cleaned: int | None = None) -> dict:
    """Add ``measured`` (a ``StageMeter`` result) to ``stage``'s entry of the ``cost.json`` at ``path`` and
    rewrite the file (atomically); returns its new content. ``None`` counts keep the file's earlier ones."""
    previous = read_json(path, default=None) or {}
    stages = dict(previous.get("stages") or {})
    entry = dict(measured)
    entry["gpu_hours"] = entry.get("gpu_hours", entry["gpus"] * entry["wall_s"] / 3600)
    stages[stage] = _add(stages.get(stage), entry)
    summary = summarize(stages, cfg,
                        tokens_trained=tokens_trained if tokens_trained is not None else previous.get("tokens_trained"),
                        documents_cleaned=(documents_cleaned if documents_cleaned is not None
                                           else previous.get("documents_cleaned")))
    write_json(path, summary)
    return summary
