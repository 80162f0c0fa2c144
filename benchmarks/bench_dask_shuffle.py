"""The Dask runner's shuffle as the partition count grows: one pick task per source × output pair (direct)
against the two-round staged shuffle (``beam_dask.translate.Emitter.staged_pieces``), interleaved.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_dask_shuffle.py [--partitions 32,64,128,256] [--reps 3]

The pipeline is the shape of near-dedup's chains of shuffles with little data in them (the fixed cost is what
is measured): ``--elements`` integers dealt into P partitions (``Reshuffle``), each with ``--payload`` bytes (to
weigh the staged shuffle's second transfer of the data), then ``--rounds`` GroupByKeys of P × P pairs each (the
keys re-drawn every round, the smallest element of each group kept), then a sum. Both ways run on one
2-worker LocalCluster (one thread each), started once; each run is a fresh pipeline. Reported per run: wall seconds, the tasks of the graph,
CPU seconds of this process (client and scheduler: the LocalCluster's scheduler runs in it) and of the worker
processes (``psutil``), and the checksum of the groups (equal both ways, or the script fails).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import apache_beam as beam
import psutil
from apache_beam.options.pipeline_options import PipelineOptions

import beam_dask
from beam_dask.runner import DaskRunner
from beam_dask.translate import STAGED_SHUFFLE_ABOVE

NEVER = 1 << 62


def _with_payload(x: int, payload: int) -> bytes:
    return x.to_bytes(8, "big") + bytes(payload)


def _keyed(value: bytes, round_index: int, parts: int) -> tuple[int, bytes]:
    x = int.from_bytes(value[:8], "big")
    return (x * 2654435761 + round_index) % (parts * 7), value


def _first(kv) -> bytes:
    return min(kv[1])


def _number(value: bytes) -> int:
    return int.from_bytes(value[:8], "big")


def _write(total: int, path: str) -> None:
    with open(path, "w") as f:
        f.write(str(total))


def build(p: beam.Pipeline, elements: int, rounds: int, parts: int, payload: int, path: str) -> None:
    values = (p | "Create" >> beam.Create(range(elements)) | "Deal" >> beam.Reshuffle()
              | "Payload" >> beam.Map(_with_payload, payload))
    for r in range(rounds):
        # (the first round groups every element: its shuffle carries elements x (8 + payload) bytes)
        values = (values | f"Key{r}" >> beam.Map(_keyed, r, parts)
                  | f"Group{r}" >> beam.GroupByKey() | f"First{r}" >> beam.Map(_first))
    _ = (values | "Number" >> beam.Map(_number) | "Sum" >> beam.CombineGlobally(sum)
         | "Write" >> beam.Map(_write, path))


def cpu_of(processes: list) -> float:
    total = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def worker_processes(client) -> list:
    pids = client.run(lambda: __import__("os").getpid())
    return [psutil.Process(pid) for pid in pids.values()]


def run_once(client, parts: int, staged_above: int, args) -> dict:
    runner = DaskRunner(client=client, partitions=parts)
    options = PipelineOptions([f"--dask_staged_shuffle_above={staged_above}"])
    p = beam.Pipeline(runner=runner, options=options)
    path = os.path.join(args.work, f"sum-{parts}-{staged_above}")
    build(p, args.elements, args.rounds, parts, args.payload, path)
    workers = worker_processes(client)
    me = psutil.Process()
    cpu_workers, cpu_me = cpu_of(workers), cpu_of([me])
    started = time.perf_counter()
    result = p.run()
    state = result.wait_until_finish()
    wall = time.perf_counter() - started
    if state != "DONE":
        raise SystemExit(f"run ended {state}")
    with open(path) as f:
        checksum = int(f.read())
    return {"wall_s": round(wall, 3), "tasks": result.translation_info["tasks"], "checksum": checksum,
            "client_scheduler_cpu_s": round(cpu_of([me]) - cpu_me, 3),
            "workers_cpu_s": round(cpu_of(workers) - cpu_workers, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="32,64,128,256")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--elements", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--payload", type=int, default=0, help="bytes carried by each element besides its number")
    parser.add_argument("--out", default=None, help="write every run as JSON here")
    args = parser.parse_args()
    args.work = tempfile.mkdtemp(prefix="bench-shuffle-")
    cluster = beam_dask.LocalDaskCluster(2)
    client = cluster.client
    rows = []
    try:
        run_once(client, 4, NEVER, args)  # warm-up: imports and DoFn pools on the workers
        for parts in [int(x) for x in args.partitions.split(",")]:
            for rep in range(args.reps):
                for way, above in (("direct", NEVER), ("staged", 0)):
                    row = {"partitions": parts, "rep": rep, "way": way, **run_once(client, parts, above, args)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                if len({r["checksum"] for r in rows if r["partitions"] == parts}) != 1:
                    raise SystemExit(f"{parts} partitions: the two ways gave different groups: {rows[-2:]}")
    finally:
        cluster.close()
    print(f"\ndefault threshold: staged above {STAGED_SHUFFLE_ABOVE} source x output pairs")
    print("partitions  way     tasks  wall s (median)  client+scheduler CPU s  workers CPU s")
    for parts in sorted({r["partitions"] for r in rows}):
        for way in ("direct", "staged"):
            runs = [r for r in rows if r["partitions"] == parts and r["way"] == way]
            print(f"{parts:10d}  {way:6s} {runs[0]['tasks']:7d}  {statistics.median(r['wall_s'] for r in runs):14.2f}"
                  f"  {statistics.median(r['client_scheduler_cpu_s'] for r in runs):22.2f}"
                  f"  {statistics.median(r['workers_cpu_s'] for r in runs):13.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
