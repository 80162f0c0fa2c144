"""Distributed trainer scenarios, many per torchrun launch (a launch costs ~15 s on CPU).

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/dist/train_scenarios.py WORKDIR two
    python -m torch.distributed.run --standalone --nproc-per-node 4 tests/dist/train_scenarios.py WORKDIR four

WORKDIR holds ``shards/`` (written by the test) and, for the 1→2 resume, ``single/`` (a single-process run
with a checkpoint at step 5). Each scenario trains in the run directory ``runs/<scenario>`` (its shards linked
to WORKDIR's) and writes ``results/<scenario>.rank<r>.json``; the pytest side (tests/test_train_dist.py) compares
them with a single-process reference run.
"""
from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenario_configs import EVAL, SampleLog, base_config, merge, run_with_shards  # noqa: E402

from runio.layout import RunPaths  # noqa: E402
from trainer_bridge.checkpoint.store import LATEST, step_dir_name  # noqa: E402
from trainer_bridge.parallel.parallelize import local_grads  # noqa: E402
from trainer_bridge.loop.train import TrainHooks, train  # noqa: E402

TWO_RANK_EQUIVALENCE = {
    "fsdp2": {"mesh": {"dp": 2}},
    "fsdp2_activation_checkpointing": {"mesh": {"dp": 2}, "activation_checkpointing": {"mode": "every"}},
    "pp_gpipe": {"mesh": {"pp": 2}, "batch": {"micro_batch_size": 4}, "pipeline": {"schedule": "gpipe"}},
    "pp_1f1b": {"mesh": {"pp": 2}, "batch": {"micro_batch_size": 4}, "pipeline": {"schedule": "1f1b"}},
    "pp_interleaved_1f1b": {"mesh": {"pp": 2}, "batch": {"micro_batch_size": 4},
                            "pipeline": {"schedule": "interleaved_1f1b", "stages_per_rank": 2}},
}
FOUR_RANK_EQUIVALENCE = {
    "pp2_dp2_1f1b": {"mesh": {"pp": 2, "dp": 2}, "batch": {"micro_batch_size": 2},
                     "pipeline": {"schedule": "1f1b", "microbatches": 2}},
    "pp2_dp2_interleaved": {"mesh": {"pp": 2, "dp": 2}, "batch": {"micro_batch_size": 2},
                            "pipeline": {"schedule": "interleaved_1f1b", "stages_per_rank": 2, "microbatches": 2}},
}

DISTILL = {"model": {"n_layers": 2}, "mesh": {"dp": 2}, "steps": 12, "optimizer": {"lr": 1e-2},
           "checkpoint": {"enabled": False}}


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def write_result(workdir: Path, name: str, result, samples: SampleLog) -> None:
    out = workdir / "results"
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "losses": {str(k): v for k, v in result.losses.items()},
        "grad_norms": {str(k): v for k, v in result.grad_norms.items()},
        "val_losses": {str(k): v for k, v in result.val_losses.items()},
        "sample_ids": {str(k): v for k, v in samples.sample_ids.items()},
        "events": result.events, "skipped_bad_steps": result.skipped_bad_steps,
        "skipped_overflow_steps": result.skipped_overflow_steps, "rollbacks": result.rollbacks,
        "loss_scale": result.loss_scale, "resumed_from": result.resumed_from, "final_step": result.final_step,
    }
    (out / f"{name}.rank{rank()}.json").write_text(json.dumps(record, allow_nan=True))


def run(workdir: Path, name: str, overrides: dict, hooks: TrainHooks | None = None, out_name: str | None = None,
        clock=None):
    samples = SampleLog()
    hooks = hooks or TrainHooks()
    hooks.on_batch = samples
    paths = run_with_shards(workdir / "runs" / (out_name or name), workdir / "shards")
    result = train(base_config(overrides), paths, hooks=hooks, clock=clock)
    write_result(workdir, name, result, samples)
    dist.barrier()
    return result


def inject_on_rank(target_rank: int, steps: set[int], value: float):
    """A hook that puts ``value`` into one gradient element on one rank at the given steps."""

    def hook(step, model):
        if step in steps and rank() == target_rank:
            grads = local_grads(model)
            if grads:
                grads[0].view(-1)[0] = value

    return hook


def copy_checkpoint(src_run: Path, step: int, dst_run: Path) -> None:
    """Copy one complete checkpoint into a fresh run directory, as its 'latest'."""
    if rank() == 0:
        dst = RunPaths(dst_run).checkpoints
        shutil.rmtree(dst_run, ignore_errors=True)
        dst.mkdir(parents=True)
        shutil.copytree(RunPaths(src_run).checkpoints / step_dir_name(step), dst / step_dir_name(step))
        (dst / LATEST).write_text(step_dir_name(step) + "\n")
    dist.barrier()


class StepClock:
    """The schedule's clock on each rank: 22:00 UTC on 2026-12-01 at the start, 20 minutes per step; ``sleep``
    jumps (the pause)."""

    def __init__(self):
        self.t = 1796162400.0  # 2026-12-01 22:00 UTC
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds

    def hooks(self) -> TrainHooks:
        def on_step(step, record):
            self.t += 20 * 60

        return TrainHooks(on_step=on_step)


