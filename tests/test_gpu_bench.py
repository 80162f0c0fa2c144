"""benchmarks/gpu_bench.py on CPU: the script itself runs (``--smoke``, a tiny fp32 model through the whole
trainer) and refuses a strategy combination the trainer does not support with one line, not a traceback. Its
GPU figures come only from a lent GPU; this keeps the script from rotting between such runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _gpu_bench(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(REPO / "benchmarks/gpu_bench.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_smoke_run_reports_a_summary(tmp_path):
    out = tmp_path / "summary.json"
    result = _gpu_bench("--smoke", "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(out.read_text())
    assert summary["timed_steps"] == 3 and summary["tokens_per_s"] > 0 and summary["cp"] == 1
    assert summary["loss_first"] > 0 and summary["device"] == "cpu (smoke check)"


def test_unsupported_combination_is_one_line():
    result = _gpu_bench("--smoke", "--cp", "2", "--experts", "4", "--ep", "2")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "mesh.cp" in lines[0] and "Traceback" not in result.stderr
