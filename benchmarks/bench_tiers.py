"""Checkpoint tiers: the time a save blocks the training loop with a durable tier (the background uploader
copying and verifying the previous checkpoints meanwhile) vs with the fast tier alone, in one interleaved run.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_tiers.py [--rounds 3] [--steps 12] [--interval 2]

Each round trains the same model twice from scratch, once with ``checkpoint.tiers: [{keep_last: 2}]`` (one tier)
and once with a second, durable tier (a directory on the same disk, ``keep_last: 10, every: 1``: every checkpoint
is copied and read back), alternating which goes first, so that machine contention hits both alike. Blocking
seconds per checkpoint are the trainer's own ``checkpoint`` events, for synchronous and async saves: ``blocking_s``
(the save call) and ``loop_s`` (all the loop's wall time for that checkpoint: with async saves also the previous
save's promotion, hashing its files on the loop's thread, and any wait for its background write). The bar: the
median with two tiers within 10% of the median with one.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "dist"))

from scenario_configs import run_with_shards  # noqa: E402

from runio.layout import RunPaths  # noqa: E402
from trainer_bridge.config import TrainConfig  # noqa: E402
from trainer_bridge.loop.synthetic import write_synthetic_shards  # noqa: E402
from trainer_bridge.loop.train import train  # noqa: E402

MODEL = {"dim": 256, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "multiple_of": 32}


def config(steps: int, async_save: bool, durable: Path | None, interval: int = 2) -> TrainConfig:
    tiers = [{"keep_last": 2}] + ([{"path": str(durable), "keep_last": 10, "every": 1}] if durable else [])
    return TrainConfig.model_validate({
        "model": MODEL, "batch": {"global_batch_size": 4, "micro_batch_size": 2},
        "optimizer": {"lr": 1e-3, "warmup_steps": 2}, "eval": {"interval": 0}, "steps": steps, "device": "cpu",
        "metrics": {"tensorboard": False, "peak_flops": 1e11},
        "checkpoint": {"interval": interval, "async_save": async_save, "tiers": tiers}})


def blocking(result, key: str = "blocking_s") -> list[float]:
    return [e[key] for e in result.events if e.get("event") == "checkpoint"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--interval", type=int, default=2, help="steps between checkpoints")
    args = parser.parse_args()
    out: dict = {"rounds": args.rounds, "steps": args.steps, "interval": args.interval, "model": MODEL}
    with tempfile.TemporaryDirectory(prefix="bench-tiers-") as work:
        work = Path(work)
        shards = RunPaths(work / "synthetic").shards  # a shard set of its own, outside the runs
        write_synthetic_shards(shards)
        for async_save in (False, True):
            samples: dict[str, list[float]] = {"one_tier": [], "two_tiers": []}
            loop: dict[str, list[float]] = {"one_tier": [], "two_tiers": []}
            copied = 0
            for round_ in range(args.rounds):
                order = ("one_tier", "two_tiers") if round_ % 2 == 0 else ("two_tiers", "one_tier")
                for kind in order:
                    run = run_with_shards(work / f"{kind}-{async_save}-{round_}" / "run", shards)
                    durable = work / f"durable-{async_save}-{round_}" if kind == "two_tiers" else None
                    result = train(config(args.steps, async_save, durable, args.interval), run)
                    samples[kind] += blocking(result)
                    loop[kind] += blocking(result, "loop_s")
                    if durable is not None:
                        copied += len(list(Path(run.durable_checkpoints(str(durable))).glob("step-*")))
            one, two = statistics.median(samples["one_tier"]), statistics.median(samples["two_tiers"])
            out["async" if async_save else "sync"] = {
                "checkpoints_per_kind": len(samples["one_tier"]), "durable_copies_verified": copied,
                "median_blocking_s_one_tier": round(one, 4), "median_blocking_s_two_tiers": round(two, 4),
                "ratio_two_over_one": round(two / one, 3),
                "mean_blocking_s_one_tier": round(statistics.mean(samples["one_tier"]), 4),
                "mean_blocking_s_two_tiers": round(statistics.mean(samples["two_tiers"]), 4)}
            one_loop, two_loop = statistics.median(loop["one_tier"]), statistics.median(loop["two_tiers"])
            out["async" if async_save else "sync"].update({
                "median_loop_s_one_tier": round(one_loop, 4), "median_loop_s_two_tiers": round(two_loop, 4),
                "loop_ratio_two_over_one": round(two_loop / one_loop, 3),
                "mean_loop_s_one_tier": round(statistics.mean(loop["one_tier"]), 4),
                "mean_loop_s_two_tiers": round(statistics.mean(loop["two_tiers"]), 4),
                "mean_loop_ratio_two_over_one": round(statistics.mean(loop["two_tiers"])
                                                      / statistics.mean(loop["one_tier"]), 3)})
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
