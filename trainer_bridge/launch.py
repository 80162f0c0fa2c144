"""Starting training: in this process (one rank) or through torchrun (pp × dp ranks, one or more nodes).

``run_training(cfg)`` is what ``corpusmill train`` and ``make demo`` call. It writes the resolved train config
to ``RunPaths.train_config`` (``<run>/train/train_config.json``) and, when the mesh has more than one rank (or a
multi-node rendezvous is asked for), starts ``torchrun`` whose workers run ``python -m trainer_bridge.launch`` on
that file. A worker restarted by torchrun (``--max-restarts``) resumes from the latest checkpoint by itself; the
restarted group forms its process group in a store namespace of its own (``device.group_store``).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from runio.files import write_json
from runio.layout import RunPaths
from trainer_bridge.config import TrainConfig

EXIT_STOPPED = 3  # training stopped by the guards (persistent bad steps)


@dataclass
class Rendezvous:
    """torchrun options passed through for multi-node jobs (see ``torchrun --help``)."""

    nnodes: str = "1"
    node_rank: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    max_restarts: int = 0
    nproc_per_node: int | None = None

    @property
    def multi_node(self) -> bool:
        return self.nnodes != "1" or self.rdzv_endpoint is not None


def torchrun_command(config_file: Path, run_dir: Path, world_size: int, rdzv: Rendezvous) -> list[str]:
    nnodes_max = int(rdzv.nnodes.split(":")[-1])
    nproc = rdzv.nproc_per_node or max(1, world_size // nnodes_max)
    command = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={rdzv.nnodes}",
               f"--nproc-per-node={nproc}", f"--max-restarts={rdzv.max_restarts}"]
    if rdzv.rdzv_endpoint is None and not rdzv.multi_node:
        command.append("--standalone")
    for flag, value in (("--node-rank", rdzv.node_rank), ("--rdzv-backend", rdzv.rdzv_backend),
                        ("--rdzv-endpoint", rdzv.rdzv_endpoint), ("--rdzv-id", rdzv.rdzv_id)):
        if value is not None:
            command.append(f"{flag}={value}")
    return command + ["-m", "trainer_bridge.launch", "--train-config", str(config_file), "--run-dir", str(run_dir)]


def run_training(cfg, rendezvous: Rendezvous | None = None) -> int:
    """Train run ``cfg`` (a ``pipelines.config.RunConfig``, or anything with ``.run_dir`` and ``.train``);
    returns an exit code. Shards come from ``RunPaths.shards``; outputs go to ``RunPaths.train``."""
    rdzv = rendezvous or Rendezvous()
    paths = RunPaths(cfg.run_dir)
    train_cfg: TrainConfig = cfg.train
    write_json(paths.train_config, train_cfg.model_dump(mode="json"))
    world = train_cfg.mesh.world_size
    if world == 1 and not rdzv.multi_node and rdzv.max_restarts == 0:
        return train_in_process(train_cfg, paths)
    command = torchrun_command(paths.train_config, paths.root, world, rdzv)
    print("corpusmill train: " + " ".join(command), flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.run(command, env=env).returncode


def train_in_process(train_cfg: TrainConfig, paths: RunPaths) -> int:
    from trainer_bridge.device import init_runtime, shutdown
    from trainer_bridge.train import TrainingStopped, train

    runtime = init_runtime(train_cfg.device, train_cfg.collective_timeout_s, train_cfg.connect_timeout_s)
    try:
        result = train(train_cfg, paths)
    except TrainingStopped as stopped:
        print(f"corpusmill train: {stopped}", file=sys.stderr)
        return EXIT_STOPPED
    finally:
        shutdown(runtime)
    if runtime.is_main:
        final = result.losses.get(result.final_step - 1)
        print(f"corpusmill train: done at step {result.final_step}"
              + (f", loss {final:.4f}" if final is not None else "")
              + f"; metrics in {paths.metrics_jsonl}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """torchrun worker entry point."""
    parser = argparse.ArgumentParser(description="corpusmill trainer worker (started by torchrun)")
    parser.add_argument("--train-config", required=True, type=Path)
    parser.add_argument("--run-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    train_cfg = TrainConfig.model_validate_json(args.train_config.read_text())
    return train_in_process(train_cfg, RunPaths(args.run_dir))


if __name__ == "__main__":
    sys.exit(main())
