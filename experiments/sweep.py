"""`corpusmill sweep`: Bayesian hyper-parameter search with Optuna over the run's shards.

Optuna does the searching: its sampler (TPE, GP or random) proposes each trial's ``train.*`` values from the
``sweep.space`` section, its pruner (median or Hyperband) stops a trial whose intermediate validation losses
are poor, and its storage (journal file, or RDB on SQLite) in ``<run>/sweep/`` holds the study, so a killed
sweep resumes where it stopped: finished trials (complete or pruned) are never run again; a trial left
``RUNNING`` by a killed process is marked failed (the sweep holds ``<run>/sweep/.lock`` while it runs, so no
live process can own it) and its budget is given to a new trial.

Each trial is a real training run through the trainer's public API (``trainer_bridge.loop.train.train`` in this
process when the mesh has one rank, ``trainer_bridge.launch.run_training`` through torchrun otherwise) in its
own run directory ``<run>/sweep/trials/NNNN/`` whose ``shards`` (and ``tokenizer``) link to the run's: its own
``train/metrics.jsonl``, checkpoints and TensorBoard. ``--parallel K`` starts K worker processes that share the
study through the storage; each worker's torch uses cores / K threads.

Outputs: ``sweep/best.yaml`` (the best trial's values as a config overlay: the nested sections of a run config)
and ``sweep/best.set`` (the same as ``--set`` items, one a line: ``corpusmill train CONFIG $(sed 's/^/--set /'
runs/NAME/sweep/best.set)``).
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from experiments.storage import storage_for
from pipelines.config import ConfigError, RunConfig, apply_overrides, read_config_file, validate_config
from pipelines.run import DATA_STAGES, run_stages
from pipelines.sweep_config import ParamSpec, SweepConfig
from runio.files import write_atomic, write_json
from runio.layout import RunPaths, SweepPaths
from tokenizer.shards import manifest_path
from trainer_bridge.launch import run_training

FINISHED = ("COMPLETE", "PRUNED")


# ------------------------------------------------------------------------------------------ Optuna objects

def make_sampler(cfg: SweepConfig, worker: int = 0):
    """Optuna's sampler; each parallel worker gets its own seed so their random start-up points differ."""
    import optuna

    seed = cfg.seed + 1000 * worker
    startup = {} if cfg.startup_trials is None else {"n_startup_trials": cfg.startup_trials}
    if cfg.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed, **startup)
    if cfg.sampler == "gp":
        return optuna.samplers.GPSampler(seed=seed, **startup)
    return optuna.samplers.RandomSampler(seed=seed)


def make_pruner(cfg: SweepConfig, budget_steps: int, eval_interval: int):
    import optuna

    if cfg.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=cfg.pruner_startup_trials,
                                           n_warmup_steps=cfg.pruner_warmup_steps)
    if cfg.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=eval_interval, max_resource=budget_steps)
    return optuna.pruners.NopPruner()


def suggest(trial, key: str, spec: ParamSpec) -> Any:
    if spec.type == "float":
        return trial.suggest_float(key, spec.low, spec.high, log=spec.log, step=spec.step)
    if spec.type == "int":
        return trial.suggest_int(key, int(spec.low), int(spec.high), log=spec.log,
                                 step=int(spec.step) if spec.step else 1)
    return trial.suggest_categorical(key, spec.choices)


# ------------------------------------------------------------------------------------------ the budget

def budget(cfg: RunConfig) -> tuple[int, int]:
    """(training steps, validation interval) of every trial; the last step is a validation step, whose loss
    is the objective."""
    sweep, train = cfg.sweep, cfg.train
    if sweep.budget_tokens is not None:
        steps = max(1, math.ceil(sweep.budget_tokens / (train.batch.global_batch_size * cfg.packing.seq_len)))
    else:
        steps = sweep.budget_steps or train.steps
    interval = sweep.eval_interval or train.eval.interval
    if interval <= 0:
        raise ConfigError("sweep: trials need validation (set sweep.eval_interval or train.eval.interval > 0)")
    if steps % interval:
        raise ConfigError(f"sweep: the trial budget ({steps} steps) must be a multiple of the validation interval "
                          f"({interval}) so that the last step is validated (set sweep.budget_steps / "
                          f"sweep.eval_interval)")
    return steps, interval


