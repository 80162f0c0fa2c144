"""The run configuration: one YAML file per run, validated once, here, at the edge.

Each component owns its section's model next to its code; this module composes them, applies
``--set section.key=value`` overrides, and turns validation errors into messages that name the field.
"""
from __future__ import annotations

import datetime
import importlib.util
import json
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from beamio.config_base import (M, ConfigError, InputConfig, Strict, _format_error, _parse_value,  # noqa: F401
                                apply_overrides, load_section, param_overrides, read_config_file)
from pipelines.report_config import ReportConfig
from pipelines.sweep_config import SweepConfig
from runio.cost import CostConfig
from runio.files import sha256_bytes
from tokenizer.config import PackingConfig, TokenizerConfig
from trainer_bridge.config import TrainConfig
from transforms.exact_dedup import ExactDedupConfig
from transforms.extract.config import ExtractConfig
from transforms.filters import FiltersConfig
from transforms.langid import LangIdConfig
from transforms.near_dedup import NearDedupConfig
from transforms.normalize import NormalizeConfig
from transforms.pii import PiiConfig
from transforms.quality import QualityConfig
from transforms.url_filter import UrlFilterConfig


class OutputConfig(Strict):
    runs_dir: str = Field("runs", description="parent folder of run directories (local path or a Beam FileSystems "
                                              "URI)")
    target_shard_bytes: int = Field(64_000_000, gt=0, description="approximate size of each docs/ Parquet file")
    pushgateway_url: str | None = Field(None, description="Prometheus Pushgateway (host:port) that receives each "
                                                          "stage's counters; stats.json is written always")


RUNNER_NAMES = ("direct", "inprocess", "dask", "flink", "spark", "dataflow")


class RunnerConfig(Strict):
    name: str = Field("direct", description="direct | inprocess | dask | flink | spark | dataflow | a Beam runner "
                                            "class name")
    workers: int | None = Field(None, ge=1, description="local workers; default one per core (dask without an "
                                                        "address: the LocalCluster's worker processes)")
    dask_address: str | None = Field(None, description="with name: dask, the scheduler (tcp://host:8786); null: "
                                                       "a LocalCluster on this machine")
    worker_memory: str | None = Field(
        None, pattern=r"^\s*\d+(\.\d+)?\s*([KMGT]i?B)?\s*$",
        description="with name: dask and no address, each LocalCluster worker's memory limit (e.g. 2.5GiB): beyond "
                    "60-70% of it the worker spills the shuffle data it holds to disk, so its memory is bounded "
                    "by the limit, not by the corpus. null: Dask's default (the machine's memory / workers, which "
                    "on a large machine never spills). Workers of a cluster started elsewhere take "
                    "`dask worker --memory-limit`")
    options: list[str] = Field(default_factory=list, description="extra Beam pipeline options, passed through")
    unit_bytes: int = Field(
        64 << 20, ge=1, description="the clean's unit of work: consecutive input files of about this many bytes "
                                    "are cleaned, and committed, together (docs/scale-out.md). Memory grows with "
                                    "a unit, not with the corpus; a killed clean redoes only unfinished units. "
                                    "Outputs do not depend on it",
    )

    @field_validator("name")
    @classmethod
    def _known_runner(cls, value: str) -> str:
        """A runner Beam cannot create is refused here, before any stage (Beam would fail in the first one)."""
        if value in RUNNER_NAMES:
            return value
        from apache_beam.runners.runner import _RUNNER_MAP  # how Beam's create_runner resolves a runner name

        resolved = _RUNNER_MAP.get(value.lower(), _RUNNER_MAP.get(value.lower() + "runner", value))
        module = resolved.rsplit(".", 1)[0] if "." in resolved else None
        if module is None or importlib.util.find_spec(module.split(".")[0]) is None:
            raise ValueError(f"unknown runner {value!r}: expected one of {', '.join(RUNNER_NAMES)}, a runner Beam "
                             f"names (e.g. PrismRunner) or the module path of a PipelineRunner class")
        return value

    @model_validator(mode="after")
    def _address_needs_dask(self):
        if self.dask_address and self.name != "dask":
            raise ValueError(f"dask_address is set but name is {self.name!r}: set runner.name to dask")
        if self.worker_memory and (self.name != "dask" or self.dask_address):
            raise ValueError("worker_memory applies to the LocalCluster of runner.name: dask without a dask_address "
                             "(workers of a running cluster take `dask worker --memory-limit`)")
        return self


