"""The first part of tests/test_trace.py's resumed run, on two data-parallel ranks (FSDP2, gloo):

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/dist/trace_scenario.py RUN_DIR CONFIG_JSON

trains RUN_DIR with the TrainConfig in CONFIG_JSON (mesh.dp 2) and writes each rank's rows per step to
``RUN_DIR/rank<r>.samples.json``, so the test can compare the union with its replay of Contract 4.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenario_configs import SampleLog  # noqa: E402

from runio.layout import RunPaths  # noqa: E402
from trainer_bridge.config import TrainConfig  # noqa: E402
from trainer_bridge.loop.train import train  # noqa: E402

if __name__ == "__main__":
    run_dir, config = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
    log = SampleLog()
    train(TrainConfig.model_validate(config), RunPaths(run_dir), hooks=log.hooks())
    (run_dir / f"rank{dist.get_rank()}.samples.json").write_text(json.dumps(log.sample_ids))
    dist.barrier()
    dist.destroy_process_group()