def trial_overrides(cfg: RunConfig, params: dict[str, Any]) -> list[str]:
    steps, interval = budget(cfg)
    items = [f"train.steps={steps}", f"train.eval.interval={interval}"]
    return items + [f"{key}={json.dumps(value)}" for key, value in params.items()]


def trial_config(base: dict, overrides: list[str], trial_paths: RunPaths) -> RunConfig:
    data = apply_overrides(json.loads(json.dumps(base)), overrides)
    data["name"] = trial_paths.name
    data.setdefault("output", {})["runs_dir"] = str(trial_paths.root.parent)
    return validate_config(data)


def link_shards(run: RunPaths, trial: RunPaths) -> None:
    """The trial's run directory reads the run's shards, tokenizer and cleaned documents (symbolic links, nothing
    copied): the documents give the trial its per-domain validation losses, as they give the run its own."""
    trial.root.mkdir(parents=True, exist_ok=True)
    for source, link in ((run.shards, trial.shards), (run.tokenizer_dir, trial.tokenizer_dir), (run.docs, trial.docs)):
        if source.exists() and not link.exists():
            link.symlink_to(source.resolve(), target_is_directory=True)


# ------------------------------------------------------------------------------------------ one trial

def val_losses_from_metrics(paths: RunPaths) -> dict[int, float]:
    """step (completed steps) -> val_loss, from a run's metrics.jsonl."""
    out = {}
    if paths.metrics_jsonl.is_file():
        for line in paths.metrics_jsonl.read_text().splitlines():
            record = json.loads(line)
            if "val_loss" in record:
                out[int(record["step"]) + 1] = float(record["val_loss"])
    return out


def train_one(cfg: RunConfig, paths: RunPaths, on_val: Callable[[int, float], None] | None = None):
    """Train run ``cfg`` into ``paths`` as ``corpusmill train`` does; ``on_val(completed_steps, val_loss)`` sees
    every validation (in this process: as it happens, and may raise to stop the run; through torchrun: after
    the run, from its metrics.jsonl). Returns (val losses by completed steps, tokens seen)."""
    if cfg.train.mesh.world_size == 1:
        from trainer_bridge.loop.train import TrainHooks, train  # deferred: the trainer's modules import torch
        from trainer_bridge.parallel.device import init_runtime, shutdown  # deferred: torch, as above

        seen: dict[int, float] = {}
        tokens = {"seen": 0}

        def on_step(step: int, record: dict) -> None:
            tokens["seen"] = int(record.get("tokens_seen", tokens["seen"]))
            if "val_loss" in record:
                seen[step + 1] = float(record["val_loss"])
                if on_val is not None:
                    on_val(step + 1, float(record["val_loss"]))

        write_json(paths.train_config, cfg.train.model_dump(mode="json"))  # as run_training writes it
        train_cfg = cfg.train
        runtime = init_runtime(train_cfg.device, train_cfg.collective_timeout_s, train_cfg.connect_timeout_s)
        try:
            train(train_cfg, paths, hooks=TrainHooks(on_step=on_step))
        finally:
            shutdown(runtime)
        return seen, tokens["seen"]
    code = run_training(cfg)
    if code != 0:
        raise RuntimeError(f"training exited with code {code}")
    seen = val_losses_from_metrics(paths)
    for step, value in sorted(seen.items()):
        if on_val is not None:
            on_val(step, value)
    last = paths.metrics_jsonl.read_text().splitlines()[-1] if paths.metrics_jsonl.is_file() else "{}"
    return seen, int(json.loads(last).get("tokens_seen", 0))


