"""What training consumed: steps ↔ global sample indices ↔ train rows, read from the run directory alone.

The trainer writes ``train/data_order.jsonl`` (``trainer_bridge.loop.data.DataOrderLog``): a ``stretch`` line
whenever it starts consuming consecutive samples at a step (a start, a resume on any world size, an init from
another run, a rollback) and an ``end`` line when the loop ends. Within a stretch, step ``s`` uses the
``global_batch_size`` samples from ``sample + (s - step) * global_batch_size``; sample ``g`` is row
``permutation(g // rows)[g % rows]`` of the train split (Contract 4, ``SampleOrder``). A checkpoint's
``provenance.json`` holds the global sample index it was saved at (``samples``): it had consumed samples
``0 .. samples - 1``, whatever happened in between (the data position only moves forward; a rollback keeps it).

A run trained before this log existed, or with another sample order, has no derivable steps: ``TrainingOrder``
says why instead of guessing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from runio.files import read_jsonl
from runio.layout import RunPaths
from trainer_bridge.checkpoint.names import PROVENANCE_FILE, complete_checkpoints, read_checkpoint_json, step_of
from trainer_bridge.loop.order import SAMPLE_ORDER, SampleOrder


@dataclass(frozen=True)
class Stretch:
    """Steps ``first_step .. last_step`` used consecutive samples from ``first_sample`` (``last_step`` None: the
    log does not say where it ended)."""

    cause: str
    first_step: int
    first_sample: int
    global_batch_size: int
    micro_batch_size: int
    dp: int
    last_step: int | None

    def samples_end(self) -> int:
        """One past the last sample index the stretch consumed."""
        steps = 0 if self.last_step is None else max(0, self.last_step - self.first_step + 1)
        return self.first_sample + steps * self.global_batch_size


@dataclass
class TrainingOrder:
    """The run's consumed samples as stretches of steps; ``problem`` says why steps cannot be derived."""

    stretches: list[Stretch] = field(default_factory=list)
    seed: int | None = None
    train_rows: int | None = None
    problem: str | None = None
    shards: set = field(default_factory=set)  # the shard manifests' sha256 the stretches trained on

    @property
    def samples_consumed(self) -> int:
        return max((s.samples_end() for s in self.stretches), default=0)

    def order(self) -> SampleOrder:
        return SampleOrder(self.train_rows, self.seed)

    def samples_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """Every consumed global sample index whose row is in ``rows`` (train split), sorted: one permutation
        per epoch consumed, inverted for the given rows only."""
        wanted = np.zeros(self.train_rows, dtype=bool)
        wanted[np.asarray(rows, dtype=np.int64)] = True
        end, order, found = self.samples_consumed, self.order(), []
        for epoch in range(math.ceil(end / self.train_rows)):
            positions = np.flatnonzero(wanted[order.permutation(epoch)]) + epoch * self.train_rows
            found.append(positions[positions < end])
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    def steps_of_samples(self, samples: np.ndarray) -> list[dict]:
        """(step, micro-step, position in the global batch) of every use of the given sample indices; a sample
        can be used by two steps of the same number only around a rollback (then both are listed). A crashed
        stretch and the resume after it replay the same (step, sample) pairs: listed once."""
        uses, seen = [], set()
        for stretch in self.stretches:
            lo, hi = stretch.first_sample, stretch.samples_end()
            inside = samples[(samples >= lo) & (samples < hi)]
            per_micro_step = stretch.micro_batch_size * stretch.dp
            for sample in inside.tolist():
                offset, position = divmod(sample - lo, stretch.global_batch_size)
                if (stretch.first_step + offset, sample) in seen:
                    continue
                seen.add((stretch.first_step + offset, sample))
                uses.append({"step": stretch.first_step + offset, "micro_step": position // per_micro_step,
                             "position": position, "sample": sample})
        return uses


def _last_steps_from_metrics(paths: RunPaths) -> list[tuple[float, int]]:
    """(time, step) of every metrics.jsonl record: where a stretch without an ``end`` line got to."""
    return [(float(r["time"]), int(r["step"])) for r in read_jsonl(paths.metrics_jsonl)
            if isinstance(r.get("step"), int) and isinstance(r.get("time"), (int, float))]


