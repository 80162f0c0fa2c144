"""`corpusmill train CONFIG`: train on runs/<name>/shards with the config's `train` section.

Starts torchrun with mesh.pp × mesh.dp processes (or trains in this process when the mesh has one rank);
multi-node rendezvous options and --max-restarts are passed through to torchrun.
"""
from __future__ import annotations

import argparse

from pipelines.config import load_config
from pipelines.run import record_training
from runio.errors import ExitCode
from runio.layout import RunPaths


def register(subparsers) -> None:
    train = subparsers.add_parser(
        "train", help="train the model on runs/<name>/shards (torchrun, FSDP2 × pipeline parallelism)",
        description="Train on runs/<name>/shards; writes runs/<name>/train/{checkpoints/,metrics.jsonl,tensorboard/}. "
                    "Resumes from the newest sound checkpoint automatically; refuses (exit 4, one line) when the "
                    "checkpoints are all damaged, were trained with another model or on other shards, or the newest "
                    "is past train.steps, and when train.checkpoint.resume is false beside checkpoints. Exit codes: "
                    "0 done, 2 config, 3 stopped by the guards, 4 refused, 5 run directory not writable, "
                    "130 interrupted, 143 terminated (the last checkpoint is kept).")
    train.add_argument("config", help="run config YAML (its `train` section configures the trainer)")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                       help="override a config value, e.g. --set train.steps=50; repeatable")
    train.add_argument("--from-scratch", action="store_true",
                       help="start over at step 0: the run's checkpoints and training logs are moved to "
                            "train/set-aside-<time>/ (nothing is deleted); needed when checkpoints exist but none "
                            "is sound or none fits the current model and shards")
    group = train.add_argument_group("torchrun pass-through (multi-node)")
    group.add_argument("--nnodes", default="1",
                       help="nodes, or MIN:MAX for an elastic job (needs train.mesh.dp: auto; a lost node's "
                            "survivors resume from the latest checkpoint on fewer ranks; default 1)")
    group.add_argument("--node-rank", type=int, help="this node's rank (static rendezvous)")
    group.add_argument("--rdzv-backend", help="rendezvous backend, e.g. c10d")
    group.add_argument("--rdzv-endpoint", help="HOST:PORT of the rendezvous")
    group.add_argument("--rdzv-id", help="job id shared by all nodes")
    group.add_argument("--rdzv-conf", metavar="KEY=VALUE,...",
                       help="torchrun's c10d rendezvous settings over corpusmill's (elastic jobs: "
                            "last_call_timeout=2,keep_alive_interval=1,keep_alive_max_attempt=3), e.g. "
                            "join_timeout=900,last_call_timeout=10")
    group.add_argument("--max-restarts", type=int, default=None,
                       help="worker group restarts on failure (default 0; 3 for an elastic --nnodes MIN:MAX job, "
                            "where the loss of a node is one)")
    group.add_argument("--nproc-per-node", type=int, help="processes on this node (default: mesh size / nnodes)")
    train.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    # deferred: the launcher imports torch, which registering the command (every `corpusmill` call) must not
    from trainer_bridge.launch import Rendezvous, TrainInterrupted, run_training

    cfg = load_config(args.config, args.overrides)
    if getattr(cfg, "train", None) is None:
        print("corpusmill train: the run config has no `train` section", flush=True)
        return ExitCode.CONFIG
    rendezvous = Rendezvous(nnodes=args.nnodes, node_rank=args.node_rank, rdzv_backend=args.rdzv_backend,
                            rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id,
                            max_restarts=(args.max_restarts if args.max_restarts is not None
                                          else 3 if ":" in args.nnodes else 0),
                            nproc_per_node=args.nproc_per_node, rdzv_conf=args.rdzv_conf)
    print(f"corpusmill train: run {cfg.name} → {RunPaths.of(cfg).train}", flush=True)
    try:
        code = run_training(cfg, rendezvous, from_scratch=args.from_scratch)
    except TrainInterrupted as interrupted:  # said in one line already
        code = interrupted.code
    if not args.node_rank:  # one node records it (the others share the run directory or have none)
        record_training(cfg, code)
    return code
