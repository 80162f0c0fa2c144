"""Trainer overhead on CPU, measured against a plain PyTorch loop in the same run.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_trainer.py

1. Throughput: the trainer (1 process, fp32, shards + prefetching loader, guards, metrics, no checkpoints, no
   eval) vs a plain loop on the same model (same init) and a fixed, pre-collated batch of the same shape
   (forward, loss, backward, clipping, AdamW; no FSDP, no pipeline, no data loader). Rounds alternate between
   the two so that machine contention hits both alike; the median step time of each is compared.
2. Data wait: the share of the trainer's step time spent waiting for the next batch.
3. Checkpoints: the time an async save blocks the training loop vs the time of a synchronous save.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runio.layout import RunPaths  # noqa: E402
from tokenizer.shards import ShardReader  # noqa: E402
from trainer_bridge.config import TrainConfig  # noqa: E402
from trainer_bridge.loop.data import IGNORE_INDEX, collate  # noqa: E402
from trainer_bridge.model.transformer import Transformer  # noqa: E402
from trainer_bridge.parallel.parallelize import materialize  # noqa: E402
from trainer_bridge.loop.synthetic import write_synthetic_shards  # noqa: E402
from trainer_bridge.loop.train import TrainHooks, train  # noqa: E402

SEQ_LEN, VOCAB = 128, 512
CONFIG = {
    "model": {"dim": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "multiple_of": 32},
    "batch": {"global_batch_size": 8, "micro_batch_size": 4},
    "optimizer": {"lr": 1e-3, "warmup_steps": 5, "clip_grad_norm": 1.0},
    "checkpoint": {"enabled": False}, "eval": {"interval": 0},
    "metrics": {"tensorboard": False, "peak_flops": 1e11, "log_interval": 1000},
    "device": "cpu",
}
STEPS_PER_ROUND, ROUNDS, WARMUP = 12, 6, 2


def plain_loop_step_times(cfg: TrainConfig, batch, steps: int) -> list[float]:
    with torch.device("meta"):
        model = Transformer(cfg.model)
    materialize(model, torch.device("cpu"), cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optimizer.lr, betas=cfg.optimizer.betas,
                                  weight_decay=cfg.optimizer.weight_decay, foreach=True)
    micro = cfg.batch.micro_batch_size
    tokens = int((batch.labels != IGNORE_INDEX).sum())
    times, cpu_times = [], []
    for _ in range(steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        for i in range(0, cfg.batch.global_batch_size, micro):
            logits = model(batch.input_ids[i:i + micro], batch.position_ids[i:i + micro], batch.segment_ids[i:i + micro])
            loss = F.cross_entropy(logits.float().flatten(0, 1), batch.labels[i:i + micro].flatten(),
                                   ignore_index=IGNORE_INDEX, reduction="sum") / tokens
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optimizer.clip_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - start_cpu)
    return times[WARMUP:], cpu_times[WARMUP:]


def main() -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as tmp:
        run(Path(tmp))


def run_dir(work: Path, name: str, shards: Path) -> RunPaths:
    """A run directory of its own for one training run, over the shared shards."""
    paths = RunPaths(work / name)
    paths.root.mkdir(parents=True)
    paths.shards.symlink_to(shards, target_is_directory=True)
    return paths


def run(work: Path) -> None:
    shards = RunPaths(work / "data").shards
    write_synthetic_shards(shards, seq_len=SEQ_LEN, vocab_size=VOCAB, train_docs=4000, val_docs=20,
                           min_doc_len=16, max_doc_len=120, fill=0.95, rows_per_shard=256)
    cfg = TrainConfig.model_validate({**CONFIG, "steps": STEPS_PER_ROUND,
                                      "metrics": {**CONFIG["metrics"], "log_interval": 1}})
    source = ShardReader(str(shards), "train")
    # the plain loop needs the resolved model sizes the trainer takes from the shards
    cfg_model = cfg.model.model_copy(update={"vocab_size": VOCAB, "max_seq_len": SEQ_LEN})
    cfg = cfg.model_copy(update={"model": cfg_model})
    rows = [source.row(i)[:2] for i in range(cfg.batch.global_batch_size)]
    batch = collate(rows, list(range(len(rows))), SEQ_LEN)

    plain, trainer, ratios, waits, steps_total = [], [], [], 0.0, 0.0
    plain_cpu, trainer_cpu = [], []
    for r in range(ROUNDS):
        round_plain, round_plain_cpu = plain_loop_step_times(cfg, batch, STEPS_PER_ROUND)
        plain_cpu += round_plain_cpu
        records: list[dict] = []  # every step's metrics record (what metrics.jsonl logs)
        train(cfg, run_dir(work, f"trainer{r}", shards),
              hooks=TrainHooks(on_step=lambda step, record: records.append(dict(record))))
        records = records[WARMUP:]
        round_trainer = [rec["step_time_s"] for rec in records]
        trainer_cpu += [rec["process_cpu_s"] for rec in records]
        waits += sum(rec["data_wait_s"] for rec in records)
        steps_total += sum(rec["step_time_s"] for rec in records)
        plain += round_plain
        trainer += round_trainer
        ratios.append(statistics.median(round_trainer) / statistics.median(round_plain))
    rows_tokens = cfg.batch.global_batch_size * SEQ_LEN
    plain_tps = rows_tokens / statistics.median(plain)
    trainer_tps = rows_tokens / statistics.median(trainer)
    # Median over rounds of the per-round ratio of median step times: each round's pair ran back to back.
    overhead = statistics.median(ratios) - 1
    best_overhead = min(trainer) / min(plain) - 1
    # CPU seconds per step (all threads of the process, the loader thread included) are what the step costs;
    # wall time on a shared machine also counts the time other processes held the cores.
    cpu_overhead = statistics.median(trainer_cpu) / statistics.median(plain_cpu) - 1

    # Checkpoints: a larger state so that writing takes measurable time (model + AdamW state).
    ckpt_cfg = {**CONFIG, "model": {"dim": 512, "n_layers": 6, "n_heads": 8, "n_kv_heads": 4, "multiple_of": 64},
                "steps": 6, "batch": {"global_batch_size": 2, "micro_batch_size": 2}}
    blocking = {}
    for mode in (False, True):
        cfg_ck = TrainConfig.model_validate({**ckpt_cfg, "checkpoint": {"interval": 2, "keep_last": 1, "async_save": mode}})
        result = train(cfg_ck, run_dir(work, f"ckpt_async{mode}", shards))
        blocking[mode] = [e["blocking_s"] for e in result.events if e["event"] == "checkpoint"]
    sync_s, async_s = statistics.median(blocking[False]), statistics.median(blocking[True])
    ck_dir = RunPaths(work / "ckpt_asyncFalse").checkpoints
    size_mb = sum(p.stat().st_size for p in ck_dir.glob("**/*") if p.is_file()) / 1e6

    print(f"model: {CONFIG['model']}, seq_len {SEQ_LEN}, {cfg.batch.global_batch_size} rows/step, "
          f"micro-batch {cfg.batch.micro_batch_size}, fp32, 1 thread; {ROUNDS} alternating rounds of "
          f"{STEPS_PER_ROUND} steps ({WARMUP} warm-up steps dropped per round)")
    print(f"plain loop:  {plain_tps:,.0f} tokens/s (median step {statistics.median(plain) * 1e3:.1f} ms)")
    print(f"trainer:     {trainer_tps:,.0f} tokens/s (median step {statistics.median(trainer) * 1e3:.1f} ms)")
    print(f"CPU time per step: plain {statistics.median(plain_cpu) * 1e3:.1f} ms, trainer "
          f"{statistics.median(trainer_cpu) * 1e3:.1f} ms → overhead {cpu_overhead * 100:+.1f}% (bar: <= 5%)")
    print(f"wall-time overhead: {overhead * 100:+.1f}% (median of per-round ratios; rounds: "
          f"{', '.join(f'{(x - 1) * 100:+.1f}%' for x in ratios)}; fastest step vs fastest step: "
          f"{best_overhead * 100:+.1f}%) (bar: <= 5%)")
    print(f"data wait:   {waits / steps_total * 100:.2f}% of trainer step time (bar: <= 1%)")
    print(f"checkpoint ({size_mb:.0f} MB on disk): sync save {sync_s * 1e3:.0f} ms, async save blocks "
          f"{async_s * 1e3:.0f} ms ({async_s / sync_s * 100:.0f}% of sync)")


if __name__ == "__main__":
    main()