def training_order(paths: RunPaths) -> TrainingOrder:
    """Read ``train/data_order.jsonl``; a missing log or another sample order gives a ``problem``."""
    log_path = paths.data_order_jsonl
    if not log_path.is_file():
        why = ("the run has not trained" if not paths.checkpoints.is_dir() and not paths.metrics_jsonl.is_file()
               else f"{log_path} is missing (trained before corpusmill recorded its data order, or with another "
                    "sampler): the steps that used a row cannot be derived")
        return TrainingOrder(problem=why)
    problems: list[str] = []
    records = read_jsonl(log_path, problems)
    stretches_raw = [r for r in records if r.get("event") == "stretch"]
    if not stretches_raw:
        return TrainingOrder(problem=f"{log_path} holds no stretch of training")
    orders = {r.get("order") for r in stretches_raw}
    if orders != {SAMPLE_ORDER}:
        return TrainingOrder(problem=f"{log_path}: sample order {sorted(map(str, orders))} is not "
                                     f"{SAMPLE_ORDER!r}, the one this corpusmill can replay")
    identities = {(r["seed"], r["train_rows"]) for r in stretches_raw}
    if len(identities) > 1:
        return TrainingOrder(problem=f"{log_path}: the seed or the train split changed between stretches "
                                     f"{sorted(identities)}: one order cannot describe the run")
    seed, train_rows = identities.pop()
    metrics = None
    stretches = []
    for index, record in enumerate(records):
        if record.get("event") != "stretch":
            continue
        following = records[index + 1] if index + 1 < len(records) else None
        if following is not None and following.get("event") == "end":
            last = int(following["step"]) - 1
        elif following is not None and following.get("cause") == "rollback":
            last = int(following["previous_last_step"])
        else:  # ended by a failure (or still running): the metrics log says how far it got
            metrics = _last_steps_from_metrics(paths) if metrics is None else metrics
            until = following.get("time", math.inf) if following is not None else math.inf
            logged = [step for time, step in metrics if record["time"] <= time < until and step >= record["step"]]
            last = max(logged) if logged else (int(following["step"]) - 1 if following is not None else None)
        stretches.append(Stretch(cause=record["cause"], first_step=int(record["step"]),
                                 first_sample=int(record["sample"]),
                                 global_batch_size=int(record["global_batch_size"]),
                                 micro_batch_size=int(record["micro_batch_size"]), dp=int(record["dp"]),
                                 last_step=last))
    return TrainingOrder(stretches=stretches, seed=int(seed), train_rows=int(train_rows),
                         shards={r.get("shards_manifest_sha256") for r in stretches_raw} - {None})


@dataclass(frozen=True)
class CheckpointPosition:
    """A checkpoint directory and the data it had consumed: samples ``0 .. samples - 1`` (None: an older
    checkpoint without the position in its provenance.json)."""

    path: Path
    step: int
    samples: int | None
    tokens_seen: int | None


def checkpoint_positions(paths: RunPaths) -> list[CheckpointPosition]:
    """Every complete checkpoint of the run, oldest first, with the data position it was saved at."""
    out = []
    for path in complete_checkpoints(paths.checkpoints):
        provenance = read_checkpoint_json(path, PROVENANCE_FILE) or {}
        samples, tokens = provenance.get("samples"), provenance.get("tokens_seen")
        out.append(CheckpointPosition(path=path, step=step_of(path), samples=samples if isinstance(samples, int) else None,
                                      tokens_seen=tokens if isinstance(tokens, int) else None))
    return out


def row_use_counts(train_rows: int, seed: int, samples: int) -> np.ndarray:
    """How many times each train row was consumed by samples ``0 .. samples - 1``: every full epoch once, the
    partial epoch by its permutation's first positions."""
    full_epochs, rest = divmod(samples, train_rows)
    counts = np.full(train_rows, full_epochs, dtype=np.int64)
    if rest:
        counts[SampleOrder(train_rows, seed).permutation(full_epochs)[:rest]] += 1
    return counts