def objective_for(base: dict, run: RunPaths) -> Callable:
    base_cfg = validate_config(base)
    sweep_paths = run.sweep

    def objective(trial) -> float:
        import optuna

        params = {key: suggest(trial, key, spec) for key, spec in base_cfg.sweep.space.items()}
        trial_paths = sweep_paths.trial(trial.number)
        cfg = trial_config(base, trial_overrides(base_cfg, params), trial_paths)
        link_shards(run, trial_paths)
        trial.set_user_attr("run_dir", str(trial_paths.root))
        write_atomic(trial_paths.config_yaml, cfg.resolved_yaml().encode("utf-8"))

        def report(step: int, value: float) -> None:
            trial.report(value, step)
            if trial.should_prune():
                trial.set_user_attr("pruned_at_step", step)
                raise optuna.TrialPruned(f"pruned at step {step}: val_loss {value:.4f}")

        losses, tokens = train_one(cfg, trial_paths, report)
        trial.set_user_attr("tokens_seen", tokens)
        if not losses:
            raise RuntimeError(f"trial {trial.number}: no validation loss (is there a 'val' split in the shards?)")
        last_step = max(losses)
        return losses[last_step]

    return objective


# ------------------------------------------------------------------------------------------ the study

def study_name(cfg: RunConfig) -> str:
    return cfg.name


def search_fingerprint(cfg: RunConfig) -> str:
    """What makes trials comparable: everything but the sweep's own run-time knobs."""
    keep = cfg.model_copy(update={"sweep": cfg.sweep.model_copy(update={"trials": 1, "parallel": 1})})
    return keep.fingerprint()


@contextmanager
def sweep_lock(paths: SweepPaths) -> Iterator[None]:
    paths.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"{paths.root} is locked: another sweep is running on this run") from None
        yield
    finally:
        os.close(fd)


def open_study(cfg: RunConfig, paths: SweepPaths, worker: int = 0):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    steps, interval = budget(cfg)
    return optuna.create_study(study_name=study_name(cfg), storage=storage_for(cfg.sweep, paths),
                               sampler=make_sampler(cfg.sweep, worker), pruner=make_pruner(cfg.sweep, steps, interval),
                               direction="minimize", load_if_exists=True)