def tiers_and_schedule(workdir: Path) -> None:
    """Issue 16 on two FSDP ranks: the fast tier deleted after an interrupted run, resumed from the durable tier;
    a one-hour window (three steps), paused with a checkpoint after steps 3, 6 and 9 and continued each next day
    (both compared with fsdp2)."""
    tiered = {"mesh": {"dp": 2}, "checkpoint": {"tiers": [{"keep_last": 3},
                                                          {"path": str(workdir / "durable"), "keep_last": 3}]}}
    run(workdir, "tiers_interrupted", tiered, hooks=TrainHooks(stop_after_step=5), out_name="tiers")
    if rank() == 0:
        shutil.rmtree(RunPaths(workdir / "runs" / "tiers").checkpoints)  # the fast tier is lost
    dist.barrier()
    run(workdir, "tiers_resumed", tiered, out_name="tiers")
    clock = StepClock()
    run(workdir, "schedule_paused", {"mesh": {"dp": 2}, "schedule": {"windows": ["22:00-23:00"]}},
        hooks=clock.hooks(), clock=clock)
    assert clock.slept == [23 * 3600] * 3, clock.slept  # three steps per window: pauses after 3, 6 and 9


def two_ranks(workdir: Path) -> None:
    runs = workdir / "runs"
    for name, overrides in TWO_RANK_EQUIVALENCE.items():
        run(workdir, name, overrides)
    # Resume on the same topology: interrupted at step 5 (async save), resumed to 10; compare with "fsdp2".
    async_fsdp = {"mesh": {"dp": 2}, "checkpoint": {"async_save": True}}
    run(workdir, "fsdp2_interrupted", async_fsdp, hooks=TrainHooks(stop_after_step=5), out_name="fsdp2_resume")
    copy_checkpoint(runs / "fsdp2_resume", 5, workdir / "from_two_ranks")  # for the 2 → 1 test (pytest side)
    run(workdir, "fsdp2_resumed", async_fsdp, out_name="fsdp2_resume")
    # Pipeline resume on the same topology.
    pp = TWO_RANK_EQUIVALENCE["pp_1f1b"]
    run(workdir, "pp_1f1b_interrupted", pp, hooks=TrainHooks(stop_after_step=5), out_name="pp_resume")
    run(workdir, "pp_1f1b_resumed", pp, out_name="pp_resume")
    # 1 → 2: the single-process run's step-5 checkpoint, continued on 2 FSDP ranks.
    copy_checkpoint(workdir / "single", 5, runs / "from_one_rank")
    run(workdir, "one_to_two", {"mesh": {"dp": 2}}, out_name="from_one_rank")
    # fp16: an overflow injected on rank 1 only must be seen by both ranks (FSDP, then pipeline).
    fp16 = {"precision": {"dtype": "fp16"}}
    run(workdir, "fp16_fsdp2_overflow", {**fp16, "mesh": {"dp": 2}},
        hooks=TrainHooks(after_backward=inject_on_rank(1, {3}, math.inf)))
    run(workdir, "fp16_pp_overflow", {**fp16, **pp}, hooks=TrainHooks(after_backward=inject_on_rank(1, {3}, math.inf)))
    # bf16 through FSDP2's MixedPrecisionPolicy: trains.
    run(workdir, "bf16_fsdp2", {"precision": {"dtype": "bf16"}, "mesh": {"dp": 2}, "steps": 20,
                                "checkpoint": {"enabled": False}})
    # NaN on one rank at one step: the guard skips it on both ranks.
    run(workdir, "nan_fsdp2", {"mesh": {"dp": 2}}, hooks=TrainHooks(after_backward=inject_on_rank(0, {4}, math.nan)))
    # Distillation: the single-process reference run (4 layers, 10 steps) teaches a 2-layer FSDP2 student.
    parts: dict[str, dict] = {}
    run(workdir, "distill_fsdp2", DISTILL | {"distill": {"teacher": str(workdir / "single"), "alpha": 0.5,
                                                         "temperature": 2.0}},
        hooks=TrainHooks(on_step=lambda step, record: parts.__setitem__(
            str(step), {k: record[k] for k in ("loss", "ce_loss", "kl_loss")})))
    (workdir / "results" / f"distill_fsdp2.parts.rank{rank()}.json").write_text(json.dumps(parts))
    # Evaluation during training under FSDP2: per-domain validation loss, samples (weights gathered on rank 0).
    train(base_config(merge(EVAL, {"mesh": {"dp": 2}})), RunPaths(workdir / "eval_fsdp2"))
    dist.barrier()
    tiers_and_schedule(workdir)


def four_ranks(workdir: Path) -> None:
    for name, overrides in FOUR_RANK_EQUIVALENCE.items():
        run(workdir, name, overrides)


if __name__ == "__main__":
    torch.set_num_threads(1)
    workdir, group = Path(sys.argv[1]), sys.argv[2]
    from trainer_bridge.parallel.device import init_runtime, shutdown

    runtime = init_runtime("cpu")
    {"two": two_ranks, "four": four_ranks}[group](workdir)
    shutdown(runtime)
