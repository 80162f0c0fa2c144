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
from lineage.config import LineageConfig
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
from transforms.takedown import TakedownConfig
from transforms.url_filter import UrlFilterConfig


class OutputConfig(Strict):
    runs_dir: str = Field("runs", description="parent folder of run directories (local path or a Beam FileSystems "
                                              "URI)")
    target_shard_bytes: int = Field(64_000_000, gt=0, description="approximate size of each docs/ Parquet file")
    pushgateway_url: str | None = Field(None, description="Prometheus Pushgateway (host:port) that receives each "
                                                          "stage's counters; stats.json is written always")


RUNNER_NAMES = ("direct", "inprocess", "dask", "flink", "spark", "dataflow")
_SIZE = r"^\s*\d+(\.\d+)?\s*([KMGT]i?B)?\s*$"  # a memory size as Dask reads it: 2.5GiB, 4GB, 512MiB


class SlurmConfig(Strict):
    """Submitted with sbatch through dask-jobqueue; the Dask scheduler runs in the corpusmill process, and the jobs
    are cancelled when the command's data stages end."""

    jobs: int = Field(1, ge=1, description="Slurm batch jobs submitted (sbatch), each running `processes` Dask "
                                           "workers that connect to the scheduler in the corpusmill process")
    cores: int = Field(1, ge=1, description="CPU cores of each job (--cpus-per-task), shared out as threads among "
                                            "its worker processes")
    processes: int = Field(1, ge=1, description="Dask worker processes in each job (each with cores / processes "
                                                "threads; the project's steps run best at one thread each)")
    memory: str = Field("4GiB", pattern=_SIZE, description="memory of each job (--mem); each of its workers' "
                                                            "limit is its share, beyond 60-70% of which it "
                                                            "spills its shuffle data to disk (pause and terminate "
                                                            "off, as for worker_memory)")
    queue: str | None = Field(None, description="the partition (--partition/-p); null: the cluster's default")
    account: str | None = Field(None, description="the account charged (--account/-A); null: the user's default")
    walltime: str | None = Field(None, pattern=r"^\d+(-\d+)?(:\d+){0,2}$",
                                 description="each job's time limit (-t) in Slurm's format, e.g. 02:00:00 or "
                                             "1-12:00:00; it must cover the whole command (the jobs serve all its "
                                             "data stages). null: the partition's default limit")
    job_directives: list[str] = Field(default_factory=list, description="more sbatch options, one #SBATCH line "
                                                                        "each, e.g. [--qos=high, "
                                                                        "--constraint=skylake]")
    prologue: list[str] = Field(default_factory=list, description="shell lines the job script runs before the "
                                                                  "workers start, e.g. [module load python/3.11, "
                                                                  "source /shared/venv/bin/activate]; the jobs "
                                                                  "already inherit this command's environment and "
                                                                  "working directory")
    python: str | None = Field(None, description="the workers' Python interpreter (a path valid on the compute "
                                                 "nodes, with corpusmill installed); null: the interpreter running "
                                                 "this command")
    scheduler_host: str | None = Field(None, description="the address the Dask scheduler (in this command's "
                                                         "process) listens on and the workers connect to; null: "
                                                         "all interfaces, announced as this host's address")
    interface: str | None = Field(None, description="the network interface of the workers and the scheduler "
                                                    "(e.g. ib0), when the compute nodes reach this host on one "
                                                    "interface only")
    local_directory: str | None = Field(None, description="each worker's scratch folder for spilled data, on the "
                                                          "compute node (e.g. /scratch/$USER or $TMPDIR); null: "
                                                          "Dask's default (a temporary folder)")
    log_directory: str | None = Field(None, description="where the jobs' stdout/stderr go; null: the run "
                                                        "directory's logs/slurm/ (a shared filesystem path)")
    start_timeout_s: float = Field(600, gt=0, description="how long the command waits for every job's workers to "
                                                         "connect (jobs pending in the queue included) before it "
                                                         "stops with what squeue says of them")

    @field_validator("job_directives")
    @classmethod
    def _sbatch_options(cls, value: list[str]) -> list[str]:
        for option in value:
            if not option.startswith("-"):
                raise ValueError(f"{option!r} is not an sbatch option: write it as on sbatch's command line, e.g. "
                                 f"--qos=high")
        return value

    @model_validator(mode="after")
    def _processes_fit(self):
        if self.processes > self.cores:
            raise ValueError(f"processes ({self.processes}) exceed cores ({self.cores}): each worker process "
                             f"needs at least one core")
        return self


class RunnerConfig(Strict):
    name: str = Field("direct", description="direct | inprocess | dask | flink | spark | dataflow | a Beam runner "
                                            "class name")
    workers: int | None = Field(None, ge=1, description="local workers; default one per core (dask without an "
                                                        "address: the LocalCluster's worker processes)")
    dask_address: str | None = Field(None, description="with name: dask, the scheduler (tcp://host:8786); null: "
                                                       "a LocalCluster on this machine")
    worker_memory: str | None = Field(
        None, pattern=_SIZE,
        description="with name: dask and no address, each LocalCluster worker's memory limit (e.g. 2.5GiB): beyond "
                    "60-70% of it the worker spills the shuffle data it holds to disk, so its memory is bounded "
                    "by the limit, not by the corpus. null: Dask's default (the machine's memory / workers, which "
                    "on a large machine never spills). Workers of a cluster started elsewhere take "
                    "`dask worker --memory-limit`")
    slurm: SlurmConfig | None = Field(None, description="with name: dask, start the Dask workers as Slurm batch "
                                                        "jobs (see docs/scale-out.md); null: no Slurm")
    options: list[str] = Field(default_factory=list, description="extra Beam pipeline options, passed through")
    unit_bytes: int = Field(
        64 << 20, ge=1, description="the clean's unit of work: consecutive input files of about this many bytes "
                                    "are cleaned, and committed, together; a larger plain JSONL file is cut at "
                                    "line boundaries into parts of at most this size (docs/scale-out.md). Memory "
                                    "grows with a unit, not with the corpus; a killed clean redoes only "
                                    "unfinished units. Outputs do not depend on it",
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
        if self.slurm is not None:
            if self.name != "dask":
                raise ValueError(f"slurm is set but name is {self.name!r}: Slurm jobs run Dask workers, set "
                                 f"runner.name to dask")
            given = [f for f in ("dask_address", "worker_memory", "workers") if getattr(self, f) is not None]
            if given:
                raise ValueError(f"slurm starts its own Dask cluster: {', '.join(given)} cannot be set with it "
                                 f"(the jobs' size is slurm.jobs, slurm.processes and slurm.memory)")
        return self


class RunConfig(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$", description="run name: outputs go to <output.runs_dir>/<name> "
                                                                "(letters, digits, . _ -)")
    input: InputConfig = Field(description="what to read: files, folders or globs and how to parse them")
    output: OutputConfig = Field(OutputConfig(), description="where the run directory goes and how its files are "
                                                             "sized")
    runner: RunnerConfig = Field(RunnerConfig(), description="the Beam runner of the cleaning and shard stages")
    takedown: TakedownConfig = Field(TakedownConfig(), description="the takedown step: documents that `corpusmill "
                                                                   "forget` forgot (in this run directory's ledger, "
                                                                   "--against runs' and these) are dropped when they "
                                                                   "come back, before any other step")
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
    lineage: LineageConfig = Field(LineageConfig(), description="the per-checkpoint data cards (`corpusmill trace`, "
                                   "docs/compliance.md)")

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