class RunConfig(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$", description="run name: outputs go to <output.runs_dir>/<name> "
                                                                "(letters, digits, . _ -)")
    input: InputConfig = Field(description="what to read: files, folders or globs and how to parse them")
    output: OutputConfig = Field(OutputConfig(), description="where the run directory goes and how its files are "
                                                             "sized")
    runner: RunnerConfig = Field(RunnerConfig(), description="the Beam runner of the cleaning and shard stages")
    url_filter: UrlFilterConfig = Field(UrlFilterConfig(), description="the URL filter: block and allow lists of "
                                                                       "domains, URL prefixes and regexes, applied "
                                                                       "to meta.url before any text work")
    extract: ExtractConfig = Field(ExtractConfig(), description="the extract step: main text of HTML records "
                                                                "(first step; other records pass untouched)")
    normalize: NormalizeConfig = Field(NormalizeConfig(), description="the normalize step: Unicode form, whitespace, "
                                                                      "script detection")
    langid: LangIdConfig = Field(LangIdConfig(), description="the langid step: language of each document (picks its "
                                                             "quality model)")
    filters: FiltersConfig = Field(FiltersConfig(), description="the heuristic filters (Gopher, C4, FineWeb rules)")
    exact_dedup: ExactDedupConfig = Field(ExactDedupConfig(), description="the exact-duplicate removal step")
    near_dedup: NearDedupConfig = Field(NearDedupConfig(), description="the near-duplicate removal step (MinHash or "
                                                                       "SimHash)")
    quality: QualityConfig = Field(QualityConfig(), description="the quality scoring and decision step")
    pii: PiiConfig = Field(PiiConfig(), description="the PII masking step (Presidio)")
    tokenizer: TokenizerConfig = Field(TokenizerConfig(), description="the tokenizer trained (or loaded) by the shard "
                                                                      "stage")
    packing: PackingConfig = Field(PackingConfig(), description="how encoded documents are packed into rows and "
                                                                "shards")
    train: TrainConfig = Field(TrainConfig(), description="the trainer: model, mesh, optimizer, checkpoints, "
                                                          "monitoring")
    report: ReportConfig = Field(ReportConfig(), description="the run report (report.html)")
    sweep: SweepConfig = Field(SweepConfig(), description="the hyper-parameter search of `corpusmill sweep`")
    cost: CostConfig = Field(CostConfig(), description="prices and assumptions of cost.json (energy, money, carbon)")

    @field_validator("name", mode="before")
    @classmethod
    def _name_as_written(cls, value: Any) -> Any:
        """YAML reads ``name: 2024-12-04`` as a date: a run named by its day is common, and a date's ISO text is
        what was written. A number or a boolean may not be (``0123``, ``1e3``, ``yes``): refused, saying how to
        quote it."""
        if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
            return value.isoformat()
        if not isinstance(value, str) and value is not None:
            kind = "a boolean" if isinstance(value, bool) else "a number" if isinstance(value, (int, float)) else \
                type(value).__name__
            raise ValueError(f"was read as {kind} ({value!r}); quote it to make it a name: name: \"…\" in the "
                             f"file, --set 'name=\"…\"' on the command line")
        return value

    @field_validator("input", mode="before")
    @classmethod
    def _paths_as_list(cls, value: Any) -> Any:
        if isinstance(value, dict) and isinstance(value.get("paths"), str):
            value = {**value, "paths": [value["paths"]]}
        return value

    @property
    def run_dir(self) -> Path:
        return Path(self.output.runs_dir) / self.name

    def resolved_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)

    def fingerprint(self, sections: tuple[str, ...] | None = None) -> str:
        """A hash of the resolved config (or of some sections), to refuse mixing outputs of two configs."""
        data = self.model_dump(mode="json")
        if sections is not None:
            data = {key: data[key] for key in sections}
        return sha256_bytes(json.dumps(data, sort_keys=True).encode())[:16]


def validate_config(data: dict) -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_error(err)) from None


def load_config(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    return validate_config(apply_overrides(read_config_file(path), list(overrides or [])))


