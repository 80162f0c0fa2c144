"""The ``sweep`` section of the run config (composed by ``pipelines/config.py``, read by ``experiments.sweep``): the
search space, the budget, Optuna's sampler, pruner and storage.

The search space maps dotted ``train.*`` keys (the same keys ``--set`` takes) to a distribution::

    sweep:
      space:
        train.optimizer.lr: {type: float, low: 1.0e-4, high: 3.0e-2, log: true}
        train.optimizer.warmup_steps: {type: int, low: 0, high: 20}
        train.model.n_kv_heads: {type: categorical, choices: [1, 2, 4]}
      trials: 20
      budget_steps: 200
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ParamSpec(_Strict):
    """One dimension of the search space (Optuna's ``suggest_float`` / ``suggest_int`` / ``suggest_categorical``)."""

    type: Literal["float", "int", "categorical"] = Field(description="float, int or categorical (Optuna's suggest_*)")
    low: float | None = Field(None, description="float/int: lower bound")
    high: float | None = Field(None, description="float/int: upper bound")
    log: bool = Field(False, description="float/int: sample on a log scale (needs low > 0)")
    step: float | None = Field(None, gt=0, description="float/int: grid step (not with log)")
    choices: list[Any] | None = Field(None, description="categorical: the values to choose from")

    @model_validator(mode="after")
    def _bounds(self) -> "ParamSpec":
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical parameter needs a non-empty 'choices' list")
            return self
        if self.low is None or self.high is None:
            raise ValueError(f"a {self.type} parameter needs 'low' and 'high'")
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) > high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError("a log-scaled parameter needs low > 0")
        if self.log and self.step is not None:
            raise ValueError("'step' and 'log' cannot be combined")
        if self.type == "int" and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError("an int parameter needs integer bounds")
        return self


class SweepConfig(_Strict):
    space: dict[str, ParamSpec] = Field(default_factory=dict,
                                        description="dotted train.* key -> distribution; see pipelines/sweep_config.py")
    trials: int = Field(20, ge=1, description="finished (complete or pruned) trials the study should end with")
    parallel: int = Field(1, ge=1, description="trials running at once (one worker process each)")
    sampler: Literal["tpe", "gp", "random"] = Field("tpe", description="Optuna sampler: tpe, gp or random")
    startup_trials: int | None = Field(None, ge=0, description="tpe/gp: random trials before the model is used; "
                                                              "None: Optuna's default (10)")
    pruner: Literal["median", "hyperband", "none"] = Field("median",
                                                           description="Optuna pruner: median, hyperband or none")
    pruner_startup_trials: int = Field(1, ge=0, description="median: finished trials before any pruning")
    pruner_warmup_steps: int = Field(0, ge=0, description="median: steps before a trial may be pruned")
    budget_steps: int | None = Field(None, ge=1, description="training steps per trial; None: train.steps")
    budget_tokens: int | None = Field(None, ge=1, description="instead of budget_steps: tokens per trial "
                                                              "(steps = tokens / (global_batch_size × seq_len))")
    eval_interval: int | None = Field(None, ge=1, description="validation (and pruner report) cadence of a "
                                                              "trial; None: train.eval.interval")
    seed: int = Field(0, description="the sampler's seed")
    storage: Literal["journal", "sqlite"] = Field("journal", description="journal: Optuna's JournalFileStorage; "
                                                                         "sqlite: its RDB storage")
    enqueue: list[dict[str, Any]] = Field(default_factory=list,
                                          description="points evaluated first (known-good settings), "
                                                      "same keys as space")

    @model_validator(mode="after")
    def _keys(self) -> "SweepConfig":
        for key in self.space:
            if not key.startswith("train.") or len(key.split(".")) < 2:
                raise ValueError(f"space key {key!r}: must be a dotted train.* key such as train.optimizer.lr")
        for point in self.enqueue:
            unknown = set(point) - set(self.space)
            if unknown:
                raise ValueError(f"enqueue point {point}: keys {sorted(unknown)} are not in space")
        if self.budget_steps is not None and self.budget_tokens is not None:
            raise ValueError("set budget_steps or budget_tokens, not both")
        return self
