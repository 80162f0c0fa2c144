"""A torchrun worker for tests/test_train_faults.py: does a restarted group form its process group when the
rank that survived the failure comes back later than the one that died?

    python -m torch.distributed.run --standalone --nproc-per-node 2 --max-restarts 1 \
        tests/dist/restart_worker.py OUT_DIR LATE_SECONDS

First start: both ranks form the group and all-reduce; then rank 1 dies. torchrun restarts both; in the restart
rank 0 starts ``LATE_SECONDS`` late, so rank 1 looks for rank 0's address in the store before rank 0 has
published it. torchrun's agent store still holds the addresses of the first start; a rank that read one would
connect to a dead process (``Gloo connectFullMesh failed … Connection refused``). Each rank writes
``OUT_DIR/start<restart>.rank<r>.json`` with the all-reduced value.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from trainer_bridge.parallel.device import init_runtime, shutdown

if __name__ == "__main__":
    out, late_s = Path(sys.argv[1]), float(sys.argv[2])
    restart, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), int(os.environ["RANK"])
    if restart == 1 and rank == 0:
        time.sleep(late_s)
    runtime = init_runtime("cpu", collective_timeout_s=30, connect_timeout_s=120)
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"start{restart}.rank{rank}.json").write_text(json.dumps({"sum": float(total[0])}))
    if restart == 0:
        if rank == 1:
            os._exit(1)  # dies after the group was formed, as a killed rank would
        time.sleep(120)  # the survivor: torchrun stops it when it restarts the group
    shutdown(runtime)
