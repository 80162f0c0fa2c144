"""A killed `prepare` run again (issue 44, item 2): the second run's CPU against an uninterrupted run's.

Three runs of ``corpusmill prepare`` on the same grown corpus (``scale_corpus.grow``) and the demo config's steps
(as ``bench_scale.py``), each in its own run directory: (1) uninterrupted; (2) started in a new session and
killed with SIGKILL of its whole process group once ``--kill-at`` of the clean's unit markers (phases A and C,
``RUN/work/clean/{A,C}/*.done``) exist; (3) the same command again, which resumes. CPU seconds are the kernel's
rusage of each reaped process tree; outputs of (3) are compared with (1), file by file.

Usage:
  python benchmarks/bench_resume.py --mb 8 --unit-mb 1 [--kill-at 0.6] [--work /tmp/bench_resume]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import config_for  # noqa: E402
from scale_corpus import grow, host_documents, read_jsonl, write_corpus  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OUTPUTS = ("docs", "removed", "quarantine", "dedup", "shards")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def prepare(cfg_path: Path, log_path: Path, kill_when=None) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
    before, started = _cpu(), time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "prepare", str(cfg_path)], cwd=REPO, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        killed = False
        while proc.poll() is None:
            if kill_when is not None and kill_when():
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.1)
        rc = proc.wait()
    return {"rc": rc, "killed": killed, "wall_s": round(time.monotonic() - started, 1),
            "cpu_s": round(_cpu() - before, 1)}


def digests(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in OUTPUTS for p in sorted((run_dir / d).rglob("*")) if p.is_file()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default=str(REPO.parent / "shared/corpora/real_text_sample.jsonl.gz"))
    parser.add_argument("--mb", type=float, default=8.0, help="MB of UTF-8 text")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--unit-mb", type=float, default=1.0, help="runner.unit_bytes in MB")
    parser.add_argument("--kill-at", type=float, default=0.6, help="share of the clean's unit markers")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", default="/tmp/bench_resume")
    parser.add_argument("--out", default=None, help="a JSON file for the results")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    site = next(Path(sys.prefix).glob("lib/python3*/site-packages"), None)
    docs = grow(read_jsonl(args.corpus), int(args.mb * 1e6), fresh_share=0.75, seed=0,
                extra_docs=host_documents(site_packages=str(site) if site else None))
    paths = write_corpus(docs, str(work / "corpus"), files=args.files)
    runs_dir = work / "runs"
    results = {"MB": round(sum(len(d["text"].encode()) for d in docs) / 1e6, 2), "files": len(paths),
               "unit_mb": args.unit_mb, "kill_at": args.kill_at}
    units = None
    for name in ("whole", "killed"):
        cfg = config_for(name, paths, str(runs_dir), "local", args.workers, unit_mb=args.unit_mb)
        cfg_path = work / f"{name}.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg))
        subprocess.run(["rm", "-rf", str(runs_dir / name)], check=False)
        if name == "whole":
            results["uninterrupted"] = prepare(cfg_path, work / "whole.log")
            units = json.loads((runs_dir / name / "stats.json").read_text())["resume"]["units"]
            continue
        work_dir = runs_dir / name / "work" / "clean"
        need = max(1, round(args.kill_at * 2 * units))

        def enough() -> bool:
            return len(list(work_dir.glob("A/*.done"))) + len(list(work_dir.glob("C/*.done"))) >= need

        results["killed"] = {**prepare(cfg_path, work / "killed.log", enough), "markers_at_kill": need,
                             "markers_possible": 2 * units}
        results["resumed"] = prepare(cfg_path, work / "resumed.log")
        stats = json.loads((runs_dir / name / "stats.json").read_text())
        results["resumed"]["reused"] = stats["resume"]
        results["resumed"]["balanced"] = stats["accounting"]["balanced"]
    results["units"] = units
    results["identical_outputs"] = digests(runs_dir / "whole") == digests(runs_dir / "killed")
    results["resumed_cpu_over_uninterrupted"] = round(results["resumed"]["cpu_s"] / results["uninterrupted"]["cpu_s"], 3)
    print(json.dumps(results, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