def count_states(study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return counts


def fail_stale_trials(study) -> list[int]:
    """Trials left RUNNING by a killed sweep (only called under the sweep lock, so none is alive)."""
    from optuna.trial import TrialState

    stale = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    for t in stale:
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    return [t.number for t in stale]


def shares(total: int, parts: int) -> list[int]:
    """``total`` trials split over ``parts`` workers as evenly as possible (no empty share)."""
    split = [total // parts + (1 if i < total % parts else 0) for i in range(parts)]
    return [n for n in split if n > 0]


def run_worker(run_dir: Path, n_trials: int, worker: int, threads: int | None = None) -> None:
    """One worker: ``n_trials`` trials of the study in ``run_dir`` (the base config is ``sweep/base_config.json``)."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    run = RunPaths(run_dir)
    paths = run.sweep
    base = json.loads(paths.base_config.read_text())
    cfg = validate_config(base)
    study = open_study(cfg, paths, worker)
    study.optimize(objective_for(base, run), n_trials=n_trials, catch=(Exception,), gc_after_trial=True)


def ensure_shards(cfg: RunConfig, log: Callable[[str], None]) -> None:
    paths = RunPaths.of(cfg)
    if Path(manifest_path(str(paths.shards))).is_file():
        return
    log(f"sweep: no shards in {paths}: preparing them first")
    run_stages(cfg, DATA_STAGES, resume=True, log=log)


def run_sweep(cfg: RunConfig, *, overwrite: bool = False, log: Callable[[str], None] = print) -> dict:
    """Run (or resume) the study of run ``cfg`` until it holds ``sweep.trials`` finished trials; write the best
    overlay; return the summary (also ``sweep/summary.json``)."""
    if not cfg.sweep.space:
        raise ConfigError("sweep.space is empty: name at least one train.* key to search "
                          "(see pipelines/sweep_config.py)")
    budget(cfg)  # fail early on a budget that cannot be validated
    run = RunPaths.of(cfg)
    ensure_shards(cfg, log)
    paths = run.sweep
    with sweep_lock(paths):
        study = open_study(cfg, paths)
        fingerprint = search_fingerprint(cfg)
        previous = study.user_attrs.get("search_fingerprint")
        if previous is not None and previous != fingerprint:
            if not overwrite:
                raise ConfigError(f"{paths.root} holds a study of a different search (fingerprint {previous} vs "
                                  f"{fingerprint}); pass --overwrite to discard it")
            import optuna

            optuna.delete_study(study_name=study_name(cfg), storage=storage_for(cfg.sweep, paths))
            study = open_study(cfg, paths)
        study.set_user_attr("search_fingerprint", fingerprint)
        stale = fail_stale_trials(study)
        if stale:
            log(f"sweep: trial(s) {stale} were left running by a killed sweep: marked failed, their budget reused")
        if not study.get_trials(deepcopy=False):
            for point in cfg.sweep.enqueue:
                study.enqueue_trial(point)
        write_json(paths.base_config, cfg.model_dump(mode="json"))
        counts = count_states(study)
        done = sum(counts.get(s, 0) for s in FINISHED)
        remaining = max(0, cfg.sweep.trials - done)
        log(f"sweep: {done} finished trial(s) in {paths.root}; running {remaining} more "
            f"({cfg.sweep.sampler} sampler, {cfg.sweep.pruner} pruner, {cfg.sweep.parallel} at once)")
        if remaining:
            parts = shares(remaining, min(cfg.sweep.parallel, remaining))
            if len(parts) == 1:
                study.optimize(objective_for(cfg.model_dump(mode="json"), run), n_trials=remaining,
                               catch=(Exception,), gc_after_trial=True)
            else:
                threads = max(1, (os.cpu_count() or 1) // len(parts))
                procs = [subprocess.Popen([sys.executable, "-m", "experiments.sweep", str(run.root), str(n), str(i),
                                           str(threads)], env={**os.environ, "OMP_NUM_THREADS": str(threads)})
                         for i, n in enumerate(parts)]
                codes = [p.wait() for p in procs]
                if any(codes):
                    raise RuntimeError(f"sweep worker(s) exited with {codes}")
        return write_results(cfg, paths, study)


def write_results(cfg: RunConfig, paths: SweepPaths, study) -> dict:
    from optuna.trial import TrialState

    counts = count_states(study)
    summary: dict[str, Any] = {"study": study.study_name, "sampler": cfg.sweep.sampler, "pruner": cfg.sweep.pruner,
                               "counts": counts, "trials": []}
    for t in study.get_trials(deepcopy=False):
        summary["trials"].append({"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
                                  "intermediate": {str(k): v for k, v in sorted(t.intermediate_values.items())},
                                  "run_dir": t.user_attrs.get("run_dir")})
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if complete:
        best = min(complete, key=lambda t: t.value)
        summary["best"] = {"number": best.number, "value": best.value, "params": best.params}
        overlay: dict = {}
        apply_overrides(overlay, [f"{k}={json.dumps(v)}" for k, v in best.params.items()])
        header = (f"# corpusmill sweep {cfg.name}: best of {len(complete)} complete trial(s): trial {best.number}, "
                  f"val_loss {best.value:.6g} after {budget(cfg)[0]} steps.\n# A config overlay: merge into the run "
                  f"config, or pass each line of best.set with --set.\n")
        write_atomic(paths.best_yaml, (header + yaml.safe_dump(overlay, sort_keys=False)).encode("utf-8"))
        write_atomic(paths.best_set, "".join(f"{k}={json.dumps(v)}\n" for k, v in best.params.items()).encode())
    write_json(paths.summary, summary)
    return summary


def read_overlay(path: str | Path) -> list[str]:
    """A ``best.yaml`` overlay as ``--set`` items (``section.key=value``)."""
    data = read_config_file(path)  # the one config reader: a clear one-line error for a bad file
    items: list[str] = []

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                items.append(f"{prefix}{key}={json.dumps(value)}")

    walk(data, "")
    return items


if __name__ == "__main__":  # a --parallel worker: RUN_DIR N_TRIALS WORKER_INDEX THREADS
    run_worker(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
